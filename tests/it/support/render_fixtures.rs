//! The vendors' render-driver fixtures as tests use them: each driver's ResourceSlice as
//! tests/fixtures/render-drivers/<driver>.yaml writes it (for node [`FIXTURE_NODE`]), moved to
//! another node, and the recorded reports of two GPUs at the fixtures' addresses
//! (tests/fixtures/render-drivers/reports/: the example fleet's `mtl-1`, which decodes HEVC Main 10
//! and scales 10-bit, and `gen9-1`, which does neither).

use std::path::{Path, PathBuf};

use serde_json::Value;

use media_operator::render_drivers::RenderDriver;

/// The node every fixture is written for.
pub const FIXTURE_NODE: &str = "node-a";

/// An address where every fixture has a whole GPU (NVIDIA's beside a VFIO device of that address).
pub const WHOLE: &str = "0000:83:00.0";

/// A recorded GPU: (example node, PCI address, render node).
pub type RecordedGpu = (&'static str, &'static str, &'static str);

/// Each directory of recorded reports with its GPUs, the qualifying one (`mtl-1`) first. Each
/// record is the example's with only the address and the render node changed.
pub const REPORTS: [(&str, [RecordedGpu; 2]); 3] = [
    // The qualifying GPU where every driver has a whole GPU.
    (
        "whole",
        [
            ("mtl-1", WHOLE, "/dev/dri/renderD129"),
            ("gen9-1", "0000:03:00.0", "/dev/dri/renderD128"),
        ],
    ),
    // The qualifying GPU at NVIDIA's MIG and VFIO devices' and AMD's partitions' address.
    (
        "parent-address",
        [
            ("mtl-1", "0000:03:00.0", "/dev/dri/renderD128"),
            ("gen9-1", WHOLE, "/dev/dri/renderD129"),
        ],
    ),
    // The qualifying GPU at Intel's VF.
    (
        "vf",
        [
            ("mtl-1", "0000:03:00.1", "/dev/dri/renderD129"),
            ("gen9-1", WHOLE, "/dev/dri/renderD130"),
        ],
    ),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/render-drivers")
}

/// The directory of the recorded reports `name` (of [`REPORTS`]), as `--reports` reads it.
pub fn reports_dir(name: &str) -> PathBuf {
    fixtures().join("reports").join(name)
}

/// The address of the qualifying GPU in the reports `name`.
pub fn qualifying_address(name: &str) -> &'static str {
    let (_, gpus) = REPORTS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no reports {name}"));
    gpus[0].1
}

/// The driver's fixture, as written.
pub fn fixture(driver: &RenderDriver) -> Value {
    let path = fixtures().join(format!("{}.yaml", driver.name));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let slice: Value =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()));
    assert_eq!(
        slice["spec"]["nodeName"],
        FIXTURE_NODE,
        "{}",
        path.display()
    );
    slice
}

/// `slice` (a fixture) moved to `node` whose uid is `uid`: its name, owner, node and pool.
pub fn moved(mut slice: Value, node: &str, uid: Value) -> Value {
    let name = slice["metadata"]["name"].as_str().unwrap_or_default();
    slice["metadata"]["name"] = name.replace(FIXTURE_NODE, node).into();
    let owner = &mut slice["metadata"]["ownerReferences"][0];
    owner["name"] = node.into();
    owner["uid"] = uid;
    slice["spec"]["nodeName"] = node.into();
    slice["spec"]["pool"]["name"] = node.into();
    slice
}
