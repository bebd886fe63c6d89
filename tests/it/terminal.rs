//! Terminal safety: names and messages from the cluster or a file reach a person's terminal
//! escaped, never as controls. The example fleet and a `why` scenario are rewritten so that
//! every name (nodes, devices, claims, templates) and every string attribute and message
//! carries escape sequences, a newline that would forge a table row, and bidi overrides; then
//! every human output of `caps` and `why` is checked for a character a terminal acts on, and
//! `-o json|yaml` for the exact strings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

/// What a hostile ResourceSlice writes: clear the screen, set the window title, a newline and
/// a forged row, a C1 CSI, reversed text, a carriage return, a tab and DEL.
const PAYLOAD: &str =
    "\u{1b}[2J\u{1b}]0;owned\u{7}\nforged  row  ok\u{9b}7m\u{202e}desrever\u{2066}\r\t\u{7f}";

/// How the payload reads once escaped.
const SHOWN: &str =
    r"\x1b[2J\x1b]0;owned\x07\nforged  row  ok\u{9b}7m\u{202e}desrever\u{2066}\r\t\x7f";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The characters a terminal acts on, but for the newlines that end our own lines.
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

fn assert_safe(what: &str, text: &str) {
    if let Some((i, c)) = text.char_indices().find(|&(_, c)| acts_on_terminal(c)) {
        panic!(
            "{what}: U+{:04X} reaches the terminal at byte {i}:\n{text}",
            u32::from(c)
        );
    }
}

/// The names to poison: every node, device, claim and template name the objects hold.
fn names(objects: &[Value]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for object in objects {
        let mut add = |v: &Value| {
            if let Some(s) = v.as_str() {
                names.insert(s.to_owned());
            }
        };
        match object["kind"].as_str() {
            Some("ResourceSlice") => {
                add(&object["spec"]["nodeName"]);
                for device in object["spec"]["devices"].as_array().into_iter().flatten() {
                    add(&device["name"]);
                }
            }
            Some("Node" | "ResourceClaim" | "ResourceClaimTemplate") => {
                add(&object["metadata"]["name"])
            }
            _ => {}
        }
    }
    names
}

