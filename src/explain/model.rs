//! The fleet as the allocator reads it, built from the objects read (files or the cluster), as the
//! scheduler's `GatherPools` gathers it: a pool's newest generation only, pools with fewer slices
//! than `resourceSliceCount` incomplete, the devices other claims hold, the candidate nodes.
//! Devices are viewed in place ([`SliceDevice`] implements [`DeviceView`]). Pure.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use foldhash::fast::RandomState as Fast;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceTaint, ResourceClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::allocate::Features;
use super::{AttributeValue, DeviceId, DeviceView, NodeInfo, Placement};
use crate::fleet::objects::{Device, DeviceTaintRule, QualifiedName, ResourceSlice, Taint, Value};
use ustr::Ustr;

/// One device of a current slice, as [`DeviceView`] reads it.
pub(crate) struct SliceDevice<'a> {
    driver: Ustr,
    pool: Ustr,
    device: &'a Device,
    /// The attributes' names joined as `domain/name`, in the device's order (shared by every
    /// device of the same shape).
    names: Arc<[Ustr]>,
    capacities: Vec<(Ustr, Ustr)>,
    taints: Vec<DeviceTaint>,
    placement: Placement<'a>,
    /// The node the device is published for, when one is (`nodeName`).
    node: Option<Ustr>,
    /// The index of its slice, when that slice has `perDeviceNodeSelection`.
    per_device_slice: Option<usize>,
}

impl SliceDevice<'_> {
    /// The node named by the slice (or the device, with `perDeviceNodeSelection`).
    pub(crate) fn node(&self) -> Option<Ustr> {
        self.node
    }

    /// Which shape of attribute names the device has: equal for devices that list the same
    /// names in the same order (and the same driver, which qualifies them).
    pub(crate) fn shape_id(&self) -> (usize, Ustr) {
        (
            Arc::as_ptr(&self.names).cast::<Ustr>() as usize,
            self.driver,
        )
    }

    /// The driver, interned.
    pub(crate) fn driver_interned(&self) -> Ustr {
        self.driver
    }

    /// Where attribute `name` sits in this device's shape.
    pub(crate) fn position(&self, name: QualifiedName) -> Option<usize> {
        self.device.attributes.position(name)
    }

    /// The string (or version) at position `i` of this device's attributes.
    pub(crate) fn interned_at(&self, i: usize) -> Option<Ustr> {
        match self.device.attributes.value_at(i) {
            Some(Value::String(s) | Value::Version(s)) => Some(*s),
            _ => None,
        }
    }

    /// A string (or version) attribute by its fully qualified name.
    pub(crate) fn string(&self, qualified: &str) -> Option<&'static str> {
        let (domain, name) = qualified.split_once('/')?;
        self.string_in(domain, name)
    }

    /// A string (or version) attribute by its domain and name.
    pub(crate) fn string_in(&self, domain: &str, name: &str) -> Option<&'static str> {
        match self.device.attributes.get_in(domain, name) {
            Some(Value::String(s) | Value::Version(s)) => Some(s.as_str()),
            _ => None,
        }
    }
}

