//! The kubelet's own DRA code as a process (tests/controlplane/kubelet, built for the control
//! plane's release): its plugin manager and DRA manager register plugins, prepare and unprepare
//! claims, and wipe the node's ResourceSlices, against a real API server. Its stdout is a line
//! protocol: events (`registered`, `unregistered`, `refused`, `deleted slices`) and one answer
//! per command (`prepare NS POD`, `unprepare NS POD`, `health NS POD`).
//! Failures panic with one line, so tests fail rather than skip where Go is installed.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::support::controlplane::{self, ControlPlane, Release};

/// How long the program may take to say `ready` (its start is a few API calls).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one command may take; the program bounds it to 50 s (the kubelet's call timeout
/// to a plugin is 45 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a stop may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of the program's log quoted when something fails.
const LOG_TAIL: usize = 30;

/// The program built for `release`, building it first if the module's sources changed.
pub fn binary(release: Release) -> &'static Path {
    controlplane::built(&controlplane::KUBELET, release).unwrap_or_else(|e| panic!("{e}"))
}

/// The program's stdout so far, with a way to wait for a line.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    changed: Condvar,
}

impl Lines {
    /// Waits for the first line at index `from` or later that satisfies `wanted`; returns its
    /// index and text, or `None` after `timeout`.
    fn wait(
        &self,
        from: usize,
        timeout: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> Option<(usize, String)> {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some((i, line)) = lines.iter().enumerate().skip(from).find(|(_, l)| wanted(l)) {
                return Some((i, line.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            lines = self
                .changed
                .wait_timeout(lines, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn len(&self) -> usize {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A running kubelet program for one node.
pub struct Kubelet {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
    lines: Arc<Lines>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubelet {
    /// Starts the kubelet code for `node` of `cp` (as its admin), watching `registry_dir`;
    /// `services` plays an older kubelet that knows only these DRA services (comma-separated).
    /// Returns once it said `ready`.
    pub fn start(
        cp: &ControlPlane,
        node: &str,
        registry_dir: &Path,
        services: Option<&str>,
    ) -> Kubelet {
        Self::start_with(cp, node, registry_dir, services, None)
    }

    /// [`Kubelet::start`] with the kubelet's feature gates set to `gates`
    /// (`ResourceHealthStatus=true`), as its `--feature-gates` flag takes them.
    pub fn start_with(
        cp: &ControlPlane,
        node: &str,
        registry_dir: &Path,
        services: Option<&str>,
        gates: Option<&str>,
    ) -> Kubelet {
        let dir = tempfile::tempdir().expect("temp dir for the kubelet's state");
        let log = dir.path().join("kubelet.log");
        let stderr = File::create(&log).expect("create the kubelet's log");
        let binary = binary(cp.release);
        let mut command = Command::new(binary);
        command
            .arg("--kubeconfig")
            .arg(cp.kubeconfig())
            .args(["--node", node])
            .arg("--registry-dir")
            .arg(registry_dir)
            .arg("--state-dir")
            .arg(dir.path().join("state"));
        if let Some(services) = services {
            command.args(["--services", services]);
        }
        if let Some(gates) = gates {
            command.args(["--feature-gates", gates]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines = Arc::new(Lines::default());
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    lines
                        .lines
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(line);
                    lines.changed.notify_all();
                }
            });
        }
        let kubelet = Kubelet {
            stdin: Mutex::new(child.stdin.take()),
            child,
            lines,
            log,
            _dir: dir,
        };
        let (_, first) = kubelet
            .lines
            .wait(0, START_TIMEOUT, |l| {
                l == "ready" || l.starts_with("error ")
            })
            .unwrap_or_else(|| panic!("the kubelet never said ready; {}", kubelet.log_tail()));
        assert_eq!(first, "ready", "{}", kubelet.log_tail());
        kubelet
    }

    /// How many lines the program wrote so far: a mark for [`Kubelet::event_after`].
    pub fn mark(&self) -> usize {
        self.lines.len()
    }

    /// The first event at or after `mark` that starts with `prefix`, waiting up to `timeout`.
    pub fn event_after(&self, mark: usize, prefix: &str, timeout: Duration) -> String {
        self.lines
            .wait(mark, timeout, |l| l.starts_with(prefix))
            .unwrap_or_else(|| {
                panic!(
                    "no {prefix:?} from the kubelet within {timeout:?}; its lines: {:?}; {}",
                    self.all(),
                    self.log_tail()
                )
            })
            .1
    }

    /// Every line so far.
    pub fn all(&self) -> Vec<String> {
        self.lines
            .lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sends one command and returns its answer: `Ok` with the answer, `Err` with the message
    /// of an `error` answer.
    pub fn command(&self, line: &str) -> Result<String, String> {
        let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let mark = self.mark();
        let pipe = stdin.as_mut().expect("the kubelet is running");
        writeln!(pipe, "{line}").unwrap_or_else(|e| panic!("send {line:?}: {e}"));
        let is_answer = |l: &str| {
            ["prepared ", "unprepared ", "health ", "error "]
                .iter()
                .any(|p| l.starts_with(p))
        };
        let (_, answer) = self
            .lines
            .wait(mark, COMMAND_TIMEOUT, is_answer)
            .unwrap_or_else(|| panic!("{line:?}: no answer; {}", self.log_tail()));
        match answer.strip_prefix("error ") {
            Some(error) => Err(error.to_string()),
            None => Ok(answer),
        }
    }

    /// The tail of the kubelet code's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "kubelet log tail:\n{}",
            lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
        )
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        // Closing stdin is the stop.
        drop(
            self.stdin
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
