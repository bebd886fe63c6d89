//! The differential test of verdicts: seeded random fleets read by `why` (in process, as `why POD
//! -f - -o json --kubernetes-version R`) and by the oracle of release R; every node's verdict must
//! agree (allocatable exactly where the real allocator allocates, an error where it fails), and the
//! devices `why` picks must be ones the allocator accepts there ([`picks_are_valid`]). The fleets
//! mix what the allocator treats apart: other drivers, per-device node selection, updating pools,
//! taints, shareable devices, every allocation mode and constraint, capacity requests, claims
//! already allocated with and without a share ID, and (one in 200) nodes enough for threads. A
//! node's render devices are liken's or one vendor's, shaped as its fixture
//! (tests/fixtures/render-drivers/): whole GPUs, MIG and VFIO devices and partitions at their
//! parent's address, Intel's VFs at their own, now and then a release without `type`; claims ask
//! for them through the table's whole-GPU classes with the product's pciBusID constraint.

use std::time::Instant;

use media_operator::cli::{self, Io, Parsed};
use media_operator::render_drivers::{self, RenderDriver};
use serde_json::{Value, json};

use crate::support::oracle::{Oracle, RELEASES, Verdict};

/// Fleets per release; `ORACLE_FLEETS` changes it (a failure prints its seed).
const FLEETS: u64 = 2000;

/// One fleet in this many has many nodes (the others' random draws are unchanged).
const MANY_NODES_EVERY: u64 = 200;

const NS: &str = "media";
const PCI: &str = "resource.kubernetes.io/pciBusID";

/// The classes every fleet has: name and selector.
const CLASSES: [(&str, &str); 8] = [
    ("render", r#"device.driver == "liken.sh""#),
    ("media", r#"device.driver == "media.liken.sh""#),
    (
        "hevc10",
        r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].decodeHEVCMain10 && device.attributes["media.liken.sh"].scale10bit"#,
    ),
    (
        "big",
        r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].vram >= 8"#,
    ),
    (
        "newer",
        r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].driverVersion.isGreaterThan(semver("23.0.0"))"#,
    ),
    (
        "arc",
        r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].model == "arc""#,
    ),
    ("other", r#"device.driver == "gpu.example.com""#),
    ("any", "true"),
];

/// The whole-GPU class of each render driver (`render-<key>`), as `kubectl media class` writes it.
fn render_classes() -> impl Iterator<Item = (String, String)> {
    render_drivers::ALL
        .iter()
        .map(|d| (format!("render-{}", d.key), d.whole_gpu_cel()))
}

/// Request selectors: safe on every device, but for the last, which fails at run time on a
/// device without `decodeHEVCMain10` (the scheduler fails the attempt).
const SELECTORS: [&str; 5] = [
    r#"device.attributes["resource.kubernetes.io"].?pciBusID.orValue("") != "0000:01:00.0""#,
    r#"device.attributes[device.driver].?vram.orValue(0) >= 16"#,
    r#"has(device.attributes["media.liken.sh"].scale10bit) || device.driver != "media.liken.sh""#,
    r#"!device.attributes[device.driver].?model.orValue("").startsWith("a")"#,
    r#"device.attributes["media.liken.sh"].decodeHEVCMain10"#,
];

/// matchAttribute over each attribute type.
const MATCHED: [&str; 5] = [
    PCI,
    "media.liken.sh/scale10bit",
    "media.liken.sh/vram",
    "media.liken.sh/model",
    "media.liken.sh/driverVersion",
];

/// A vendor's device: name, pciBusID (none before the release that publishes it), and string
/// attributes of the driver's domain.
type VendorDevice = (String, Option<String>, Vec<(&'static str, &'static str)>);

struct Gen {
    rng: fastrand::Rng,
    objects: Vec<Value>,
    /// Every published device: (driver, pool, name, node it is usable from or None for many,
    /// shareable).
    devices: Vec<(String, String, String, Option<String>, bool)>,
    /// 80 to 112 nodes rather than 1 to 3: enough for `why` to visit them on several threads.
    many_nodes: bool,
    /// The render driver of each node, in node order.
    render: Vec<&'static RenderDriver>,
}

impl Gen {
    fn chance(&mut self, one_in: u32) -> bool {
        self.rng.u32(0..one_in) == 0
    }

    fn taints(&mut self) -> Value {
        match self.rng.u8(0..10) {
            0 => json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            1 => json!([{"key": "k", "value": "w", "effect": "NoExecute"}]),
            2 => json!([{"key": "other", "effect": "NoSchedule"}]),
            _ => json!([]),
        }
    }

    /// A device of `driver` with the attributes of a GPU at `gpu`'s PCI address.
    fn device(&mut self, driver: &str, name: &str, gpu: u8, shareable: bool) -> Value {
        self.device_at(driver, name, Some(&format!("0000:0{gpu}:00.0")), shareable)
    }

