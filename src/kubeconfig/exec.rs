//! A kubeconfig user's exec credential plugin (`users[].user.exec`), run as client-go runs it
//! (`plugin/pkg/client/auth/exec`: `KUBERNETES_EXEC_INFO`, the interactive modes, the
//! `ExecCredential` it prints), within bounds kube-rs does not keep: its standard output is
//! read up to [`MAX_STDOUT`], its standard error passed through (the plugin) or kept as a
//! [`STDERR_TAIL`] for the error line (the agent, whose log is no terminal), and the whole run is
//! bounded by the request timeout, after which its process group is killed. kube-rs runs the
//! plugin itself with `Command::output`, which keeps both streams whole and waits for ever; so
//! the credential is fetched here and handed to kube-rs as a token or a certificate.

use std::process::Stdio;
use std::time::Duration;

use kube::config::{ExecConfig, ExecInteractiveMode};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The most of a plugin's standard output read: an `ExecCredential` with a client certificate
/// and key is a few KiB; a plugin that writes more is looping.
pub const MAX_STDOUT: usize = 1 << 20;

/// How much of a plugin's standard error is kept when it is not passed through: the end, where
/// a failing program says why.
pub const STDERR_TAIL: usize = 2048;

/// How long the output of a plugin that has exited is still read: a child it left behind
/// holding its output is killed with its process group, and the rest is not waited for.
const AFTER_EXIT: Duration = Duration::from_secs(1);

/// What happens to the plugin's standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// Ours (kubectl's: a plugin may prompt there).
    PassThrough,
    /// Kept, its last [`STDERR_TAIL`] bytes, for the error line.
    Tail,
}

/// How a plugin is run.
#[derive(Clone, Copy, Debug)]
pub struct ExecOptions {
    /// The whole run; `None` waits as long as it takes (as kubectl without `--request-timeout`).
    pub timeout: Option<Duration>,
    pub stderr: Stderr,
}

/// What the plugin handed over.
#[derive(Debug)]
pub(crate) enum Credential {
    Token(String),
    Certificate { certificate: String, key: String },
}

/// Why the plugin gave no credential.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec plugin {command}: {cause}")]
    Start {
        command: String,
        cause: std::io::Error,
        install_hint: Option<String>,
    },
    #[error("exec plugin {command} did not finish within {timeout:?}")]
    Timeout { command: String, timeout: Duration },
    #[error("exec plugin {command} wrote over {} KiB to its standard output, more than a credential", MAX_STDOUT >> 10)]
    TooMuch { command: String },
    #[error("exec plugin {command} failed with {status}{said}")]
    Failed {
        command: String,
        status: String,
        /// `: ` and the end of its standard error, on one line, when kept.
        said: String,
    },
    #[error("exec plugin {command}: {problem}")]
    Credential { command: String, problem: String },
    #[error(
        "exec plugin {command} requires a terminal (interactiveMode: Always), but standard input is not one"
    )]
    NotInteractive { command: String },
}

impl ExecError {
    /// What to do about it, for the caller's `(hint: ...)`.
    pub fn hint(&self) -> String {
        match self {
            ExecError::Start {
                install_hint: Some(text),
                ..
            } => crate::text::one_line(text, crate::api_errors::MAX_ERROR_TEXT),
            ExecError::Start { .. } => {
                "check the exec command of the kubeconfig's user, or install it".into()
            }
            ExecError::Timeout { .. } => "raise --request-timeout, or fix the plugin".into(),
            ExecError::TooMuch { .. } => "run the plugin by hand to see what it prints".into(),
            ExecError::Failed { .. } => "run the plugin by hand to see why, or log in again".into(),
            ExecError::Credential { .. } => {
                "the plugin must print an ExecCredential, as kubectl expects".into()
            }
            ExecError::NotInteractive { .. } => {
                "run this at a terminal, or set the user's interactiveMode to IfAvailable".into()
            }
        }
    }
}

