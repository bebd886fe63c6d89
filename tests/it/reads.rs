//! Every read of outside input bounded: the kubeconfig and the files it names refused in one line
//! when they are not regular files or too large (for `caps`, for `why -f`, which reads the
//! kubeconfig for its namespace, and for the agent), and an exec credential plugin that floods
//! or hangs stopped. The inputs are generated here: FIFOs, devices, sparse files of any size,
//! plugins that are shell scripts. None of these needs a server: each fails before one is asked.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{error_line, kubectl_media};

/// A kubeconfig whose one context's cluster and user are these YAML flow maps.
fn kubeconfig(dir: &Path, cluster: &str, user: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {cluster}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: media}}\n\
             current-context: c\nusers:\n- name: u\n  user: {user}\n"
        ),
    )
    .unwrap();
    path
}

fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    assert!(
        Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success()
    );
    path
}

/// A file of `size` bytes that takes no room (a hole).
fn sparse(dir: &Path, name: &str, size: u64) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    path
}

/// `why` of a pod the file does not hold: the namespace comes from the kubeconfig.
fn why_offline(dir: &Path, kubeconfig: &Path) -> String {
    let pods = dir.join("pods.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: a}\nspec: {containers: []}\n",
    )
    .unwrap();
    error_line(kubectl_media(
        &["why", "nosuch", "-f", pods.to_str().unwrap()],
        kubeconfig,
    ))
}

#[test]
fn a_kubeconfig_that_is_no_regular_file_or_too_large_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let big = sparse(dir.path(), "big", 40 << 20);
    for (path, said) in [
        (fifo(dir.path(), "fifo"), "it is a FIFO, not a regular file"),
        (
            PathBuf::from("/dev/zero"),
            "it is a character device, not a regular file",
        ),
        (big, "it is over 32 MiB, more than a kubeconfig holds"),
    ] {
        let expected = format!(
            "error: load kubeconfig {}: {said} (hint: fix that file or take it out of \
             KUBECONFIG, or read objects from a file with -f)",
            path.display()
        );
        assert_eq!(error_line(kubectl_media(&["caps"], &path)), expected);
        // `-f` reads no cluster, but the kubeconfig for the namespace.
        let line = why_offline(dir.path(), &path);
        assert!(
            line.starts_with(&expected[..expected.find(" (hint").unwrap()]),
            "{line}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_file_the_kubeconfig_names_that_is_no_regular_file_or_too_large_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let ca = fifo(dir.path(), "ca.crt");
    let token = sparse(dir.path(), "token", 5 << 20);
    let key = dir.path().join("missing.key");
    let cases = [
        (
            format!(
                "{{server: 'https://127.0.0.1:9', certificate-authority: {}}}",
                ca.display()
            ),
            "{}".to_string(),
            format!(
                "certificate-authority {}: it is a FIFO, not a regular file",
                ca.display()
            ),
        ),
        (
            "{server: 'https://127.0.0.1:9'}".to_string(),
            format!("{{tokenFile: {}}}", token.display()),
            format!(
                "tokenFile {}: it is over 4 MiB, more than a token file holds",
                token.display()
            ),
        ),
        (
            "{server: 'https://127.0.0.1:9'}".to_string(),
            format!(
                "{{client-certificate: /dev/zero, client-key: {}}}",
                key.display()
            ),
            "client-certificate /dev/zero: it is a character device, not a regular file"
                .to_string(),
        ),
    ];
    for (cluster, user, said) in cases {
        let config = kubeconfig(dir.path(), &cluster, &user);
        assert_eq!(
            error_line(kubectl_media(&["caps"], &config)),
            format!(
                "error: load kubeconfig: {said} (hint: fix the file the kubeconfig names, or \
                 read objects from a file with -f)"
            )
        );
        // `-f` takes only the namespace: it reads none of these files.
        let line = why_offline(dir.path(), &config);
        assert!(line.starts_with("error: pod nosuch not found"), "{line}");
    }
}

/// A user whose exec plugin is `/bin/sh -c script`.
fn exec_user(script: &str) -> String {
    format!(
        "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, {}], \
         interactiveMode: Never}}}}",
        serde_json::to_string(script).unwrap()
    )
}

#[test]
fn an_exec_plugin_that_floods_or_hangs_is_stopped_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = "{server: 'https://127.0.0.1:9'}";
    let started = Instant::now();
    let flood = kubeconfig(dir.path(), server, &exec_user("exec yes"));
    assert_eq!(
        error_line(kubectl_media(&["caps"], &flood)),
        "error: exec plugin /bin/sh wrote over 1024 KiB to its standard output, more than a \
         credential (hint: run the plugin by hand to see what it prints)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // A plugin that never ends is bounded by --request-timeout, as every request is.
    let hang = kubeconfig(dir.path(), server, &exec_user("sleep 600"));
    let started = Instant::now();
    assert_eq!(
        error_line(kubectl_media(&["caps", "--request-timeout", "1s"], &hang)),
        "error: exec plugin /bin/sh did not finish within 1s (hint: raise --request-timeout, \
         or fix the plugin)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // What it prints that is not a credential: one line, no parser's drawing of the place.
    let garbage = kubeconfig(
        dir.path(),
        server,
        &exec_user("printf 'status: [\\n  - {\\n'"),
    );
    let line = error_line(kubectl_media(&["caps"], &garbage));
    assert!(
        line.starts_with("error: exec plugin /bin/sh: what it printed is not an ExecCredential: ")
            && !line.contains('^'),
        "{line}"
    );
}