    /// A device of `driver` with the attributes of a GPU at `address` (a vendor's without it:
    /// a release before pciBusID).
    fn device_at(
        &mut self,
        driver: &str,
        name: &str,
        address: Option<&str>,
        shareable: bool,
    ) -> Value {
        let mut attributes = serde_json::Map::new();
        if let Some(address) = address
            && (driver != "gpu.example.com" || self.chance(2))
        {
            attributes.insert(PCI.into(), json!({"string": address}));
        }
        if driver == "media.liken.sh" {
            attributes.insert("decodeHEVCMain10".into(), json!({"bool": self.rng.bool()}));
            attributes.insert("scale10bit".into(), json!({"bool": self.rng.bool()}));
            attributes.insert(
                "vram".into(),
                json!({"int": ([4, 8, 16])[self.rng.usize(0..3)]}),
            );
            attributes.insert(
                "model".into(),
                json!({"string": (["arc", "tgl", "amd"])[self.rng.usize(0..3)]}),
            );
            attributes.insert(
                "driverVersion".into(),
                json!({"version": (["22.3.1", "24.2.4", "26.1.2"])[self.rng.usize(0..3)]}),
            );
        }
        if driver == "gpu.example.com" {
            attributes.insert(
                "vram".into(),
                json!({"int": ([8, 16])[self.rng.usize(0..2)]}),
            );
        }
        let mut device = json!({"name": name, "attributes": attributes, "taints": self.taints()});
        if shareable {
            device["allowMultipleAllocations"] = json!(true);
        } else if self.chance(3) {
            // Capacities on exclusive devices only: a shareable device's consumed capacity is
            // what why documents it does not model. The name as written matters.
            let name = if self.chance(4) {
                format!("{driver}/memory")
            } else {
                "memory".to_owned()
            };
            let value = (["8Gi", "16Gi"])[self.rng.usize(0..2)];
            device["capacity"] = json!({name: {"value": value}});
        }
        device
    }