/// The `ExecCredential` a plugin prints (client.authentication.k8s.io v1 and v1beta1).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Printed {
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<PrintedStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PrintedStatus {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// The plugin's credential. `cluster` is the `spec.cluster` of `KUBERNETES_EXEC_INFO`, when the
/// kubeconfig asks to provide it.
pub(crate) async fn credential(
    exec: &ExecConfig,
    cluster: Option<serde_json::Value>,
    options: ExecOptions,
) -> Result<Credential, ExecError> {
    let command = exec.command.clone().unwrap_or_default();
    let shown = crate::text::one_line(&command, 200);
    let stdin_terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
    // client-go: IfAvailable (and v1beta1's default) is interactive only at a terminal.
    let interactive = match exec.interactive_mode {
        Some(ExecInteractiveMode::Never) => false,
        Some(ExecInteractiveMode::Always) if !stdin_terminal => {
            return Err(ExecError::NotInteractive { command: shown });
        }
        _ => stdin_terminal,
    };
    let api_version = exec.api_version.clone().unwrap_or_default();
    let mut spec = serde_json::json!({ "interactive": interactive });
    if let Some(cluster) = cluster.filter(|_| exec.provide_cluster_info) {
        spec["cluster"] = cluster;
    }
    let info = serde_json::json!({
        "apiVersion": api_version, "kind": "ExecCredential", "spec": spec,
    });
    let mut cmd = tokio::process::Command::new(&command);
    cmd.args(exec.args.iter().flatten())
        .envs(
            exec.env
                .iter()
                .flatten()
                .filter_map(|pair| Some((pair.get("name")?.clone(), pair.get("value")?.clone()))),
        )
        .env("KUBERNETES_EXEC_INFO", info.to_string())
        .stdout(Stdio::piped())
        .stderr(match options.stderr {
            Stderr::PassThrough => Stdio::inherit(),
            Stderr::Tail => Stdio::piped(),
        })
        .kill_on_drop(true);
    for name in exec.drop_env.iter().flatten() {
        cmd.env_remove(name);
    }
    if interactive {
        // Its prompts read the terminal, which only the foreground process group may.
        cmd.stdin(Stdio::inherit());
    } else {
        // A group of its own: whatever it starts is killed with it.
        cmd.stdin(Stdio::null()).process_group(0);
    }
    let child = cmd.spawn().map_err(|cause| ExecError::Start {
        command: shown.clone(),
        cause,
        install_hint: exec.install_hint.clone(),
    })?;
    let pid = child.id();
    let run = run(child, !interactive, &shown);
    let (stdout, status, tail) = match options.timeout {
        Some(timeout) => tokio::time::timeout(timeout, run).await.map_err(|_| {
            // The plugin itself is killed as its handle drops; what it started, here.
            if let (false, Some(pid)) = (interactive, pid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            ExecError::Timeout {
                command: shown.clone(),
                timeout,
            }
        })??,
        None => run.await?,
    };
    if !status.success() {
        let said = crate::text::one_line(&String::from_utf8_lossy(&tail), STDERR_TAIL);
        return Err(ExecError::Failed {
            command: shown,
            status: describe(status),
            said: if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            },
        });
    }
    parse(&stdout, &api_version).map_err(|problem| ExecError::Credential {
        command: shown,
        problem,
    })
}

/// `exit status 3`, or the signal that ended it.
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
            Ok(name) => format!("signal {name}"),
            Err(_) => format!("signal {signal}"),
        },
        _ => status.to_string(),
    }
}

