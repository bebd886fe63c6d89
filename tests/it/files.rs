//! `kubectl media caps -f` as a user meets it: the real binary on files that repeat objects,
//! that hold no Kubernetes objects, or that are pathological (issue 13, item 4). The reader's
//! rules have unit tests in src/fleet/files.rs; these check what a person sees.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error_line;

fn fleet() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/examples/fleet.yaml")
}

fn caps(args: &[&str], stdin: Option<&Path>) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-media"));
    command
        .arg("caps")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("NO_COLOR", "1");
    match stdin {
        Some(path) => command.stdin(std::fs::File::open(path).unwrap()),
        None => command.stdin(Stdio::null()),
    };
    command.output().unwrap()
}

fn gpus(out: Output) -> usize {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Value = serde_json::from_slice(&out.stdout).unwrap();
    records.as_array().unwrap().len()
}

#[test]
fn the_same_objects_given_twice_count_once() {
    let fleet = fleet();
    let path = fleet.to_str().unwrap();
    let once = gpus(caps(&["-f", path, "-o", "json"], None));
    assert_eq!(once, 9);
    assert_eq!(
        gpus(caps(&["-f", path, "-f", path, "-o", "json"], None)),
        once
    );
    assert_eq!(
        gpus(caps(&["-f", "-", "-f", path, "-o", "json"], Some(&fleet))),
        once
    );
    // The same List as JSON, beside the YAML.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fleet.json");
    let list: Value = serde_yaml::from_str(&std::fs::read_to_string(&fleet).unwrap()).unwrap();
    std::fs::write(&json, list.to_string()).unwrap();
    assert_eq!(
        gpus(caps(
            &["-f", path, "-f", json.to_str().unwrap(), "-o", "json"],
            None
        )),
        once
    );
}

#[test]
fn input_without_kubernetes_objects_is_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        (
            "numbers.json",
            b"[1,2,3]\n",
            ":1:1: a JSON array, not a Kubernetes object or List",
        ),
        (
            "words.txt",
            b"plain words\n",
            ":1:1: plain text, not a Kubernetes object or List",
        ),
        (
            "probe.json",
            b"{\"node\": \"n1\", \"gpus\": []}\n",
            ":1:1: a JSON object without kind or items, not a Kubernetes object or List",
        ),
        (
            "movie.mkv",
            b"\x1aE\xdf\xa3\x00\x00\x00\x00",
            ": not a text file (it holds a NUL byte)",
        ),
    ];
    for (name, text, expected) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let line = error_line(caps(&["-f", path.to_str().unwrap()], None));
        assert!(
            line.starts_with(&format!("error: {}{expected}", path.display()))
                && line.ends_with(
                    "(hint: -f takes the output of `kubectl get ... -o yaml` or `-o json`)"
                ),
            "{name}: {line}"
        );
    }
}

/// Another program's file with an `items` key is no empty fleet, and a TOML file is named as
/// one: each is one error line, exit 1, never "no devices found" with exit 0.
#[test]
fn another_program_s_list_or_a_toml_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    // Lists of other programs: empty, of scalars, of mappings, of a mapping, in YAML and JSON.
    let items = [
        serde_json::json!([]),
        serde_json::json!(["apples", "pears"]),
        serde_json::json!([{"name": "a", "count": 3}]),
        serde_json::json!({"apple": 3}),
    ];
    for (i, items) in items.iter().enumerate() {
        let document = serde_json::json!({"name": format!("list-{i}"), "items": items});
        cases.push((
            format!("list-{i}.yaml"),
            serde_yaml::to_string(&document).unwrap(),
            ": YAML document 1 is a mapping with items but no kind",
        ));
        // JSON is read as a stream: a non-empty list fails at its first item.
        if items.is_array() {
            cases.push((
                format!("list-{i}.json"),
                serde_json::to_string(&document).unwrap(),
                if i == 0 {
                    ":1:1: a JSON object with items but no kind"
                } else {
                    ":1:"
                },
            ));
        }
    }
    for (i, header) in ["[package]", "[[bin]]", "[tool.poetry]", "[server-1]"]
        .iter()
        .enumerate()
    {
        cases.push((
            format!("config-{i}.toml"),
            // With a comment first, the YAML reader meets the header; else the JSON one.
            if i % 2 == 0 {
                format!("# settings\n\n{header}\nname = \"x{i}\"\n")
            } else {
                format!("{header}\nname = \"x{i}\"\n")
            },
            if i % 2 == 0 {
                ":3:1: a TOML or INI file (a [table] header)"
            } else {
                ": a TOML or INI file (a [table] header)"
            },
        ));
    }
    for (name, text, expected) in cases {
        let path = dir.path().join(&name);
        std::fs::write(&path, text).unwrap();
        let line = error_line(caps(&["-f", path.to_str().unwrap()], None));
        assert!(
            line.starts_with(&format!("error: {}{expected}", path.display()))
                && line.contains(", not a Kubernetes object or List"),
            "{name}: {line}"
        );
    }
    // JSON arrays are still called so, `[true]` included.
    for text in ["[1, 2]", "[true]", "[[\"a\"]]"] {
        let path = dir.path().join("array.json");
        std::fs::write(&path, text).unwrap();
        let line = error_line(caps(&["-f", path.to_str().unwrap()], None));
        assert!(line.contains(":1:1: a JSON array, not a"), "{text}: {line}");
    }
}