impl DeviceView for SliceDevice<'_> {
    fn driver(&self) -> &str {
        &self.driver
    }
    fn pool(&self) -> &str {
        &self.pool
    }
    fn name(&self) -> &str {
        &self.device.name
    }
    fn attributes(&self) -> Box<dyn Iterator<Item = (&str, AttributeValue<'_>)> + '_> {
        Box::new(
            self.names
                .iter()
                .zip(self.device.attributes.iter())
                .filter_map(|(joined, (_, value))| {
                    let value = match *value {
                        Value::Bool(b) => AttributeValue::Bool(b),
                        Value::Int(i) => AttributeValue::Int(i),
                        Value::String(s) => AttributeValue::String(s.as_str()),
                        Value::Version(v) => AttributeValue::Version(v.as_str()),
                        // No type the scheduler converts: not an attribute CEL sees, and the
                        // reason every selector fails on the device (unsupported_attribute).
                        Value::Invalid => return None,
                    };
                    Some((joined.as_str(), value))
                }),
        )
    }
    fn capacities(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(
            self.capacities
                .iter()
                .map(|(n, q)| (n.as_str(), q.as_str())),
        )
    }
    fn capacities_written(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(
            self.device
                .capacities_written()
                .map(|(n, q)| (n.as_str(), q.as_str())),
        )
    }
    fn allow_multiple_allocations(&self) -> Option<bool> {
        self.device.allow_multiple_allocations
    }
    fn taints(&self) -> &[DeviceTaint] {
        &self.taints
    }
    fn placement(&self) -> Placement<'_> {
        self.placement
    }
    fn unsupported_attribute(&self) -> Option<&str> {
        self.names
            .iter()
            .zip(self.device.attributes.iter())
            .find(|(_, (_, value))| matches!(value, Value::Invalid))
            .map(|(joined, _)| joined.as_str())
    }
    fn per_device_slice(&self) -> Option<usize> {
        self.per_device_slice
    }
    fn hash_cel_inputs<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        // Interned: equal text is one address, so addresses stand for the text and 80,000
        // devices' attributes are not hashed byte by byte.
        let at = |s: Ustr| s.as_str().as_ptr() as usize;
        at(self.driver).hash(h);
        for (name, (_, value)) in self.names.iter().zip(self.device.attributes.iter()) {
            at(*name).hash(h);
            match *value {
                Value::Bool(b) => (0u8, u64::from(b)).hash(h),
                Value::Int(i) => (1u8, i).hash(h),
                Value::String(s) => (2u8, at(s)).hash(h),
                Value::Version(v) => (3u8, at(v)).hash(h),
                Value::Invalid => 4u8.hash(h),
            }
        }
        0xffu8.hash(h);
        for (name, quantity) in &self.capacities {
            (at(*name), at(*quantity)).hash(h);
        }
        self.device.allow_multiple_allocations.hash(h);
    }
}

fn device_taint(t: &Taint) -> DeviceTaint {
    DeviceTaint {
        key: t.key.to_string(),
        value: t.value.map(|v| v.to_string()),
        effect: t.effect.to_string(),
        time_added: t
            .time_added
            .as_deref()
            .and_then(|s| s.parse().ok())
            .map(Time),
    }
}

/// The fleet the allocator works on.
pub(crate) struct FleetModel<'a> {
    pub devices: Vec<SliceDevice<'a>>,
    /// Devices allocated exclusively to a claim (any claim: the pod's own allocated claims hold
    /// their devices too), with the claims holding them.
    pub taken: HashMap<DeviceId, Vec<String>>,
    /// Pools (`driver`, `pool`) whose newest generation lacks slices ("being updated").
    pub incomplete_pools: HashSet<(String, String)>,
    /// Every node: from the Node objects when there are any, else the nodes the slices name.
    pub nodes: Vec<CandidateNode<'a>>,
    /// Whether the nodes came from Node objects (labels and taints known) or only from slices.
    pub nodes_known: bool,
    /// Current slices with `perDeviceNodeSelection` that the release's scheduler skips
    /// (DRAPartitionableDevices off), by name: their devices are not in [`Self::devices`].
    pub ignored_slices: Vec<String>,
}

/// A node the pod could run on, with what the scheduler's node filters read.
pub(crate) struct CandidateNode<'a> {
    pub info: NodeInfo,
    pub node: Option<&'a Node>,
}

