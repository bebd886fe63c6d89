//! Device taints reach kube-scheduler (issue 34): the real agent publishes a node of two GPUs,
//! the first of which failed its probe and carries the agent's taint
//! (`media.liken.sh/unhealthy=query-failed:NoSchedule`), beside liken's render nodes (a stand-in
//! slice), one of which an operator tainted (`liken.sh/maintenance`). With DRADeviceTaints on (1.37's
//! default, and 1.34 with the gate and `resource.k8s.io/v1alpha3`):
//!
//! - a claim for one device of any media GPU gets the working GPU, never the tainted one, and a
//!   claim for both stays pending until it tolerates the taint; `why` agrees with the scheduler
//!   and names the taint and the `--tolerate` that admits it;
//! - the `decode-10bit` template `class` writes stays pending while the qualifying GPU's render
//!   node is tainted, and the same written with `--tolerate liken.sh/maintenance` is placed there.
//!
//! On 1.34's default gates the server drops the taints: the claim for both GPUs is placed.
//! Each control plane is this module's own: its node would otherwise be one more GPU that
//! decodes 10-bit HEVC for the product flow's scheduler.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::product::{
    Devices, Placed, apply, apply_in, claim_of_in, class, create_pod_in, get, placed_in,
    publish_with_the_agent_from, results, scheduler_events_in, wait, why_agrees_in, why_in,
};
use super::{install, ok};
use crate::support::agent::{example_records, set_gpu_index, write_record};
use crate::support::controlplane::{self, ControlPlane, Release};
use crate::support::examples;
use media_operator::catalogue;

/// The pods' namespace.
const NS: &str = "taints";
/// The taint the agent puts on a GPU whose query failed, by default.
const OURS: &str = "media.liken.sh/unhealthy";
/// An operator's taint on the working GPU's render node.
const MAINTENANCE: &str = "liken.sh/maintenance";

/// GPU 0 (0000:01:00.0): the example fleet's amd-2, whose vaInitialize failed.
const FAILED: &str = "pci-0000-01-00-0";
/// GPU 1 (0000:02:00.0): amd-1 (Navi 31), which decodes HEVC Main 10 and scales 10-bit.
const WORKING: &str = "pci-0000-02-00-0";

/// Which server: the gate's release and setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    On137,
    On134,
    Off134,
}

impl Server {
    fn node(self) -> &'static str {
        match self {
            Server::On137 => "taints-137",
            Server::On134 => "taints-134",
            Server::Off134 => "taints-134-off",
        }
    }
}

fn plane(server: Server) -> &'static ControlPlane {
    static PLANES: [OnceLock<Result<ControlPlane, String>>; 3] = [const { OnceLock::new() }; 3];
    PLANES[server as usize]
        .get_or_init(|| {
            let gate_on = [
                "--feature-gates",
                "DRADeviceTaints=true,DRAConsumableCapacity=true",
                "--runtime-config",
                "resource.k8s.io/v1alpha3=true",
            ];
            let (release, flags): (Release, &[&str]) = match server {
                Server::On137 => (Release::V1_37, &[]),
                Server::On134 => (Release::V1_34, &gate_on),
                Server::Off134 => (Release::V1_34, &[]),
            };
            let cp = controlplane::shared_with_on(release, server.node(), flags)?;
            prepare(&cp, server.node());
            Ok(cp)
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The install, the node with the agent's slice and liken's stand-in, the classes and the
/// templates.
fn prepare(cp: &ControlPlane, node: &str) {
    install(cp);
    cp.node(node, &[]);
    let reports = tempfile::tempdir().unwrap();
    let records = example_records();
    let failed = records
        .iter()
        .find(|r| r["pci"]["product"] == "67df")
        .expect("the Ellesmere record, whose vaInitialize failed");
    let working = records
        .iter()
        .find(|r| r["pci"]["product"] == "744c")
        .expect("the Navi 31 record");
    for (i, record) in [failed, working].into_iter().enumerate() {
        let mut record = record.clone();
        set_gpu_index(&mut record, i);
        write_record(reports.path(), &record);
    }
    // Stopped once published: the slice stays, and the scheduler reads only the slice.
    drop(publish_with_the_agent_from(cp, node, reports.path(), &[]));
    stand_in_for_liken(cp, node);

    ok(cp.kubectl(&["create", "namespace", NS]));
    apply(
        cp,
        &json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "taints-any-media-gpu"},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{}\"", catalogue::DRIVER)}}]},
        })
        .to_string(),
    );
    // "both" asks for every media GPU of the node (allocationMode All): with a count of 2,
    // 1.34's allocator would give one shareable device twice.
    let one = json!({"deviceClassName": "taints-any-media-gpu", "allocationMode": "ExactCount", "count": 1});
    let all = json!({"deviceClassName": "taints-any-media-gpu", "allocationMode": "All"});
    for (name, mode, tolerations) in [
        ("one", &one, json!(null)),
        ("both", &all, json!(null)),
        (
            "both-tolerant",
            &all,
            json!([{"key": OURS, "operator": "Exists", "effect": "NoSchedule"}]),
        ),
    ] {
        let mut exactly = mode.clone();
        if !tolerations.is_null() {
            exactly["tolerations"] = tolerations;
        }
        apply_in(
            cp,
            NS,
            &json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
            })
            .to_string(),
        );
    }
    let decode_10bit = [
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--claim",
        "--with-render-class",
    ];
    apply_in(cp, NS, &class(&decode_10bit));
    let tolerant = [
        "--claim=decode-10bit-tolerant",
        "decode-10bit",
        "--decode",
        "HEVCMain10",
        "--scale",
        "10bit",
        "--tolerate",
        MAINTENANCE,
    ];
    apply_in(cp, NS, &class(&tolerant));
}