/// Each name in `names`, wherever it is a whole string, gets the payload inside it (so the
/// objects still refer to each other); every string attribute but the PCI address and render
/// node, and every message, gets it too.
fn poison(value: &mut Value, names: &BTreeSet<String>, key: &str) {
    // A stack, not recursion: the documents are ours, but the habit costs nothing.
    let mut stack: Vec<(&mut Value, String)> = vec![(value, key.to_owned())];
    while let Some((value, key)) = stack.pop() {
        match value {
            Value::String(s) if names.contains(s.as_str()) => {
                let (head, tail) = s.split_at(s.len() / 2);
                *s = format!("{head}{PAYLOAD}{tail}");
            }
            Value::String(s) if key == "message" => s.push_str(PAYLOAD),
            Value::Object(map) => {
                let attribute_string = map.len() == 1 && map.contains_key("string");
                for (k, v) in map.iter_mut() {
                    let k = if attribute_string
                        && !matches!(
                            key.as_str(),
                            "resource.kubernetes.io/pciBusID" | "renderNode"
                        ) {
                        "message".to_owned()
                    } else {
                        k.clone()
                    };
                    stack.push((v, k));
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut().map(|v| (v, key.clone()))),
            _ => {}
        }
    }
}

/// `files` poisoned into one List written in `dir`.
fn poisoned(dir: &Path, files: &[PathBuf]) -> (String, BTreeSet<String>) {
    let mut objects = crate::support::objects::from_files(files);
    let names = names(&objects);
    for object in &mut objects {
        poison(object, &names, "");
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let file = dir.join("poisoned.yaml");
    std::fs::write(&file, serde_yaml::to_string(&list).unwrap()).unwrap();
    (file.display().to_string(), names)
}

fn run(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    crate::support::timing::plugin(env!("CARGO_BIN_EXE_kubectl-media"), args, home.path())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn a_hostile_fleet_cannot_reach_the_terminal_from_caps() {
    let dir = tempfile::tempdir().unwrap();
    let (fleet, names) = poisoned(dir.path(), &[root().join("docs/examples/fleet.yaml")]);
    let node = names.iter().find(|n| n.starts_with("arc-")).unwrap();
    let node = {
        let (head, tail) = node.split_at(node.len() / 2);
        format!("{head}{PAYLOAD}{tail}")
    };
    let gpus = 9;
    for extra in [
        &[][..],
        &["-o", "wide"],
        &["--summary"],
        &["--decode", "AV1"],
        &["--node", &node],
        &["--no-headers"],
    ] {
        let mut args = vec!["caps", "-f", &fleet];
        args.extend_from_slice(extra);
        let out = run(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{extra:?}: {stderr}");
        assert_safe(&format!("caps {extra:?}"), &stdout);
        assert_safe(&format!("caps {extra:?} stderr"), &stderr);
        assert!(stdout.contains(SHOWN), "{extra:?}:\n{stdout}");
        // One line per GPU: no newline of a name forged a row.
        let rows = stdout.lines().take_while(|l| !l.is_empty()).count();
        match extra {
            [] | ["-o", "wide"] => assert_eq!(rows, 1 + gpus, "{extra:?}:\n{stdout}"),
            ["--no-headers"] => assert_eq!(rows, gpus, "{stdout}"),
            ["--node", _] => assert_eq!(rows, 2, "{stdout}"),
            _ => {}
        }
    }
    // In a terminal 80 columns wide the notes are wrapped, and stay as safe.
    let shown = crate::caps::in_terminal(&["caps", "-f", &fleet], 80, &[("NO_COLOR", "1")]);
    assert_safe("caps in a terminal", &shown);
    assert!(shown.contains("drift [1]"), "{shown}");

    // The records keep every string exact.
    for format in ["json", "yaml"] {
        let out = run(&["caps", "-f", &fleet, "-o", format]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let records: Vec<Value> = if format == "json" {
            serde_json::from_slice(&out.stdout).unwrap()
        } else {
            serde_yaml::from_slice(&out.stdout).unwrap()
        };
        let nodes: BTreeSet<&str> = records.iter().filter_map(|r| r["node"].as_str()).collect();
        assert!(nodes.contains(node.as_str()), "{format}: {nodes:?}");
        let va_driver = records
            .iter()
            .find_map(|r| r["attributes"]["vaDriver"].as_str())
            .unwrap();
        assert!(va_driver.ends_with(PAYLOAD), "{format}: {va_driver:?}");
    }
}

#[test]
fn a_hostile_scenario_cannot_reach_the_terminal_from_why() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "docs/examples/fleet.yaml",
        "docs/examples/why/nodes.yaml",
        "deploy/examples/classes.yaml",
        "docs/examples/why/no-gpu-qualifies.yaml",
    ]
    .map(|f| root().join(f));
    let (file, _) = poisoned(dir.path(), &files);
    for extra in [&[][..], &["-o", "wide"]] {
        let mut args = vec!["why", "archive-0", "-n", "media", "-f", &file];
        args.extend_from_slice(extra);
        let out = run(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(3), "{extra:?}: {stderr}\n{stdout}");
        assert_safe(&format!("why {extra:?}"), &stdout);
        assert_safe(&format!("why {extra:?} stderr"), &stderr);
        // The claim's name, the nodes, the models and the scheduler's messages.
        assert!(stdout.contains(SHOWN), "{stdout}");
        assert!(
            stdout.contains("FailedScheduling (×12): 0/9 nodes"),
            "{stdout}"
        );
    }
    let shown = crate::caps::in_terminal_exiting(
        &["why", "archive-0", "-n", "media", "-f", &file],
        80,
        &[("NO_COLOR", "1")],
        3,
    );
    assert_safe("why in a terminal", &shown);
    // The records keep the messages exact.
    let out = run(&["why", "archive-0", "-n", "media", "-f", &file, "-o", "json"]);
    let record: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = record["scheduler"]["events"][0]["message"]
        .as_str()
        .unwrap();
    assert!(message.ends_with(PAYLOAD), "{message:?}");
}

#[test]
fn an_argument_echoed_in_an_error_stays_one_line() {
    let fleet = root()
        .join("docs/examples/fleet.yaml")
        .display()
        .to_string();
    for (args, code) in [
        (
            vec!["caps", "-f", &fleet, "--node", "gpu\nnode\u{1b}[2J"],
            1,
        ),
        (vec!["caps", "-f", &fleet, "--decode", "HEVC\nMain"], 2),
        (vec!["why", "film\n0\u{1b}]0;x\u{7}", "-f", &fleet], 1),
        (vec!["caps", "-f", "no\nsuch\u{1b}[31m.yaml"], 1),
        // clap's own errors, folded into one line by usage::message.
        (vec!["caps", "-o", "x\ny\u{1b}[2J"], 2),
        (vec!["ca\nps"], 2),
    ] {
        let line = crate::one_error_line(run(&args), code);
        assert_safe(&format!("{args:?}"), line.trim_end());
        assert!(line.contains(r"\n"), "{args:?}: {line}");
    }
}
