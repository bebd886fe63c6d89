//! `kubectl media caps` as a user runs it, from files: the real binary with a scrubbed
//! environment, on the shipped example fleet, into a pipe and into real terminals of 120, 100
//! and 80 columns (a pty from util-linux's `script`, sized with `stty`, since the width comes
//! from the terminal as kubectl's does, never from `COLUMNS`). Outputs are snapshotted; bad input
//! and odd content are checked for one clear line and no crash. The agent-log hints are tested
//! against the real control plane, with and without the right to list pods. (The rest of `caps`
//! against a cluster is in `tests/it/cluster.rs`.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::support::faultproxy::Fault;
use crate::support::{examples, objects, render_fixtures};
use media_operator::agent::probing::read_records;
use media_operator::render_drivers::{AMD, INTEL, NVIDIA, RenderDriver};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fleet() -> String {
    root()
        .join("docs/examples/fleet.yaml")
        .display()
        .to_string()
}

/// Runs kubectl-media into a pipe with nothing inherited: no kubeconfig, no colour. `COLUMNS`
/// is set, to show that it changes nothing (kubectl does not read it either).
fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-media"));
    command
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .env("COLUMNS", "40");
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

fn ok(args: &[&str]) -> String {
    let out = run(args, None);
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
    let stderr = crate::one_error_line(run(args, stdin), code);
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    stderr
}

/// Runs kubectl-media in a real terminal `columns` wide (a pty from util-linux's `script`, sized
/// with `stty`), with `COLUMNS` set to something else to show that it is not what counts.
pub(crate) fn in_terminal(args: &[&str], columns: u16, env: &[(&str, &str)]) -> String {
    in_terminal_exiting(args, columns, env, 0)
}

/// [`in_terminal`], for a command that exits with `code`.
pub(crate) fn in_terminal_exiting(
    args: &[&str],
    columns: u16,
    env: &[(&str, &str)],
    code: i32,
) -> String {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let command = format!(
        "stty cols {columns} rows 60; exec {} {}",
        env!("CARGO_BIN_EXE_kubectl-media"),
        quoted.join(" ")
    );
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "xterm-256color")
        .env("COLUMNS", "300")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run script(1)");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A terminal ends lines with CR LF.
    String::from_utf8(out.stdout).unwrap().replace("\r\n", "\n")
}

pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
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
}

/// The table's lines: up to the blank line before the notes.
fn table_lines(text: &str) -> Vec<&str> {
    text.lines().take_while(|l| !l.is_empty()).collect()
}

/// Where each header cell starts; every row must have a cell starting there too (a non-blank
/// after a blank), which is what "the header aligns with the data" means.
fn assert_aligned(table: &[&str]) {
    let header = table[0];
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header[..i].ends_with("  ")))
        .map(|(i, _)| i)
        .collect();
    assert!(starts.len() >= 5, "{header}");
    for row in &table[1..] {
        let chars: Vec<char> = row.chars().collect();
        for &start in &starts {
            assert!(
                chars.get(start).is_some_and(|c| *c != ' ')
                    && (start == 0 || chars[start - 1] == ' '),
                "column at {start} of {header:?} is not aligned in {row:?}"
            );
        }
    }
}

