//! The real Kubernetes control plane for tests: `tests/controlplane` (Go) runs embedded etcd,
//! kube-apiserver, kube-scheduler and the needed controllers in one process, from the modules of
//! a [`Release`] (1.34: go.mod; 1.37: go.1.37.mod and the `k8s137` tag). Built once per change
//! of its sources into `target/tmp/controlplane/RELEASE-KEY/`, under a file lock. [`shared_on`]
//! starts one per release and test process, [`ControlPlane::start`] one of a test's own; an
//! instance stops, and removes its state, when its stdin closes. Tests that name no release run
//! on 1.34. Failures panic with one line, so tests fail rather than skip where Go is installed.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a start may take before the harness gives up (it says which part was not ready).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long one command (`node`, `token`) may take; the program bounds its requests to 30 s.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a stop may take; the program drains for at most 30 s.
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// Lines of the program's log quoted when a start fails.
const LOG_TAIL: usize = 20;

/// The Go module's directory.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/controlplane")
}

/// A Kubernetes release the harness is built from: one source tree, one module file each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// go.mod: 1.34, the oldest release that serves `resource.k8s.io/v1`.
    V1_34,
    /// go.1.37.mod: the newest release, with its own default feature gates.
    V1_37,
}

impl Release {
    /// Every release, in order.
    pub const ALL: [Release; 2] = [Release::V1_34, Release::V1_37];

    /// `1.34`: what test names and messages call it.
    pub fn name(self) -> &'static str {
        match self {
            Release::V1_34 => "1.34",
            Release::V1_37 => "1.37",
        }
    }

    /// The module file that pins it; go picks the .sum beside it (go.1.37.sum).
    fn modfile(self) -> &'static str {
        match self {
            Release::V1_34 => "go.mod",
            Release::V1_37 => "go.1.37.mod",
        }
    }

    /// The build tag of the files for its APIs (`//go:build k8s137`; 1.34's are `!k8s137`).
    fn tags(self) -> &'static str {
        match self {
            Release::V1_34 => "",
            Release::V1_37 => "k8s137",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The version its module file pins (`k8s.io/kubernetes vX.Y.Z`), which `/version` reports.
    pub fn version(self) -> String {
        let path = source_dir().join(self.modfile());
        let go_mod =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        go_mod
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace().skip_while(|w| *w == "require");
                (words.next() == Some("k8s.io/kubernetes")).then(|| words.next())?
            })
            .next()
            .unwrap_or_else(|| panic!("{} requires k8s.io/kubernetes", path.display()))
            .to_string()
    }
}

/// The Kubernetes release go.mod pins, which the tests that name none run on.
pub fn release() -> String {
    Release::V1_34.version()
}

/// The built 1.34 control plane, building it first if its sources changed.
pub fn binary() -> &'static Path {
    built(&CONTROL_PLANE, Release::V1_34).unwrap_or_else(|e| panic!("{e}"))
}

/// The build's result, kept for the process: a failed build is not tried again by every test.
pub fn built(program: &Program, release: Release) -> Result<&'static Path, String> {
    static BUILT: [[OnceLock<Result<PathBuf, String>>; 2]; 2] =
        [const { [const { OnceLock::new() }; 2] }; 2];
    let index = PROGRAMS
        .iter()
        .position(|p| p.name == program.name)
        .expect("a program of the module");
    BUILT[index][release.index()]
        .get_or_init(|| build(program, release))
        .as_deref()
        .map_err(Clone::clone)
}

/// A main package of the Go module, built under its own name beside the others.
pub struct Program {
    /// The package's directory in the module, as `go build` takes it.
    pub package: &'static str,
    /// The binary's file name, and what the build messages call it.
    pub name: &'static str,
}

/// The control plane (the module's root package).
pub const CONTROL_PLANE: Program = Program {
    package: ".",
    name: "controlplane",
};

/// The kubelet's plugin manager and DRA manager (see support/kubelet_real.rs).
pub const KUBELET: Program = Program {
    package: "./kubelet",
    name: "kubelet",
};

/// Every program of the module: their sources make the cache key, their binaries a build.
const PROGRAMS: [&Program; 2] = [&CONTROL_PLANE, &KUBELET];