/// Builds the model from `slices` (every driver's), the claims of the cluster, its nodes and
/// DeviceTaintRules, for the release and gates of `features`: only with DRAConsumableCapacity
/// is a result with a share ID a shared allocation; only with DRADeviceTaintRules do the rules
/// taint devices.
pub(crate) fn build<'a>(
    slices: &'a [ResourceSlice],
    claims: &[ResourceClaim],
    nodes: &'a [Node],
    taint_rules: &[DeviceTaintRule],
    features: Features,
    threads: usize,
) -> FleetModel<'a> {
    let consumable_capacity = features.consumable_capacity;
    // The slices that count, by index: the newest generation of each pool.
    let mut current: Vec<usize> = crate::fleet::inventory::is_current(slices)
        .into_iter()
        .enumerate()
        .filter_map(|(i, current)| current.then_some(i))
        .collect();
    // From 1.36 the scheduler tries a pool's slices by name (pools_incubating.go `buildPool`
    // `sortSlicesByName`; the allocator orders the pools); 1.34 and 1.35 keep the order they
    // were listed in, which is the one kept here.
    if features.release >= 36 {
        current.sort_by(|&a, &b| {
            let (a, b) = (&slices[a], &slices[b]);
            (
                a.spec.driver.as_str(),
                a.spec.pool.name.as_str(),
                &a.metadata.name,
            )
                .cmp(&(
                    b.spec.driver.as_str(),
                    b.spec.pool.name.as_str(),
                    &b.metadata.name,
                ))
        });
    }
    let mut incomplete_pools = HashSet::new();
    let mut counts: HashMap<(Ustr, Ustr), (i64, usize)> = HashMap::new();
    for &i in &current {
        let spec = &slices[i].spec;
        let entry = counts
            .entry((spec.driver, spec.pool.name))
            .or_insert((spec.pool.resource_slice_count, 0));
        entry.1 += 1;
    }
    for ((driver, pool), (expected, seen)) in &counts {
        if i64::try_from(*seen).unwrap_or(i64::MAX) < *expected {
            incomplete_pools.insert((driver.to_string(), pool.to_string()));
        }
    }
    // Two halves of the slices on two threads, when there are enough to pay for one.
    let (devices, ignored_slices) = if threads < 2 || current.len() < SLICES_FOR_THREADS {
        devices_of(slices, &current, taint_rules, features)
    } else {
        let (first, second) = current.split_at(current.len() / 2);
        std::thread::scope(|scope| {
            let second = scope.spawn(|| devices_of(slices, second, taint_rules, features));
            let (mut devices, mut ignored) = devices_of(slices, first, taint_rules, features);
            match second.join() {
                Ok((more, more_ignored)) => {
                    devices.extend(more);
                    ignored.extend(more_ignored);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
            (devices, ignored)
        })
    };
    let taken = taken(claims, consumable_capacity);
    let (nodes, nodes_known) = candidate_nodes(nodes, &devices);
    FleetModel {
        devices,
        taken,
        incomplete_pools,
        nodes,
        nodes_known,
        ignored_slices,
    }
}

/// Slices below this many are read on one thread.
const SLICES_FOR_THREADS: usize = 256;

/// The devices of the slices at `current`, in that order, and the slices skipped.
fn devices_of<'a>(
    slices: &'a [ResourceSlice],
    current: &[usize],
    taint_rules: &[DeviceTaintRule],
    features: Features,
) -> (Vec<SliceDevice<'a>>, Vec<String>) {
    // Joined names by shape and by capacity name: devices alike share them, and a device
    // mostly has the shape of the one before it.
    let mut shapes: HashMap<*const [QualifiedName], Arc<[Ustr]>, Fast> = HashMap::default();
    let mut last_shape: Option<(*const [QualifiedName], Arc<[Ustr]>)> = None;
    let mut capacity_names: HashMap<QualifiedName, Ustr, Fast> = HashMap::default();
    let mut devices =
        Vec::with_capacity(current.iter().map(|&i| slices[i].spec.devices.len()).sum());
    let mut ignored_slices = Vec::new();
    for &i in current {
        let slice = &slices[i];
        let spec = &slice.spec;
        // pools_incubating.go `GatherPools`: without DRAPartitionableDevices (1.34, 1.35 by
        // default) a slice that sets perDeviceNodeSelection is skipped, none of its devices is
        // ever allocated. (Its pool still counts its slices: checkSlicesInPool reads them all.)
        if spec.per_device_node_selection && !features.partitionable_devices {
            ignored_slices.push(slice.metadata.name.clone());
            continue;
        }
        for device in &spec.devices {
            let shape = Arc::as_ptr(&device.attributes.shape());
            let names = match &last_shape {
                Some((last, names)) if std::ptr::eq(*last, shape) => names.clone(),
                _ => {
                    let names = shapes
                        .entry(shape)
                        .or_insert_with(|| {
                            let shape = device.attributes.shape();
                            shape.iter().map(|n| Ustr::from(&n.to_string())).collect()
                        })
                        .clone();
                    last_shape = Some((shape, names.clone()));
                    names
                }
            };
            let (placement, node) = if spec.per_device_node_selection {
                match (
                    device.node_name(),
                    device.node_selector(),
                    device.all_nodes(),
                ) {
                    (Some(n), _, _) => (Placement::Node(n.as_str()), Some(n)),
                    (None, Some(s), _) => (Placement::Selector(s), None),
                    _ => (Placement::AllNodes, None),
                }
            } else {
                match (spec.node_name, spec.node_selector.as_ref(), spec.all_nodes) {
                    (Some(n), _, _) => (Placement::Node(n.as_str()), Some(n)),
                    (None, Some(s), _) => (Placement::Selector(s), None),
                    _ => (Placement::AllNodes, None),
                }
            };
            // The slice's taints, then each rule's that selects the device (the scheduler's
            // slice tracker, resourceslice/tracker tracker.go `applyPatches`).
            let rules = taint_rules
                .iter()
                .filter(|_| features.device_taint_rules)
                .filter(|r| {
                    r.spec.device_selector.as_ref().is_some_and(|s| {
                        s.driver
                            .as_deref()
                            .is_none_or(|d| d == spec.driver.as_str())
                            && s.pool
                                .as_deref()
                                .is_none_or(|p| p == spec.pool.name.as_str())
                            && s.device
                                .as_deref()
                                .is_none_or(|n| n == device.name.as_str())
                    })
                })
                .map(|r| &r.spec.taint);
            devices.push(SliceDevice {
                driver: spec.driver,
                pool: spec.pool.name,
                device,
                names,
                capacities: device
                    .capacities()
                    .iter()
                    .map(|(n, q)| {
                        let joined = capacity_names
                            .entry(*n)
                            .or_insert_with(|| Ustr::from(&n.to_string()));
                        (*joined, *q)
                    })
                    .collect(),
                taints: device
                    .taints()
                    .iter()
                    .chain(rules)
                    .map(device_taint)
                    .collect(),
                placement,
                node,
                per_device_slice: spec.per_device_node_selection.then_some(i),
            });
        }
    }
    (devices, ignored_slices)
}