#[test]
fn table_of_the_example_fleet() {
    let fleet = fleet();
    // Into a pipe: the natural width, which at 118 columns is also what a 120-column terminal
    // shows, one line per GPU and nothing cut.
    let piped = ok(&["caps", "-f", &fleet]);
    insta::assert_snapshot!("caps-table", piped);
    insta::assert_snapshot!(
        "caps-no-headers",
        ok(&["caps", "-f", &fleet, "--no-headers"])
    );
    let at_120 = in_terminal(&["caps", "-f", &fleet], 120, &[("NO_COLOR", "1")]);
    let table = table_lines(&at_120);
    assert_eq!(table.len(), 10, "a header and one line per GPU: {at_120}");
    assert!(table.iter().all(|l| l.chars().count() <= 120), "{at_120}");
    assert!(
        !at_120.contains('…'),
        "nothing is cut at 120 columns: {at_120}"
    );
    assert_eq!(table, table_lines(&piped));
    assert_aligned(&table);
    insta::assert_snapshot!("caps-table-120", at_120);

    // Narrower: still one line per GPU, cells cut at a word with `…`, never a column of single
    // characters, and the notes wrapped at the terminal's width. At 40 columns not even the
    // columns' floors fit: the lines run on, and still no name is cut inside.
    for columns in [100, 80, 40] {
        let text = in_terminal(&["caps", "-f", &fleet], columns, &[("NO_COLOR", "1")]);
        let table = table_lines(&text);
        assert_eq!(table.len(), 10, "{text}");
        if columns > 40 {
            // Only a command longer than a line runs past the edge, on a line of its own: one
            // that fits never leaves its `)` alone on the terminal's next line.
            for line in text.lines() {
                assert!(
                    line.chars().count() <= usize::from(columns)
                        || (line.starts_with("  kubectl ")
                            && !line.contains(" then ")
                            && line.trim_start().chars().count() > usize::from(columns)),
                    "{columns}: {line:?}"
                );
            }
        }
        // The hints' commands are never parted by a line break (a command so parted cannot be
        // copied and run): at 80 columns each has a line of its own.
        if columns == 80 {
            for command in [
                "  kubectl get pods -n liken-system -l app.kubernetes.io/name=media-capabilities --field-selector spec.nodeName=amd-2,",
                // 79 columns with its `)`: at the margin, not past the edge after the indent.
                "kubectl -n liken-system get pods -o wide --field-selector spec.nodeName=edge-1)",
            ] {
                assert!(text.lines().any(|l| l == command), "{command:?} in {text}");
            }
        }
        assert!(text.contains('…'), "{text}");
        assert_aligned(&table);
        // `all but X` cut is `all but …`, never `all …`, which would read as its opposite.
        assert!(!text.contains("all …"), "{text}");
        // No cell is cut inside a capability's shorthand: every word of DECODE and ENCODE is a
        // label, `all`, `but`, `-` or the ellipsis.
        let labels: Vec<&str> = [
            "AV1",
            "AV1-10",
            "H264",
            "HEVC",
            "HEVC-10",
            "MPEG2",
            "VC1",
            "VP8",
            "VP9",
            "VP9-10",
            "H264-LP",
            "HEVC-10-LP",
            "HEVC-LP",
            "all",
            "but",
            "-",
            "…",
        ]
        .to_vec();
        let decode = table[0].find("DECODE").unwrap();
        let scale = table[0].find("SCALE").unwrap();
        for row in &table[1..] {
            let cells: String = row.chars().skip(decode).take(scale - decode).collect();
            for word in cells.split_whitespace() {
                assert!(labels.contains(&word), "{word:?} in {row:?}");
            }
        }
        if columns > 40 {
            insta::assert_snapshot!(format!("caps-table-{columns}"), text);
        }
    }

    // -o wide never squeezes: in an 80-column terminal its rows are the pipe's, full strings
    // included; only the notes wrap at the terminal's width.
    let wide = ok(&["caps", "-f", &fleet, "-o", "wide"]);
    insta::assert_snapshot!("caps-wide", wide);
    let wide_at_80 = in_terminal(
        &["caps", "-f", &fleet, "-o", "wide"],
        80,
        &[("NO_COLOR", "1")],
    );
    assert_eq!(table_lines(&wide_at_80), table_lines(&wide));
    assert!(wide.contains("Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()"));
    assert!(wide.contains("Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"));
    assert_aligned(&table_lines(&wide));
}

/// With colour on, in a terminal and into a pipe, at every width: the escapes are the only
/// difference, so every header cell starts at the column of its data.
#[test]
fn colour_never_moves_a_column() {
    let fleet = fleet();
    for columns in [120, 100, 80] {
        let plain = in_terminal(&["caps", "-f", &fleet], columns, &[("NO_COLOR", "1")]);
        let coloured = in_terminal(&["caps", "-f", &fleet], columns, &[]);
        assert!(coloured.contains("\u{1b}[1mNODE"), "{coloured:?}");
        assert_eq!(strip_ansi(&coloured), plain, "at {columns} columns");
        assert_aligned(&table_lines(&strip_ansi(&coloured)));
        if columns == 120 {
            insta::assert_snapshot!("caps-table-120-colour", coloured);
        }
    }
    let wide = in_terminal(&["caps", "-f", &fleet, "-o", "wide"], 80, &[]);
    assert_aligned(&table_lines(&strip_ansi(&wide)));
}

#[test]
fn records_of_the_example_fleet() {
    let fleet = fleet();
    let json = ok(&["caps", "-f", &fleet, "-o", "json"]);
    let yaml = ok(&["caps", "-f", &fleet, "-o", "yaml"]);
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
        // Every record has its drift: null, or the model's.
        assert!(
            record.as_object().unwrap().contains_key("drift"),
            "{record}"
        );
    }
    // The drift is data: the model, the differing capabilities, the variants with their VA
    // drivers and nodes, and which variant this GPU is.
    let arc = records.iter().find(|r| r["node"] == "arc-2").unwrap();
    assert_eq!(
        arc["drift"],
        serde_json::json!({
            "model": {"vendor": "8086", "product": "56a0", "name": "DG2 [Arc A770]"},
            "differing": ["encodeHEVCMain10LowPower"],
            "variant": 1,
            "variants": [
                {"capabilities": {"encodeHEVCMain10LowPower": true},
                 "vaDrivers": ["Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()"],
                 "nodes": ["arc-1"], "gpus": 1},
                {"capabilities": {"encodeHEVCMain10LowPower": false},
                 "vaDrivers": ["Intel iHD driver for Intel(R) Gen Graphics - 23.1.6 ()"],
                 "nodes": ["arc-2"], "gpus": 1}
            ]
        })
    );
    let mtl = records.iter().find(|r| r["node"] == "mtl-1").unwrap();
    assert_eq!(mtl["drift"], serde_json::Value::Null);
    // PCI addresses and numeric IDs are quoted as kubectl (go-yaml v2) quotes them, so a YAML 1.1
    // reader does not take 0000:00:02.0 for a base-60 number or 8086 for an int; hex IDs stay
    // plain.
    assert!(yaml.contains("    address: \"0000:00:02.0\"\n"), "{yaml}");
    assert!(
        yaml.contains("    resource.kubernetes.io/pciBusID: \"0000:03:00.0\"\n"),
        "{yaml}"
    );
    assert!(yaml.contains("    vendor: \"8086\"\n"), "{yaml}");
    assert!(yaml.contains("    product: 56a0\n"), "{yaml}");
    assert!(
        !yaml.contains('\''),
        "double quotes only, as go-yaml: {yaml}"
    );
    insta::assert_snapshot!("caps-json", json);
    insta::assert_snapshot!("caps-yaml", yaml);
}