/// liken's slice of the node's two render nodes, the working GPU's tainted by an operator.
fn stand_in_for_liken(cp: &ControlPlane, node: &str) {
    let render_nodes = [
        (
            "/dev/dri/renderD128".to_string(),
            "0000:01:00.0".to_string(),
        ),
        (
            "/dev/dri/renderD129".to_string(),
            "0000:02:00.0".to_string(),
        ),
    ];
    let mut slice = examples::liken_slice(node, &render_nodes);
    slice["metadata"]["ownerReferences"][0]["uid"] =
        get(cp, &["node", node])["metadata"]["uid"].clone();
    slice["spec"]["devices"][1]["taints"] = json!([
        {"key": MAINTENANCE, "value": "firmware", "effect": "NoSchedule"}
    ]);
    apply(cp, &slice.to_string());
}

/// The agent's stored slice of the node.
fn media_slice(cp: &ControlPlane, node: &str) -> Value {
    get(
        cp,
        &["resourceslice", &format!("{node}-{}", catalogue::DRIVER)],
    )
}

fn taints_of(slice: &Value, device: &str) -> Value {
    slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == device)
        .unwrap_or_else(|| panic!("no {device}: {slice}"))
        .get("taints")
        .cloned()
        .unwrap_or(Value::Null)
}

/// The devices allocated to the pod's claim, by name.
fn allocated(cp: &ControlPlane, pod: &str) -> Vec<String> {
    results(&claim_of_in(cp, NS, pod))
        .into_iter()
        .map(|(_, _, _, device)| device)
        .collect()
}

/// Waits for the scheduler's event of a pending pod, so that `why` has it to quote.
fn pending(cp: &ControlPlane, pod: &str) -> Placed {
    let placed = placed_in(cp, NS, pod);
    assert!(
        matches!(placed, Placed::Pending(_)),
        "{pod}: {placed:?}: {:?}",
        results(&claim_of_in(cp, NS, pod))
    );
    wait(&format!("the scheduler's event for {pod}"), || {
        (!scheduler_events_in(cp, NS, pod).is_empty()).then_some(())
    })
    .unwrap();
    placed
}