    fn slice(
        &mut self,
        name: &str,
        driver: &str,
        pool: &str,
        placement: Value,
        devices: Vec<Value>,
    ) {
        let (generation, count) = match self.rng.u8(0..14) {
            // Being updated: fewer slices than the count says.
            0 => (1, 2),
            _ => (1, 1),
        };
        let mut spec = json!({"driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": devices});
        for (k, v) in placement.as_object().unwrap() {
            spec[k] = v.clone();
        }
        // An older generation of the pool, which the allocator ignores.
        if self.chance(14) {
            let mut old = spec.clone();
            old["pool"]["generation"] = json!(0);
            self.objects.push(
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": format!("{name}-old")}, "spec": old}),
            );
        }
        self.objects.push(
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name}, "spec": spec}),
        );
    }

    /// The devices `driver` (a vendor's) publishes for GPU `gpu` of a node, as its fixture shapes
    /// them: (name, pciBusID, string attributes of its own domain).
    fn vendor_gpu(&mut self, driver: &RenderDriver, gpu: u8) -> Vec<VendorDevice> {
        let parent = Some(format!("0000:0{gpu}:00.0"));
        let mut devices = Vec::new();
        let split = self.chance(3);
        match driver.key {
            // A MIG GPU has no `gpu` device (static MIG); a VFIO device sits at either's address.
            "nvidia" => {
                if split {
                    for m in 0..2 {
                        devices.push((
                            format!("gpu-{gpu}-mig-{m}"),
                            parent.clone(),
                            vec![("type", "mig")],
                        ));
                    }
                } else {
                    devices.push((format!("gpu-{gpu}"), parent.clone(), vec![("type", "gpu")]));
                }
                if self.chance(3) {
                    devices.push((
                        format!("gpu-vfio-{gpu}"),
                        parent.clone(),
                        vec![("type", "vfio")],
                    ));
                }
            }
            // A partitioned GPU is only its partitions.
            "amd" => {
                let (n, kind) = if split {
                    (2, "amdgpu-partition")
                } else {
                    (1, "amdgpu")
                };
                for p in 0..n {
                    devices.push((
                        format!("gpu-{gpu}-{}", 128 + p),
                        parent.clone(),
                        vec![("type", kind)],
                    ));
                }
            }
            // A whole GPU bound to i915, xe or vfio-pci; a VF at an address of its own.
            "intel" => {
                let bound = (["i915", "xe", "vfio-pci"])[self.rng.usize(0..3)];
                devices.push((
                    format!("0000-0{gpu}-00-0"),
                    parent,
                    vec![("type", "gpu"), ("driver", bound)],
                ));
                if split {
                    let vf = Some(format!("0000:0{gpu}:00.1"));
                    devices.push((
                        format!("0000-0{gpu}-00-1"),
                        vf,
                        vec![("type", "vf"), ("driver", "i915")],
                    ));
                }
            }
            other => unreachable!("render driver {other} is no vendor's"),
        }
        // A release before `type` (and sometimes before pciBusID): the classes' `.?` reads it.
        if self.chance(8) {
            for (_, address, attributes) in &mut devices {
                attributes.retain(|(name, _)| *name != "type");
                if self.rng.bool() {
                    *address = None;
                }
            }
        }
        devices
    }

    /// Node `node`'s slices: `gpus` GPUs' render devices of a random render driver, and their
    /// media devices (at an Intel VF's address too, now and then).
    fn node_slices(&mut self, node: &str, gpus: u8) {
        // liken on half the nodes, as the rest of the fleet's claims expect; a vendor on the rest.
        let render = match self.rng.bool() {
            true => &render_drivers::LIKEN,
            false => &render_drivers::ALL[self.rng.usize(1..render_drivers::ALL.len())],
        };
        self.render.push(render);
        let mut devices = Vec::new();
        let mut media: Vec<(String, String)> = Vec::new();
        for gpu in 0..gpus {
            media.push((format!("gpu{gpu}"), format!("0000:0{gpu}:00.0")));
            if render.name == render_drivers::LIKEN.name {
                let name = format!("renderD{}", 128 + gpu);
                let shareable = self.chance(3);
                devices.push(self.device(render.name, &name, gpu, shareable));
                self.devices.push((
                    render.name.into(),
                    node.into(),
                    name,
                    Some(node.into()),
                    shareable,
                ));
                continue;
            }
            for (name, address, strings) in self.vendor_gpu(render, gpu) {
                let mut device = self.device_at(render.name, &name, address.as_deref(), false);
                for (attribute, value) in strings {
                    device["attributes"][attribute] = json!({"string": value});
                }
                if let Some(vf) = address.filter(|a| a.ends_with(".1"))
                    && self.rng.bool()
                {
                    media.push((format!("gpu{gpu}vf"), vf));
                }
                devices.push(device);
                self.devices.push((
                    render.name.into(),
                    node.into(),
                    name,
                    Some(node.into()),
                    false,
                ));
            }
        }
        self.slice(
            &format!("{node}-{}", render.name),
            render.name,
            node,
            json!({"nodeName": node}),
            devices,
        );
        let driver = "media.liken.sh";
        let devices = media
            .into_iter()
            .map(|(name, address)| {
                let device = self.device_at(driver, &name, Some(&address), false);
                self.devices
                    .push((driver.into(), node.into(), name, Some(node.into()), false));
                device
            })
            .collect();
        self.slice(
            &format!("{node}-{driver}"),
            driver,
            node,
            json!({"nodeName": node}),
            devices,
        );
    }

    fn fleet(&mut self) {
        let nodes = self.rng.usize(1..=3);
        let nodes = if self.many_nodes {
            64 + 16 * nodes
        } else {
            nodes
        };
        for n in 1..=nodes {
            let node = format!("n{n}");
            let zone = if n == 1 { "a" } else { "b" };
            self.objects.push(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node, "zone": zone}}, "spec": {}}));
            let gpus = self.rng.u8(1..=2);
            self.node_slices(&node, gpus);
        }
        // Another driver's devices, for every node or by node selector.
        if self.chance(2) {
            let all = self.rng.bool();
            let placement = if all {
                json!({"allNodes": true})
            } else {
                json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}})
            };
            let devices = (0..self.rng.u8(1..=2))
                .map(|i| {
                    let shareable = self.chance(3);
                    let name = format!("x{i}");
                    self.devices.push((
                        "gpu.example.com".into(),
                        "shared".into(),
                        name.clone(),
                        None,
                        shareable,
                    ));
                    self.device("gpu.example.com", &name, i, shareable)
                })
                .collect();
            self.slice("shared", "gpu.example.com", "shared", placement, devices);
        }
        // A slice whose devices say their own node (DRAPartitionableDevices).
        if self.chance(5) {
            let devices = (0..2)
                .map(|i| {
                    let name = format!("pd{i}");
                    let mut device = self.device("gpu.example.com", &name, i, false);
                    if self.chance(3) {
                        device["allNodes"] = json!(true);
                    } else {
                        device["nodeName"] = json!(format!("n{}", self.rng.usize(1..=nodes)));
                    }
                    self.devices
                        .push(("gpu.example.com".into(), "pd".into(), name, None, false));
                    device
                })
                .collect();
            self.slice(
                "pd",
                "gpu.example.com",
                "pd",
                json!({"perDeviceNodeSelection": true}),
                devices,
            );
        }
        self.taint_rules();
        let classes = CLASSES.map(|(n, e)| (n.to_owned(), e.to_owned()));
        for (name, expression) in classes.into_iter().chain(render_classes()) {
            self.objects.push(
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]}}),
            );
        }
    }

    /// DeviceTaintRules (resource.k8s.io/v1, applied from 1.37): by driver, pool or device,
    /// their combinations, the empty selector (every device) and none (no device).
    fn taint_rules(&mut self) {
        for i in 0..self.rng.usize(0..=2) {
            if self.devices.is_empty() || !self.chance(2) {
                return;
            }
            let (driver, pool, device, _, _) =
                self.devices[self.rng.usize(0..self.devices.len())].clone();
            let selector = match self.rng.u8(0..7) {
                0 => json!({"driver": driver}),
                1 => json!({"driver": driver, "pool": pool}),
                2 => json!({"driver": driver, "pool": pool, "device": device}),
                3 => json!({"device": device}),
                4 => json!({"pool": pool, "device": device}),
                5 => json!({}),
                _ => Value::Null,
            };
            let taint = match self.rng.u8(0..4) {
                0 => json!({"key": "k", "value": "v", "effect": "NoSchedule"}),
                1 => json!({"key": "rule", "effect": "NoExecute"}),
                2 => json!({"key": "rule", "effect": "None"}),
                _ => json!({"key": "other", "effect": "NoSchedule"}),
            };
            let mut spec = json!({"taint": taint});
            if !selector.is_null() {
                spec["deviceSelector"] = selector;
            }
            self.objects.push(
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                "metadata": {"name": format!("rule-{i}")}, "spec": spec}),
            );
        }
    }

    fn exact(&mut self) -> Value {
        let mut r = json!({"deviceClassName": CLASSES[self.rng.usize(0..CLASSES.len())].0});
        if self.chance(6) {
            r["allocationMode"] = json!("All");
        } else if self.chance(4) {
            r["count"] = json!(2);
        }
        if self.chance(4) {
            // The last selector fails at run time: rarer.
            let i = if self.chance(4) {
                4
            } else {
                self.rng.usize(0..4)
            };
            r["selectors"] = json!([{"cel": {"expression": SELECTORS[i]}}]);
        }
        match self.rng.u8(0..8) {
            0 => r["tolerations"] = json!([{"operator": "Exists"}]),
            1 => r["tolerations"] = json!([{"key": "k", "value": "v"}]),
            2 => {
                r["tolerations"] =
                    json!([{"key": "k", "operator": "Exists", "effect": "NoExecute"}])
            }
            _ => {}
        }
        if self.chance(15) {
            r["adminAccess"] = json!(true);
        }
        if self.chance(6) {
            // Capacity requests (DRAConsumableCapacity): 1.34 refuses them, 1.35 ignores them.
            let name =
                (["memory", "memory", "media.liken.sh/memory", "slots"])[self.rng.usize(0..4)];
            let amount = (["4Gi", "8Gi", "12Gi", "16Gi"])[self.rng.usize(0..4)];
            r["capacity"] = json!({"requests": {name: amount}});
        }
        r
    }

    /// The claim `kubectl media class NAME --claim --render-driver D` writes: a render driver's
    /// whole GPU and a media device on one GPU (classes.rs: requests `gpu` and `decodes`,
    /// `matchAttribute` on pciBusID over both).
    fn paired_claim_spec(&mut self) -> Value {
        // Mostly the driver of one of the fleet's nodes, so that the claim can land somewhere.
        let render = match self.chance(4) {
            true => &render_drivers::ALL[self.rng.usize(0..render_drivers::ALL.len())],
            false => self.render[self.rng.usize(0..self.render.len())],
        };
        let media = (["hevc10", "media", "media"])[self.rng.usize(0..3)];
        json!({"devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": format!("render-{}", render.key)}},
                {"name": "decodes", "exactly": {"deviceClassName": media}},
            ],
            "constraints": [{"matchAttribute": PCI, "requests": ["gpu", "decodes"]}],
        }})
    }

    fn claim_spec(&mut self) -> Value {
        if self.chance(4) {
            return self.paired_claim_spec();
        }
        let mut requests = Vec::new();
        let mut names = Vec::new();
        for i in 0..self.rng.usize(1..=3) {
            let name = format!("r{i}");
            let request = if self.chance(5) {
                let subs: Vec<Value> = (0..2)
                    .map(|s| {
                        let mut sub = self.exact();
                        sub["name"] = json!(format!("s{s}"));
                        sub
                    })
                    .collect();
                json!({"name": name, "firstAvailable": subs})
            } else {
                json!({"name": name, "exactly": self.exact()})
            };
            requests.push(request);
            names.push(name);
        }
        let mut devices = json!({"requests": requests});
        if self.chance(2) {
            let attribute = MATCHED[self.rng.usize(0..MATCHED.len())];
            let mut constraint = if self.chance(3) {
                // Refused (an attempt error) before DRAConsumableCapacity, 1.36.
                json!({"distinctAttribute": attribute})
            } else {
                json!({"matchAttribute": attribute})
            };
            if names.len() > 1 && self.rng.bool() {
                constraint["requests"] = json!(names[..2]);
            }
            devices["constraints"] = json!([constraint]);
        }
        json!({"devices": devices})
    }

    /// Claims of other pods, allocated: exclusive, or with a share ID on a shareable device,
    /// or with admin access.
    fn held(&mut self) {
        for i in 0..self.rng.usize(0..=3) {
            if self.devices.is_empty() {
                return;
            }
            let (driver, pool, device, _, shareable) =
                self.devices[self.rng.usize(0..self.devices.len())].clone();
            let mut result =
                json!({"request": "r", "driver": driver, "pool": pool, "device": device});
            if shareable && self.rng.bool() {
                result["shareID"] = json!(format!("aaaaaaaa-aaaa-aaaa-aaaa-00000000000{i}"));
            }
            if self.chance(6) {
                result["adminAccess"] = json!(true);
            }
            self.objects.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": format!("held-{i}"), "namespace": NS, "uid": format!("held-uid-{i}")},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any"}}]}},
                "status": {"allocation": {"devices": {"results": [result]}},
                           "reservedFor": [{"resource": "pods", "name": format!("other-{i}"), "uid": format!("other-uid-{i}")}]}}));
        }
    }

    fn pod(&mut self) {
        let claims = self.rng.usize(1..=2);
        let mut entries = Vec::new();
        for c in 0..claims {
            let name = format!("c{c}");
            let spec = self.claim_spec();
            self.objects.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NS, "uid": format!("claim-uid-{c}")}, "spec": spec}));
            entries.push(json!({"name": name, "resourceClaimName": name}));
        }
        self.objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": NS, "uid": "pod-uid"},
            "spec": {"resourceClaims": entries, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"}}));
    }
}

