//! The GPU DRA drivers people run (Intel's, NVIDIA's, AMD's) beside the agent, on the real control
//! plane of each release with its default gates: each driver's ResourceSlice as it publishes it at
//! its pinned version (tests/fixtures/render-drivers/, MIG devices, partitions, a VF and VFIO
//! devices among them) on two nodes of its own, the real agent run with `--render-driver` and
//! recorded reports of two different GPUs at the fixture's addresses
//! (tests/fixtures/render-drivers/reports/: the example fleet's `mtl-1`, which decodes HEVC Main 10
//! and scales 10-bit, and `gen9-1`, which does neither, moved there), and what
//! `kubectl media class decode-10bit --decode HEVCMain10 --scale 10bit --claim --with-render-class
//! --render-driver DRIVER` writes, applied in a namespace per driver. kube-scheduler must put a pod
//! that claims through that template on the driver's whole GPU at the qualifying GPU's address,
//! never on a MIG device, a partition, a VF or a VFIO device and never on the other GPU; `why`
//! must agree with it (product.rs `why_agrees`).
//!
//! Node `<key>-a` has the qualifying GPU at [`WHOLE`] (0000:83:00.0, where every fixture has a
//! whole GPU: NVIDIA's beside a VFIO device of the same address) and the other at 0000:03:00.0.
//! Node `<key>-b` has the qualifying GPU where the driver publishes only sub-devices: NVIDIA's MIG
//! and VFIO devices and AMD's partitions at 0000:03:00.0 (their parent's address), Intel's VF at
//! 0000:03:00.1 (its own). A pod that may go anywhere must pick `<key>-a` among the six nodes; one
//! kept to `<key>-b` stays pending, and the same claim on a class of every device of the driver
//! lands there on a sub-device, which shows that only the whole-GPU class kept it off.
//!
//! One control plane per release holds the three drivers: their slices coexist (other driver
//! names, other nodes). On 1.34's default gates the API server drops nothing of them (no counters,
//! taints or `allowMultipleAllocations` at the pinned versions, as their headers say); it does drop
//! the media devices' `allowMultipleAllocations` (DRAConsumableCapacity off), so there each claim
//! holds its devices exclusively, which no test here depends on. The kubelet is not run: AMD's
//! plugin at its pinned commit would refuse to prepare a claim that also holds a media device
//! (docs/render-drivers/amd.md); the scheduler's decision is what is tested.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::product::{
    Devices, Placed, apply, apply_in, claim_of_in, class, create_pod_in, get, placed_in,
    publish_with_the_agent_from, results, scheduler_events_in, stored_device, wait, why_agrees_in,
};
use super::{AGENT, NAMESPACE, install, ok};
use crate::support::agent::FAST;
use crate::support::audit::Audit;
use crate::support::controlplane::{self, ControlPlane, Release};
use crate::support::examples::EXAMPLE_DIR;
use crate::support::render_fixtures::{
    REPORTS, WHOLE, fixture, moved, qualifying_address, reports_dir,
};
use media_operator::catalogue;
use media_operator::render_drivers::{AMD, DeviceKind, INTEL, NVIDIA, RenderDriver};

/// A render driver and what its fixture holds where the tests look.
struct Vendor {
    driver: RenderDriver,
    /// The reports of node `<key>-b`: its qualifying GPU where the driver has sub-devices only.
    sub_device_reports: &'static str,
    /// The driver's whole GPU at [`WHOLE`].
    whole_gpu: &'static str,
    /// Its devices at the address of `<key>-b`'s qualifying GPU, none a whole GPU.
    sub_devices: &'static [&'static str],
    /// The whole GPUs it publishes on `<key>-b` that the agent there has no report of.
    not_seen_on_b: &'static [&'static str],
}

const VENDORS: [Vendor; 3] = [
    Vendor {
        driver: INTEL,
        sub_device_reports: "vf",
        whole_gpu: "0000-83-00-0-0xe20b",
        sub_devices: &["0000-03-00-1-0x56c0"],
        // The VF's parent: the agent there sees the VF and the B580.
        not_seen_on_b: &["0000:03:00.0"],
    },
    Vendor {
        driver: NVIDIA,
        sub_device_reports: "parent-address",
        whole_gpu: "gpu-1",
        sub_devices: &["gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0", "gpu-vfio-0"],
        not_seen_on_b: &[],
    },
    Vendor {
        driver: AMD,
        sub_device_reports: "parent-address",
        whole_gpu: "gpu-8-136",
        sub_devices: &["gpu-0-128", "gpu-1-129"],
        not_seen_on_b: &[],
    },
];