/// The reasons `why` gives for the pod's request, and its next steps.
fn why_says(cp: &ControlPlane, pod: &str) -> (Vec<Value>, Vec<Value>) {
    let (_, diagnosis) = why_in(cp, NS, pod);
    let reasons = diagnosis["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["requests"].as_array().into_iter().flatten())
        .flat_map(|r| r["reasons"].as_array().cloned().unwrap_or_default())
        .collect();
    let steps = diagnosis["nextSteps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (reasons, steps)
}

fn the_scheduler_keeps_new_claims_off_the_tainted_gpu(server: Server) {
    let cp = plane(server);
    let node = server.node();
    let slice = media_slice(cp, node);
    assert_eq!(
        taints_of(&slice, FAILED)[0].as_object().map(|t| (
            t["key"].clone(),
            t["value"].clone(),
            t["effect"].clone()
        )),
        Some((json!(OURS), json!("query-failed"), json!("NoSchedule"))),
        "{slice}"
    );
    assert_eq!(taints_of(&slice, WORKING), Value::Null, "{slice}");

    // One device of any media GPU: the working one, never the tainted one.
    create_pod_in(cp, NS, "one", "one", Some(node));
    let placed = placed_in(cp, NS, "one");
    assert_eq!(placed, Placed::On(node.into()));
    assert_eq!(allocated(cp, "one"), [WORKING]);
    why_agrees_in(cp, NS, "one", &placed, Devices::Shared);

    // Every media GPU of the node: pending while the claim does not tolerate the taint, and
    // why says which taint.
    create_pod_in(cp, NS, "both", "both", Some(node));
    let placed = pending(cp, "both");
    why_agrees_in(cp, NS, "both", &placed, Devices::Shared);
    let (reasons, steps) = why_says(cp, "both");
    assert!(
        reasons.iter().any(|r| r["reason"] == "Untolerated"
            && r["detail"]["key"] == OURS
            && r["detail"]["value"] == "query-failed"
            && r["detail"]["effect"] == "NoSchedule"),
        "{reasons:#?}"
    );
    assert!(
        steps.iter().any(|s| s["code"] == "Tolerate"
            && s["taints"] == json!([format!("{OURS}=query-failed:NoSchedule")])),
        "{steps:#?}"
    );
    // Tolerated: placed, on both.
    create_pod_in(cp, NS, "both-tolerant", "both-tolerant", Some(node));
    let placed = placed_in(cp, NS, "both-tolerant");
    assert_eq!(placed, Placed::On(node.into()));
    let mut devices = allocated(cp, "both-tolerant");
    devices.sort();
    assert_eq!(devices, [FAILED, WORKING]);
    why_agrees_in(cp, NS, "both-tolerant", &placed, Devices::Shared);
}

fn a_template_written_with_tolerate_takes_a_gpu_whose_render_node_is_tainted(server: Server) {
    let cp = plane(server);
    let node = server.node();
    create_pod_in(cp, NS, "film", "decode-10bit", Some(node));
    let placed = pending(cp, "film");
    why_agrees_in(cp, NS, "film", &placed, Devices::Shared);
    let (reasons, steps) = why_says(cp, "film");
    assert!(
        reasons
            .iter()
            .any(|r| r["reason"] == "Untolerated" && r["detail"]["key"] == MAINTENANCE),
        "{reasons:#?}"
    );
    assert!(
        steps.iter().any(|s| s["code"] == "Tolerate"
            && s["taints"] == json!([format!("{MAINTENANCE}=firmware:NoSchedule")])),
        "{steps:#?}"
    );
    create_pod_in(cp, NS, "film-tolerant", "decode-10bit-tolerant", Some(node));
    let placed = placed_in(cp, NS, "film-tolerant");
    assert_eq!(placed, Placed::On(node.into()));
    let allocated = results(&claim_of_in(cp, NS, "film-tolerant"));
    let devices: Vec<(&str, &str)> = allocated
        .iter()
        .map(|(_, driver, _, device)| (driver.as_str(), device.as_str()))
        .collect();
    assert_eq!(
        devices,
        [("liken.sh", "renderd129"), (catalogue::DRIVER, WORKING)]
    );
    why_agrees_in(cp, NS, "film-tolerant", &placed, Devices::Shared);
}

macro_rules! on_each_server {
    ($($test:ident),+ $(,)?) => {
        mod with_the_gate {
            $(
                #[test]
                #[cfg_attr(
                    not(all(have_go, have_kubectl)),
                    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
                )]
                fn $test() {
                    super::$test(super::Server::On137);
                    super::$test(super::Server::On134);
                }
            )+
        }
    };
}

on_each_server!(
    the_scheduler_keeps_new_claims_off_the_tainted_gpu,
    a_template_written_with_tolerate_takes_a_gpu_whose_render_node_is_tainted,
);

/// 1.34's default gates: the server drops the taints, so the scheduler has none to keep claims
/// off; the claim for both GPUs is placed.
#[test]
#[cfg_attr(
    not(all(have_go, have_kubectl)),
    ignore = "needs kubectl and Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn without_the_gate_the_server_drops_the_taints_and_nothing_is_kept_off() {
    let server = Server::Off134;
    let cp = plane(server);
    let node = server.node();
    let slice = media_slice(cp, node);
    assert_eq!(taints_of(&slice, FAILED), Value::Null, "{slice}");
    create_pod_in(cp, NS, "both", "both", Some(node));
    let placed = placed_in(cp, NS, "both");
    assert_eq!(placed, Placed::On(node.into()));
    let mut devices = allocated(cp, "both");
    devices.sort();
    assert_eq!(devices, [FAILED, WORKING]);
    // Held exclusively there (no DRAConsumableCapacity).
    why_agrees_in(cp, NS, "both", &placed, Devices::Exclusive);
}
