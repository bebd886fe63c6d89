//! `media-capabilities probe` as a user runs it: from recorded probes (the example of
//! docs/report-format.md and a failed probe), in every output format, and its errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_media-capabilities"))
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The JSON example of docs/report-format.md, written to `dir`.
fn docs_example(dir: &Path) -> PathBuf {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report-format.md"),
    )
    .unwrap();
    let start = doc.find("```json\n").expect("a json block") + "```json\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let path = dir.join("mtl.json");
    std::fs::write(&path, &doc[start..end]).unwrap();
    path
}

const FAILED: &str = r#"{
  "render_node": "/dev/dri/renderD129",
  "pci": { "address": "0000:03:00.0", "vendor": "10de", "product": "2684", "driver": "nvidia" },
  "failure": "probe of /dev/dri/renderD129 (0000:03:00.0) killed by SIGSEGV after 0.4s; libva said: libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/nvidia_drv_video.so"
}"#;

#[test]
fn the_docs_example_publishes_the_product_documents_device() {
    let dir = tempfile::tempdir().unwrap();
    let example = docs_example(dir.path());
    let out = stdout(&run(&[
        "probe",
        "--from",
        example.to_str().unwrap(),
        "-o",
        "json",
    ]));
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown[0]["name"], "pci-0000-00-02-0");
    // The attributes of the device in the product document, section 1.
    let expected = serde_json::json!({
        "address": "0000:00:02.0",
        "decodeAV1Main": true, "decodeAV1Main10": true, "decodeH264": true,
        "decodeHEVCMain": true, "decodeHEVCMain10": true, "decodeMPEG2": true,
        "decodeVC1": false, "decodeVP8": true, "decodeVP9": true, "decodeVP9Profile2": true,
        "driver": "i915",
        "encodeH264": true, "encodeH264LowPower": false, "encodeHEVCMain": true,
        "encodeHEVCMain10": true, "encodeHEVCMain10LowPower": false,
        "encodeHEVCMainLowPower": false,
        "name": "Meteor Lake-P [Intel Arc Graphics]",
        "product": "7d55",
        "resource.kubernetes.io/pciBusID": "0000:00:02.0",
        "scale10bit": true, "scale8bit": true,
        "vaDriver": "Intel iHD driver for Intel(R) Gen Graphics - 26.1.2 ()",
        "vendor": "8086"
    });
    assert_eq!(shown[0]["attributes"], expected);
}

#[test]
fn json_and_yaml_output_read_back_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    docs_example(dir.path());
    std::fs::write(dir.path().join("nvidia.json"), FAILED).unwrap();
    let first = stdout(&run(&[
        "probe",
        "--from",
        dir.path().to_str().unwrap(),
        "-o",
        "json",
    ]));
    let again_path = dir.path().join("again.out");
    std::fs::write(&again_path, &first).unwrap();
    let again = stdout(&run(&[
        "probe",
        "--from",
        again_path.to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(first, again);
    let yaml = stdout(&run(&[
        "probe",
        "--from",
        again_path.to_str().unwrap(),
        "-o",
        "yaml",
    ]));
    let from_yaml: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    let from_json: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(from_yaml, from_json);
}

#[test]
fn the_table_shows_identity_statements_values_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    docs_example(dir.path());
    std::fs::write(dir.path().join("nvidia.json"), FAILED).unwrap();
    let output = run(&["probe", "--from", dir.path().to_str().unwrap()]);
    insta::assert_snapshot!("probe_table_mtl_and_failed_nvidia", stdout(&output));
    // The log has one line per GPU with every value, and the failure word for word.
    let log = String::from_utf8(output.stderr).unwrap();
    assert!(
        log.contains("pci-0000-00-02-0 (/dev/dri/renderD128): address=\"0000:00:02.0\""),
        "{log}"
    );
    assert!(log.contains(&format!(
        "scale10bit=false; {}",
        "probe of /dev/dri/renderD129 (0000:03:00.0) killed by SIGSEGV after 0.4s; libva said: libva info: Trying to open /usr/lib/x86_64-linux-gnu/dri/nvidia_drv_video.so"
    )), "{log}");
}

/// The output is the table, and says that it replays records; the log is quiet unless asked
/// for with RUST_LOG.
#[test]
fn recorded_probes_are_said_to_be_replayed_and_the_log_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    docs_example(dir.path());
    for i in 0..3 {
        let text = FAILED
            .replace("renderD129", &format!("renderD{}", 130 + i))
            .replace("0000:03:00.0", &format!("0000:0{}:00.0", 4 + i));
        std::fs::write(dir.path().join(format!("gpu-{i}.json")), text).unwrap();
    }
    let from = dir.path().to_str().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_media-capabilities"))
        .args(["probe", "--from", from])
        .env_clear()
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let table = stdout(&output);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        table.starts_with("Recorded probes (--from), replayed: not this machine's GPUs.\n\nGPU "),
        "{table}"
    );
    assert!(!table.contains("  libva said:\n"), "{table}");
    assert!(
        table.contains("  libva said, when it was recorded:\n"),
        "{table}"
    );
    // Live, the same words without the replay: the agent's own log stays at info.
    let cli = <media_operator::agent::cli::Cli as clap::Parser>::try_parse_from([
        "media-capabilities",
        "probe",
    ])
    .unwrap();
    assert_eq!(cli.default_log_level(), "warn");
    let cli = <media_operator::agent::cli::Cli as clap::Parser>::try_parse_from([
        "media-capabilities",
        "--node-name",
        "n1",
    ])
    .unwrap();
    assert_eq!(cli.default_log_level(), "info");
}