pub fn go_version() -> Result<String, String> {
    let out = Command::new("go")
        .args(["env", "GOVERSION"])
        .output()
        .map_err(|e| {
            format!("build the control plane: run go: {e} (hint: install Go 1.26 or newer)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "build the control plane: go env GOVERSION: {}",
            first_line(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// SHA-256 of the release's module and sum files and the Go files (the module's and its
/// programs' one directory down, such as kubelet/), with the Go version: the build's cache key.
fn source_key(go: &str, release: Release) -> String {
    let dir = source_dir();
    let mut names: Vec<String> = Vec::new();
    for sub in ["."].into_iter().chain(PROGRAMS.iter().map(|p| p.package)) {
        let files = fs::read_dir(dir.join(sub)).expect("read tests/controlplane");
        names.extend(
            files
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    let sum = release.modfile().replace(".mod", ".sum");
                    *n == release.modfile() || *n == sum || n.ends_with(".go")
                })
                .map(|n| format!("{sub}/{n}")),
        );
    }
    names.sort();
    names.dedup();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(go.as_bytes());
    for name in names {
        ctx.update(name.as_bytes());
        ctx.update(&fs::read(dir.join(&name)).unwrap());
    }
    ctx.finish().as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("controlplane")
}

/// Builds `program` for `release` once per change of the module's sources; Go's build cache
/// shares the packages the programs have in common.
pub fn build(program: &Program, release: Release) -> Result<PathBuf, String> {
    let go = go_version()?;
    let prefix = format!("{}-", release.name());
    let out_dir = cache_dir().join(format!("{prefix}{}", source_key(&go, release)));
    let binary = out_dir.join(program.name);
    fs::create_dir_all(&out_dir).map_err(|e| format!("create {}: {e}", out_dir.display()))?;
    // Another test process may be building the same sources: wait for it, then use its result.
    let lock =
        File::create(cache_dir().join("build.lock")).map_err(|e| format!("build lock: {e}"))?;
    lock.lock().map_err(|e| format!("build lock: {e}"))?;
    if binary.is_file() {
        return Ok(binary);
    }
    let version = release.version();
    let (major, minor) = {
        let mut parts = version.trim_start_matches('v').split('.');
        (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        )
    };
    // Not captured by the test harness: a person waiting should know why.
    let _ = writeln!(
        std::io::stderr(),
        "building {} (Kubernetes {version}, {go}) into {}: the first build takes minutes",
        program.name,
        out_dir.display()
    );
    let partial = out_dir.join(format!("{}.partial", program.name));
    // -X: /version would say v0.0.0-master; `why` reads it for the release's feature gates.
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={version} \
         -X k8s.io/component-base/version.gitMajor={major} \
         -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean"
    );
    let started = Instant::now();
    let out = Command::new("go")
        // -buildvcs=false: stamping asks git about the worktree, which a tarball checkout lacks.
        .args(["build", "-mod=readonly", "-buildvcs=false"])
        .arg(format!("-modfile={}", release.modfile()))
        .arg(format!("-tags={}", release.tags()))
        .arg("-o")
        .arg(&partial)
        .args(["-ldflags", &ldflags, program.package])
        .current_dir(source_dir())
        .output()
        .map_err(|e| format!("build {}: run go: {e}", program.name))?;
    if !out.status.success() {
        return Err(format!(
            "build {} for {}: go build: {} (hint: a module the proxy does not serve is named \
             above; cd tests/controlplane && go build -modfile={} -tags={} {} shows everything)",
            program.name,
            release.name(),
            build_error(&out.stderr),
            release.modfile(),
            release.tags(),
            program.package
        ));
    }
    fs::rename(&partial, &binary).map_err(|e| format!("move {}: {e}", partial.display()))?;
    // Builds of older sources are 120 MB each; a process still running one keeps its inode.
    // Another release's builds are not older: they stay.
    for entry in fs::read_dir(cache_dir()).into_iter().flatten().flatten() {
        let path = entry.path();
        let is_build = PROGRAMS.iter().any(|p| {
            path.join(p.name).is_file() || path.join(format!("{}.partial", p.name)).is_file()
        });
        let name = entry.file_name().to_string_lossy().into_owned();
        let other_release = Release::ALL
            .iter()
            .any(|r| *r != release && name.starts_with(&format!("{}-", r.name())));
        if is_build && !other_release && path != out_dir {
            let _ = fs::remove_dir_all(path);
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "built {} for {} in {:.0?}",
        program.name,
        release.name(),
        started.elapsed()
    );
    Ok(binary)
}

/// The line of `go build`'s output that says what failed: the first `go:` or compiler error,
/// else the first line.
pub fn build_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines()
        .find(|l| l.starts_with("go: ") || l.contains(".go:"))
        .or_else(|| text.lines().next())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// The instance shared by the tests of this process. It is never dropped: it stops when the
/// process exits and closes its stdin. Its run directory (the log) is named after this process
/// and removed by a later process once this one is gone.
///
/// A start that failed is kept too, so that every test of the process fails with its reason
/// instead of trying again for minutes.
pub fn shared() -> &'static ControlPlane {
    shared_on(Release::V1_34)
}

/// [`shared`] for `release`: one instance per release and test process.
pub fn shared_on(release: Release) -> &'static ControlPlane {
    static SHARED: [OnceLock<Result<ControlPlane, String>>; 2] = [const { OnceLock::new() }; 2];
    let started = SHARED[release.index()].get_or_init(|| {
        remove_stale_runs();
        let run = cache_dir().join(format!("shared-{}-{}", release.name(), std::process::id()));
        fs::create_dir_all(&run).map_err(|e| format!("create {}: {e}", run.display()))?;
        let cp = ControlPlane::start_in(RunDir::Kept(run), &[], release)?;
        let _ = writeln!(
            std::io::stderr(),
            "control plane {} ready in {:.1?} ({})",
            release.version(),
            cp.startup,
            cp.url
        );
        Ok(cp)
    });
    started.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

/// A second instance for the tests of this process that need `flags` (feature gates are
/// process-global, so an instance with other gates is another process), or objects of their
/// own that the tests on [`shared`] must not see. Kept like [`shared`]: the caller holds it in a
/// `static`, and its run directory `shared-NAME-PID` is removed by a later process.
pub fn shared_with(name: &str, flags: &[&str]) -> Result<ControlPlane, String> {
    shared_with_on(Release::V1_34, name, flags)
}

/// [`shared_with`] for `release`; `name` must differ between releases (it names the run).
pub fn shared_with_on(
    release: Release,
    name: &str,
    flags: &[&str],
) -> Result<ControlPlane, String> {
    remove_stale_runs();
    let run = cache_dir().join(format!("shared-{name}-{}", std::process::id()));
    fs::create_dir_all(&run).map_err(|e| format!("create {}: {e}", run.display()))?;
    let cp = ControlPlane::start_in(RunDir::Kept(run), flags, release)?;
    let _ = writeln!(
        std::io::stderr(),
        "control plane {name} {} ({}) ready in {:.1?} ({})",
        release.version(),
        flags.join(" "),
        cp.startup,
        cp.url
    );
    Ok(cp)
}

/// Removes the run directories of shared instances whose test process has exited.
fn remove_stale_runs() {
    let Ok(entries) = fs::read_dir(cache_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `shared-PID` or `shared-NAME-PID` (see [`shared_with`]).
        let Some(pid) = name
            .strip_prefix("shared-")
            .map(|rest| rest.rsplit('-').next().unwrap_or(rest))
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Where an instance's log and state directory live.
enum RunDir {
    /// A test's own instance: removed when it is dropped.
    Temp(tempfile::TempDir),
    /// The shared instance's: see [`shared`].
    Kept(PathBuf),
}

impl RunDir {
    fn path(&self) -> &Path {
        match self {
            RunDir::Temp(dir) => dir.path(),
            RunDir::Kept(path) => path,
        }
    }
}

/// A running control plane.
pub struct ControlPlane {
    /// The API server, `https://127.0.0.1:PORT`.
    pub url: String,
    /// How long the start took, from spawning the program to its `ready`.
    pub startup: Duration,
    /// The release it was built from.
    pub release: Release,
    kubeconfig: PathBuf,
    log: PathBuf,
    io: Mutex<Io>,
    // Holds the log beside the state directory (which the program removes itself).
    run: RunDir,
}

/// The running program's pipes.
pub struct Io {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl ControlPlane {
    /// Builds the program if needed and starts an instance of its own for one test.
    pub fn start() -> ControlPlane {
        let dir = cache_dir();
        fs::create_dir_all(&dir).unwrap();
        let run = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(dir)
            .expect("create the run directory");
        Self::start_in(RunDir::Temp(run), &[], Release::V1_34).unwrap_or_else(|e| panic!("{e}"))
    }

    fn start_in(run: RunDir, flags: &[&str], release: Release) -> Result<ControlPlane, String> {
        let binary = built(&CONTROL_PLANE, release)?;
        let (io, url, startup) = Self::spawn(binary, run.path(), flags)?;
        Ok(ControlPlane {
            url,
            startup,
            release,
            kubeconfig: run.path().join("state/admin.kubeconfig"),
            log: run.path().join("controlplane.log"),
            io: Mutex::new(io),
            run,
        })
    }

    /// Runs the program with `--dir RUN/state` and `extra` flags until it says `ready`; the
    /// error is its `error` line, or what ended the wait, with the tail of its log.
    pub fn spawn(
        binary: &Path,
        run: &Path,
        extra: &[&str],
    ) -> Result<(Io, String, Duration), String> {
        let log_path = run.join("controlplane.log");
        let log =
            File::create(&log_path).map_err(|e| format!("create {}: {e}", log_path.display()))?;
        let began = Instant::now();
        let mut child = Command::new(binary)
            .arg("--dir")
            .arg(run.join("state"))
            .arg(format!("--start-timeout={}s", START_TIMEOUT.as_secs()))
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start the control plane {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut io = Io {
            child,
            stdin,
            lines,
        };
        // The program's own timeout ends the start first; ours only guards against a hang.
        match io
            .lines
            .recv_timeout(START_TIMEOUT + Duration::from_secs(10))
        {
            Ok(line) => match line.strip_prefix("ready ") {
                Some(url) => Ok((io, url.to_string(), began.elapsed())),
                None => {
                    let _ = io.child.wait();
                    Err(format!(
                        "start the control plane: {}",
                        line.trim_start_matches("error ")
                    ))
                }
            },
            Err(e) => {
                let _ = io.child.kill();
                let _ = io.child.wait();
                Err(format!(
                    "start the control plane: {} (log tail: {})",
                    match e {
                        RecvTimeoutError::Timeout => "no ready line in time".to_string(),
                        RecvTimeoutError::Disconnected => "it exited without a word".to_string(),
                    },
                    log_tail(&log_path)
                ))
            }
        }
    }

    /// The admin kubeconfig (client certificate in group system:masters).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The components' log, for failure messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Sends one command line and returns its answer, panicking on an `error` answer.
    fn command(&self, line: &str) -> String {
        self.command_within(line, COMMAND_TIMEOUT)
    }

    fn command_within(&self, line: &str, timeout: Duration) -> String {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let stdin = io.stdin.as_mut().expect("the control plane is running");
        writeln!(stdin, "{line}").unwrap_or_else(|e| panic!("send {line:?}: {e}"));
        let answer = io
            .lines
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("{line:?}: no answer ({e}); log: {}", self.log_tail()));
        if let Some(error) = answer.strip_prefix("error ") {
            panic!("{line:?}: {error}");
        }
        answer
    }

    /// Creates a Ready node with `labels` (`key=value`).
    pub fn node(&self, name: &str, labels: &[&str]) {
        let answer = self.command(&format!("node {name} {}", labels.join(" ")));
        assert_eq!(answer, format!("node {name}"));
    }

    /// A token of `namespace/service_account` bound to `pod` on `node` (both made if missing),
    /// whose requests carry the node's name in their user info.
    pub fn token(&self, namespace: &str, service_account: &str, pod: &str, node: &str) -> String {
        let answer = self.command(&format!("token {namespace} {service_account} {pod} {node}"));
        answer
            .strip_prefix("token ")
            .unwrap_or_else(|| panic!("unexpected answer {answer:?}"))
            .to_string()
    }

    /// Stops kube-apiserver (connections to [`Self::url`] are refused); etcd and the other
    /// components keep running. Only on an instance of the test's own ([`Self::start`]).
    pub fn stop_apiserver(&self) {
        assert_eq!(self.command("apiserver stop"), "apiserver stopped");
    }

    /// Starts kube-apiserver again on the same port and etcd; returns once its /readyz is ok.
    pub fn start_apiserver(&self) {
        assert_eq!(
            self.command_within("apiserver start", START_TIMEOUT),
            "apiserver started"
        );
    }

    /// kube-apiserver's audit log (JSON lines, Metadata level, for DRA's objects and Nodes).
    pub fn audit_log(&self) -> PathBuf {
        self.run.path().join("state/audit.log")
    }

    /// The API server's serving certificate and key (PEM), valid for 127.0.0.1 and signed by
    /// the cluster's CA, and that CA: what a proxy in front of the server can present.
    pub fn serving_pem(&self) -> (PathBuf, PathBuf, PathBuf) {
        let state = self.run.path().join("state");
        (
            state.join("apiserver.crt"),
            state.join("apiserver.key"),
            state.join("ca.crt"),
        )
    }

    /// A kubeconfig at `path` for this cluster that authenticates with `token` only.
    pub fn token_kubeconfig(&self, token: &str, path: &Path) {
        let admin: serde_yaml::Value =
            serde_yaml::from_str(&fs::read_to_string(&self.kubeconfig).unwrap()).unwrap();
        let mut config = admin.clone();
        config["users"] =
            serde_yaml::from_str(&format!("[{{name: admin, user: {{token: {token}}}}}]")).unwrap();
        fs::write(path, serde_yaml::to_string(&config).unwrap()).unwrap();
    }

    /// `kubectl ARGS` against this cluster as its admin, in an empty environment but for `HOME`.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(&self.kubeconfig, args)
    }
}

/// `kubectl ARGS` with `kubeconfig`, in an empty environment but for its own `HOME`.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new("kubectl")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run kubectl")
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let io = self.io.get_mut().unwrap_or_else(|e| e.into_inner());
        // Closing stdin is the stop: the program drains, removes its state and exits.
        drop(io.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = io.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = io.child.kill();
        let _ = io.child.wait();
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL)..].join(" | ")
}