/// The scheduler's allocated devices (k/k dynamicresources allocateddevices.go
/// `foreachAllocatedDevice`): every allocated claim's, the pod's own included. The claims `why`
/// explains are pending, without an allocation, so nothing of theirs is skipped here.
fn taken(claims: &[ResourceClaim], consumable_capacity: bool) -> HashMap<DeviceId, Vec<String>> {
    let mut taken: HashMap<DeviceId, Vec<String>> = HashMap::new();
    for claim in claims {
        let name = claim_name(claim);
        let results = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default();
        for result in results {
            // Admin access does not hold the device. A share ID marks a shared allocation
            // (allowMultipleAllocations) only with the DRAConsumableCapacity gate; without it
            // the device is held like any other.
            if result.admin_access == Some(true)
                || (consumable_capacity && result.share_id.is_some())
            {
                continue;
            }
            taken
                .entry(DeviceId {
                    driver: result.driver.clone(),
                    pool: result.pool.clone(),
                    device: result.device.clone(),
                })
                .or_default()
                .push(name.clone());
        }
    }
    taken
}

/// The candidate nodes, in natural order: the Node objects, or without them the nodes the
/// devices name (then `false`: the nodes' own filters are not known).
fn candidate_nodes<'a>(
    nodes: &'a [Node],
    devices: &[SliceDevice<'a>],
) -> (Vec<CandidateNode<'a>>, bool) {
    let (nodes, nodes_known) = if nodes.is_empty() {
        let mut names: Vec<Ustr> = devices.iter().filter_map(|d| d.node).collect();
        names.sort();
        names.dedup();
        let nodes = names
            .into_iter()
            .map(|name| CandidateNode {
                info: NodeInfo {
                    name: name.to_string(),
                    labels: BTreeMap::new(),
                },
                node: None,
            })
            .collect();
        (nodes, false)
    } else {
        let nodes = nodes
            .iter()
            .map(|node| CandidateNode {
                info: NodeInfo {
                    name: node.metadata.name.clone().unwrap_or_default(),
                    labels: node.metadata.labels.clone().unwrap_or_default(),
                },
                node: Some(node),
            })
            .collect();
        (nodes, true)
    };
    // In natural order (edge-1-2 before edge-1-10), as caps lists them; a file's order and the
    // API server's (by name) then give the same explanation.
    let mut nodes: Vec<CandidateNode<'a>> = nodes;
    nodes.sort_by(|a, b| crate::fleet::inventory::natural_cmp(&a.info.name, &b.info.name));
    (nodes, nodes_known)
}

