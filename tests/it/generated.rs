//! Generated files are committed and must match what the code generates now: the protobuf code
//! in `src/agent/kubelet/generated/` (checked by SHA-256 sums of `proto/`, the code and the
//! generator's versions; byte for byte with the `regenerate-protos` feature, whose compiler is
//! too costly for every build), `docs/capabilities.md`, `docs/examples/fleet.yaml`, `docs/man/`.
//! To rewrite them all (without the feature: all but the protobuf code):
//!
//!     UPDATE_GENERATED=1 cargo test --features regenerate-protos --test it generated

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The command that rewrites the committed files; printed when they drift.
const UPDATE_COMMAND: &str =
    "UPDATE_GENERATED=1 cargo test --features regenerate-protos --test it generated";

/// The first line of every generated protobuf file, so a reader knows not to edit it by hand.
#[cfg(feature = "regenerate-protos")]
const HEADER: &str = "// Generated from proto/ by `UPDATE_GENERATED=1 cargo test --features regenerate-protos --test it generated`; do not edit.\n";

/// The `.proto` files, relative to `proto/`, that make up the kubelet APIs we serve.
#[cfg(feature = "regenerate-protos")]
const PROTOS: [&str; 5] = [
    "pluginregistration/v1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "dra-health/v1alpha1/api.proto",
    "dra-health/v1/api.proto",
];

/// Where the generated protobuf code lives, relative to the repository root.
const GENERATED_DIR: &str = "src/agent/kubelet/generated";

/// The sums of the inputs and outputs, relative to the repository root, in `sha256sum` format so
/// that `sha256sum -c src/agent/kubelet/generated/SHA256SUMS` checks them too.
const SUMS: &str = "src/agent/kubelet/generated/SHA256SUMS";

/// The crates whose versions decide the generated text: the `.proto` parser, the message and
/// service generators, and the formatters they print with. A change of any of them in
/// `Cargo.lock` may change the output, so it counts as drift until the code is regenerated.
const GENERATOR_CRATES: [&str; 6] = [
    "protox",
    "protox-parse",
    "prost-build",
    "tonic-build",
    "tonic-prost-build",
    "prettyplease",
];

/// The line of `SHA256SUMS` that records the generator's versions; `sha256sum` skips it.
const GENERATOR_PREFIX: &str = "# generator: ";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Regenerates the code into a fresh temporary directory and returns file name → contents.
#[cfg(feature = "regenerate-protos")]
fn regenerate(root: &Path) -> BTreeMap<String, String> {
    let proto_dir = root.join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| proto_dir.join(p)).collect();
    let fds = protox::compile(&files, [&proto_dir]).expect("proto/ compiles");
    let out = tempfile::tempdir().expect("temporary directory");
    tonic_prost_build::configure()
        // Our clients (used by tests) connect through their own unix-socket connector, so the
        // generated `connect(url)` helpers, which need TCP URLs, are not wanted.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("code generation succeeds");
    read_dir(out.path())
        .into_iter()
        .map(|(name, text)| (name, format!("{HEADER}{text}")))
        .collect()
}

/// The `.rs` files directly in `dir`: file name → contents.
fn read_dir(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return files;
    };
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            files.insert(name, fs::read_to_string(&path).expect("readable file"));
        }
    }
    files
}