#[test]
fn summary_of_the_example_fleet() {
    let fleet = fleet();
    insta::assert_snapshot!("caps-summary", ok(&["caps", "-f", &fleet, "--summary"]));
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["caps", "-f", &fleet, "--summary", "-o", "json"])).unwrap();
    assert_eq!(json["gpus"], 9);
    assert_eq!(json["nodes"], 9);
    assert_eq!(
        json["capabilities"]["decodeHEVCMain10"],
        serde_json::json!({"gpus": 6, "nodes": 6})
    );
    assert_eq!(
        json["statuses"],
        serde_json::json!({
            "ok": {"gpus": 5, "nodes": 5},
            "tainted": {"gpus": 0, "nodes": 0},
            "no render device": {"gpus": 0, "nodes": 0},
            "drift": {"gpus": 2, "nodes": 2},
            "probe failed": {"gpus": 1, "nodes": 1},
            "incomplete": {"gpus": 0, "nodes": 0},
            "not probed": {"gpus": 0, "nodes": 0},
            "no agent": {"gpus": 1, "nodes": 1}
        })
    );
    let drift = json["drift"].as_array().unwrap();
    assert_eq!(drift.len(), 1);
    assert_eq!(
        drift[0]["differing"],
        serde_json::json!(["encodeHEVCMain10LowPower"])
    );
    assert!(
        drift[0].get("variant").is_none(),
        "no GPU to place: {drift:?}"
    );
    // The table and the JSON agree.
    let yaml: serde_json::Value =
        serde_yaml::from_str(&ok(&["caps", "-f", &fleet, "--summary", "-o", "yaml"])).unwrap();
    assert_eq!(yaml, json);
}

#[test]
fn filters_count_what_they_keep() {
    let fleet = fleet();
    let out = ok(&[
        "caps",
        "-f",
        &fleet,
        "--decode",
        "hevcmain10",
        "--scale",
        "10bit",
    ]);
    insta::assert_snapshot!("caps-filtered", out);
    assert!(
        out.ends_with("5 of 9 GPUs on 5 of 9 nodes (decodeHEVCMain10, scale10bit)\n"),
        "{out}"
    );
    // What the table prints can be typed back: its shorthand filters the same.
    assert_eq!(
        ok(&["caps", "-f", &fleet, "--decode", "HEVC-10", "--scale", "10"]),
        out
    );
    let out = ok(&["caps", "-f", &fleet, "--node", "arc-1,gen9-1", "-o", "json"]);
    let records: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes: Vec<&str> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["arc-1", "gen9-1"]);
}

/// The summary has no `[1]` marks, so its drift notes use none; the count line keeps the
/// capabilities and the nodes apart. On a fleet built from the recorded probes.
#[test]
fn summary_notes_and_count_lines_say_what_they_show() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet.json");
    let value = crate::support::examples::example_fleet(&root()).unwrap();
    std::fs::write(&fleet, value.to_string()).unwrap();
    let fleet = fleet.display().to_string();
    let summary = ok(&["caps", "-f", &fleet, "--summary"]);
    assert!(!summary.contains("[1]"), "{summary}");
    assert!(summary.contains("\ndrift: DG2 [Arc A770]"), "{summary}");
    let table = ok(&["caps", "-f", &fleet]);
    assert!(
        table.contains("drift [1]") && table.contains("\n[1] drift: DG2"),
        "{table}"
    );
    let count = |extra: &[&str]| {
        let mut args = vec!["caps", "-f", &fleet];
        args.extend_from_slice(extra);
        ok(&args).lines().last().unwrap().to_owned()
    };
    assert_eq!(
        count(&["--node", "arc-1,arc-2", "--decode", "AV1", "--scale", "10"]),
        "2 of 9 GPUs on 2 of 9 nodes (decodeAV1Main, scale10bit; --node arc-1, arc-2)"
    );
    assert_eq!(
        count(&["--node", "arc-1"]),
        "1 of 9 GPUs on 1 of 9 nodes (--node arc-1)"
    );
    assert_eq!(
        count(&["--decode", "AV1"]),
        "6 of 9 GPUs on 6 of 9 nodes (decodeAV1Main)"
    );
}

