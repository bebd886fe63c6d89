//! Exit codes that tell the truth, for both programs: output that cannot be written (a closed
//! stdout, a full disk) is a failure with one line, a reader that went away (`| head`) is not,
//! a full stderr never turns a failure into a panic (101), and an API answer of 200 whose body
//! is a `Status` of failure is an error, as client-go takes it. The streams are made here: a
//! closed descriptor (through `sh`, which can close one), /dev/full, a pipe closed at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::agent::AgentProcess;
use crate::support::fakeapi::{FakeApi, Reply};
use crate::{error_line, kubectl_media};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-media");
const AGENT: &str = env!("CARGO_BIN_EXE_media-capabilities");

fn fleet() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/examples/fleet.yaml")
        .to_string_lossy()
        .into_owned()
}

/// A failed probe as `media-capabilities probe --from` replays it, in a fresh directory.
fn recorded_probe() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("gpu.json"),
        r#"{"render_node": "/dev/dri/renderD128", "pci": {"address": "0000:03:00.0", "vendor": "10de", "product": "2684", "driver": "nvidia"}, "failure": "probe killed by SIGSEGV"}"#,
    )
    .unwrap();
    dir
}

/// `program args` in a scrubbed environment, with standard output closed (`>&-`): only a
/// shell can hand a program a closed descriptor.
fn with_stdout_closed(program: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$@" >&-"#)
        .arg("sh")
        .arg(program)
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn dev_full() -> Stdio {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
        .into()
}

/// `program args` writing its standard output (or error) to /dev/full.
fn into_full(program: &str, args: &[&str], stderr_full: bool) -> Output {
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", "/nonexistent")
        .stdin(Stdio::null());
    if stderr_full {
        command.stdout(Stdio::piped()).stderr(dev_full());
    } else {
        command.stdout(dev_full()).stderr(Stdio::piped());
    }
    command.output().unwrap()
}

/// `program args` into a pipe whose reader is gone before the program writes.
fn into_gone_reader(program: &str, args: &[&str]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn output_that_cannot_be_written_is_a_failure_and_a_gone_reader_is_not() {
    let fleet = fleet();
    let probes = recorded_probe();
    let from = probes.path().to_str().unwrap();
    let closed = "write output: standard output is closed (hint: send the output to a file or a \
                  pipe, or to /dev/null to discard it)";
    let cases: [(&str, &[&str]); 5] = [
        (PLUGIN, &["caps", "-f", &fleet]),
        (PLUGIN, &["class", "--decode", "AV1Main"]),
        (PLUGIN, &["--help"]),
        (AGENT, &["--help"]),
        (AGENT, &["probe", "--from", from]),
    ];
    for (program, args) in cases {
        let name = format!("{} {}", Path::new(program).display(), args.join(" "));
        // Closed: a failure, said in one line (the agent's probe says what it was writing).
        let out = with_stdout_closed(program, args);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {said}");
        assert_eq!(said.lines().count(), 1, "{name}: {said}");
        assert!(
            said.starts_with("error: ")
                && said
                    .trim_end()
                    .ends_with(closed.split_once(": ").unwrap().1),
            "{name}: {said}"
        );
        // Full: the same, in the system's words.
        let out = into_full(program, args, false);
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {said}");
        assert!(said.contains("No space left on device"), "{name}: {said}");
        assert_eq!(said.lines().count(), 1, "{name}: {said}");
        // A reader that went away: quiet, and the usual exit.
        let out = into_gone_reader(program, args);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{name}");
    }
    // A closed stdout where nothing is written costs nothing: the failure is the command's own.
    let out = with_stdout_closed(PLUGIN, &["caps", "-f", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent"), "{}", stderr(&out));
}

#[test]
fn a_full_stderr_never_turns_a_failure_into_a_panic() {
    // Each failure keeps its own exit code: 1 for a file that is not there, 2 for usage.
    let cases: [(&str, &[&str], i32); 5] = [
        (PLUGIN, &["caps", "-f", "/nonexistent"], 1),
        (PLUGIN, &["caps", "--bogus"], 2),
        (PLUGIN, &["caps"], 1),
        (AGENT, &["--bogus"], 2),
        (
            AGENT,
            &["--node-name", "n1", "--kubeconfig", "/nonexistent"],
            2,
        ),
    ];
    for (program, args, code) in cases {
        let out = into_full(program, args, true);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // The agent logging to a full stderr (it logs as it starts and when the API server is not
    // there) runs on and stops on SIGTERM with 0.
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApi::start(|_, _| Reply::status(503, 503, "ServiceUnavailable", "starting"));
    let kubeconfig = api.kubeconfig(dir.path());
    let mut agent = Command::new(AGENT)
        .env_clear()
        .env("RUST_LOG", "debug")
        .args(["--node-name", "n1", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--kubelet-registry-dir")
        .arg(dir.path().join("registry"))
        .arg("--kubelet-plugins-dir")
        .arg(dir.path().join("plugins"))
        .arg("--sys-root")
        .arg(dir.path())
        .arg("--dev-root")
        .arg(dir.path())
        .args(["--health-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(dev_full())
        .spawn()
        .unwrap();
    // Running until it has asked the server twice: it logged by then.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while api.asked().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent asked nothing"
        );
        assert!(agent.try_wait().unwrap().is_none(), "the agent ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(agent.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(agent.wait().unwrap().code(), Some(0));
}

/// A kubeconfig for `api` in a fresh directory.
fn kubeconfig_of(api: &FakeApi) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(dir.path());
    (dir, kubeconfig)
}

#[test]
fn a_200_whose_body_is_a_status_of_failure_is_an_error() {
    // As kube-apiserver words an etcd timeout, sent with 200 (a proxy's or a server's bug).
    let api = FakeApi::start(|_, _| {
        Reply::status(200, 500, "InternalError", "etcdserver: request timed out")
    });
    let (_dir, kubeconfig) = kubeconfig_of(&api);
    let url = api.url();
    for encoding in ["json", "protobuf"] {
        let out = Command::new(PLUGIN)
            .args(["caps"])
            .env_clear()
            .env("NO_COLOR", "1")
            .env("HOME", "/nonexistent")
            .env("KUBECONFIG", &kubeconfig)
            .env("KUBECTL_MEDIA_LIST_ENCODING", encoding)
            .output()
            .unwrap();
        assert_eq!(
            error_line(out),
            format!(
                "error: the Kubernetes API at {url} refused to list resourceslices.resource.k8s.io: \
                 etcdserver: request timed out (500 InternalError)"
            )
        );
    }
    // `why` lists through the same client; a Status's own code decides (403: forbidden).
    let api = FakeApi::start(|_, _| {
        Reply::status(
            200,
            403,
            "Forbidden",
            "pods is forbidden: User \"u\" cannot list pods",
        )
    });
    let (_dir, kubeconfig) = kubeconfig_of(&api);
    let line = error_line(kubectl_media(&["why", "p"], &kubeconfig));
    assert!(
        line.starts_with("error: forbidden: cannot list ") && line.contains("pods is forbidden"),
        "{line}"
    );
    // A Status of success is no failure: an empty fleet, said as one.
    let api = FakeApi::start(|_, _| {
        Reply::json(
            200,
            &serde_json::json!({"kind": "Status", "status": "Success", "code": 200}),
        )
    });
    let (_dir, kubeconfig) = kubeconfig_of(&api);
    let out = kubectl_media(&["caps"], &kubeconfig);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn the_agent_takes_a_200_status_of_failure_for_the_error_it_is() {
    let api = FakeApi::start(|_, _| {
        Reply::status(200, 500, "InternalError", "etcdserver: request timed out")
    });
    let (dir, kubeconfig) = kubeconfig_of(&api);
    let reports = dir.path().join("reports");
    crate::support::agent::write_fleet(&reports, 1);
    let agent = AgentProcess::start(AGENT, "n1", &reports, &kubeconfig, &[]);
    let line = agent.log.wait_for("etcdserver", Duration::from_secs(30));
    assert!(
        line.contains("500 InternalError: etcdserver: request timed out"),
        "{line}"
    );
    assert_eq!(agent.log.count("up to date"), 0, "nothing was published");
}
