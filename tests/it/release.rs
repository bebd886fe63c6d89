//! The plugin's release: the archives `deploy/krew/archive` packs and the krew manifest
//! `deploy/krew/render` writes from `deploy/krew/media.yaml.in`, checked against the rules krew
//! itself applies to a manifest (kubernetes-sigs/krew `internal/index/validation/validate.go`)
//! and against the archives it points at.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const PLATFORMS: [(&str, &str); 4] = [
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {:?}: {e}", command.get_program()));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn sha256(path: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(path));
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// Packs all four platforms: with `real`, the plugin built here for linux/amd64, stripped of
/// its symbols as the dist profile strips them (the debug build's 65 MB were most of this
/// test's time, in gzip); stand-in files for the others (they are cross-built by a release job,
/// not here).
fn archives(dir: &Path, real: bool) -> Vec<PathBuf> {
    let stand_in = dir.join("stand-in");
    std::fs::write(&stand_in, b"#!/bin/sh\n").unwrap();
    let built = dir.join("kubectl-media");
    if real {
        run(Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&built)
            .arg(env!("CARGO_BIN_EXE_kubectl-media")));
    }
    PLATFORMS
        .iter()
        .map(|&(os, arch)| {
            let binary = if real && (os, arch) == ("linux", "amd64") {
                built.clone()
            } else {
                stand_in.clone()
            };
            let out = run(Command::new(root().join("deploy/krew/archive"))
                .arg(&binary)
                .args([os, arch])
                .arg(dir.join("dist")));
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        })
        .collect()
}

#[test]
fn the_krew_manifest_passes_krews_validation_and_matches_the_archives() {
    let dir = tempfile::tempdir().unwrap();
    let archives = archives(dir.path(), true);
    let out = run(Command::new(root().join("deploy/krew/render")).arg(dir.path().join("dist")));
    let manifest: Value = serde_yaml::from_slice(&out.stdout).expect("the manifest is YAML");
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));

    // ValidatePlugin
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    let name = manifest["metadata"]["name"].as_str().unwrap();
    assert_eq!(name, "media", "the plugin is `kubectl media`");
    assert!(
        name.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    );
    let spec = &manifest["spec"];
    let short = spec["shortDescription"].as_str().unwrap();
    assert!(!short.is_empty() && !short.contains(['\r', '\n']));
    // krew parses the version as semver with a leading v.
    assert_eq!(spec["version"], version.as_str());
    let caveats = spec["caveats"].as_str().unwrap();
    let shim = std::fs::read_to_string(root().join("completions/kubectl_complete-media")).unwrap();
    let exec = shim.lines().find(|l| l.starts_with("exec ")).unwrap();
    assert!(
        caveats.contains("kubectl_complete-media") && caveats.contains(exec),
        "the caveats show the completion shim as shipped ({exec:?}):\n{caveats}"
    );

    // validatePlatform, for each; and each points at its own archive.
    let platforms = spec["platforms"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    for platform in platforms {
        let labels = platform["selector"]["matchLabels"].as_object().unwrap();
        assert!(!labels.is_empty());
        assert!(
            labels.keys().all(|k| k == "os" || k == "arch"),
            "{labels:?}"
        );
        let (os, arch) = (
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap(),
        );
        assert!(
            seen.insert((os.to_owned(), arch.to_owned())),
            "{os}/{arch} twice"
        );

        let file = format!("kubectl-media-{version}-{os}-{arch}.tar.gz");
        let uri = platform["uri"].as_str().unwrap();
        assert!(
            uri.starts_with("https://") && uri.ends_with(&format!("/{version}/{file}")),
            "{uri}"
        );
        let archive = archives.iter().find(|a| a.ends_with(&file)).unwrap();
        let digest = platform["sha256"].as_str().unwrap();
        assert!(
            digest.len() == 64
                && digest
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(digest, sha256(archive), "{file}");

        let listing = run(Command::new("tar").arg("-tzf").arg(archive));
        let contents: BTreeSet<String> = String::from_utf8(listing.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let files = platform["files"].as_array().unwrap();
        assert!(!files.is_empty());
        let from: BTreeSet<String> = files
            .iter()
            .map(|f| {
                assert!(!f["to"].as_str().unwrap().is_empty());
                f["from"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(
            from, contents,
            "{file}: files of the manifest and of the archive"
        );
        assert!(from.contains("LICENSE"));
        assert_eq!(platform["bin"], "kubectl-media");
    }
    assert_eq!(seen.len(), PLATFORMS.len());

    // What krew installs from the linux/amd64 archive runs.
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let linux = archives
        .iter()
        .find(|a| a.to_string_lossy().ends_with("-linux-amd64.tar.gz"))
        .unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(linux)
        .arg("-C")
        .arg(&unpacked));
    let version_line = run(Command::new(unpacked.join("kubectl-media")).arg("--version"));
    assert!(String::from_utf8_lossy(&version_line.stdout).contains(env!("CARGO_PKG_VERSION")));
    let license = std::fs::read(unpacked.join("LICENSE")).unwrap();
    assert_eq!(license, std::fs::read(root().join("LICENSE")).unwrap());
}

#[test]
fn a_missing_archive_is_one_error_line_and_no_manifest() {
    let dir = tempfile::tempdir().unwrap();
    archives(dir.path(), false);
    let gone = dir.path().join(format!(
        "dist/kubectl-media-v{}-darwin-arm64.tar.gz",
        env!("CARGO_PKG_VERSION")
    ));
    std::fs::remove_file(&gone).unwrap();
    let out = Command::new(root().join("deploy/krew/render"))
        .arg(dir.path().join("dist"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no half-written manifest");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ")
            && stderr.contains("darwin-arm64")
            && stderr.contains("deploy/krew/archive"),
        "{stderr}"
    );
}
