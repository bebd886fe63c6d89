//! `kubectl media caps` as a user runs it, from files: the real binary with a scrubbed
//! environment, on the shipped example fleet. Outputs are snapshotted; bad input and odd content
//! are checked for one clear line and no crash. (The same command against a cluster is tested in
//! `tests/it/cluster.rs`, through the test API server.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fleet() -> String {
    root()
        .join("docs/examples/fleet.yaml")
        .display()
        .to_string()
}

/// Runs kubectl-media with nothing inherited: no kubeconfig, no colour, a fixed width.
fn run(args: &[&str], columns: Option<&str>, stdin: Option<&str>) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-media"));
    command
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1");
    if let Some(columns) = columns {
        command.env("COLUMNS", columns);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str], columns: Option<&str>) -> String {
    let out = run(args, columns, None);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A failing command: one line on stderr, nothing on stdout, the given exit code.
fn fails(args: &[&str], code: i32, stdin: Option<&str>) -> String {
    let out = run(args, None, stdin);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{args:?} wrote {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn table_of_the_example_fleet() {
    let fleet = fleet();
    insta::assert_snapshot!("caps-table", ok(&["caps", "-f", &fleet], Some("200")));
    insta::assert_snapshot!(
        "caps-table-narrow",
        ok(&["caps", "-f", &fleet], Some("120"))
    );
    insta::assert_snapshot!("caps-wide", ok(&["caps", "-f", &fleet, "-o", "wide"], None));
    insta::assert_snapshot!(
        "caps-no-headers",
        ok(&["caps", "-f", &fleet, "--no-headers"], Some("200"))
    );
}

#[test]
fn records_of_the_example_fleet() {
    let fleet = fleet();
    let json = ok(&["caps", "-f", &fleet, "-o", "json"], None);
    let yaml = ok(&["caps", "-f", &fleet, "-o", "yaml"], None);
    let from_json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let from_yaml: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(from_json, from_yaml);
    let records = from_json.as_array().unwrap();
    assert_eq!(records.len(), 9, "8 GPUs with an agent and one without");
    for record in records {
        assert_eq!(
            record["attributes"].as_object().unwrap().len(),
            25,
            "{record}"
        );
    }
    insta::assert_snapshot!("caps-json", json);
    insta::assert_snapshot!("caps-yaml", yaml);
}

#[test]
fn summary_of_the_example_fleet() {
    let fleet = fleet();
    insta::assert_snapshot!(
        "caps-summary",
        ok(&["caps", "-f", &fleet, "--summary"], Some("200"))
    );
    let json: serde_json::Value = serde_json::from_str(&ok(
        &["caps", "-f", &fleet, "--summary", "-o", "json"],
        None,
    ))
    .unwrap();
    assert_eq!(json["gpus"], 9);
    assert_eq!(json["nodes"], 9);
    assert_eq!(
        json["capabilities"]["decodeHEVCMain10"],
        serde_json::json!({"gpus": 6, "nodes": 6})
    );
    assert_eq!(json["drift"].as_array().unwrap().len(), 1);
}

#[test]
fn filters_count_what_they_keep() {
    let fleet = fleet();
    let out = ok(
        &[
            "caps",
            "-f",
            &fleet,
            "--decode",
            "hevcmain10",
            "--scale",
            "10bit",
        ],
        Some("200"),
    );
    insta::assert_snapshot!("caps-filtered", out);
    assert!(
        out.ends_with("5 of 9 GPUs on 5 of 9 nodes (decodeHEVCMain10, scale10bit)\n"),
        "{out}"
    );
    let out = ok(
        &["caps", "-f", &fleet, "--node", "arc-1,gen9-1", "-o", "json"],
        None,
    );
    let records: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes: Vec<&str> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["arc-1", "gen9-1"]);
}

/// The same objects as JSON (`kubectl get -o json`), on stdin, or split over several files give
/// the same answer as the YAML file.
#[test]
fn every_input_form_gives_the_same_answer() {
    let fleet = fleet();
    let expected = ok(&["caps", "-f", &fleet, "-o", "json"], None);
    let yaml = std::fs::read_to_string(&fleet).unwrap();
    let list: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let json_file = dir.path().join("fleet.json");
    std::fs::write(&json_file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    assert_eq!(
        ok(
            &["caps", "-f", json_file.to_str().unwrap(), "-o", "json"],
            None
        ),
        expected
    );

    let out = run(&["caps", "-f", "-", "-o", "json"], None, Some(&yaml));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    // Each slice its own document, split across two files.
    let items = list["items"].as_array().unwrap();
    let (first, second) = items.split_at(items.len() / 2);
    let write_docs = |path: &Path, items: &[serde_json::Value]| {
        let docs: Vec<String> = items
            .iter()
            .map(|i| serde_yaml::to_string(i).unwrap())
            .collect();
        std::fs::write(path, docs.join("---\n")).unwrap();
    };
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    write_docs(&a, first);
    write_docs(&b, second);
    assert_eq!(
        ok(
            &[
                "caps",
                "-f",
                a.to_str().unwrap(),
                "-f",
                b.to_str().unwrap(),
                "-o",
                "json"
            ],
            None
        ),
        expected
    );
}

#[test]
fn odd_content_never_crashes() {
    let odd = r#"
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-media.liken.sh}
  spec:
    driver: media.liken.sh
    nodeName: n1
    pool: {name: n1, generation: 1, resourceSliceCount: 1}
    devices:
    - name: pci-0000-00-02-0
      attributes:
        resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
        vaDriver: {string: "some driver"}
        decodeVP9: {string: "true"}
        decodeH264: {bool: true}
        vendor: {int: 32902}
    - name: no-attributes
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: other}
  spec:
    driver: gpu.example.com
    nodeName: n1
    pool: {name: n1, generation: 1}
    devices: [{name: x, attributes: {decodeVP9: {bool: true}}}]
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: broken}
  spec: {driver: media.liken.sh, pool: {name: n2, generation: many}}
- apiVersion: resource.k8s.io/v1beta1
  kind: ResourceSlice
  metadata: {name: old}
  spec: {driver: media.liken.sh, nodeName: n3, pool: {name: n3, generation: 1}}
- apiVersion: v1
  kind: Pod
  metadata: {name: p}
"#;
    let out = run(&["caps", "-f", "-"], Some("200"), Some(odd));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    insta::assert_snapshot!("caps-odd-content", format!("{stdout}--- stderr\n{stderr}"));
}