#[test]
fn a_pathological_file_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    // 16 MiB of brackets, opening or closing: each refused where it shows.
    let deep = dir.path().join("deep.json");
    std::fs::write(&deep, "[".repeat(16 << 20).replacen('[', "{\"a\":", 1)).unwrap();
    let junk = dir.path().join("junk.json");
    let mut text = b"{\"items\": [".to_vec();
    text.extend(std::iter::repeat_n(b'}', 16 << 20));
    std::fs::write(&junk, text).unwrap();
    for (path, expected) in [
        (
            &deep,
            ":1:133: nesting deeper than 128 levels, which no Kubernetes object is",
        ),
        (&junk, ":1:12: mismatched brackets: '}' closes a '['"),
    ] {
        let started = Instant::now();
        let line = error_line(caps(&["-f", path.to_str().unwrap()], None));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(
            line.starts_with(&format!("error: {}{expected}", path.display())),
            "{line}"
        );
    }
}

/// `-f DIR` as kubectl reads it: the directory's .json, .yaml and .yml files, other names passed
/// over, subdirectories with `-R`; a path that is not there is said as kubectl says it.
#[test]
fn a_directory_is_read_as_kubectl_reads_it() {
    let fleet = fleet();
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("nodes");
    std::fs::create_dir(&sub).unwrap();
    // The fleet's List, one half beside the other in a subdirectory, as JSON and YAML.
    let list: Value = serde_yaml::from_str(&std::fs::read_to_string(&fleet).unwrap()).unwrap();
    let items = list["items"].as_array().unwrap();
    let (first, second) = items.split_at(items.len() / 2);
    let half =
        |items: &[Value]| serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(dir.path().join("a.json"), half(first).to_string()).unwrap();
    std::fs::write(
        sub.join("b.yaml"),
        serde_yaml::to_string(&half(second)).unwrap(),
    )
    .unwrap();
    // kubectl passes over other names in a directory: so does caps, whatever they hold.
    std::fs::write(dir.path().join("README.md"), "# not objects\n").unwrap();
    let path = dir.path().to_str().unwrap();
    assert_eq!(gpus(caps(&["-f", path, "-R", "-o", "json"], None)), 9);
    assert_eq!(
        gpus(caps(&["--recursive", "-f", path, "-o", "json"], None)),
        9
    );
    let top = gpus(caps(&["-f", path, "-o", "json"], None));
    assert!(top > 0 && top < 9, "{top}");
    // A directory of other files only: an error with the way out.
    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("notes.txt"), "").unwrap();
    assert_eq!(
        error_line(caps(&["-f", empty.path().to_str().unwrap()], None)),
        format!(
            "error: {}: no .json, .yaml or .yml file in this directory (hint: -R reads its \
             subdirectories too; -f reads a directory's files with these extensions)",
            empty.path().display()
        )
    );
}

#[test]
fn a_path_that_does_not_exist_is_named_as_kubectl_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().unwrap();
    assert_eq!(
        error_line(caps(&["-f", missing], None)),
        format!(
            "error: the path \"{missing}\" does not exist (hint: -f takes a file, a directory of \
             .json, .yaml or .yml files, or - for standard input)"
        )
    );
}