/// The template, beside `decode-10bit`, whose render request takes any device of the driver.
const ANY_DEVICE: &str = "any-device";

impl Vendor {
    fn node(&self, which: char) -> String {
        format!("{}-{which}", self.driver.key)
    }

    /// Where the pods, the claims and the templates of this driver live.
    fn namespace(&self) -> &'static str {
        self.driver.key
    }

    /// (node, its reports' directory, the whole GPUs there its agent cannot open).
    fn nodes(&self) -> [(String, &'static str, &'static [&'static str]); 2] {
        [
            (self.node('a'), "whole", &[]),
            (self.node('b'), self.sub_device_reports, self.not_seen_on_b),
        ]
    }
}

/// The driver's fixture moved to `node`, owned by the Node (the fixture's made-up uid would have
/// the garbage collector delete the slice).
fn fixture_on(cp: &ControlPlane, driver: &RenderDriver, node: &str) -> Value {
    let uid = get(cp, &["node", node])["metadata"]["uid"].clone();
    moved(fixture(driver), node, uid)
}

/// What a stored device of `driver` is, by the table's own reading of its attributes.
fn kind(driver: &RenderDriver, device: &Value) -> DeviceKind {
    driver.kind(|name| device["attributes"].get(name).map(|v| v["string"].as_str()))
}

/// The control plane of `release` with the three drivers' nodes, slices, media slices and
/// classes.
fn beside_the_vendors(release: Release) -> &'static ControlPlane {
    static PLANES: [OnceLock<Result<ControlPlane, String>>; 2] = [const { OnceLock::new() }; 2];
    PLANES[release as usize]
        .get_or_init(|| prepared(release))
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn prepared(release: Release) -> Result<ControlPlane, String> {
    let name = format!("render-drivers-{}", release.name());
    let cp = controlplane::shared_with_on(release, &name, &[])?;
    install(&cp);
    for vendor in &VENDORS {
        let driver = &vendor.driver;
        for (node, reports, _) in vendor.nodes() {
            cp.node(&node, &[]);
            apply(&cp, &fixture_on(&cp, driver, &node).to_string());
            let flags = ["--render-driver", driver.name];
            drop(publish_with_the_agent_from(
                &cp,
                &node,
                &reports_dir(reports),
                &flags,
            ));
        }
        ok(cp.kubectl(&["create", "namespace", vendor.namespace()]));
        let decode_10bit = ["decode-10bit", "--decode", "HEVCMain10", "--scale", "10bit"];
        let render = ["--render-driver", driver.name];
        let written = class(
            &[
                &decode_10bit[..],
                &["--claim", "--with-render-class"][..],
                &render[..],
            ]
            .concat(),
        );
        apply_in(&cp, vendor.namespace(), &written);
        // The control: the same claim, its render request on every device of the driver.
        let any = format!("{}-any-device", driver.key);
        let selector = format!("device.driver == \"{}\"", driver.name);
        apply(
            &cp,
            &json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": any},
                "spec": {"selectors": [{"cel": {"expression": selector}}]},
            })
            .to_string(),
        );
        let claim = format!("--claim={ANY_DEVICE}");
        let flags = [claim.as_str(), "--render-class", &any];
        apply_in(
            &cp,
            vendor.namespace(),
            &class(&[&flags[..], &decode_10bit[..], &render[..]].concat()),
        );
    }
    Ok(cp)
}

super::on_each_release!(
    the_servers_store_each_drivers_slices_as_it_publishes_them,
    beside_gpu_intel_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies,
    beside_gpu_nvidia_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies,
    beside_gpu_amd_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies,
    the_agent_beside_each_driver_names_the_whole_gpus_it_cannot_open,
);