pub(crate) fn generate(seed: u64) -> Vec<Value> {
    let mut g = Gen {
        rng: fastrand::Rng::with_seed(seed),
        objects: Vec::new(),
        devices: Vec::new(),
        many_nodes: seed % MANY_NODES_EVERY == MANY_NODES_EVERY - 1,
        render: Vec::new(),
    };
    g.fleet();
    g.held();
    g.pod();
    g.objects
}

/// What `why` says of each node, as the oracle's verdict kinds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Allocatable,
    Unallocatable,
    Error,
    /// why could not decide ("undecided"): a disagreement unless documented.
    Undecided,
}

/// `why p -f - -o json --kubernetes-version R` in process on `objects`: per node its kind, and
/// the record's notes.
pub(super) fn why(objects: &[Value], release: &str) -> (Vec<(String, Kind)>, Value) {
    let list =
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": objects})).unwrap();
    let args = [
        "kubectl-media",
        "why",
        "p",
        "-n",
        NS,
        "-f",
        "-",
        "-o",
        "json",
        "--kubernetes-version",
        release,
    ];
    let Ok(Parsed::Run(command)) = cli::parse(args) else {
        panic!("the why command line parses")
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let result = cli::run(
        &command,
        &mut Io {
            stdin: &mut list.as_slice(),
            stdout: &mut stdout,
            stderr: &mut stderr,
            ending: false,
        },
    );
    if let Err(e) = &result {
        assert!(e.is_silent(), "why failed: {e}");
    }
    let record: Value = serde_json::from_slice(&stdout).expect("why -o json prints JSON");
    let undecided = record["unchecked"]
        .as_array()
        .is_some_and(|u| !u.is_empty());
    let mut nodes = Vec::new();
    for outcome in record["nodes"]["outcomes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let kind = match outcome["outcome"].as_str().unwrap_or_default() {
            "Allocatable" if undecided => Kind::Undecided,
            "Allocatable" => Kind::Allocatable,
            "Error" => Kind::Error,
            "RequestUnsatisfied" | "Constraint" | "CannotAllocate" | "InvalidPools" => {
                Kind::Unallocatable
            }
            other => panic!("why gave outcome {other} for a pod with no node filters: {record}"),
        };
        for node in outcome["nodes"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            nodes.push((node.as_str().unwrap().to_owned(), kind.clone()));
        }
    }
    nodes.sort();
    (nodes, record)
}

