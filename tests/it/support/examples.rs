//! Example fleets, built from recorded probes with the agent's own code, so an example always
//! shows what the agent would publish: the shipped `docs/examples/fleet.yaml`, and fleets of any
//! size for tests and benchmarks.
//!
//! A fleet is a `kubectl get resourceslices -o yaml`-style List: for each node, liken's slice of
//! render nodes and (unless the node has no agent) the `media.liken.sh` slice the agent builds
//! from that node's recorded probes ([`media_operator::node::slice::desired`]).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use media_operator::agent::probing::{ProbeError, Probed, read_records};
use media_operator::catalogue;
use media_operator::node::device;
use media_operator::node::slice::{self, NodeRef};

/// Where the example fleet's recorded probes live, one directory per node.
pub const EXAMPLE_DIR: &str = "docs/examples/fleet";

/// Nodes of the example fleet where liken runs but the agent does not: their render nodes, as
/// (render node, PCI address).
const WITHOUT_AGENT: &[(&str, &[(&str, &str)])] =
    &[("edge-1", &[("/dev/dri/renderD128", "0000:00:02.0")])];

/// A stable, made-up uid for an object of the example (real ones are random UUIDs).
pub fn uid(kind: &str, name: &str) -> String {
    let hash = slice::fnv1a(format!("{kind}/{name}").as_bytes());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        (hash >> 20) & 0xfff,
        hash & 0xffff_ffff_ffff
    )
}

fn node_ref(node: &str) -> NodeRef {
    NodeRef {
        name: node.to_string(),
        uid: uid("Node", node),
    }
}

/// Fills in the metadata an API server adds, so the example reads like `kubectl get` output.
fn served(mut object: Value, resource_version: u64) -> Value {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let metadata = &mut object["metadata"];
    metadata["uid"] = json!(uid("ResourceSlice", &name));
    metadata["resourceVersion"] = json!(resource_version.to_string());
    metadata["generation"] = json!(1);
    metadata["creationTimestamp"] = json!("2026-11-02T08:00:00Z");
    object
}

/// The `media.liken.sh` slice the agent on `node` publishes for these probes.
pub fn media_slice(node: &str, probed: &[Probed]) -> Value {
    let devices: Vec<_> = probed
        .iter()
        .map(|p| device::describe(&p.node(), &p.outcome()))
        .collect();
    serde_json::to_value(slice::desired(&node_ref(node), &devices, 1))
        .expect("a ResourceSlice serialises")
}