/// Every attribute and capacity of every device reaches the scheduler, 1.34's default gates
/// included: the scheduler below decides on what the drivers publish.
fn the_servers_store_each_drivers_slices_as_it_publishes_them(release: Release) {
    let cp = beside_the_vendors(release);
    for vendor in &VENDORS {
        let published = fixture(&vendor.driver);
        for (node, _, _) in vendor.nodes() {
            let name = fixture_on(cp, &vendor.driver, &node)["metadata"]["name"].clone();
            let stored = get(cp, &["resourceslice", name.as_str().unwrap()]);
            assert_eq!(
                stored["spec"]["devices"], published["spec"]["devices"],
                "{} on {node}",
                vendor.driver.name
            );
            assert_eq!(stored["spec"]["nodeName"], node.as_str());
        }
    }
}

fn beside_gpu_intel_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies(release: Release) {
    gets_the_whole_gpu_that_qualifies(release, &VENDORS[0]);
}

fn beside_gpu_nvidia_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies(release: Release) {
    gets_the_whole_gpu_that_qualifies(release, &VENDORS[1]);
}

fn beside_gpu_amd_com_a_decode_10bit_pod_gets_the_whole_gpu_that_qualifies(release: Release) {
    gets_the_whole_gpu_that_qualifies(release, &VENDORS[2]);
}

/// The scheduler's choice for the `decode-10bit` template `class` wrote for `vendor`'s driver: the
/// whole GPU at the qualifying address of `<key>-a`, nothing on `<key>-b`, where only sub-devices
/// share that GPU's address, though a claim on any device of the driver is allocated there.
fn gets_the_whole_gpu_that_qualifies(release: Release, vendor: &Vendor) {
    let cp = beside_the_vendors(release);
    let driver = &vendor.driver;
    let ns = vendor.namespace();
    let (a, b) = (vendor.node('a'), vendor.node('b'));

    create_pod_in(cp, ns, "film", "decode-10bit", None);
    let placed = placed_in(cp, ns, "film");
    assert_eq!(placed, Placed::On(a.clone()), "{}", driver.name);
    let allocated = results(&claim_of_in(cp, ns, "film"));
    assert_eq!(allocated.len(), 2, "{allocated:?}");
    let (gpu, decodes) = (&allocated[0], &allocated[1]);
    assert_eq!(
        gpu,
        &(
            "gpu".into(),
            driver.name.into(),
            a.clone(),
            vendor.whole_gpu.into()
        ),
        "{allocated:?}"
    );
    let render = stored_device(cp, driver.name, &gpu.2, &gpu.3);
    assert_eq!(kind(driver, &render), DeviceKind::Gpu, "{render}");
    assert_eq!(render["attributes"][catalogue::PCI_BUS_ID]["string"], WHOLE);
    assert_eq!(
        (decodes.0.as_str(), decodes.1.as_str(), decodes.2.as_str()),
        ("decodes", catalogue::DRIVER, a.as_str()),
        "{allocated:?}"
    );
    let media = stored_device(cp, catalogue::DRIVER, &decodes.2, &decodes.3);
    assert_eq!(media["attributes"][catalogue::PCI_BUS_ID]["string"], WHOLE);
    why_agrees_in(cp, ns, "film", &placed, Devices::Exclusive);

    // Kept to b, where the qualifying GPU's address has only sub-devices: pending, and why says
    // so as the scheduler does.
    create_pod_in(cp, ns, "film-on-b", "decode-10bit", Some(&b));
    let pending = placed_in(cp, ns, "film-on-b");
    assert!(matches!(pending, Placed::Pending(_)), "{pending:?}");
    wait("the scheduler's event for film-on-b", || {
        (!scheduler_events_in(cp, ns, "film-on-b").is_empty()).then_some(())
    })
    .unwrap();
    why_agrees_in(cp, ns, "film-on-b", &pending, Devices::Exclusive);

    // The same claim on every device of the driver lands on b, on a sub-device at the
    // qualifying GPU's address: only the whole-GPU class kept the pod above off it.
    create_pod_in(cp, ns, "any-device-on-b", ANY_DEVICE, Some(&b));
    let placed = placed_in(cp, ns, "any-device-on-b");
    assert_eq!(placed, Placed::On(b.clone()), "{}", driver.name);
    let allocated = results(&claim_of_in(cp, ns, "any-device-on-b"));
    let gpu = &allocated[0];
    assert!(
        gpu.0 == "gpu" && gpu.2 == b && vendor.sub_devices.contains(&gpu.3.as_str()),
        "{allocated:?}"
    );
    let sub_device = stored_device(cp, driver.name, &gpu.2, &gpu.3);
    assert_ne!(kind(driver, &sub_device), DeviceKind::Gpu, "{sub_device}");
    assert_eq!(
        sub_device["attributes"][catalogue::PCI_BUS_ID]["string"],
        qualifying_address(vendor.sub_device_reports)
    );
    why_agrees_in(cp, ns, "any-device-on-b", &placed, Devices::Exclusive);
}