/// `namespace/name` of a claim, as the scheduler's messages print it.
pub(crate) fn claim_name(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fleet::objects::{Kinds, Objects};

    /// The objects of a multi-document YAML fixture, every one read (no note), for the tests
    /// of `explain`.
    pub(crate) fn objects(text: &str) -> Objects {
        let mut objects = Objects::wanting(Kinds::ALL);
        for document in serde_yaml::Deserializer::from_str(text) {
            let value: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
            if !value.is_null() {
                objects.add_value(&value);
            }
        }
        assert!(objects.notes.is_empty(), "{:?}", objects.notes);
        objects
    }

    const SLICES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-liken}
spec:
  driver: liken.sh
  nodeName: n1
  pool: {name: n1, generation: 2, resourceSliceCount: 1}
  devices:
  - name: renderd128
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-liken-old}
spec:
  driver: liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: stale
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: shared}
spec:
  driver: media.liken.sh
  allNodes: true
  pool: {name: shared, generation: 1, resourceSliceCount: 2}
  devices:
  - name: gpu-0
    taints: [{key: broken, effect: NoSchedule}]
    capacity: {memory: {value: 16Gi}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: other, namespace: media}
spec: {}
status:
  allocation:
    devices:
      results:
      - {request: r, driver: liken.sh, pool: n1, device: renderd128}
      - {request: r, driver: media.liken.sh, pool: shared, device: gpu-0, shareID: 7b8c0c8e-6b3a-4a49-9d5e-2f1d4c0e8a11}