/// The same objects as JSON (`kubectl get -o json`), on stdin, or split over several files give
/// the same answer as the YAML file.
#[test]
fn every_input_form_gives_the_same_answer() {
    let fleet = fleet();
    let expected = ok(&["caps", "-f", &fleet, "-o", "json"]);
    let yaml = std::fs::read_to_string(&fleet).unwrap();
    let list: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let json_file = dir.path().join("fleet.json");
    std::fs::write(&json_file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    assert_eq!(
        ok(&["caps", "-f", json_file.to_str().unwrap(), "-o", "json"]),
        expected
    );

    let out = run(&["caps", "-f", "-", "-o", "json"], Some(&yaml));
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
        ok(&[
            "caps",
            "-f",
            a.to_str().unwrap(),
            "-f",
            b.to_str().unwrap(),
            "-o",
            "json"
        ]),
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
    let out = run(&["caps", "-f", "-"], Some(odd));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    insta::assert_snapshot!("caps-odd-content", format!("{stdout}--- stderr\n{stderr}"));
}

#[test]
fn an_empty_fleet_says_so_and_json_stays_parseable() {
    let empty = "apiVersion: v1\nkind: List\nitems: []\n";
    let out = run(&["caps", "-f", "-"], Some(empty));
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "No media.liken.sh devices or render nodes found (the files hold no ResourceSlices).\n"
    );
    let out = run(&["caps", "-f", "-", "-o", "json"], Some(empty));
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
        (vec!["caps", "-f", &fleet, "--decode", "HEVC10"], 2),
        (vec!["caps", "-f", &fleet, "--decode", "h265"], 2),
        (vec!["caps", "-f", &fleet, "--encode", "AV1"], 2),
        (vec!["caps", "-f", &fleet, "--node", ""], 2),
        (vec!["caps", "-f", &fleet, "--node", "arc-1,"], 2),
        (vec!["caps", "-f", &fleet, "--node", "arc-3"], 1),
        (
            vec!["caps", "-f", &fleet, "--node", "nvidia", "-o", "json"],
            1,
        ),
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
    let table = ok(&["caps", "-f", &fleet, "--color", "always"]);
    assert!(table.contains("\u{1b}["), "{table}");
    let plain = ok(&["caps", "-f", &fleet, "--color", "never"]);
    assert!(!plain.contains('\u{1b}'));
    // NO_COLOR is set by `run`; auto into a pipe is plain as well.
    assert!(!ok(&["caps", "-f", &fleet]).contains('\u{1b}'));
    let json = ok(&["caps", "-f", &fleet, "--color", "always", "-o", "json"]);
    assert!(!json.contains('\u{1b}'));
    // Colour changes nothing but the escapes.
    let stripped = strip_ansi(&table);
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
    let out = run(&["caps", "-f", "-", "-o", "wide"], Some(yaml));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wide = String::from_utf8(out.stdout).unwrap();
    let row = wide
        .lines()
        .find(|l| l.contains("0000:03:00.0"))
        .unwrap_or_else(|| panic!("{wide}"));
    assert!(row.ends_with("not probed"), "{row}");
    let out = run(&["caps", "-f", "-"], Some(yaml));
    let stdout = String::from_utf8(out.stdout).unwrap();
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
    let fleet = fleet();
    // Every case names its TERM, which overrides the one `in_terminal` sets.
    let in_a_terminal =
        |env: &[(&str, &str)]| in_terminal(&["caps", "-f", &fleet], 200, env).contains('\u{1b}');
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

/// An agent's pod as the DaemonSet makes it (deploy/base/daemonset.yaml: its labels, its namespace).
fn agent_pod(name: &str, node: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "liken-system", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "media-capabilities"}]},
        "status": {"phase": "Running"}
    })
}

fn agent_labels() -> Value {
    json!({"app.kubernetes.io/name": "media-capabilities"})
}

/// The pods in liken-system of the fleet's control plane: amd-2's agent (its probe failed),
/// another node's agent, and another program's pod on amd-2 (neither is the one).
pub(crate) fn fleet_pods() -> Vec<Value> {
    vec![
        agent_pod("media-capabilities-7xk2p", "amd-2", agent_labels()),
        agent_pod("media-capabilities-q9d4w", "amd-1", agent_labels()),
        agent_pod(
            "liken-plugin-h2m8c",
            "amd-2",
            json!({"app.kubernetes.io/name": "liken"}),
        ),
    ]
}