/// The agent with `--render-driver` compares the driver's whole GPUs on its node with its own
/// GPUs and names those it lacks: never a MIG device, a partition, a VF or a VFIO device (Intel's
/// `-a` node has a VF and a vfio-bound GPU it has no report of; NVIDIA's and AMD's `-a` nodes
/// have sub-devices only at the other GPU's address).
fn the_agent_beside_each_driver_names_the_whole_gpus_it_cannot_open(release: Release) {
    let cp = beside_the_vendors(release);
    let user = format!("system:serviceaccount:{NAMESPACE}:{AGENT}");
    for vendor in &VENDORS {
        let driver = &vendor.driver;
        for (node, reports, not_seen) in vendor.nodes() {
            let audit = Audit::follow(cp.audit_log(), &user);
            let flags = [&["--render-driver", driver.name][..], FAST].concat();
            let (agent, _home) =
                publish_with_the_agent_from(cp, &node, &reports_dir(reports), &flags);
            // Each list of the driver's slices of the node is compared before the next: after
            // two, the first comparison has been said (or found nothing to say).
            let lists = |events: &[crate::support::audit::Event]| {
                events
                    .iter()
                    .filter(|e| e.verb == "list" && e.resource == "resourceslices")
                    .filter(|e| e.is_complete() && e.ok())
                    .filter(|e| {
                        e.query_param("fieldSelector").is_some_and(|f| {
                            f.contains(&format!("spec.nodeName={node}"))
                                && f.contains(&format!("spec.driver={}", driver.name))
                        })
                    })
                    .count()
            };
            audit
                .wait_until(super::product::WAIT, |events| lists(events) >= 2)
                .unwrap_or_else(|e| {
                    panic!(
                        "{node}: two lists of {}: {e}; log:\n{}",
                        driver.name,
                        agent.log.lines().join("\n")
                    )
                });
            let said: Vec<String> = agent
                .log
                .lines()
                .into_iter()
                .filter(|l| l.contains("that this agent's container does not have"))
                .collect();
            let metric = agent.metric("media_capabilities_gpus_not_in_claim");
            if not_seen.is_empty() {
                assert!(said.is_empty(), "{node}: {said:#?}");
                assert_eq!(metric, 0.0, "{node}");
                continue;
            }
            let expected = format!(
                "{} publishes {} GPU(s) on this node that this agent's container does not have: {} (",
                driver.name,
                not_seen.len(),
                not_seen.join(", ")
            );
            assert!(
                said.len() == 1 && said[0].contains(" WARN ") && said[0].contains(&expected),
                "{node}: {said:#?}"
            );
            assert_eq!(metric, not_seen.len() as f64, "{node}");
            let (_, ready) = agent.get("/readyz");
            assert!(
                ready.contains(&format!("warning: {expected}")),
                "{node}: {ready}"
            );
        }
    }
}

/// The recorded reports are the example fleet's `mtl-1` and `gen9-1`, each moved to the fixtures'
/// addresses and nothing else changed.
#[test]
fn the_reports_are_the_example_gpus_at_the_fixtures_addresses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, gpus) in REPORTS {
        let read = media_operator::agent::probing::read_records(&reports_dir(dir)).unwrap();
        let mut expected = Vec::new();
        for (example, address, render_node) in gpus {
            let path = root.join(EXAMPLE_DIR).join(example);
            let mut records = media_operator::agent::probing::read_records(&path).unwrap();
            assert_eq!(records.len(), 1, "{example}");
            let mut record = records.remove(0);
            record.pci.address = address.into();
            record.render_node = render_node.into();
            expected.push(record);
        }
        expected.sort_by(|x, y| x.pci.address.cmp(&y.pci.address));
        assert_eq!(read, expected, "{dir}");
    }
}