"#;

    #[test]
    fn devices_alike_share_a_cel_class_across_slices() {
        // One slice per node, as the agent publishes: devices that CEL sees alike must share
        // a class (their selectors run once), whatever slice they come from.
        let slice = |node: &str, devices: &str| {
            format!(
                "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}}}\nspec:\n  driver: liken.sh\n  nodeName: {node}\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}---\n"
            )
        };
        let gpu = |name: &str, attributes: &str, capacity: &str| {
            format!(
                "  - name: {name}\n    attributes: {{{attributes}}}\n    capacity: {{{capacity}}}\n"
            )
        };
        let a = gpu(
            "a",
            "model: {string: A770}, cores: {int: 32}",
            "memory: {value: 16Gi}",
        );
        // n1 and n3 alike; another name with the same value between them (the reader shares
        // a shape only with the device just before), another value, another capacity.
        let text = [
            slice("n1", &a),
            slice(
                "n2",
                &gpu(
                    "a",
                    "model: {string: A770}, units: {int: 32}",
                    "memory: {value: 16Gi}",
                ),
            ),
            slice("n3", &a),
            slice(
                "n4",
                &gpu(
                    "a",
                    "model: {string: A380}, cores: {int: 32}",
                    "memory: {value: 16Gi}",
                ),
            ),
            slice(
                "n5",
                &gpu(
                    "a",
                    "model: {string: A770}, cores: {int: 32}",
                    "memory: {value: 8Gi}",
                ),
            ),
        ]
        .concat();
        let objects = objects(&text);
        let model = build(
            &objects.slices,
            &objects.claims,
            &objects.nodes,
            &objects.taint_rules,
            Features::for_minor(36),
            2,
        );
        let (taken, incomplete) = (HashMap::new(), HashSet::new());
        let classes: BTreeMap<String, k8s_openapi::api::resource::v1::DeviceClassSpec> =
            BTreeMap::new();
        let allocator = super::super::allocate::Allocator::new(
            super::super::allocate::Fleet {
                devices: &model.devices,
                taken: &taken,
                incomplete_pools: &incomplete,
            },
            &classes,
            Features::for_minor(36),
        );
        let nodes: Vec<String> = model
            .devices
            .iter()
            .map(|d| d.node().unwrap().to_string())
            .collect();
        assert_eq!(nodes, ["n1", "n2", "n3", "n4", "n5"]);
        let class: Vec<usize> = (0..5).map(|d| allocator.cel_class(d)).collect();
        assert_eq!(class[0], class[2]);
        let distinct: HashSet<usize> = [0, 1, 3, 4].iter().map(|&d| class[d]).collect();
        assert_eq!(distinct.len(), 4, "{class:?}");
    }

    #[test]
    fn the_model_follows_the_scheduler_s_gathering() {
        let objects = objects(SLICES);
        let model = build(
            &objects.slices,
            &objects.claims,
            &objects.nodes,
            &objects.taint_rules,
            Features::for_minor(36),
            2,
        );
        let names: Vec<String> = model.devices.iter().map(|d| d.id().to_string()).collect();
        // The older generation of a pool does not count.
        assert_eq!(
            names,
            ["liken.sh/n1/renderd128", "media.liken.sh/shared/gpu-0"]
        );
        let render = &model.devices[0];
        // Unqualified names belong to the slice's driver; qualified ones keep their domain.
        assert_eq!(
            render.attribute("liken.sh", "renderNode"),
            Some(AttributeValue::String("/dev/dri/renderD128"))
        );
        assert_eq!(
            render.attribute("resource.kubernetes.io", "pciBusID"),
            Some(AttributeValue::String("0000:03:00.0"))
        );
        assert_eq!(render.node().as_deref(), Some("n1"));
        let shared = &model.devices[1];
        assert!(matches!(shared.placement(), Placement::AllNodes));
        assert_eq!(shared.taints()[0].effect, "NoSchedule");
        assert_eq!(
            shared.capacities().collect::<Vec<_>>(),
            [("media.liken.sh/memory", "16Gi")]
        );
        // One slice of two: the pool is being updated.
        assert!(
            model
                .incomplete_pools
                .contains(&("media.liken.sh".into(), "shared".into()))
        );
        // An exclusive allocation takes the device; a shared one (share ID) does not.
        assert_eq!(model.taken.len(), 1);
        assert_eq!(model.taken[&render.id()], vec!["media/other".to_string()]);
        // Without Node objects, the nodes are the ones the slices name.
        assert!(!model.nodes_known);
        assert_eq!(model.nodes.len(), 1);
        assert_eq!(model.nodes[0].info.name, "n1");
        // Without the DRAConsumableCapacity gate (1.34, 1.35) a share ID means nothing: the
        // device is held like any other (allocateddevices.go `foreachAllocatedDevice`).
        let model = build(
            &objects.slices,
            &objects.claims,
            &objects.nodes,
            &objects.taint_rules,
            Features::for_minor(35),
            2,
        );
        assert_eq!(model.taken.len(), 2);
        assert_eq!(model.taken[&shared_id()], vec!["media/other".to_string()]);
    }

    #[test]
    fn from_1_36_a_pool_s_slices_are_tried_by_name() {
        let objects = objects(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-b}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu-b}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-a}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu-a}]
