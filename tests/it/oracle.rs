//! `why` against the scheduler's own allocator (the oracle of tests/oracle/, one build per
//! release). The oracle is checked first on fleets whose answers the product document and the
//! example fleet give; then `why`'s verdicts are compared with it on seeded random fleets
//! (tests/it/oracle/fleets.rs).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::oracle::{Oracle, RELEASES, Verdict};

mod cel;
mod estimate;
pub(crate) mod fleets;
mod selectors;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every object of the YAML files (relative to the repository), Lists flattened.
fn objects(files: &[&str]) -> Vec<Value> {
    let paths: Vec<PathBuf> = files.iter().map(|f| root().join(f)).collect();
    crate::support::objects::from_files(&paths)
}

/// The example fleet, its nodes and the product document's classes.
const FLEET: [&str; 3] = [
    "docs/examples/fleet.yaml",
    "docs/examples/why/nodes.yaml",
    "deploy/examples/classes.yaml",
];

fn start(release: &str) -> Oracle {
    Oracle::start(release).unwrap_or_else(|e| panic!("{e}"))
}

/// The product document's pod (deploy/examples/pod.yaml) on the example fleet: the GPUs whose
/// drivers state decodeHEVCMain10 and scale10bit, per the README's `caps` table (HEVC-10
/// decoded, 10-bit scaled: amd-1, arc-1, arc-2, mtl-1, tgl-1), each with its render node and
/// its media device on the node.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_decode_10bit_claim_lands_on_the_five_gpus_that_state_both() {
    let mut files = FLEET.to_vec();
    files.extend([
        "deploy/examples/claim-templates.yaml",
        "deploy/examples/pod.yaml",
    ]);
    let objects = objects(&files);
    for release in RELEASES {
        let verdicts = start(release)
            .fleet(&objects, "default/decode-10bit-worker")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdicts.allocatable(),
            ["amd-1", "arc-1", "arc-2", "mtl-1", "tgl-1"],
            "{release}: {verdicts:?}"
        );
        for node in verdicts.allocatable() {
            let Some(Verdict::Allocated(claims)) = verdicts.on(node) else {
                unreachable!()
            };
            assert_eq!(claims.len(), 1, "{release} {node}: {claims:?}");
            let (claim, devices) = &claims[0];
            assert_eq!(claim, "default/decode-10bit-worker-gpu");
            let drivers: Vec<(&str, &str)> = devices
                .iter()
                .map(|(request, device)| (request.as_str(), device.split('/').next().unwrap()))
                .collect();
            assert_eq!(
                drivers,
                [("gpu", "liken.sh"), ("decodes", "media.liken.sh")]
            );
            for (_, device) in devices {
                assert_eq!(
                    device.split('/').nth(1),
                    Some(node),
                    "{device} is on {node}"
                );
            }
        }
        assert_eq!(verdicts.unschedulable, None);
    }
}

/// docs/examples/why/all-taken.yaml: every render node is held by its agent's claim.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn with_every_render_node_taken_no_node_allocates() {
    let mut files = FLEET.to_vec();
    files.push("docs/examples/why/all-taken.yaml");
    let objects = objects(&files);
    for release in RELEASES {
        let verdicts = start(release)
            .fleet(&objects, "media/film-0")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(verdicts.nodes.len(), 9, "{release}: {verdicts:?}");
        for (node, verdict) in &verdicts.nodes {
            assert_eq!(verdict, &Verdict::Unallocatable, "{release} {node}");
        }
    }
}

/// A template of the pod of `files`, in namespace default, with `request` as its only request.
fn pod_with_request(request: Value) -> Vec<Value> {
    vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": "t", "namespace": "default"},
               "spec": {"spec": {"devices": {"requests": [request]}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                        "containers": [{"name": "c", "image": "i"}]}}),
    ]
}

/// A selector no device satisfies (an attribute no driver states, read with a default): not
/// allocatable anywhere, and no error.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_claim_nothing_satisfies_is_allocatable_nowhere() {
    let mut objects = objects(&FLEET);
    objects.extend(pod_with_request(json!({"name": "gpu", "exactly": {
        "deviceClassName": "media-gpu",
        "selectors": [{"cel": {"expression":
            "device.attributes[\"media.liken.sh\"].?decodeAV1Main12.orValue(false)"}}]}})));
    for release in RELEASES {
        let verdicts = start(release)
            .fleet(&objects, "default/p")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(verdicts.nodes.len(), 9, "{release}: {verdicts:?}");
        for (node, verdict) in &verdicts.nodes {
            assert_eq!(verdict, &Verdict::Unallocatable, "{release} {node}");
        }
    }
}

/// docs/examples/why/class-typo.yaml: reading an attribute no device has is a CEL runtime
/// error, which fails the attempt on every node with a media device (edge-1 has none).
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_class_with_a_typo_fails_the_attempt() {
    let mut files = FLEET.to_vec();
    files.push("docs/examples/why/class-typo.yaml");
    let objects = objects(&files);
    for release in RELEASES {
        let verdicts = start(release)
            .fleet(&objects, "media/review-0")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdicts.on("edge-1"),
            Some(&Verdict::Unallocatable),
            "{release}"
        );
        let Some(Verdict::Error(message)) = verdicts.on("mtl-1") else {
            panic!("{release}: {verdicts:?}")
        };
        assert!(
            message.contains("class hevc10: selector #0") && message.contains("no such key"),
            "{release}: {message}"
        );
    }
}

/// A request naming a class that does not exist: the scheduler's PreFilter makes the pod
/// unschedulable on every node.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_missing_class_makes_the_pod_unschedulable() {
    let mut objects = objects(&FLEET);
    objects.extend(pod_with_request(
        json!({"name": "gpu", "exactly": {"deviceClassName": "decode-10bits"}}),
    ));
    for release in RELEASES {
        let verdicts = start(release)
            .fleet(&objects, "default/p")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdicts.unschedulable.as_deref(),
            Some("request gpu: device class decode-10bits does not exist"),
            "{release}"
        );
        assert!(verdicts.allocatable().is_empty());
    }
}

/// Bad input is one clear line and exit 1, in the plain mode a person uses.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn the_plain_mode_reads_files_like_why() {
    let binary = crate::support::oracle::binary(RELEASES[0]).unwrap_or_else(|e| panic!("{e}"));
    let mut args: Vec<String> = FLEET
        .iter()
        .flat_map(|f| ["-f".to_owned(), root().join(f).display().to_string()])
        .collect();
    args.extend([
        "-f".to_owned(),
        root()
            .join("docs/examples/why/all-taken.yaml")
            .display()
            .to_string(),
        "media/film-0".to_owned(),
    ]);
    let out = std::process::Command::new(&binary)
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("Kubernetes 1.34 allocator, pod media/film-0\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\narc-1: not allocatable\n"), "{stdout}");

    let out = std::process::Command::new(&binary)
        .args(["-f", "/nonexistent.yaml", "p"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: read /nonexistent.yaml: "),
        "{stderr}"
    );
}