#[test]
fn an_empty_fleet_says_so_and_json_stays_parseable() {
    let empty = "apiVersion: v1\nkind: List\nitems: []\n";
    let out = run(&["caps", "-f", "-"], None, Some(empty));
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "No media.liken.sh or liken.sh devices found.\n"
    );
    let out = run(&["caps", "-f", "-", "-o", "json"], None, Some(empty));
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "[]\n");
}

#[test]
fn bad_input_gets_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "apiVersion: v1\nkind: List\nitems:\n- {a: 1\n").unwrap();
    let broken_json = dir.path().join("broken.json");
    std::fs::write(&broken_json, "{\"apiVersion\": \"v1\",\n  \"items\": [}\n").unwrap();
    let fleet = fleet();
    let mut transcript = String::new();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["caps", "-f", broken.to_str().unwrap()], 1),
        (vec!["caps", "-f", broken_json.to_str().unwrap()], 1),
        (vec!["caps", "-f", "/nonexistent/fleet.yaml"], 1),
        (vec!["caps", "-f", &fleet, "--decode", "HEVCMain12"], 2),
        (vec!["caps", "-f", &fleet, "--summary", "-o", "wide"], 2),
        (vec!["caps", "-f", &fleet, "--no-headers", "-o", "json"], 2),
        (vec!["caps", "-f", &fleet, "-o", "table"], 2),
        (vec!["caps", "--request-timeout", "soon"], 2),
        (vec!["caps"], 1),
    ];
    for (args, code) in cases {
        let stderr = fails(&args, code, None);
        let shown: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace(dir.path().to_str().unwrap(), "$TMP")
                    .replace(&fleet, "fleet.yaml")
            })
            .collect();
        transcript.push_str(&format!(
            "$ kubectl media {}\n{}\n",
            shown.join(" "),
            stderr.replace(dir.path().to_str().unwrap(), "$TMP")
        ));
    }
    insta::assert_snapshot!("caps-errors", transcript);
}