/// Waits for the plugin while reading its output within bounds; its process group (`group`)
/// is killed when it exits or overflows, so no child of it holds the output open.
async fn run(
    mut child: tokio::process::Child,
    group: bool,
    shown: &str,
) -> Result<(Vec<u8>, std::process::ExitStatus, Vec<u8>), ExecError> {
    let kill_group = |child: &tokio::process::Child| {
        if let (true, Some(pid)) = (group, child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    };
    let too_much = || ExecError::TooMuch {
        command: shown.to_owned(),
    };
    let mut stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take();
    let (mut out, mut tail) = (Vec::new(), Vec::new());
    let status = {
        let mut reading_out = std::pin::pin!(read_up_to(&mut stdout, &mut out, MAX_STDOUT));
        let mut reading_err = std::pin::pin!(async {
            if let Some(stderr) = stderr {
                keep_tail(stderr, &mut tail).await;
            }
        });
        let (mut out_done, mut err_done) = (false, false);
        let mut exited = None;
        let mut after_exit = std::pin::pin!(tokio::time::sleep(Duration::MAX));
        loop {
            if out_done && err_done && exited.is_some() {
                break;
            }
            tokio::select! {
                over = &mut reading_out, if !out_done => {
                    out_done = true;
                    if over {
                        kill_group(&child);
                        let _ = child.kill().await;
                        return Err(too_much());
                    }
                }
                () = &mut reading_err, if !err_done => err_done = true,
                status = child.wait(), if exited.is_none() => {
                    // What it left behind goes with it; its output is read a moment longer.
                    kill_group(&child);
                    exited = Some(status);
                    after_exit
                        .as_mut()
                        .reset(tokio::time::Instant::now() + AFTER_EXIT);
                }
                () = &mut after_exit, if exited.is_some() => break,
            }
        }
        exited.expect("exited")
    }
    .map_err(|cause| ExecError::Start {
        command: shown.to_owned(),
        cause,
        install_hint: None,
    })?;
    Ok((out, status, tail))
}

/// Reads `from` to its end into `into`; `true` (and stops) past `max` bytes.
async fn read_up_to(from: &mut (impl AsyncRead + Unpin), into: &mut Vec<u8>, max: usize) -> bool {
    let mut chunk = [0u8; 8192];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                if into.len() + n > max {
                    return true;
                }
                into.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Reads `from` to its end, keeping its last [`STDERR_TAIL`] bytes in `tail`.
async fn keep_tail(mut from: impl AsyncRead + Unpin, tail: &mut Vec<u8>) {
    let mut chunk = [0u8; 8192];
    while let Ok(n) = from.read(&mut chunk).await {
        if n == 0 {
            return;
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
}

/// The credential in what the plugin printed (YAML or JSON, as client-go's decoder takes it).
fn parse(stdout: &[u8], api_version: &str) -> Result<Credential, String> {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("it printed nothing".to_string());
    }
    let printed: Printed = serde_yaml::from_slice(stdout).map_err(|e| {
        let text = crate::text::one_line(&e.to_string(), crate::api_errors::MAX_ERROR_TEXT);
        format!("what it printed is not an ExecCredential: {text}")
    })?;
    if printed.kind.as_deref() != Some("ExecCredential") {
        return Err(format!(
            "it printed kind {:?}, not ExecCredential",
            printed.kind.unwrap_or_default()
        ));
    }
    // client-go: "exec plugin is configured to use API version X, plugin returned version Y".
    let returned = printed.api_version.unwrap_or_default();
    if returned != api_version {
        return Err(format!(
            "it is configured to use API version {api_version:?}, but returned version {returned:?}"
        ));
    }
    let status = printed
        .status
        .ok_or_else(|| "it printed an ExecCredential without a status".to_string())?;
    match (
        status.token,
        status.client_certificate_data,
        status.client_key_data,
    ) {
        (_, Some(certificate), Some(key)) => Ok(Credential::Certificate { certificate, key }),
        (Some(token), _, _) if !token.is_empty() => Ok(Credential::Token(token)),
        (_, Some(_), None) | (_, None, Some(_)) => {
            Err("its status has a client certificate or key without the other".to_string())
        }
        _ => Err("its status has neither a token nor a client certificate and key".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "client.authentication.k8s.io/v1";

    /// A plugin that is `sh -c script`, never interactive.
    fn plugin(script: &str) -> ExecConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": V1, "command": "sh", "args": ["-c", script],
            "interactiveMode": "Never",
        }))
        .unwrap()
    }

    fn options(timeout: u64) -> ExecOptions {
        ExecOptions {
            timeout: Some(Duration::from_secs(timeout)),
            stderr: Stderr::Tail,
        }
    }

    const CREDENTIAL: &str = r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}'"#;

    #[tokio::test]
    async fn a_plugin_is_bounded_in_output_and_time() {
        let started = std::time::Instant::now();
        // Its credential, and KUBERNETES_EXEC_INFO as client-go sets it.
        let info =
            r#"case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) exit 9;; esac; "#;
        let got = credential(&plugin(&format!("{info}{CREDENTIAL}")), None, options(30)).await;
        assert!(
            matches!(&got, Ok(Credential::Token(t)) if t == "t"),
            "{got:?}"
        );

        // A flood on standard output: stopped at the bound.
        let err = credential(&plugin("yes"), None, options(30))
            .await
            .unwrap_err();
        assert!(matches!(err, ExecError::TooMuch { .. }), "{err}");
        // A flood on standard error, then a failure: the end of it, on one line.
        let flood = "i=0; while [ $i -lt 20000 ]; do echo retrying >&2; i=$((i+1)); done; echo 'token expired' >&2; exit 3";
        let err = credential(&plugin(flood), None, options(30))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("exec plugin sh failed with exit status 3: retrying retrying")
                && err.ends_with("retrying token expired")
                && err.len() < STDERR_TAIL + 100,
            "{}",
            &err[..err.len().min(300)]
        );
        // A plugin that hangs: killed with what it started when the time is up.
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let hang = format!("sleep 600 & echo $! > {}; wait", pid.display());
        let err = credential(&plugin(&hang), None, options(1))
            .await
            .unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
        let child = std::fs::read_to_string(&pid)
            .unwrap()
            .trim()
            .parse::<i32>()
            .unwrap();
        // Gone, or a zombie left for init to reap.
        let gone = || {
            std::fs::read_to_string(format!("/proc/{child}/stat")).map_or(true, |stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|s| s.trim_start().starts_with('Z'))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !gone() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(gone(), "the plugin's child outlived it");
        // A plugin that exits leaving a child that holds its output: not waited for.
        let left = format!("{CREDENTIAL}; sleep 600 &");
        let got = credential(&plugin(&left), None, options(30)).await;
        assert!(matches!(got, Ok(Credential::Token(_))), "{got:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        // Not there at all: the kubeconfig's install hint.
        let mut missing = plugin("");
        missing.command = Some("/nonexistent/kubelogin".into());
        missing.install_hint = Some("install kubelogin\nfrom its site".into());
        let err = credential(&missing, None, options(30)).await.unwrap_err();
        assert_eq!(err.hint(), "install kubelogin from its site");
    }

    #[test]
    fn the_credential_is_read_as_client_go_reads_it() {
        let v1 = "client.authentication.k8s.io/v1";
        let json = r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}"#;
        assert!(matches!(parse(json.as_bytes(), v1), Ok(Credential::Token(t)) if t == "t"));
        let yaml = "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  clientCertificateData: c\n  clientKeyData: k\n";
        assert!(matches!(
            parse(yaml.as_bytes(), v1),
            Ok(Credential::Certificate { .. })
        ));
        let other = parse(json.as_bytes(), "client.authentication.k8s.io/v1beta1").err();
        assert!(other.unwrap().contains("returned version"));
        assert_eq!(parse(b"  \n", v1).err().unwrap(), "it printed nothing");
        // A YAML parser's report stays one line, without its drawing of the place.
        let bad = parse(b"status: [\n  - {\n", v1).unwrap_err();
        assert!(
            !bad.contains('\n') && bad.starts_with("what it printed is not"),
            "{bad}"
        );
    }
}