/// The note of a failed probe names the node and the command that shows that node's agent log:
/// the pod itself when `caps` may list pods in liken-system (found by the DaemonSet's labels and
/// `spec.nodeName`), else the command that finds it. A 403 on pods is a reader's normal role and
/// changes nothing else; any other failure of the lookup is one warning, never a failed `caps`.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_failed_probe_points_to_its_nodes_agent_log() {
    // The fleet's control plane holds [`fleet_pods`].
    let cp = crate::cluster::fleet_cluster();
    let (server, kubeconfig) = crate::cluster::proxied(cp);
    let caps = |args: &[&str]| crate::kubectl_media(args, &kubeconfig);
    let note = |out: &Output| {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        stdout
            .lines()
            .find(|l| l.starts_with("probe failed:"))
            .unwrap_or_else(|| panic!("{stdout}"))
            .to_string()
    };
    let found = "probe failed: 1 GPU on node amd-2: the agent's query of the VA-API driver failed, \
                 so every capability reads false (hint: the failure is in the agent's log: \
                 kubectl logs -n liken-system media-capabilities-7xk2p)";
    let fallback = "probe failed: 1 GPU on node amd-2: the agent's query of the VA-API driver \
                    failed, so every capability reads false (hint: the failure is in the agent's \
                    log: find the pod with kubectl get pods -n liken-system -l \
                    app.kubernetes.io/name=media-capabilities --field-selector \
                    spec.nodeName=amd-2, then kubectl logs -n liken-system POD)";

    let mark = server.mark();
    let out = caps(&["caps"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(note(&out), found);
    let pod_lists = crate::cluster::lists(server.answers_since(mark), "pods");
    assert_eq!(
        pod_lists.len(),
        1,
        "one listing for the one failed node: {pod_lists:?}"
    );
    assert!(
        pod_lists[0]
            .target
            .contains("/namespaces/liken-system/pods?"),
        "{pod_lists:?}"
    );
    assert!(
        pod_lists[0]
            .target
            .contains("labelSelector=app.kubernetes.io%2Fname%3Dmedia-capabilities")
            && pod_lists[0]
                .target
                .contains("fieldSelector=spec.nodeName%3Damd-2"),
        "{pod_lists:?}"
    );

    // No right to list pods (the real server's RBAC): the command that finds the pod, and
    // nothing else changes.
    let dir = tempfile::tempdir().unwrap();
    let reader = objects::reader(
        cp,
        dir.path(),
        "caps-no-pods",
        &["resourceslices.resource.k8s.io"],
        &[],
    );
    let out = crate::kubectl_media(&["caps"], &reader);
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(note(&out), fallback);

    // Any other failure: the same, with one warning saying why.
    server.fail_next(1, Fault::internal(), Some("GET"), Some("/pods?"));
    let out = caps(&["caps"]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("warning: cannot look up the agent pods for the log hints: "),
        "{stderr}"
    );
    assert_eq!(note(&out), fallback);

    // JSON and YAML look nothing up: they carry no notes.
    let mark = server.mark();
    assert!(caps(&["caps", "-o", "json"]).status.success());
    assert!(crate::cluster::lists(server.answers_since(mark), "pods").is_empty());

    // From a dump that holds the pods (kubectl get pods,resourceslices -A -o yaml), the file's
    // pod is named; from one without, the command that finds it.
    let text = std::fs::read_to_string(fleet()).unwrap();
    let list: Value = serde_yaml::from_str(&text).unwrap();
    let mut items = list["items"].as_array().unwrap().clone();
    items.push(agent_pod(
        "media-capabilities-dump1",
        "amd-2",
        agent_labels(),
    ));
    let dump = serde_yaml::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .unwrap();
    let out = run(&["caps", "-f", "-"], Some(&dump));
    assert!(out.status.success(), "{out:?}");
    assert!(
        note(&out).ends_with(
            "(hint: the failure is in the agent's log: kubectl logs -n \
                              liken-system media-capabilities-dump1)"
        ),
        "{}",
        note(&out)
    );
    assert_eq!(note(&run(&["caps", "-f", &fleet()], None)), fallback);
}

/// `-o yaml` quotes strings exactly as kubectl does: the same strings through `kubectl create
/// configmap --dry-run=client -o yaml` (kubectl's YAML printer, go-yaml v2) and through `caps`
/// (as GPU names of a fleet) come out with the same quoting, character for character.
#[test]
#[cfg_attr(not(have_kubectl), ignore = "needs kubectl on PATH (kubectl 1.32)")]
fn yaml_quotes_strings_as_kubectl_does() {
    let strings = [
        "0000:00:02.0",
        "0000:03:00.0",
        "0000:c1:00.0",
        "0000:00:1f.3",
        "1:20",
        "12:30:45",
        "8086",
        "1002",
        "10de",
        "7d55",
        "56a0",
        "1e30",
        "0089",
        "0x1f",
        "1_000",
        "+1",
        ".5",
        "1.5.2",
        "yes",
        "on",
        "NO",
        "y",
        "true",
        "null",
        "~",
        "2026-11-02",
        "2026-11-02T08:00:00Z",
        "2026-02-30",
        "a: b",
        "[Arc A770]",
        "it's",
        "#x",
        "x #y",
        "x#y",
        "- x",
        "-x",
        "@home",
        " lead",
        "trail ",
        "VA-API NVDEC driver [direct backend]",
        "Intel(R) Gen - 24.2.4 ()",
        "",
    ];
    let home = tempfile::tempdir().unwrap();
    let mut kubectl = Command::new("kubectl");
    kubectl.args(["create", "configmap", "q", "--dry-run=client", "-o", "yaml"]);
    for (i, s) in strings.iter().enumerate() {
        kubectl.arg(format!("--from-literal=k{i:02}={s}"));
    }
    let out = kubectl
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", "/dev/null")
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubectl_yaml = String::from_utf8(out.stdout).unwrap();
    let expected: Vec<String> = (0..strings.len())
        .map(|i| {
            let key = format!("  k{i:02}: ");
            let line = kubectl_yaml
                .lines()
                .find(|l| l.starts_with(&key))
                .unwrap_or_else(|| panic!("k{i:02} in {kubectl_yaml}"));
            line[key.len()..].to_string()
        })
        .collect();

    // The same strings as the names of GPUs, one media device each.
    let devices: Vec<Value> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"name": format!("gpu-{i:02}"), "attributes": {
                "name": {"string": s},
                "resource.kubernetes.io/pciBusID": {"string": format!("0000:{i:02x}:00.0")}
            }})
        })
        .collect();
    let fleet = json!({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n1-media.liken.sh"},
        "spec": {"driver": "media.liken.sh", "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    }]});
    let out = run(
        &["caps", "-f", "-", "-o", "yaml"],
        Some(&serde_json::to_string(&fleet).unwrap()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = ours
        .lines()
        .filter_map(|l| l.strip_prefix("    name: "))
        .collect();
    assert_eq!(names.len(), strings.len(), "{ours}");
    // Records come in device order (node, then address, which follows the index).
    for ((value, ours), theirs) in strings.iter().zip(&names).zip(&expected) {
        assert_eq!(ours, theirs, "{value:?}");
    }
}

/// Past three nodes whose probe failed, one note points at `caps --node`; from files, with the
/// same files, so that it runs as printed and reads what this run read.
#[test]
fn the_hint_for_more_failed_probes_reads_the_same_files() {
    let text = std::fs::read_to_string(fleet()).unwrap();
    let list: Value = serde_yaml::from_str(&text).unwrap();
    // amd-2's slices (its probe failed), again on four more nodes.
    let mut items = Vec::new();
    for item in list["items"].as_array().unwrap() {
        if item["spec"]["nodeName"] != "amd-2" {
            continue;
        }
        for n in 1..=4 {
            let node = format!("x-{n}");
            let mut copy = item.clone();
            let name = copy["metadata"]["name"]
                .as_str()
                .unwrap()
                .replace("amd-2", &node);
            copy["metadata"]["name"] = json!(name);
            copy["metadata"]["uid"] = json!(format!("uid-{name}"));
            copy["spec"]["nodeName"] = json!(node);
            copy["spec"]["pool"]["name"] = json!(node);
            items.push(copy);
        }
    }
    assert_eq!(items.len(), 8, "amd-2 has two slices");
    let dir = tempfile::tempdir().unwrap();
    let more = dir.path().join("more nodes.json");
    std::fs::write(
        &more,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap(),
    )
    .unwrap();
    let fleet = fleet();
    let more = more.display().to_string();
    let out = ok(&["caps", "-f", &fleet, "-f", &more]);
    let note = out
        .lines()
        .find(|l| l.starts_with("probe failed: 2 GPUs more"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        note,
        format!(
            "probe failed: 2 GPUs more on nodes x-3, x-4 (hint: the log of each is named by \
             kubectl media caps --node NODE -f {fleet} -f '{more}')"
        )
    );
    // Run as printed by a shell (`kubectl media` being this binary), it names x-3's log.
    let command = note
        .split_once("named by ")
        .unwrap()
        .1
        .trim_end_matches(')')
        .replace("NODE", "x-3");
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "kubectl() {{ shift; \"$BIN\" \"$@\"; }}; {command}"
        ))
        .env_clear()
        .env("BIN", env!("CARGO_BIN_EXE_kubectl-media"))
        .env("HOME", home.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{command}: {out:?}");
    assert!(
        stdout.contains("probe failed: 1 GPU on node x-3:"),
        "{command}: {stdout}"
    );
}

// --- beside the vendors' render drivers -------------------------------------------------------

/// Node `node`: the `driver`'s fixture moved there and the agent's slice of the recorded GPUs
/// `reports` (tests/fixtures/render-drivers/reports/).
fn beside_vendor(driver: &RenderDriver, node: &str, reports: &str) -> [Value; 2] {
    let uid = json!(examples::uid("Node", node));
    let probed = read_records(&render_fixtures::reports_dir(reports)).unwrap();
    [
        render_fixtures::moved(render_fixtures::fixture(driver), node, uid),
        examples::media_slice(node, &probed),
    ]
}

/// `caps -f - ARGS` on `items`, which must succeed.
fn caps_on(items: Vec<Value>, args: &[&str]) -> String {
    let list = examples::list(items).to_string();
    let out = run(&[&["caps", "-f", "-"][..], args].concat(), Some(&list));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Each GPU of `caps -o json` as (node, address, render device `driver/device` or `-`, status),
/// checked against `-o wide`'s ADDRESS and RENDER columns for the same rows.
fn render_pairs(items: Vec<Value>) -> Vec<(String, String, String, String)> {
    let records: Vec<Value> =
        serde_json::from_str(&caps_on(items.clone(), &["-o", "json"])).unwrap();
    let pairs: Vec<(String, String, String, String)> = records
        .iter()
        .map(|r| {
            let render = match r["render"].as_object() {
                Some(d) => format!(
                    "{}/{}",
                    d["driver"].as_str().unwrap(),
                    d["device"].as_str().unwrap()
                ),
                None => "-".to_string(),
            };
            let text = |v: &Value| v.as_str().unwrap().to_string();
            (
                text(&r["node"]),
                text(&r["attributes"]["address"]),
                render,
                text(&r["status"]),
            )
        })
        .collect();
    let wide = caps_on(items, &["-o", "wide"]);
    let mut lines = wide.lines();
    let header = lines.next().unwrap();
    let column = |line: &str, name: &str| -> String {
        let at = header
            .find(name)
            .unwrap_or_else(|| panic!("no {name} in {header}"));
        line[at..]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let rows: Vec<(String, String, String)> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| (column(l, "NODE"), column(l, "ADDRESS"), column(l, "RENDER")))
        .collect();
    let from_json: Vec<(String, String, String)> = pairs
        .iter()
        .map(|(n, a, r, _)| (n.clone(), a.clone(), r.clone()))
        .collect();
    assert_eq!(rows, from_json, "{wide}");
    pairs
}

fn rows(expected: &[(&str, &str, &str, &str)]) -> Vec<(String, String, String, String)> {
    expected
        .iter()
        .map(|(n, a, r, s)| (n.to_string(), a.to_string(), r.to_string(), s.to_string()))
        .collect()
}

/// `caps` pairs each media device with the whole GPU of the vendor's driver at its address
/// (`-o json`'s `render`, `-o wide`'s RENDER), never with a MIG device, a partition, a VF or a
/// VFIO device: the vendors' slices as their fixtures write them, on node-a beside the agent's
/// slice of the recorded GPUs with the qualifying one at a whole GPU, on node-b with it where
/// the driver has only sub-devices (NVIDIA's MIG and VFIO devices and AMD's partitions at
/// 0000:03:00.0, Intel's VF at 0000:03:00.1).
#[test]
fn caps_pairs_media_devices_with_each_vendors_whole_gpus_only() {
    let (ok, none) = ("ok", "no render device");
    // NVIDIA's and AMD's nodes: a whole GPU at 0000:83:00.0 only, sub-devices at 0000:03:00.0.
    let whole_at_83 = |render: &str| {
        rows(&[
            ("node-a", "0000:03:00.0", "-", none),
            ("node-a", "0000:83:00.0", render, ok),
            ("node-b", "0000:03:00.0", "-", none),
            ("node-b", "0000:83:00.0", render, ok),
        ])
    };
    let cases = [
        (
            INTEL,
            "vf",
            rows(&[
                (
                    "node-a",
                    "0000:03:00.0",
                    "gpu.intel.com/0000-03-00-0-0x56c0",
                    ok,
                ),
                (
                    "node-a",
                    "0000:83:00.0",
                    "gpu.intel.com/0000-83-00-0-0xe20b",
                    ok,
                ),
                // The VF's parent, which the agent there has no report of.
                (
                    "node-b",
                    "0000:03:00.0",
                    "gpu.intel.com/0000-03-00-0-0x56c0",
                    "not probed",
                ),
                ("node-b", "0000:03:00.1", "-", none),
                (
                    "node-b",
                    "0000:83:00.0",
                    "gpu.intel.com/0000-83-00-0-0xe20b",
                    ok,
                ),
            ]),
        ),
        (
            NVIDIA,
            "parent-address",
            whole_at_83("gpu.nvidia.com/gpu-1"),
        ),
        (AMD, "parent-address", whole_at_83("gpu.amd.com/gpu-8-136")),
    ];
    for (driver, b, expected) in cases {
        let mut items = Vec::new();
        items.extend(beside_vendor(&driver, "node-a", "whole"));
        items.extend(beside_vendor(&driver, "node-b", b));
        assert_eq!(render_pairs(items), expected, "{}", driver.name);
    }
}

/// A whole GPU whose `pciBusID` is not lowercase `dddd:bb:dd.f` never pairs, and `caps` says
/// so: NVIDIA's fixture with its L40S at an address in capitals, as NVML writes it (`C3`), and
/// with NVML's 8-digit domain, beside a media device at the canonical address.
#[test]
fn caps_notes_a_pci_bus_id_not_in_the_canonical_form() {
    for written in ["0000:C3:00.0", "00000000:c3:00.0"] {
        let [mut render, _] = beside_vendor(&NVIDIA, "node-a", "whole");
        for device in render["spec"]["devices"].as_array_mut().unwrap() {
            if device["name"] == "gpu-1" {
                device["attributes"]["resource.kubernetes.io/pciBusID"]["string"] = json!(written);
            }
        }
        let mut probed = read_records(&render_fixtures::reports_dir("whole")).unwrap();
        for p in &mut probed {
            if p.pci.address == render_fixtures::WHOLE {
                p.pci.address = "0000:c3:00.0".into();
            }
        }
        let items = vec![render, examples::media_slice("node-a", &probed)];
        assert_eq!(
            render_pairs(items.clone()),
            rows(&[
                ("node-a", "0000:03:00.0", "-", "no render device"),
                ("node-a", "0000:c3:00.0", "-", "no render device"),
            ]),
            "{written}"
        );
        let table = caps_on(items, &[]);
        let note = table
            .lines()
            .find(|l| l.starts_with("pciBusID not canonical:"))
            .unwrap_or_else(|| panic!("{table}"));
        assert_eq!(
            note,
            format!(
                "pciBusID not canonical: gpu.nvidia.com/gpu-1 on node-a states {written:?}: \
                 matchAttribute compares strings exactly and the agent publishes lowercase \
                 dddd:bb:dd.f, so these never pair (hint: a driver release that writes the \
                 address as k8s.io/dynamic-resource-allocation/deviceattribute does)"
            )
        );
    }
}

/// A whole GPU of a release before the one that publishes `pciBusID` never pairs, and `caps`
/// names the release to upgrade to: NVIDIA's v25.8.1 publishes the address as its own
/// `pcieBusID` (cmd/gpu-kubelet-plugin/deviceinfo.go:81-123 at fc69d985), otherwise as the
/// fixture's `gpu-1`.
#[test]
fn caps_notes_a_driver_release_without_pci_bus_id() {
    let [mut render, media] = beside_vendor(&NVIDIA, "node-a", "whole");
    let devices = render["spec"]["devices"].as_array_mut().unwrap();
    devices.retain(|d| d["name"] == "gpu-1");
    let attributes = devices[0]["attributes"].as_object_mut().unwrap();
    let address = attributes
        .remove("resource.kubernetes.io/pciBusID")
        .unwrap();
    attributes.insert("pcieBusID".into(), address);
    assert_eq!(
        render_pairs(vec![render.clone(), media.clone()]),
        rows(&[
            ("node-a", "0000:03:00.0", "-", "no render device"),
            ("node-a", "0000:83:00.0", "-", "no render device"),
        ])
    );
    let table = caps_on(vec![render, media], &[]);
    let note = table
        .lines()
        .find(|l| l.starts_with("no pciBusID:"))
        .unwrap_or_else(|| panic!("{table}"));
    assert_eq!(
        note,
        "no pciBusID: gpu.nvidia.com publishes 1 GPU(s) on node node-a without \
         resource.kubernetes.io/pciBusID or the attributes that tell a whole GPU from a part of \
         one, so no claim pairs them with a media device (hint: upgrade gpu.nvidia.com to \
         v25.12.0 or newer (before it, the address was pcieBusID))"
    );
}

// --- taints -------------------------------------------------------------------------------------

/// The device of `slice` at PCI address `address`, to change in place.
fn device_at<'a>(slice: &'a mut Value, address: &str) -> &'a mut Value {
    slice["spec"]["devices"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|d| d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] == address)
        .unwrap_or_else(|| panic!("no device at {address}"))
}

/// Tainted GPUs (issue 34): the agent's taint on a media device and NVIDIA's on a whole GPU show
/// in STATUS with their reason, count in `--summary`, are listed in `-o wide`'s TAINTS, carried
/// by `-o json` with the device they are on, and named in a note with the toleration's flag; a
/// taint of effect None (informational) blocks nothing and leaves the GPU ok.
#[test]
fn caps_shows_tainted_gpus_with_the_taint_s_reason() {
    let [render_a, mut media_a] = beside_vendor(&NVIDIA, "node-a", "whole");
    let [mut render_c, media_c] = beside_vendor(&NVIDIA, "node-c", "whole");
    device_at(&mut media_a, "0000:83:00.0")["taints"] = json!([{
        "key": "media.liken.sh/unhealthy", "value": "not-answering", "effect": "NoSchedule",
        "timeAdded": "2026-12-04T01:00:00Z"
    }]);
    device_at(&mut render_c, "0000:83:00.0")["taints"] = json!([
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}
    ]);
    let [render_d, mut media_d] = beside_vendor(&NVIDIA, "node-d", "whole");
    device_at(&mut media_d, "0000:83:00.0")["taints"] =
        json!([{"key": "media.liken.sh/unhealthy", "value": "x", "effect": "None"}]);
    let items = vec![render_a, media_a, render_c, media_c, render_d, media_d];

    let records: Vec<Value> =
        serde_json::from_str(&caps_on(items.clone(), &["-o", "json"])).unwrap();
    let at = |node: &str| {
        records
            .iter()
            .find(|r| r["node"] == node && r["attributes"]["address"] == "0000:83:00.0")
            .unwrap()
    };
    assert_eq!(at("node-a")["status"], "tainted");
    assert_eq!(
        at("node-a")["taints"],
        json!([{"device": "media", "key": "media.liken.sh/unhealthy", "value": "not-answering",
                "effect": "NoSchedule", "timeAdded": "2026-12-04T01:00:00Z"}])
    );
    assert_eq!(at("node-c")["status"], "tainted");
    assert_eq!(
        at("node-c")["taints"],
        json!([
            {"device": "render", "key": "gpu.nvidia.com/unmonitored", "effect": "None"},
            {"device": "render", "key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}
        ])
    );
    assert_eq!(at("node-d")["status"], "ok");
    for r in &records {
        if r["attributes"]["address"] == "0000:03:00.0" {
            assert_eq!(r["taints"], json!([]), "{r}");
        }
    }

    let table = caps_on(items.clone(), &[]);
    let line = |node: &str| {
        table
            .lines()
            .find(|l| l.starts_with(node) && l.contains("Meteor Lake"))
            .unwrap_or_else(|| panic!("{node}: {table}"))
            .to_string()
    };
    assert!(
        line("node-a").ends_with("tainted (not-answering)"),
        "{table}"
    );
    assert!(
        line("node-c").ends_with("tainted (gpu.nvidia.com/xid=79)"),
        "{table}"
    );
    assert!(line("node-d").ends_with("ok"), "{table}");
    assert!(
        table.contains(
            "tainted: 2 GPUs on nodes node-a, node-c: media.liken.sh/unhealthy=not-answering:NoSchedule, \
             gpu.nvidia.com/xid=79:NoExecute; the scheduler gives them only to requests that \
             tolerate the taint (hint: kubectl media class --claim --tolerate KEY writes a template \
             whose requests do; the agent lifts its own taint once a probe of the GPU succeeds again)"
        ),
        "{table}"
    );

    let wide = caps_on(items.clone(), &["-o", "wide"]);
    assert!(
        wide.contains(
            "gpu.nvidia.com/unmonitored:None (render), gpu.nvidia.com/xid=79:NoExecute (render)"
        ),
        "{wide}"
    );
    assert!(wide.contains("media.liken.sh/unhealthy=x:None"), "{wide}");

    let summary = caps_on(items, &["--summary", "-o", "json"]);
    let summary: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["statuses"]["tainted"]["gpus"], 2, "{summary}");
}
