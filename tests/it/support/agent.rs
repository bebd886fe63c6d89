//! Running the real `media-capabilities` agent against an API server: recorded reports
//! for any number of GPUs, the process with its log captured line by line (so tests wait for a
//! line instead of sleeping), its health port, and SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The recorded probes of the example fleet, one GPU each.
pub fn example_records() -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate::support::examples::example_nodes(root)
        .expect("read the example fleet")
        .into_iter()
        .flat_map(|(_, probed)| probed)
        .map(|p| serde_json::to_value(p).expect("a record serialises"))
        .collect()
}

/// Writes `n` recorded GPUs into `dir` (the example fleet's records, cycled, each at its own
/// PCI address and render node), one file per GPU as `--reports` reads them.
pub fn write_fleet(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).expect("create reports dir");
    let records = example_records();
    for i in 0..n {
        let mut record = records[i % records.len()].clone();
        set_gpu_index(&mut record, i);
        write_record(dir, &record);
    }
}

/// Moves a record to GPU number `i`: address `0000:<i+1>:00.0`, render node `renderD<128+i>`.
pub fn set_gpu_index(record: &mut Value, i: usize) {
    record["pci"]["address"] = Value::String(format!("0000:{:02x}:00.0", i + 1));
    record["render_node"] = Value::String(format!("/dev/dri/renderD{}", 128 + i));
}

/// Writes one record as `<address>.json` (atomically: the agent may list the directory at any
/// moment and must not read half a file).
pub fn write_record(dir: &Path, record: &Value) {
    let address = record["pci"]["address"]
        .as_str()
        .expect("record has an address");
    let file = dir.join(format!("{}.json", address.replace(':', "-")));
    let tmp = dir.join(".tmp-record");
    std::fs::write(&tmp, serde_json::to_vec_pretty(record).expect("serialise")).expect("write");
    std::fs::rename(&tmp, file).expect("rename record into place");
}

/// The log of a running process, line by line, with a way to wait for a line.
#[derive(Default)]
pub struct Log {
    lines: Mutex<Vec<String>>,
    changed: Condvar,
}

impl Log {
    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("log lock").clone()
    }

    /// How many lines so far contain `text`.
    pub fn count(&self, text: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(text)).count()
    }

    /// Waits until a line contains `text`; returns it.
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait_for_nth(text, 1, timeout)
    }

    /// Waits until `n` lines contain `text`; returns the `n`th.
    pub fn wait_for_nth(&self, text: &str, n: usize, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut lines = self.lines.lock().expect("log lock");
        loop {
            if let Some(line) = lines.iter().filter(|l| l.contains(text)).nth(n - 1) {
                return line.clone();
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "no log line containing {text:?} within {timeout:?}; log:\n{}",
                lines.join("\n")
            );
            lines = self
                .changed
                .wait_timeout(lines, deadline - now)
                .expect("log lock")
                .0;
        }
    }
}

/// A running agent.
pub struct AgentProcess {
    child: Child,
    pub log: Arc<Log>,
    pub health: SocketAddr,
    pub registry_dir: PathBuf,
    pub plugins_dir: PathBuf,
    _dir: tempfile::TempDir,
}

/// Fast periods so tests see several of them in well under a second; every GPU is probed again
/// every 100 ms, so that each test also checks that re-probing costs no write.
pub const FAST: &[&str] = &[
    "--rescan-interval",
    "50ms",
    "--reprobe-interval",
    "100ms",
    "--resync-interval",
    "100ms",
    "--max-backoff",
    "400ms",
    "--socket-recheck-interval",
    "100ms",
];

impl AgentProcess {
    /// Starts `media-capabilities` for `node` with recorded `reports`, the server's
    /// `kubeconfig`, kubelet sockets in a temp dir, the health port on an ephemeral port, and
    /// `extra` flags; waits until it logged its health address.
    pub fn start(
        program: &str,
        node: &str,
        reports: &Path,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> AgentProcess {
        let source = ["--reports".into(), reports.as_os_str().to_owned()];
        AgentProcess::start_with(program, node, &source, &[], kubeconfig, extra)
    }

    /// As `start`, with `source` for where the GPUs come from (`--reports DIR`, or a fake node's
    /// discovery flags) and `env` added to the scrubbed environment.
    pub fn start_with(
        program: &str,
        node: &str,
        source: &[std::ffi::OsString],
        env: &[(&str, std::ffi::OsString)],
        kubeconfig: &Path,
        extra: &[&str],
    ) -> AgentProcess {
        AgentProcess::start_in(node, source, env, kubeconfig, extra, |_| {
            Command::new(program)
        })
    }

    /// As `start_with`, with the command that runs the agent made by `command` from the paths
    /// the agent is handed (the kubelet's directories, not yet created, and the kubeconfig), so
    /// that a sandbox can show it those paths.
    pub fn start_in(
        node: &str,
        source: &[std::ffi::OsString],
        env: &[(&str, std::ffi::OsString)],
        kubeconfig: &Path,
        extra: &[&str],
        command: impl FnOnce(&[&Path]) -> Command,
    ) -> AgentProcess {
        let dir = tempfile::tempdir().expect("temp dir for the kubelet sockets");
        let registry_dir = dir.path().join("plugins_registry");
        let plugins_dir = dir.path().join("plugins/media.liken.sh");
        let mut child = command(&[&registry_dir, &plugins_dir, kubeconfig])
            .env_clear()
            .env("NODE_NAME", node)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(source)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--kubelet-registry-dir")
            .arg(&registry_dir)
            .arg("--kubelet-plugins-dir")
            .arg(&plugins_dir)
            .args(["--health-addr", "127.0.0.1:0"])
            // Last: a flag given twice takes its last value, so `extra` may name its own.
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start media-capabilities");
        let log = Arc::new(Log::default());
        let stderr = child.stderr.take().expect("stderr is piped");
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if std::env::var_os("AGENT_TEST_ECHO").is_some() {
                        eprintln!("agent: {line}");
                    }
                    log.lines.lock().expect("log lock").push(line);
                    log.changed.notify_all();
                }
            });
        }
        let line = log.wait_for("agent starting", Duration::from_secs(10));
        let health = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("health="))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no health address in {line:?}"));
        AgentProcess {
            child,
            log,
            health,
            registry_dir,
            plugins_dir,
            _dir: dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The registration socket.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join("media.liken.sh-reg.sock")
    }

    /// The DRA socket.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugins_dir.join("dra.sock")
    }

    /// GET `path` on the health port: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.health, path)
    }

    /// The value of metric `name` on `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (status, body) = self.get("/metrics");
        assert_eq!(status, 200);
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("send SIGTERM");
    }

    /// Waits for the process to exit, at most `timeout`; returns its status and how long it took.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(ExitStatus, Duration)> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((status, start.elapsed()));
            }
            // Polling a child's exit: std offers no wait with a timeout.
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` from an agent's health port at `addr`: (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the health port");

    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read answer");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