/// liken's slice of render nodes for `node`: one shareable device per render node, with the PCI
/// address the claim constraint matches on.
pub fn liken_slice(node: &str, render_nodes: &[(String, String)]) -> Value {
    let devices: Vec<Value> = render_nodes
        .iter()
        .map(|(render_node, address)| {
            let name = render_node
                .rsplit('/')
                .next()
                .unwrap_or(render_node)
                .to_ascii_lowercase();
            // liken's render nodes are shareable (the product document: "several workloads
            // decode on one GPU at the same time"), as the agent's media devices are.
            json!({
                "name": name,
                "allowMultipleAllocations": true,
                "attributes": {
                    "renderNode": {"string": render_node},
                    catalogue::PCI_BUS_ID: {"string": address},
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": format!("{node}-{}", media_operator::render_drivers::LIKEN.name),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid("Node", node), "controller": true}],
        },
        "spec": {
            "driver": media_operator::render_drivers::LIKEN.name,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

/// Wraps objects in a `List`, as `kubectl get -o yaml|json` prints them.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
}

/// Why the example could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Records(#[from] ProbeError),
}

/// The example fleet of `docs/examples/fleet.yaml`, from the recorded probes under
/// [`EXAMPLE_DIR`] in the repository at `root`.
pub fn example_fleet(root: &Path) -> Result<Value, ExampleError> {
    let mut items = Vec::new();
    for (node, probed) in example_nodes(root)? {
        let render_nodes: Vec<(String, String)> = probed
            .iter()
            .map(|p| (p.render_node.display().to_string(), p.pci.address.clone()))
            .collect();
        items.push(liken_slice(&node, &render_nodes));
        items.push(media_slice(&node, &probed));
    }
    for (node, render_nodes) in WITHOUT_AGENT {
        let render_nodes: Vec<(String, String)> = render_nodes
            .iter()
            .map(|(r, a)| (r.to_string(), a.to_string()))
            .collect();
        items.push(liken_slice(node, &render_nodes));
    }
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let items = items
        .into_iter()
        .zip(1000u64..)
        .map(|(item, rv)| served(item, rv))
        .collect();
    Ok(list(items))
}

/// A fleet of `nodes` nodes with `gpus_per_node` GPUs each, for tests and benchmarks: node `i`
/// gets the GPUs of template `i % templates.len()` (each template one node's probes, as read
/// from a node directory), repeated at fresh PCI addresses until it has `gpus_per_node`.
pub fn large_fleet(
    nodes: usize,
    gpus_per_node: usize,
    templates: &[(String, Vec<Probed>)],
) -> Vec<Value> {
    let mut items = Vec::with_capacity(nodes * 2);
    for i in 0..nodes {
        let node = format!("node-{i:05}");
        let template = &templates[i % templates.len()].1;
        let probed: Vec<Probed> = (0..gpus_per_node)
            .map(|g| {
                let mut p = template[g % template.len()].clone();
                p.pci.address = format!("0000:{:02x}:00.0", g + 1);
                p.render_node = PathBuf::from(format!("/dev/dri/renderD{}", 128 + g));
                p
            })
            .collect();
        let render_nodes: Vec<(String, String)> = probed
            .iter()
            .map(|p| (p.render_node.display().to_string(), p.pci.address.clone()))
            .collect();
        items.push(served(liken_slice(&node, &render_nodes), 1));
        items.push(served(media_slice(&node, &probed), 1));
    }
    items
}

/// Who publishes the render side of a [`large_fleet_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenderSide {
    /// liken's render nodes, as [`large_fleet`].
    Liken,
    /// The vendors' drivers, node by node in turn (Intel, NVIDIA, AMD), each device shaped as
    /// the driver's first whole GPU in tests/fixtures/render-drivers/ (every attribute and
    /// capacity it sets), at the GPU's address.
    Vendors,
}

/// The vendors' render drivers in the order [`RenderSide::Vendors`] takes them.
pub const VENDORS: [&str; 3] = ["gpu.intel.com", "gpu.nvidia.com", "gpu.amd.com"];

/// A vendor driver's slices as tests/fixtures/render-drivers/ holds them.
pub fn vendor_fixture(driver: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/render-drivers")
        .join(format!("{driver}.yaml"));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("valid YAML"))
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// The first whole GPU (by the render-driver table) of a vendor's fixture.
fn vendor_gpu(driver: &str) -> Value {
    let table = media_operator::render_drivers::RenderDriver::named(driver).expect("known driver");
    vendor_fixture(driver)
        .iter()
        .filter(|s| s["spec"]["driver"] == driver)
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .find(|d| {
            table.kind(|name| d["attributes"].get(name).map(|a| a["string"].as_str()))
                == media_operator::render_drivers::DeviceKind::Gpu
        })
        .unwrap_or_else(|| panic!("no whole GPU in the {driver} fixture"))
}

/// A vendor's slice of whole GPUs for `node`, one per `(render node, address)`.
pub fn vendor_slice(driver: &str, node: &str, render_nodes: &[(String, String)]) -> Value {
    shaped_slice(driver, &vendor_gpu(driver), node, render_nodes)
}

/// A slice of `driver` for `node` whose devices are `template` at each address.
fn shaped_slice(
    driver: &str,
    template: &Value,
    node: &str,
    render_nodes: &[(String, String)],
) -> Value {
    let devices: Vec<Value> = render_nodes
        .iter()
        .enumerate()
        .map(|(i, (_, address))| {
            let mut device = template.clone();
            device["name"] = format!("gpu-{i}-{}", address.replace([':', '.'], "-")).into();
            device["attributes"][catalogue::PCI_BUS_ID] = json!({"string": address});
            device
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": format!("{node}-{driver}"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid("Node", node), "controller": true}],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

/// [`large_fleet`] with the render side of `side`: the same media slices, the same GPUs.
pub fn large_fleet_with(
    nodes: usize,
    gpus_per_node: usize,
    templates: &[(String, Vec<Probed>)],
    side: RenderSide,
) -> Vec<Value> {
    let mut items = large_fleet(nodes, gpus_per_node, templates);
    if side == RenderSide::Liken {
        return items;
    }
    let gpus: Vec<Value> = VENDORS.iter().map(|driver| vendor_gpu(driver)).collect();
    for (i, item) in items.iter_mut().enumerate() {
        if item["spec"]["driver"] != media_operator::render_drivers::LIKEN.name {
            continue;
        }
        let node = item["spec"]["nodeName"].as_str().unwrap().to_string();
        let render_nodes: Vec<(String, String)> = item["spec"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["attributes"]["renderNode"]["string"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                    d["attributes"][catalogue::PCI_BUS_ID]["string"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        let which = (i / 2) % VENDORS.len();
        *item = served(
            shaped_slice(VENDORS[which], &gpus[which], &node, &render_nodes),
            1,
        );
    }
    items
}

/// Each node of the example fleet with its recorded probes, by node name: the directories under
/// [`EXAMPLE_DIR`]. Also the templates for [`large_fleet`].
pub fn example_nodes(root: &Path) -> Result<Vec<(String, Vec<Probed>)>, ExampleError> {
    let dir = root.join(EXAMPLE_DIR);
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|source| ExampleError::Read {
            path: dir.clone(),
            source,
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    nodes.sort();
    nodes
        .into_iter()
        .map(|path| {
            let node = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            Ok((node, read_records(&path)?))
        })
        .collect()
}