/// Every file under `dir`, recursively, as paths relative to `root` with `/` separators.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(root, &path, out);
        } else {
            let relative = path.strip_prefix(root).expect("a path under the root");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// The versions `Cargo.lock` (under `root`) resolves for the generator's crates, as one line:
/// `protox 0.10.0, ..., prettyplease 0.2.37 0.3.0`. Read by hand because `Cargo.lock`'s
/// `[[package]]` blocks always start with `name` then `version`, and a TOML parser would be one
/// more crate to build for six lines.
fn generator_versions(root: &Path) -> String {
    let lock = fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock is readable");
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("name = \"")
            .and_then(|n| n.strip_suffix('"'))
        else {
            continue;
        };
        let version = lines
            .next()
            .and_then(|v| v.strip_prefix("version = \""))
            .and_then(|v| v.strip_suffix('"'))
            .expect("Cargo.lock: `version` follows `name`");
        versions.entry(name).or_default().push(version);
    }
    GENERATOR_CRATES
        .iter()
        .map(|name| {
            let found = versions.get(name).map(|v| v.join(" "));
            // Every one of them is in Cargo.lock (optional dependencies are resolved too); a
            // missing one means the list above is out of date, not that the generator is gone.
            let found = found.unwrap_or_else(|| panic!("Cargo.lock has no {name}"));
            format!("{name} {found}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What `SHA256SUMS` should say for the tree at `root` now.
fn expected_sums(root: &Path) -> String {
    let mut paths = Vec::new();
    files_under(root, &root.join("proto"), &mut paths);
    paths.extend(
        read_dir(&root.join(GENERATED_DIR))
            .into_keys()
            .map(|name| format!("{GENERATED_DIR}/{name}")),
    );
    let mut sums = format!(
        "# Written with the code by `{UPDATE_COMMAND}`; do not edit.\n\
         # tests/it/generated.rs checks these sums without a protobuf compiler; so does\n\
         # `sha256sum -c {SUMS}` in the repository root.\n\
         {GENERATOR_PREFIX}{}\n",
        generator_versions(root)
    );
    for path in paths {
        let bytes = fs::read(root.join(&path)).expect("readable file");
        sums.push_str(&format!("{}  {path}\n", sha256_hex(&bytes)));
    }
    sums
}

/// Compares the recorded sums under `root` with the files there; each difference is one line
/// naming the file (or the generator) that changed since the code was generated.
fn sums_drift(root: &Path) -> Vec<String> {
    let Ok(recorded) = fs::read_to_string(root.join(SUMS)) else {
        return vec![format!("missing: {SUMS}")];
    };
    let expected = expected_sums(root);
    let entries = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|line| {
                if let Some(generator) = line.strip_prefix(GENERATOR_PREFIX) {
                    return Some(("the generator".to_string(), generator.to_string()));
                }
                let (sum, path) = line.split_once("  ")?;
                (!line.starts_with('#')).then(|| (path.to_string(), sum.to_string()))
            })
            .collect()
    };
    let (recorded, expected) = (entries(&recorded), entries(&expected));
    let mut drift = Vec::new();
    for (path, sum) in &expected {
        match recorded.get(path) {
            None => drift.push(format!("not in {SUMS}: {path}")),
            Some(old) if old != sum && path == "the generator" => drift.push(format!(
                "the generator changed: was {old}, Cargo.lock has {sum}"
            )),
            Some(old) if old != sum => drift.push(format!("changed since generated: {path}")),
            Some(_) => {}
        }
    }
    for path in recorded.keys().filter(|p| !expected.contains_key(*p)) {
        drift.push(format!("gone since generated: {path}"));
    }
    drift
}

fn assert_no_drift(drift: &[String]) {
    assert!(
        drift.is_empty(),
        "{GENERATED_DIR}/ is out of date with proto/:\n  {}\nrewrite it with:\n  {UPDATE_COMMAND}",
        drift.join("\n  ")
    );
}

/// Without the `regenerate-protos` feature: the sums only. `UPDATE_GENERATED` cannot rewrite
/// the code without a protobuf compiler, so it changes nothing here and the test fails, naming
/// the feature, if the code is stale.
#[cfg(not(feature = "regenerate-protos"))]
#[test]
fn generated_code_matches_proto() {
    assert_no_drift(&sums_drift(&root()));
}

/// With the `regenerate-protos` feature: the code regenerated and compared byte for byte, and
/// the sums; with `UPDATE_GENERATED`, both rewritten.
#[cfg(feature = "regenerate-protos")]
#[test]
fn generated_code_matches_proto() {
    let root = root();
    let committed_dir = root.join(GENERATED_DIR);
    let fresh = regenerate(&root);
    assert_eq!(fresh.len(), PROTOS.len(), "one file per proto package");

    if std::env::var_os("UPDATE_GENERATED").is_some() {
        for stale in read_dir(&committed_dir)
            .keys()
            .filter(|n| !fresh.contains_key(*n))
        {
            fs::remove_file(committed_dir.join(stale)).expect("remove stale generated file");
        }
        fs::create_dir_all(&committed_dir).expect("create generated/");
        for (name, text) in &fresh {
            fs::write(committed_dir.join(name), text).expect("write generated file");
        }
        // After the code, since the sums cover it.
        fs::write(root.join(SUMS), expected_sums(&root)).expect("write SHA256SUMS");
        return;
    }

    let committed = read_dir(&committed_dir);
    let mut drift = Vec::new();
    for (name, text) in &fresh {
        match committed.get(name) {
            None => drift.push(format!("missing: {name}")),
            Some(old) if old != text => drift.push(format!("differs: {name}")),
            Some(_) => {}
        }
    }
    for name in committed.keys().filter(|n| !fresh.contains_key(*n)) {
        drift.push(format!("not generated any more: {name}"));
    }
    drift.extend(sums_drift(&root));
    assert_no_drift(&drift);
}

/// A copy of what the protobuf check reads (proto/, the generated code, Cargo.lock), with sums
/// written for the copy: the tests below change it and expect the drift. The sums are the
/// copy's own so that these tests hold while `UPDATE_GENERATED` rewrites the real ones beside
/// them; whether the committed sums hold is `generated_code_matches_proto`'s question.
fn copy_of_proto_inputs() -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("temporary directory");
    let mut paths = vec!["Cargo.lock".to_string()];
    files_under(&root(), &root().join("proto"), &mut paths);
    paths.extend(
        read_dir(&root().join(GENERATED_DIR))
            .into_keys()
            .map(|name| format!("{GENERATED_DIR}/{name}")),
    );
    for path in paths {
        let to = copy.path().join(&path);
        fs::create_dir_all(to.parent().unwrap()).expect("create directory");
        fs::copy(root().join(&path), to).expect("copy file");
    }
    fs::write(copy.path().join(SUMS), expected_sums(copy.path())).expect("write the sums");
    assert_eq!(
        sums_drift(copy.path()),
        Vec::<String>::new(),
        "the copy starts clean"
    );
    copy
}

#[test]
fn a_proto_changed_without_regenerating_is_drift() {
    let copy = copy_of_proto_inputs();
    let proto = copy.path().join("proto/dra/v1/api.proto");
    let text = fs::read_to_string(&proto).unwrap();
    let changed = text.replacen("string pool_name = ", "string pool = ", 1);
    assert_ne!(changed, text, "the field to rename is in the proto");
    fs::write(&proto, changed).unwrap();
    assert_eq!(
        sums_drift(copy.path()),
        ["changed since generated: proto/dra/v1/api.proto"]
    );
}

#[test]
fn a_new_proto_file_is_drift() {
    let copy = copy_of_proto_inputs();
    fs::write(
        copy.path().join("proto/dra/v1/extra.proto"),
        "syntax = \"proto3\";\n",
    )
    .unwrap();
    assert_eq!(
        sums_drift(copy.path()),
        ["not in src/agent/kubelet/generated/SHA256SUMS: proto/dra/v1/extra.proto"]
    );
}

#[test]
fn a_generated_file_edited_by_hand_is_drift() {
    let copy = copy_of_proto_inputs();
    let file = copy
        .path()
        .join(GENERATED_DIR)
        .join("pluginregistration.rs");
    let mut text = fs::read_to_string(&file).unwrap();
    text.push_str("// a hand edit\n");
    fs::write(&file, text).unwrap();
    assert_eq!(
        sums_drift(copy.path()),
        ["changed since generated: src/agent/kubelet/generated/pluginregistration.rs"]
    );
}

#[test]
fn a_generated_file_removed_is_drift() {
    let copy = copy_of_proto_inputs();
    fs::remove_file(
        copy.path()
            .join(GENERATED_DIR)
            .join("pluginregistration.rs"),
    )
    .unwrap();
    assert_eq!(
        sums_drift(copy.path()),
        ["gone since generated: src/agent/kubelet/generated/pluginregistration.rs"]
    );
}

#[test]
fn a_generator_upgrade_in_cargo_lock_is_drift() {
    let copy = copy_of_proto_inputs();
    let lock = copy.path().join("Cargo.lock");
    let text = fs::read_to_string(&lock).unwrap();
    let at = text
        .find("name = \"prost-build\"\nversion = \"")
        .expect("prost-build in Cargo.lock");
    let version_at = at + "name = \"prost-build\"\nversion = \"".len();
    let end = version_at + text[version_at..].find('"').unwrap();
    let old = &text[version_at..end];
    let changed = format!("{}9.9.9{}", &text[..version_at], &text[end..]);
    fs::write(&lock, changed).unwrap();
    let drift = sums_drift(copy.path());
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert!(
        drift[0].starts_with("the generator changed: was ")
            && drift[0].contains(&format!("prost-build {old},"))
            && drift[0].contains("prost-build 9.9.9,"),
        "{drift:?}"
    );
}

#[test]
fn missing_sums_are_drift() {
    let copy = copy_of_proto_inputs();
    fs::remove_file(copy.path().join(SUMS)).unwrap();
    assert_eq!(sums_drift(copy.path()), [format!("missing: {SUMS}")]);
}

#[test]
fn capability_reference_and_example_fleet_are_up_to_date() {
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for (path, contents) in crate::support::generated::files(&root()).expect("example inputs read")
    {
        let file = root().join(&path);
        if update {
            fs::create_dir_all(file.parent().expect("a file in a directory"))
                .expect("create directory");
            fs::write(&file, &contents).expect("write generated file");
        } else if fs::read_to_string(&file).ok().as_deref() != Some(contents.as_str()) {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "generated files are stale: {stale:?}; rewrite them with:\n  {UPDATE_COMMAND}"
    );
}

#[test]
fn example_uids_are_stable_and_distinct() {
    use crate::support::examples::uid;
    assert_eq!(uid("Node", "a"), uid("Node", "a"));
    assert_ne!(uid("Node", "a"), uid("Node", "b"));
    assert_eq!(uid("Node", "a").len(), 36);
}