/// How often, at most, a 1.34 or 1.35 fleet is asked again when why disagrees: those releases
/// try a node's pools in Go map order, so one answer is one order of several, and an order
/// that one pool in five leads may come up once in a hundred answers.
const ORDER_SAMPLES: usize = 2000;

fn kinds(verdicts: &crate::support::oracle::Verdicts) -> Vec<(String, Kind)> {
    verdicts
        .nodes
        .iter()
        .map(|(node, v)| {
            let kind = match v {
                Verdict::Allocated(_) => Kind::Allocatable,
                Verdict::Unallocatable => Kind::Unallocatable,
                Verdict::Error(_) => Kind::Error,
            };
            (node.clone(), kind)
        })
        .collect()
}

/// 1.34 and 1.35 try a node's pools in no fixed order; why tries them in 1.36's and must say
/// so where the order can change the outcome. Whether why's verdict is one the allocator gives
/// in some order: the oracle is asked again, each answer another map order.
fn one_of_the_orders(
    oracle: &mut Oracle,
    objects: &[Value],
    mine: &[(String, Kind)],
) -> Result<bool, String> {
    let mut seen = vec![false; mine.len()];
    for _ in 0..ORDER_SAMPLES {
        let again = kinds(
            &oracle
                .fleet(objects, &format!("{NS}/p"))
                .map_err(|e| e.to_string())?,
        );
        for (i, node) in mine.iter().enumerate() {
            seen[i] |= again.get(i) == Some(node);
        }
        if seen.iter().all(|&s| s) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn notes_the_order(record: &Value) -> bool {
    record["notes"].as_array().is_some_and(|notes| {
        notes.iter().any(|n| {
            n["sentence"]
                .as_str()
                .is_some_and(|n| n.contains("no fixed order"))
        })
    })
}

/// The attribute domain the pinned fleets add to every device: its `id` is the device's
/// `driver/pool/name`, which CEL cannot otherwise see.
const PIN_DOMAIN: &str = "oracle.liken.test";

/// `objects` with every device carrying its id as an attribute and each request of the pod's
/// claims limited to the devices `why` picked for it on one node: an `ExactCount` request by a
/// first selector naming them (so no other device is evaluated), a `firstAvailable` request
/// to the sub-request picked; an `All` request is left to take all it matches. `picks` are
/// (claim, request, device id).
fn pinned(objects: &[Value], picks: &[(String, String, String)]) -> Result<Vec<Value>, String> {
    let mut out = objects.to_vec();
    for object in &mut out {
        if object["kind"] == "ResourceSlice" {
            let driver = object["spec"]["driver"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let pool = object["spec"]["pool"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            for device in object["spec"]["devices"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                let id = format!(
                    "{driver}/{pool}/{}",
                    device["name"].as_str().unwrap_or_default()
                );
                device["attributes"][format!("{PIN_DOMAIN}/id")] = json!({"string": id});
            }
            continue;
        }
        let name = format!(
            "{NS}/{}",
            object["metadata"]["name"].as_str().unwrap_or_default()
        );
        if object["kind"] != "ResourceClaim" || !picks.iter().any(|(c, _, _)| *c == name) {
            continue;
        }
        for request in object["spec"]["devices"]["requests"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let base = request["name"].as_str().unwrap_or_default().to_owned();
            let mine: Vec<(&str, &str)> = picks
                .iter()
                .filter(|(c, _, _)| *c == name)
                .filter_map(|(_, r, id)| {
                    let (b, sub) = r.split_once('/').unwrap_or((r, ""));
                    (b == base).then_some((sub, id.as_str()))
                })
                .collect();
            let Some(&(sub, _)) = mine.first() else {
                return Err(format!(
                    "why picked no device for claim {name} request {base}"
                ));
            };
            let exact = if sub.is_empty() {
                &mut request["exactly"]
            } else {
                let subs = request["firstAvailable"].as_array_mut().ok_or_else(|| {
                    format!(
                        "why picked sub-request {base}/{sub} of a request without firstAvailable"
                    )
                })?;
                // The others are kept, matching nothing, where they stand: 1.34 and 1.35 treat a
                // sub-request after the first differently.
                let Some(picked) = subs.iter().position(|s| s["name"] == sub) else {
                    return Err(format!(
                        "why picked {base}/{sub}, which the request does not have"
                    ));
                };
                for (i, other) in subs.iter_mut().enumerate() {
                    if i != picked {
                        other["selectors"] = json!([{"cel": {"expression":
                            format!("device.attributes[{PIN_DOMAIN:?}].id in []")}}]);
                    }
                }
                &mut subs[picked]
            };
            if exact["allocationMode"] == "All" {
                continue;
            }
            let ids: Vec<&str> = mine.iter().map(|(_, id)| *id).collect();
            let pin = json!({"cel": {"expression": format!(
                "device.attributes[{PIN_DOMAIN:?}].id in {}",
                serde_json::to_string(&ids).unwrap()
            )}});
            let mut selectors = vec![pin];
            selectors.extend(exact["selectors"].as_array().cloned().unwrap_or_default());
            exact["selectors"] = json!(selectors);
        }
    }
    Ok(out)
}

/// The devices `why` picks on each allocatable node form an allocation the real allocator
/// accepts there: asked with every request pinned to why's devices ([`pinned`]), it allocates
/// on that node exactly those devices. Where one request's picks span sub-requests (1.35's
/// allocator can leave a device of an abandoned sub-request in the result), no pin says that:
/// the picks must then be the allocator's own (`verdicts`). `unordered` (1.34, 1.35): the
/// allocator tries pools in Go map order, so it is asked again, up to [`ORDER_SAMPLES`] times,
/// until one order allocates the picks. Returns how many nodes' picks were checked.
fn picks_are_valid(
    oracle: &mut Oracle,
    objects: &[Value],
    record: &Value,
    verdicts: &crate::support::oracle::Verdicts,
    unordered: bool,
) -> Result<usize, String> {
    let mut checked = 0;
    for node in record["nodes"]["picks"].as_array().into_iter().flatten() {
        let name = node["node"].as_str().unwrap_or_default();
        let mut picks: Vec<(String, String, String)> = node["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let text = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
                (
                    text("claim"),
                    text("request"),
                    format!("{}/{}/{}", text("driver"), text("pool"), text("device")),
                )
            })
            .collect();
        let mut subs: Vec<(&str, &str)> = picks
            .iter()
            .map(|(c, r, _)| (c.as_str(), r.as_str()))
            .collect();
        subs.sort();
        subs.dedup();
        let base = |(c, r): &(&str, &str)| (c.to_string(), r.split('/').next().map(str::to_owned));
        let spanning = subs.windows(2).any(|w| base(&w[0]) == base(&w[1]));
        let asked = if spanning {
            None
        } else {
            Some(pinned(objects, &picks)?)
        };
        picks.sort();
        let tries = if unordered { ORDER_SAMPLES } else { 1 };
        let mut refusal = None;
        for attempt in 0..tries {
            let again;
            let answer = match (&asked, attempt) {
                (None, 0) => verdicts,
                (asked, _) => {
                    again = oracle
                        .fleet(asked.as_deref().unwrap_or(objects), &format!("{NS}/p"))
                        .map_err(|e| e.to_string())?;
                    &again
                }
            };
            refusal = match answer.on(name) {
                Some(Verdict::Allocated(theirs)) => {
                    let mut theirs: Vec<(String, String, String)> = theirs
                        .iter()
                        .flat_map(|(claim, devices)| {
                            devices
                                .iter()
                                .map(|(request, id)| (claim.clone(), request.clone(), id.clone()))
                        })
                        .collect();
                    theirs.sort();
                    (picks != theirs).then(|| {
                        format!(
                            "why's picks on {name} {picks:?}: the allocator, pinned to them, allocates {theirs:?}"
                        )
                    })
                }
                other => Some(format!(
                    "why's picks on {name} {picks:?}: the allocator, pinned to them, says {other:?}"
                )),
            };
            if refusal.is_none() {
                break;
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        checked += 1;
    }
    Ok(checked)
}

/// Compares why with the oracle on fleet `seed`; returns how many nodes' picks were checked.
fn compare(release: &str, oracle: &mut Oracle, seed: u64) -> Result<usize, String> {
    let objects = generate(seed);
    let verdicts = oracle
        .fleet(&objects, &format!("{NS}/p"))
        .map_err(|e| e.to_string())?;
    let (mine, record) = why(&objects, release);
    let theirs = kinds(&verdicts);
    let unordered = matches!(release, "1.34" | "1.35");
    let mut problem = String::new();
    if mine == theirs {
        match picks_are_valid(oracle, &objects, &record, &verdicts, unordered) {
            Ok(checked) => return Ok(checked),
            Err(e) => problem = format!(" ({e})"),
        }
    } else if unordered && one_of_the_orders(oracle, &objects, &mine)? {
        if !notes_the_order(&record) {
            problem = " (why's verdict is the allocator's in another pool order, but why does not note that the order is not fixed)".to_owned();
        } else {
            match picks_are_valid(oracle, &objects, &record, &verdicts, unordered) {
                Ok(checked) => return Ok(checked),
                Err(e) => problem = format!(" ({e})"),
            }
        }
    }
    // The fleet as a file `why -f` and the oracle's plain mode read, to run by hand.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("oracle-disagreements");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{release}-{seed}.json"));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    Err(format!(
        "release {release}, seed {seed}: why {mine:?}, the allocator {:?}{problem}\nwhy's verdict: {}\nthe fleet: {}",
        verdicts.nodes,
        record["verdict"],
        file.display()
    ))
}

fn differential(release: &str) {
    let fleets = std::env::var("ORACLE_FLEETS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(FLEETS);
    let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let mut failures = Vec::new();
    let mut checked = 0;
    // `ORACLE_SEED` runs that one fleet.
    let seeds = match std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        Some(seed) => seed..seed + 1,
        None => 0..fleets,
    };
    let fleets = seeds.end - seeds.start;
    for seed in seeds {
        match compare(release, &mut oracle, seed) {
            Ok(n) => checked += n,
            Err(e) => {
                eprintln!("{}", e.lines().next().unwrap_or_default());
                failures.push(e);
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{release}: {fleets} fleets in {seconds:.1} s ({:.0} per second), {checked} nodes' picks accepted by the allocator, {} disagreements",
        fleets as f64 / seconds,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {fleets} fleets disagree; the first:\n{}",
        failures.len(),
        failures[0]
    );
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_agrees_with_the_1_34_allocator_on_random_fleets() {
    differential(RELEASES[0]);
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_agrees_with_the_1_35_allocator_on_random_fleets() {
    differential(RELEASES[1]);
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_agrees_with_the_1_36_allocator_on_random_fleets() {
    differential(RELEASES[2]);
}

#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn why_agrees_with_the_1_37_allocator_on_random_fleets() {
    differential(RELEASES[3]);
}

// ---------------------------------------------------------------------------------------------
// Disagreements the random fleets found, each fixed in why and kept here as its smallest fleet

/// One node `n1` with `devices` in one media.liken.sh slice (a liken.sh one when `liken`), the
/// classes `media`, `arc`, `render` and `none`, and pod `p` with one claim of `spec`.
fn small_fleet(driver: &str, devices: Value, spec: Value) -> Vec<Value> {
    let class = |name: &str, expression: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
               "spec": {"selectors": [{"cel": {"expression": expression}}]}})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
               "spec": {"driver": driver, "nodeName": "n1",
                        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "devices": devices}}),
        class("media", r#"device.driver == "media.liken.sh""#),
        class(
            "arc",
            r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].model == "arc""#,
        ),
        class("render", r#"device.driver == "liken.sh""#),
        class("none", r#"device.driver == "none""#),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c0", "namespace": NS, "uid": "claim-uid-0"}, "spec": spec}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS, "uid": "pod-uid"},
               "spec": {"resourceClaims": [{"name": "c0", "resourceClaimName": "c0"}],
                        "containers": [{"name": "c", "image": "i"}]}}),
    ]
}

fn two_gpus() -> Value {
    json!([
        {"name": "gpu0", "attributes": {"model": {"string": "arc"}}},
        {"name": "gpu1", "attributes": {"model": {"string": "tgl"}}},
    ])
}

/// The fleet gives `expected` on n1 for each release (in RELEASES' order), from the
/// allocator and from why alike.
fn regression(objects: &[Value], expected: [Kind; 4]) {
    for (release, expected) in RELEASES.into_iter().zip(expected) {
        let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
        let theirs = kinds(
            &oracle
                .fleet(objects, &format!("{NS}/p"))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(
            theirs,
            [("n1".to_owned(), expected)],
            "the {release} allocator"
        );
        let (mine, record) = why(objects, release);
        assert_eq!(
            mine, theirs,
            "why, as Kubernetes {release}: {}",
            record["verdict"]
        );
    }
}

/// From 1.36 a request's next device is searched after its previous one, so a shareable
/// device serves a request once (why allocated it twice); before, it is not shareable.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn a_shareable_device_serves_a_request_once() {
    let objects = small_fleet(
        "liken.sh",
        json!([{"name": "renderD128", "allowMultipleAllocations": true}]),
        json!({"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "render", "count": 2}}]}}),
    );
    regression(
        &objects,
        [
            Kind::Unallocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
}

/// 1.34 and 1.35 look up an `All` sub-request's next device under sub-request 0, whose one
/// device is done: s1 takes gpu0 only and r1 gets gpu1. From 1.36 s1 takes both.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn before_1_36_an_all_sub_request_after_the_first_takes_one_device() {
    let objects = small_fleet(
        "media.liken.sh",
        two_gpus(),
        json!({"devices": {"requests": [
            {"name": "r0", "firstAvailable": [
                {"name": "s0", "deviceClassName": "none"},
                {"name": "s1", "deviceClassName": "media", "allocationMode": "All"}]},
            {"name": "r1", "exactly": {"deviceClassName": "media"}}]}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Allocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
}

/// 1.34 and 1.35 build the second `All` sub-request's device list under the first one's
/// cache key: s1 gets s0's [gpu0] and, outside the constraint, leaves gpu1 to r1. From 1.36 s1
/// takes both GPUs.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz | tar -C /usr/local -xz, put /usr/local/go/bin on PATH, then touch build.rs"
)]
fn before_1_36_a_second_all_sub_request_takes_the_first_ones_devices() {
    let objects = small_fleet(
        "media.liken.sh",
        two_gpus(),
        json!({"devices": {
            "requests": [
                {"name": "r0", "firstAvailable": [
                    {"name": "s0", "deviceClassName": "arc", "allocationMode": "All"},
                    {"name": "s1", "deviceClassName": "media", "allocationMode": "All"}]},
                {"name": "r1", "exactly": {"deviceClassName": "media"}}],
            "constraints": [{"matchAttribute": "media.liken.sh/model", "requests": ["r0/s0", "r1"]}]}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Allocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
}

/// 1.37's scheduler applies DeviceTaintRules (DRADeviceTaintRules is GA and on), its slice
/// tracker adding each rule's taint to the devices it selects; why read none and called this
/// node allocatable.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn from_1_37_device_taint_rules_taint_devices() {
    let mut objects = small_fleet(
        "media.liken.sh",
        two_gpus(),
        json!({"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "arc"}}]}}),
    );
    objects.push(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": {"driver": "media.liken.sh", "device": "gpu0"},
                 "taint": {"key": "maintenance", "effect": "NoSchedule"}}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Allocatable,
            Kind::Allocatable,
            Kind::Unallocatable,
        ],
    );
}

/// The check of why's picks fails on picks the allocator does not accept: a device the class
/// rules out, and one device too few.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn picks_the_allocator_refuses_are_caught() {
    let objects = small_fleet(
        "media.liken.sh",
        two_gpus(),
        json!({"devices": {"requests": [
            {"name": "r0", "exactly": {"deviceClassName": "arc"}},
            {"name": "r1", "exactly": {"deviceClassName": "media"}}]}}),
    );
    let release = RELEASES[RELEASES.len() - 1];
    let mut oracle = Oracle::start(release).unwrap_or_else(|e| panic!("{e}"));
    let (_, record) = why(&objects, release);
    let verdicts = oracle
        .fleet(&objects, &format!("{NS}/p"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        picks_are_valid(&mut oracle, &objects, &record, &verdicts, false),
        Ok(1),
        "why's own picks: {}",
        record["nodes"]["picks"]
    );
    let mut wrong = record.clone();
    let devices = &mut wrong["nodes"]["picks"][0]["devices"];
    assert_eq!(devices[0]["device"], "gpu0", "r0 takes the arc GPU");
    devices[0]["device"] = json!("gpu1");
    devices[1]["device"] = json!("gpu0");
    let refused = picks_are_valid(&mut oracle, &objects, &wrong, &verdicts, false);
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("pinned")),
        "{refused:?}"
    );
    let mut short = record.clone();
    short["nodes"]["picks"][0]["devices"]
        .as_array_mut()
        .unwrap()
        .pop();
    let refused = picks_are_valid(&mut oracle, &objects, &short, &verdicts, false);
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("no device")),
        "{refused:?}"
    );
}

/// `distinctAttribute` is no constraint 1.35's allocator knows ("incubating", picked while
/// DRAConsumableCapacity is off: the attempt fails); 1.34's ("experimental", picked for
/// DRAResourceClaimDeviceStatus) compares the values by pointer, so two GPUs of one model are
/// distinct; from 1.36 they are not. why said "undecided" for all.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn distinct_attribute_as_each_release_s_allocator_has_it() {
    let objects = small_fleet(
        "media.liken.sh",
        json!([
            {"name": "gpu0", "attributes": {"model": {"string": "arc"}}},
            {"name": "gpu1", "attributes": {"model": {"string": "arc"}}},
        ]),
        json!({"devices": {
            "requests": [
                {"name": "r0", "exactly": {"deviceClassName": "media"}},
                {"name": "r1", "exactly": {"deviceClassName": "media"}}],
            "constraints": [{"distinctAttribute": "media.liken.sh/model"}]}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Error,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
    let (_, record) = why(&objects, "1.35");
    assert_eq!(
        record["attemptError"]["message"],
        "claim media/c0, constraint #0: empty constraint (unsupported constraint type?)"
    );
}

/// Two GPUs of different models are distinct: one request takes both.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn distinct_attribute_takes_different_values() {
    let objects = small_fleet(
        "media.liken.sh",
        two_gpus(),
        json!({"devices": {
            "requests": [{"name": "r0", "exactly": {"deviceClassName": "media", "count": 2}}],
            "constraints": [{"distinctAttribute": "media.liken.sh/model"}]}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Error,
            Kind::Allocatable,
            Kind::Allocatable,
        ],
    );
}

/// 1.36's allocator keeps one `distinctAttribute` value per request (constraint.go v0.36.6, a
/// map by request name): r1's GPU is compared with r0's last one only, so two arc GPUs pass;
/// 1.37 compares every value. why compared every value in 1.36 too.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn before_1_37_distinct_attribute_compares_each_request_s_last_device() {
    let objects = small_fleet(
        "media.liken.sh",
        json!([
            {"name": "gpu0", "attributes": {"model": {"string": "arc"}}},
            {"name": "gpu1", "attributes": {"model": {"string": "tgl"}}},
            {"name": "gpu2", "attributes": {"model": {"string": "arc"}}},
        ]),
        json!({"devices": {
            "requests": [
                {"name": "r0", "exactly": {"deviceClassName": "media", "count": 2}},
                {"name": "r1", "exactly": {"deviceClassName": "media"}}],
            "constraints": [{"distinctAttribute": "media.liken.sh/model"}]}}),
    );
    regression(
        &objects,
        [
            Kind::Allocatable,
            Kind::Error,
            Kind::Allocatable,
            Kind::Unallocatable,
        ],
    );
}

/// Capacity requests: 1.34 refuses them (DRAConsumableCapacity off), 1.35 does not read them;
/// from 1.36 a device must have each capacity asked for, by the name as written (gpu0 writes
/// `memory`, which `media.liken.sh/memory` does not find), and at least as much of it. why
/// called them unsupported.
#[test]
#[cfg_attr(
    not(have_go),
    ignore = "needs Go 1.26 or newer on PATH (see support::oracle::INSTALL_GO)"
)]
fn capacity_requests_by_the_name_as_written() {
    let spec = |count: u32, amount: &str| {
        json!({"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "media",
            "count": count, "capacity": {"requests": {"media.liken.sh/memory": amount}}}}]}})
    };
    let devices = json!([
        {"name": "gpu0", "capacity": {"memory": {"value": "16Gi"}}},
        {"name": "gpu1", "capacity": {"media.liken.sh/memory": {"value": "16Gi"}}},
    ]);
    let two = small_fleet("media.liken.sh", devices.clone(), spec(2, "8Gi"));
    regression(
        &two,
        [
            Kind::Error,
            Kind::Allocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
    let one = small_fleet("media.liken.sh", devices.clone(), spec(1, "16Gi"));
    regression(
        &one,
        [
            Kind::Error,
            Kind::Allocatable,
            Kind::Allocatable,
            Kind::Allocatable,
        ],
    );
    let too_much = small_fleet("media.liken.sh", devices, spec(1, "17Gi"));
    regression(
        &too_much,
        [
            Kind::Error,
            Kind::Allocatable,
            Kind::Unallocatable,
            Kind::Unallocatable,
        ],
    );
    let (_, record) = why(&too_much, "1.37");
    let reasons = &record["claims"][0]["requests"][0]["reasons"];
    assert!(
        reasons
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["reason"] == "CapacityShort")),
        "{reasons}"
    );
}
