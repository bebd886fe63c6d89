//! Generated files are committed and must match what the code generates now:
//!
//! - the protobuf code in `src/agent/kubelet/generated/`, committed so that building needs no
//!   protoc and no build script, regenerated here from `proto/` with `protox` (a protobuf
//!   compiler in Rust) and `tonic-prost-build`;
//! - `docs/capabilities.md` (from the capability catalogue) and `docs/examples/fleet.yaml` (from
//!   the recorded probes), produced by `crate::support::generated::files()`.
//!
//! To rewrite them all after a change:
//!
//! ```text
//! UPDATE_GENERATED=1 cargo test --test it generated
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The command that rewrites the committed files; printed when they drift.
const UPDATE_COMMAND: &str = "UPDATE_GENERATED=1 cargo test --test it generated";

/// The first line of every committed file, so a reader knows not to edit it by hand.
const HEADER: &str = "// Generated from proto/ by `UPDATE_GENERATED=1 cargo test --test it generated`; do not edit.\n";

/// The `.proto` files, relative to `proto/`, that make up the kubelet APIs we serve.
const PROTOS: [&str; 3] = [
    "pluginregistration/v1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Regenerates the code into a fresh temporary directory and returns file name → contents.
fn regenerate() -> BTreeMap<String, String> {
    let proto_dir = root().join("proto");
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

#[test]
fn generated_code_matches_proto() {
    let committed_dir = root().join("src/agent/kubelet/generated");
    let fresh = regenerate();
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
    assert!(
        drift.is_empty(),
        "src/agent/kubelet/generated/ is out of date with proto/:\n  {}\nrewrite it with:\n  {UPDATE_COMMAND}",
        drift.join("\n  ")
    );
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
