//! `kubectl media` against a cluster: the real binary talking HTTP to the project's Kubernetes
//! API test server (tests/it/support/apiserver), and kubectl 1.32 applying what `class` writes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::apiserver::{Fault, TestApiServer};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kubectl_media(args: &[&str], kubeconfig: &Path) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_kubectl-media"))
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

fn stdout(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The only error line, after checking the exit code and that nothing went to stdout.
fn error_line(out: Output) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr.trim_end().to_string()
}

/// The example fleet's slices, loaded into the server as the agents and liken would have.
fn load_example_fleet(server: &TestApiServer) {
    let text = std::fs::read_to_string(root().join("docs/examples/fleet.yaml")).unwrap();
    let list: Value = serde_yaml::from_str(&text).unwrap();
    for item in list["items"].as_array().unwrap() {
        server.put(item.clone()).unwrap();
    }
}

#[test]
fn caps_from_a_cluster_matches_caps_from_a_file() {
    let server = TestApiServer::start();
    load_example_fleet(&server);
    let fleet = root().join("docs/examples/fleet.yaml");
    for format in ["json", "yaml", "wide"] {
        let from_cluster = stdout(kubectl_media(&["caps", "-o", format], server.kubeconfig()));
        let from_file = stdout(kubectl_media(
            &["caps", "-o", format, "-f", fleet.to_str().unwrap()],
            server.kubeconfig(),
        ));
        assert_eq!(from_cluster, from_file, "-o {format}");
    }
    // It only read.
    assert!(server.writes_since(0).is_empty());
}

#[test]
fn caps_pages_through_large_fleets() {
    let server = TestApiServer::start();
    let templates = crate::support::examples::example_nodes(&root()).unwrap();
    for item in crate::support::examples::large_fleet(300, 2, &templates) {
        server.put(item).unwrap();
    }
    let mark = server.request_mark();
    let out = stdout(kubectl_media(&["caps", "-o", "json"], server.kubeconfig()));
    let records: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(records.as_array().unwrap().len(), 600);
    let lists: Vec<_> = server
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.verb == "list" && r.resource.as_deref() == Some("resourceslices"))
        .collect();
    assert_eq!(lists.len(), 2, "600 slices in pages of 500: {lists:?}");
    assert!(lists[1].query.contains("continue="), "{lists:?}");
}

#[test]
fn caps_explains_what_the_cluster_refuses() {
    let server = TestApiServer::start();
    load_example_fleet(&server);

    server.fail_next_matching(1, Fault::Forbidden, Some("list"), Some("resourceslices"));
    assert_eq!(
        error_line(kubectl_media(&["caps"], server.kubeconfig())),
        "error: forbidden: cannot list resourceslices.resource.k8s.io at the cluster scope: \
         resourceslices.resource.k8s.io is forbidden: User \"system:anonymous\" cannot list resource \
         \"resourceslices\" in API group \"resource.k8s.io\" at the cluster scope (hint: ask for a \
         role that allows 'list' on resourceslices.resource.k8s.io)"
    );

    server.fail_next_matching(1, Fault::Unauthorized, Some("list"), Some("resourceslices"));
    assert_eq!(
        error_line(kubectl_media(&["caps"], server.kubeconfig())),
        format!(
            "error: the Kubernetes API at {} refused our credentials (401 Unauthorized) (hint: log in \
             again, or check the user of the kubeconfig context)",
            server.base_url().trim_end_matches('/')
        )
    );

    server.fail_next_matching(
        1,
        Fault::InternalError,
        Some("list"),
        Some("resourceslices"),
    );
    let line = error_line(kubectl_media(&["caps"], server.kubeconfig()));
    assert!(
        line.starts_with("error: the Kubernetes API at http://127.0.0.1:"),
        "{line}"
    );
    assert!(
        line.ends_with("refused to list resourceslices.resource.k8s.io: Internal error occurred: injected fault (500 InternalError)"),
        "{line}"
    );

    server.set_resource_v1_served(false);
    let line = error_line(kubectl_media(&["caps"], server.kubeconfig()));
    assert_eq!(
        line,
        format!(
            "error: the cluster at {} does not serve resourceslices.resource.k8s.io in resource.k8s.io/v1: it is older than \
             Kubernetes 1.34, or the resource.k8s.io/v1 API is disabled (hint: DRA with resource.k8s.io/v1 \
             needs Kubernetes 1.34 or newer)",
            server.base_url().trim_end_matches('/')
        )
    );
    server.set_resource_v1_served(true);

    server.set_latency(Duration::from_millis(1500));
    let line = error_line(kubectl_media(
        &["caps", "--request-timeout", "200ms"],
        server.kubeconfig(),
    ));
    assert!(
        line.contains("did not answer within 200ms (hint: raise --request-timeout"),
        "{line}"
    );
    server.set_latency(Duration::ZERO);

    server.stop();
    let line = error_line(kubectl_media(&["caps"], server.kubeconfig()));
    assert!(
        line.starts_with("error: cannot reach the Kubernetes API at http://127.0.0.1:"),
        "{line}"
    );
    assert!(line.contains("Connection refused"), "{line}");
}

/// `kubectl apply -f -` accepts what `class` writes (issue 2, item 6), with kubectl 1.32 as the
/// real client; ignored, with the install hint, where kubectl is not installed.
#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn kubectl_applies_what_class_writes() {
    let server = TestApiServer::start();
    let yaml = stdout(kubectl_media(
        &[
            "class",
            "decode-10bit",
            "--decode",
            "HEVCMain10",
            "--scale",
            "10bit",
            "--claim",
            "--with-render-class",
        ],
        server.kubeconfig(),
    ));
    let selector = stdout(kubectl_media(
        &[
            "class",
            "--selector",
            "--decode",
            "VP9",
            "--scale",
            "8bit",
            "--with-base-class",
        ],
        server.kubeconfig(),
    ));
    for input in [yaml, selector] {
        let mut child = Command::new("kubectl")
            .args(["apply", "-f", "-"])
            .env("KUBECONFIG", server.kubeconfig())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let classes: Vec<String> = server
        .list("deviceclasses", None)
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(classes, ["decode-10bit", "gpu-render", "media-gpu"]);
    let templates = server.list("resourceclaimtemplates", None);
    let names: Vec<&str> = templates
        .iter()
        .map(|t| t["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["decode-10bit", "decode-vp9-scale-8bit"]);
}