#[test]
fn errors_name_the_file_and_exit_with_1() {
    let output = run(&["probe", "--from", "/nonexistent/probes.json"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "error: read recorded probes /nonexistent/probes.json: No such file or directory (os error 2)\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"render_node\": 1}").unwrap();
    let output = run(&["probe", "--from", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.starts_with(&format!("error: parse recorded probes {}: ", bad.display())),
        "{err}"
    );
    assert!(
        err.ends_with("(hint: the format is in docs/report-format.md)\n"),
        "{err}"
    );
}

/// What `--from` is given that is no record, built from its kinds: each is one error line
/// naming it, exit 1, whether named alone or the only file of a directory.
#[test]
fn what_is_no_record_is_one_error_line_alone_and_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases: Vec<(PathBuf, &str)> = Vec::new();
    for (i, (text, what)) in [
        ("", "it is empty"),
        (" \n  \n", "it is empty"),
        ("null", "nothing but comments, `---` or null"),
        ("# a comment\n", "nothing but comments, `---` or null"),
        ("---\n", "nothing but comments, `---` or null"),
        ("42", "it holds a number"),
        ("\"text\"", "it holds plain text"),
        ("words of text", "it holds plain text"),
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.path().join(format!("{i}.json"));
        std::fs::write(&file, text).unwrap();
        cases.push((file, what));
    }
    let fifo = dir.path().join("fifo.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    cases.push((fifo, "it is a FIFO, not a file"));
    cases.push((PathBuf::from("/dev/zero"), "it is a character device"));
    cases.push((PathBuf::from("/dev/null"), "it is a character device"));
    for (file, what) in &cases {
        let output = run(&["probe", "--from", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{}: {err}", file.display());
        assert!(
            err.starts_with(&format!("error: recorded probes {}: ", file.display()))
                && err.contains(what)
                && err.ends_with(")\n")
                && err.lines().count() == 1,
            "{err}"
        );
        // The only file of a directory: one line too, not a log line and then an error.
        let alone = tempfile::tempdir().unwrap();
        let link = alone.path().join("only.json");
        std::os::unix::fs::symlink(file, &link).unwrap();
        let output = run(&["probe", "--from", alone.path().to_str().unwrap()]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{err}");
        assert!(
            err.starts_with(&format!(
                "error: no readable recorded probes in {}: its one file is unreadable: \
                 recorded probes {}: ",
                alone.path().display(),
                link.display()
            )) && err.lines().count() == 1,
            "{err}"
        );
    }
}

#[test]
fn usage_errors_are_one_line_exit_with_2_and_never_suggest_hidden_subcommands() {
    let one_line = |args: &[&str]| {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains("(hint: "),
            "{args:?}: {stderr}"
        );
        stderr
    };
    let err = one_line(&["probe", "-o", "wide"]);
    assert!(
        err.contains("invalid value 'wide'") && err.contains("table, json, yaml"),
        "{err}"
    );
    // `__probe-gpu` is the probe child's own entry: close to `prob`, and never offered.
    let err = one_line(&["prob"]);
    assert_eq!(
        err,
        "error: unrecognized subcommand 'prob' (hint: a similar subcommand exists: 'probe')\n"
    );
    let err = one_line(&["--bogus"]);
    assert!(
        err.contains("'--bogus'") && err.contains("media-capabilities --help"),
        "{err}"
    );
    let err = one_line(&["probe", "--bogus"]);
    assert!(err.contains("media-capabilities probe --help"), "{err}");
    // The bare command runs the agent, which needs to know its node (tests/agent.rs runs it).
    let err = one_line(&[]);
    assert!(err.contains("--node-name"), "{err}");
    // Help is not an error.
    let output = run(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Usage:"));
}

#[test]
fn yaml_output_reads_back_and_a_fleet_or_empty_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    docs_example(dir.path());
    let from = dir.path().to_str().unwrap();
    let json = stdout(&run(&["probe", "--from", from, "-o", "json"]));
    // `probe -o yaml` output is something `--from` reads, as its help says.
    let saved = tempfile::tempdir().unwrap();
    let yaml = saved.path().join("probes.yaml");
    std::fs::write(
        &yaml,
        stdout(&run(&["probe", "--from", from, "-o", "yaml"])),
    )
    .unwrap();
    let again = stdout(&run(&[
        "probe",
        "--from",
        yaml.to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(json, again);
    // ...in a directory too.
    let again = stdout(&run(&[
        "probe",
        "--from",
        saved.path().to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert_eq!(json, again);

    // A fleet's directory of node directories is not one node.
    let fleet = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/fleet");
    let output = run(&["probe", "--from", fleet.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {} holds no recorded probes, but its subdirectories do (amd-1, ...)",
            fleet.display()
        )) && err.contains(&format!("e.g. {}/amd-1)", fleet.display())),
        "{err}"
    );
    // And a directory with nothing in it says so, instead of "no PCI render nodes found".
    let empty = tempfile::tempdir().unwrap();
    let output = run(&["probe", "--from", empty.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.starts_with(&format!(
            "error: no recorded probes in {} (hint: ",
            empty.path().display()
        )),
        "{err}"
    );
}