#[test]
fn an_unreachable_cluster_is_named_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    // Port 9 (discard) on loopback: nothing listens there, so the connection is refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:9'}\n\
         contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user: {}\n",
    )
    .unwrap();
    let stderr = fails(
        &["caps", "--kubeconfig", kubeconfig.to_str().unwrap()],
        1,
        None,
    );
    assert!(
        stderr.starts_with("error: cannot reach the Kubernetes API at http://127.0.0.1:9: "),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "(hint: check --context and --kubeconfig, or read objects from a file with -f)"
        ),
        "{stderr}"
    );
    let stderr = fails(
        &[
            "caps",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            "nope",
        ],
        1,
        None,
    );
    assert!(stderr.starts_with("error: load kubeconfig: "), "{stderr}");
    assert!(stderr.contains("nope"), "{stderr}");
}

/// One colour decision: `--color always` colours the table even into a pipe, NO_COLOR and
/// `--color never` do not, and JSON is never coloured.
#[test]
fn colour_follows_the_flag_and_never_touches_json() {
    let fleet = fleet();
    let table = ok(&["caps", "-f", &fleet, "--color", "always"], None);
    assert!(table.contains("\u{1b}["), "{table}");
    let plain = ok(&["caps", "-f", &fleet, "--color", "never"], None);
    assert!(!plain.contains('\u{1b}'));
    // NO_COLOR is set by `run`; auto into a pipe is plain as well.
    assert!(!ok(&["caps", "-f", &fleet], None).contains('\u{1b}'));
    let json = ok(
        &["caps", "-f", &fleet, "--color", "always", "-o", "json"],
        None,
    );
    assert!(!json.contains('\u{1b}'));
    // Colour changes nothing but the escapes.
    let stripped: String = {
        let mut out = String::new();
        let mut chars = table.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    assert_eq!(
        stripped.lines().map(str::trim_end).collect::<Vec<_>>(),
        plain.lines().collect::<Vec<_>>()
    );
}

/// A GPU liken publishes for a node whose agent describes the node's other GPUs was not in the
/// agent's claim (it appeared after the agent's pod started): the hint says so and names the
/// fix, deleting that node's agent pod so that its claim is made anew (issue 9, item 8).
#[test]
fn a_gpu_the_agents_claim_did_not_bring_is_not_probed_with_the_fix() {
    let yaml = r#"
apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-media.liken.sh}
  spec:
    driver: media.liken.sh
    nodeName: n1
    pool: {name: n1, generation: 1, resourceSliceCount: 1}
    devices:
    - name: pci-0000-00-02-0
      attributes:
        resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: n1-liken.sh}
  spec:
    driver: liken.sh
    nodeName: n1
    pool: {name: n1, generation: 1, resourceSliceCount: 1}
    devices:
    - name: card0
      attributes:
        renderNode: {string: /dev/dri/renderD128}
        resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
    - name: card1
      attributes:
        renderNode: {string: /dev/dri/renderD129}
        resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
"#;
    let out = run(&["caps", "-f", "-"], Some("400"), Some(yaml));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let row = stdout
        .lines()
        .find(|l| l.contains("0000:03:00.0"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.ends_with("not probed"), "{row}");
    let note = stdout
        .lines()
        .find(|l| l.starts_with("not probed:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        note,
        "not probed: 1 GPU on node n1: liken publishes a render node, but the agent on that node \
         describes no GPU at its address: the agent's claim was allocated before this GPU \
         appeared, so its container cannot open it (hint: delete the agent's pod on that node so \
         that its claim is made anew: kubectl -n liken-system delete pod -l \
         app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=n1)"
    );
}

/// `--color auto` in a real terminal (a pty from util-linux's `script`): colour, unless `TERM`
/// is `dumb` (terminals that print escape codes as text) or `NO_COLOR` is set.
#[test]
fn auto_colour_in_a_terminal_follows_term_and_no_color() {
    let in_a_terminal = |env: &[(&str, &str)]| {
        let command = format!(
            "{} caps -f {}",
            env!("CARGO_BIN_EXE_kubectl-media"),
            fleet()
        );
        let home = tempfile::tempdir().unwrap();
        let out = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/bin:/bin")
            .env("COLUMNS", "200")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run script(1)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).contains('\u{1b}')
    };
    assert!(
        in_a_terminal(&[("TERM", "xterm-256color")]),
        "a terminal is coloured"
    );
    assert!(!in_a_terminal(&[("TERM", "dumb")]), "TERM=dumb is not");
    assert!(!in_a_terminal(&[
        ("TERM", "xterm-256color"),
        ("NO_COLOR", "1")
    ]));
}