"#,
        );
        let names = |minor| {
            build(
                &objects.slices,
                &objects.claims,
                &objects.nodes,
                &objects.taint_rules,
                Features::for_minor(minor),
                2,
            )
            .devices
            .iter()
            .map(|d| d.name().to_owned())
            .collect::<Vec<_>>()
        };
        // pools_incubating.go `sortSlicesByName` (1.36); before it, the order listed.
        assert_eq!(names(36), ["gpu-a", "gpu-b"]);
        assert_eq!(names(35), ["gpu-b", "gpu-a"]);
    }

    #[test]
    fn an_attribute_of_no_known_type_fails_every_selector() {
        // A list value (DRAListTypeAttributes off): dra cel/compile.go getAttributeValue says
        // "unsupported attribute value", and DeviceMatches fails before any selector runs.
        let objects = objects(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu0
    attributes:
      codecs: {stringValues: [h264, hevc]}
      scale10bit: {bool: true}
"#,
        );
        let model = build(
            &objects.slices,
            &objects.claims,
            &objects.nodes,
            &objects.taint_rules,
            Features::default(),
            2,
        );
        let device = &model.devices[0];
        assert_eq!(device.attributes().count(), 1);
        assert_eq!(
            device.unsupported_attribute(),
            Some("media.liken.sh/codecs")
        );
        let value = crate::explain::cel::DeviceValue::new(device, 36);
        assert_eq!(
            value.err().map(|e| e.to_string()).as_deref(),
            Some("attribute media.liken.sh/codecs: unsupported attribute value")
        );
    }

    fn shared_id() -> DeviceId {
        DeviceId {
            driver: "media.liken.sh".into(),
            pool: "shared".into(),
            device: "gpu-0".into(),
        }
    }

    #[test]
    fn device_taint_rules_taint_the_devices_they_select_from_1_37() {
        let objects = objects(&format!(
            "{SLICES}---\n{}",
            r#"apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: by-device}
spec:
  deviceSelector: {driver: liken.sh, device: renderd128}
  taint: {key: maintenance, effect: NoExecute}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: every-device}
spec:
  deviceSelector: {}
  taint: {key: all, effect: NoSchedule}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: no-selector}
spec:
  taint: {key: none, effect: NoSchedule}
---
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: other-pool}
spec:
  deviceSelector: {pool: elsewhere}
  taint: {key: elsewhere, effect: NoSchedule}
"#
        ));
        assert_eq!(objects.taint_rules.len(), 4, "{:?}", objects.notes);
        let taints = |minor| {
            let model = build(
                &objects.slices,
                &objects.claims,
                &objects.nodes,
                &objects.taint_rules,
                Features::for_minor(minor),
                2,
            );
            model
                .devices
                .iter()
                .map(|d| d.taints().iter().map(|t| t.key.clone()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        // The slice's own taint first, then the rules' in their order.
        assert_eq!(
            taints(37),
            [vec!["maintenance", "all"], vec!["broken", "all"]]
        );
        // 1.36's scheduler does not apply them (DRADeviceTaintRules beta, off).
        assert_eq!(taints(36), [vec![], vec!["broken"]] as [Vec<&str>; 2]);
    }
}
