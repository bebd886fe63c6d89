//! The fleet's GPUs as `caps` shows them, pure: `media.liken.sh` devices joined with the render
//! devices of the same GPU (by node and `pciBusID`, else `address`) of whichever render driver
//! publishes them (liken's or a vendor's, [`crate::render_drivers`]), a pool's newest generation
//! only. Only a driver's whole GPUs pair; its MIG devices, partitions and VFs are counted to the
//! GPU at their address when claims hold them. A render device without a media device is a GPU
//! the agent does not describe, a device without `vaDriver` a failed probe, and GPUs of one model
//! whose statements differ drift. What can never pair (an address not in the canonical form, a
//! driver too old to publish `pciBusID`, two drivers at one address) is kept as a problem.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::catalogue::{self, Capability, Identity};
use crate::fleet::objects::{Device, ResourceSlice, Taint};
use crate::render_drivers::{self, DeviceKind, RenderDriver};
use ustr::Ustr;

/// Capability values in catalogue order; `None` when the device lacks the attribute or it is
/// not a bool.
pub(crate) type Statements = [Option<bool>; Capability::ALL.len()];

/// One GPU of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
/// Its strings are the reader's interned ones: a fleet's GPUs repeat a few hundred strings, and
/// copying them out would cost more than reading them did.
pub(crate) struct Gpu {
    pub node: Ustr,
    /// The PCI address that joins the two drivers' devices; empty when neither states one.
    pub address: Ustr,
    /// The `media.liken.sh` device's name; `None` when no media device describes the GPU.
    pub device: Option<Ustr>,
    pub name: Option<Ustr>,
    pub kernel_driver: Option<Ustr>,
    pub va_driver: Option<Ustr>,
    pub vendor: Option<Ustr>,
    pub product: Option<Ustr>,
    pub capabilities: Statements,
    pub status: Status,
    /// Index into [`Inventory::drift`] when this GPU's model drifts.
    pub drift: Option<usize>,
    /// The whole-GPU render device at this GPU's node and address, of the first render driver
    /// (in table order) that publishes one; `None` when none does.
    pub render: Option<RenderRef>,
    /// Whether a known render driver publishes anything on this GPU's node: without one, a
    /// missing render device says nothing about this GPU (a file of media slices alone).
    pub render_on_node: bool,
    /// The taints its slices put on its media device, then on its render device, as stated.
    pub taints: Vec<GpuTaint>,
}

/// Which of a GPU's two devices a taint is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TaintedDevice {
    /// The `media.liken.sh` device (the agent's taint).
    Media,
    /// The render driver's whole GPU (a vendor's health taint, or an operator's).
    Render,
}

impl TaintedDevice {
    /// The word `-o json|yaml` and the table use.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TaintedDevice::Media => "media",
            TaintedDevice::Render => "render",
        }
    }
}

/// A taint on one of a GPU's devices, as its slice states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuTaint {
    pub on: TaintedDevice,
    pub taint: Taint,
}

impl GpuTaint {
    /// Whether the scheduler keeps new allocations off the device unless a request tolerates
    /// it (NoSchedule, NoExecute; `None` is informational: k8s.io/dynamic-resource-allocation
    /// structured allocator, `allocator.go` skips only those two effects).
    pub(crate) fn blocks(&self) -> bool {
        matches!(self.taint.effect.as_str(), "NoSchedule" | "NoExecute")
    }

    /// `key=value:effect`, as kubectl writes a node's taint (outside text: renderers escape it).
    pub(crate) fn written(&self) -> String {
        let taint = &self.taint;
        crate::fleet::objects::written_taint(&taint.key, taint.value.as_deref(), &taint.effect)
    }

    /// Why, in a word: the agent's own taint's value (its key says only that it is ours),
    /// another's `key=value`.
    pub(crate) fn reason(&self) -> String {
        let taint = &self.taint;
        let value = taint.value.as_deref().filter(|v| !v.is_empty());
        match value {
            Some(value) if taint.key.starts_with(&format!("{}/", catalogue::DRIVER)) => {
                value.to_owned()
            }
            Some(value) => format!("{}={value}", taint.key),
            None => taint.key.to_string(),
        }
    }
}

/// A render driver's device, as a claim's allocation result names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RenderRef {
    pub driver: Ustr,
    pub pool: Ustr,
    pub device: Ustr,
}

/// A render device that can never pair with a media device, or an address two publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RenderProblem {
    /// Whole GPUs of two drivers (or two of one driver) at one address of a node: a claim's
    /// constraint pairs the media device with either.
    SharedAddress {
        node: Ustr,
        address: Ustr,
        devices: Vec<RenderRef>,
    },
    /// A `pciBusID` not in the canonical lowercase `dddd:bb:dd.f`: `matchAttribute` compares
    /// strings exactly, so it never pairs with the agent's.
    NotCanonical {
        node: Ustr,
        device: RenderRef,
        value: Ustr,
    },
    /// Whole GPUs of a driver that carry no `pciBusID`, or devices too old to tell whole GPUs
    /// from sub-devices (a release before [`RenderDriver::since`]), on these nodes.
    NoPciBusId {
        driver: &'static RenderDriver,
        nodes: Vec<Ustr>,
        devices: usize,
    },
}
impl Gpu {
    pub(crate) fn states(&self, capability: Capability) -> Option<bool> {
        self.capabilities[capability as usize]
    }

    /// The first taint that keeps new claims off the GPU unless they tolerate it.
    pub(crate) fn blocking_taint(&self) -> Option<&GpuTaint> {
        self.taints.iter().find(|t| t.blocks())
    }
}

/// What is known about a GPU's statements.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    /// A media device states every capability.
    Described,
    /// The media device has no `vaDriver`: the agent's query of the driver failed.
    ProbeFailed,
    /// The media device lacks capabilities, or has them with a type other than bool.
    Incomplete { unreadable: Vec<Capability> },
    /// liken publishes the GPU but no media device describes it.
    NotDescribed { agent_on_node: bool },
}

/// GPUs of one model whose statements differ across the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Drift {
    pub vendor: String,
    pub product: String,
    pub name: Option<String>,
    /// The capabilities whose value differs between variants.
    pub differing: Vec<Capability>,
    pub variants: Vec<Variant>,
}

/// One set of statements a model has somewhere in the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Variant {
    pub capabilities: Statements,
    pub va_drivers: BTreeSet<String>,
    pub nodes: BTreeSet<String>,
    pub gpus: usize,
}

/// The fleet, sorted by node then address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Inventory {
    pub gpus: Vec<Gpu>,
    pub drift: Vec<Drift>,
    /// Render devices that can never pair, and addresses two publish, in node order.
    pub render_problems: Vec<RenderProblem>,
    /// The media devices and the render drivers' devices (those with a PCI address, sub-devices
    /// too) with their GPU's node and address: [`Inventory::device_index`] joins them to
    /// `gpus` when claims are read.
    device_keys: Vec<(DeviceKey, Ustr, Ustr, Option<Ustr>)>,
}

/// A device as an allocation result names it: driver, pool, device.
pub(crate) type DeviceKey = (Ustr, Ustr, Ustr);

/// Each device's GPU, by [`DeviceKey`]. A Ustr hashes as its precomputed hash, so foldhash
/// mixes three integers where SipHash took a tenth of `caps --claims`.
pub(crate) type DeviceIndex = HashMap<DeviceKey, usize, foldhash::fast::RandomState>;

/// Whether each slice is of its pool's newest generation (per driver and pool), the slices the
/// scheduler counts: `caps` keeps those, `why` views them in place.
pub(crate) fn is_current(slices: &[ResourceSlice]) -> Vec<bool> {
    // Borrowed keys: no copy of a driver or pool name.
    let mut highest: HashMap<(Ustr, Ustr), i64> = HashMap::new();
    for slice in slices {
        let key = (slice.spec.driver, slice.spec.pool.name);
        let generation = highest.entry(key).or_insert(slice.spec.pool.generation);
        *generation = (*generation).max(slice.spec.pool.generation);
    }
    slices
        .iter()
        .map(|s| highest[&(s.spec.driver, s.spec.pool.name)] == s.spec.pool.generation)
        .collect()
}

/// Keeps, for each pool of each driver, only the slices of its highest generation.
pub(crate) fn current_slices(mut slices: Vec<ResourceSlice>) -> Vec<ResourceSlice> {
    let mut keep = is_current(&slices).into_iter();
    slices.retain(|_| keep.next().unwrap_or(false));
    slices
}

fn node_of(slice: &ResourceSlice) -> Ustr {
    slice.spec.node_name.unwrap_or(slice.spec.pool.name)
}

/// A GPU a media device describes.
fn described(node: Ustr, device: &Device) -> Gpu {
    let a = device.attributes.catalogue();
    let owned = |i: Identity| a.identity(i).and_then(|v| v.as_ustr());
    let capabilities: Statements = Capability::ALL.map(|c| a.capability(c).as_bool());
    let va_driver = owned(Identity::VaDriver);
    let unreadable: Vec<Capability> = Capability::ALL
        .into_iter()
        .filter(|&c| capabilities[c as usize].is_none())
        .collect();
    // A failed probe publishes every capability false and no vaDriver; a device that lacks
    // capabilities was not published by this agent's rules, whatever else it lacks.
    let status = if !unreadable.is_empty() {
        Status::Incomplete { unreadable }
    } else if va_driver.is_none() {
        Status::ProbeFailed
    } else {
        Status::Described
    };
    let address = owned(Identity::PciBusId).or_else(|| owned(Identity::Address));
    Gpu {
        node,
        address: address.unwrap_or_default(),
        device: Some(device.name),
        name: owned(Identity::Name),
        kernel_driver: owned(Identity::Driver),
        va_driver,
        vendor: owned(Identity::Vendor),
        product: owned(Identity::Product),
        capabilities,
        status,
        drift: None,
        render: None,
        render_on_node: false,
        taints: device
            .taints()
            .iter()
            .map(|taint| GpuTaint {
                on: TaintedDevice::Media,
                taint: taint.clone(),
            })
            .collect(),
    }
}

/// What a render driver's device is, from its string attributes of the driver's domain.
fn kind_of(driver: &RenderDriver, device: &Device) -> DeviceKind {
    driver.kind(|name| Some(device.attributes.get_in(driver.name, name)?.as_str()))
}

/// The render drivers' devices of the fleet, before they are joined to the media devices.
#[derive(Default)]
struct RenderDevices {
    /// Whole GPUs with a canonical address, per (node, address), in table-then-slice order.
    whole: HashMap<(Ustr, Ustr), Vec<RenderRef>>,
    /// Every node a known render driver publishes on.
    nodes: HashSet<Ustr>,
    problems: Vec<RenderProblem>,
    /// The taints of the whole GPUs that have any (few do).
    taints: HashMap<RenderRef, Vec<Taint>>,
}

/// Reads the known render drivers' slices: which devices are whole GPUs at which address,
/// which can never pair, and the keys that join every one of them (sub-devices too) to a GPU.
fn render_devices(
    slices: &[ResourceSlice],
    keys: &mut Vec<(DeviceKey, Ustr, Ustr, Option<Ustr>)>,
) -> RenderDevices {
    let mut found = RenderDevices::default();
    let mut unaddressed: BTreeMap<&'static str, (&'static RenderDriver, BTreeSet<Ustr>, usize)> =
        BTreeMap::new();
    // Table order, so that liken's render node is the one a GPU shows when two drivers publish
    // one address; slices in the order read within a driver.
    for driver in &render_drivers::ALL {
        for slice in slices.iter().filter(|s| s.spec.driver == driver.name) {
            let node = node_of(slice);
            found.nodes.insert(node);
            for device in &slice.spec.devices {
                let kind = kind_of(driver, device);
                let reference = RenderRef {
                    driver: slice.spec.driver,
                    pool: slice.spec.pool.name,
                    device: device.name,
                };
                let address = device
                    .attributes
                    .identity(Identity::PciBusId)
                    .and_then(|v| v.as_ustr());
                let predates = driver
                    .predates(|name| Some(device.attributes.get_in(driver.name, name)?.as_str()));
                if predates {
                    // Too old to tell whole GPUs from sub-devices: never paired, said once.
                    let entry =
                        unaddressed
                            .entry(driver.name)
                            .or_insert((driver, BTreeSet::new(), 0));
                    entry.1.insert(node);
                    entry.2 += 1;
                    if let Some(address) = address {
                        keys.push((
                            (reference.driver, reference.pool, reference.device),
                            node,
                            address,
                            None,
                        ));
                    }
                    continue;
                }
                let Some(address) = address else {
                    // A render node without a PCI address cannot be matched to any GPU
                    // statement, and a claim's matchAttribute constraint can never pair it
                    // either. A whole GPU without one is an old release of its driver, and so
                    // is a vendor's device the table cannot place (a release before its `type`).
                    if kind == DeviceKind::Gpu {
                        let entry =
                            unaddressed
                                .entry(driver.name)
                                .or_insert((driver, BTreeSet::new(), 0));
                        entry.1.insert(node);
                        entry.2 += 1;
                    }
                    continue;
                };
                keys.push((
                    (reference.driver, reference.pool, reference.device),
                    node,
                    address,
                    None,
                ));
                if kind != DeviceKind::Gpu {
                    continue;
                }
                if !render_drivers::is_canonical_pci_bus_id(&address) {
                    found.problems.push(RenderProblem::NotCanonical {
                        node,
                        device: reference,
                        value: address,
                    });
                    continue;
                }
                if !device.taints().is_empty() {
                    found.taints.insert(reference, device.taints().to_vec());
                }
                found
                    .whole
                    .entry((node, address))
                    .or_default()
                    .push(reference);
            }
        }
    }
    for (_, (driver, nodes, devices)) in unaddressed {
        found.problems.push(RenderProblem::NoPciBusId {
            driver,
            nodes: nodes.into_iter().collect(),
            devices,
        });
    }
    found
}

/// Builds the inventory from every slice read.
pub(crate) fn build(slices: Vec<ResourceSlice>) -> Inventory {
    let (media, others): (Vec<ResourceSlice>, Vec<ResourceSlice>) = current_slices(slices)
        .into_iter()
        .partition(|s| s.spec.driver == catalogue::DRIVER);
    // A node whose agent found no GPU still has a (device-less) media slice.
    let agent_nodes: HashSet<Ustr> = media.iter().map(node_of).collect();
    let mut gpus = Vec::new();
    let render_problems;
    // (key, node, address, media device name): joined to the sorted GPUs at the end.
    let mut keys: Vec<(DeviceKey, Ustr, Ustr, Option<Ustr>)> = Vec::new();
    for slice in media {
        let node = node_of(&slice);
        for device in &slice.spec.devices {
            let gpu = described(node, device);
            keys.push((
                (slice.spec.driver, slice.spec.pool.name, device.name),
                node,
                gpu.address,
                Some(device.name),
            ));
            gpus.push(gpu);
        }
    }
    let render = render_devices(&others, &mut keys);
    let mut undescribed = Vec::new();
    {
        for gpu in &mut gpus {
            gpu.render_on_node = render.nodes.contains(&gpu.node);
            gpu.render = render
                .whole
                .get(&(gpu.node, gpu.address))
                .map(|devices| devices[0]);
            if let Some(taints) = gpu.render.and_then(|r| render.taints.get(&r)) {
                gpu.taints.extend(taints.iter().map(|taint| GpuTaint {
                    on: TaintedDevice::Render,
                    taint: taint.clone(),
                }));
            }
        }
        let described: HashSet<(Ustr, Ustr)> = gpus.iter().map(|g| (g.node, g.address)).collect();
        let mut problems = render.problems;
        for (&(node, address), devices) in &render.whole {
            if devices.len() > 1 {
                problems.push(RenderProblem::SharedAddress {
                    node,
                    address,
                    devices: devices.clone(),
                });
            }
            if described.contains(&(node, address)) {
                continue;
            }
            undescribed.push(Gpu {
                node,
                address,
                device: None,
                name: None,
                kernel_driver: None,
                va_driver: None,
                vendor: None,
                product: None,
                capabilities: [None; Capability::ALL.len()],
                status: Status::NotDescribed {
                    agent_on_node: agent_nodes.contains(&node),
                },
                drift: None,
                render: Some(devices[0]),
                render_on_node: true,
                taints: render
                    .taints
                    .get(&devices[0])
                    .into_iter()
                    .flatten()
                    .map(|taint| GpuTaint {
                        on: TaintedDevice::Render,
                        taint: taint.clone(),
                    })
                    .collect(),
            });
        }
        problems.sort_by(|a, b| problem_order(a).cmp(&problem_order(b)));
        render_problems = problems;
    }
    gpus.extend(undescribed);
    // Nodes in the order people read their names; ranked once per node rather than compared
    // per GPU, which keeps a 40,000-GPU fleet's sort as cheap as a plain one.
    let mut nodes: Vec<Ustr> = gpus
        .iter()
        .map(|g| g.node)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    nodes.sort_by(|a, b| natural_cmp(a, b));
    let rank: HashMap<Ustr, usize> = nodes.into_iter().enumerate().map(|(i, n)| (n, i)).collect();
    // Keys looked up once per GPU, not twice per comparison.
    gpus.sort_by_cached_key(|g| (rank[&g.node], g.address, g.device));
    let drift = find_drift(&mut gpus);
    Inventory {
        gpus,
        drift,
        render_problems,
        device_keys: keys,
    }
}

/// Problems of a node first, by node and address; then each old driver, by name.
fn problem_order(problem: &RenderProblem) -> (u8, &str, &str) {
    match problem {
        RenderProblem::SharedAddress { node, address, .. } => (0, node, address),
        RenderProblem::NotCanonical { node, value, .. } => (0, node, value),
        RenderProblem::NoPciBusId { driver, .. } => (1, driver.name, ""),
    }
}

impl Inventory {
    /// Which GPU each device is, by (driver, pool, device) as a claim's allocation names it.
    /// Built only where claims are read: for 80,000 devices it was a tenth of `caps`.
    pub(crate) fn device_index(&self) -> DeviceIndex {
        index_devices(&self.gpus, &self.device_keys)
    }
}

/// Each device's GPU: a media device by its own name, a render node by its GPU's node and
/// address (the first GPU there, should a node publish one address twice).
fn index_devices(gpus: &[Gpu], keys: &[(DeviceKey, Ustr, Ustr, Option<Ustr>)]) -> DeviceIndex {
    let mut at: HashMap<(Ustr, Ustr), Vec<usize>, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(gpus.len(), Default::default());
    for (i, gpu) in gpus.iter().enumerate() {
        at.entry((gpu.node, gpu.address)).or_default().push(i);
    }
    keys.iter()
        .filter_map(|&(key, node, address, media)| {
            let candidates = at.get(&(node, address))?;
            let index = match media {
                Some(name) => *candidates.iter().find(|&&i| gpus[i].device == Some(name))?,
                None => candidates[0],
            };
            Some((key, index))
        })
        .collect()
}

/// Orders names as people read them: runs of digits by their value, so `edge-1-2` comes before
/// `edge-1-10` (plain string order puts it after). Equal by that measure (`n01`, `n1`), the plain
/// order decides, so the order is total and stable.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(s: &str) -> impl Iterator<Item = (bool, &str)> {
        let mut rest = s;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let digits = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digits)
                .unwrap_or(rest.len());
            let (part, tail) = rest.split_at(end);
            rest = tail;
            Some((digits, part))
        })
    }
    let mut left = parts(a);
    let mut right = parts(b);
    loop {
        let order = match (left.next(), right.next()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some((true, x)), Some((true, y))) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            (Some((_, x)), Some((_, y))) => x.cmp(y),
        };
        if order.is_ne() {
            return order;
        }
    }
}

/// Groups described GPUs by model and records the models whose statements differ.
fn find_drift(gpus: &mut [Gpu]) -> Vec<Drift> {
    // Interned names throughout (a fleet has a few models and 40,000 GPUs), made text once per
    // distinct value at the end.
    let mut models: BTreeMap<(Ustr, Ustr), Vec<usize>> = BTreeMap::new();
    for (i, gpu) in gpus.iter().enumerate() {
        if gpu.status != Status::Described {
            continue;
        }
        if let (Some(vendor), Some(product)) = (gpu.vendor, gpu.product) {
            models.entry((vendor, product)).or_default().push(i);
        }
    }
    struct Gathered {
        capabilities: Statements,
        va_drivers: HashSet<Ustr>,
        nodes: HashSet<Ustr>,
        gpus: usize,
    }
    let mut drift = Vec::new();
    for ((vendor, product), members) in models {
        let mut gathered: Vec<Gathered> = Vec::new();
        for &i in &members {
            let gpu = &gpus[i];
            let variant = match gathered
                .iter_mut()
                .find(|v| v.capabilities == gpu.capabilities)
            {
                Some(v) => v,
                None => {
                    gathered.push(Gathered {
                        capabilities: gpu.capabilities,
                        va_drivers: HashSet::new(),
                        nodes: HashSet::new(),
                        gpus: 0,
                    });
                    gathered.last_mut().expect("just pushed")
                }
            };
            variant.va_drivers.extend(gpu.va_driver);
            variant.nodes.insert(gpu.node);
            variant.gpus += 1;
        }
        if gathered.len() < 2 {
            continue;
        }
        let text = |names: HashSet<Ustr>| names.into_iter().map(|n| n.to_string()).collect();
        let mut variants: Vec<Variant> = gathered
            .into_iter()
            .map(|g| Variant {
                capabilities: g.capabilities,
                va_drivers: text(g.va_drivers),
                nodes: text(g.nodes),
                gpus: g.gpus,
            })
            .collect();
        let differing = Capability::ALL
            .into_iter()
            .filter(|&c| {
                variants
                    .iter()
                    .any(|v| v.capabilities[c as usize] != variants[0].capabilities[c as usize])
            })
            .collect();
        // Most common variant first: it is most likely the intended one.
        variants.sort_by(|a, b| b.gpus.cmp(&a.gpus).then_with(|| a.nodes.cmp(&b.nodes)));
        let index = drift.len();
        for &i in &members {
            gpus[i].drift = Some(index);
        }
        drift.push(Drift {
            vendor: vendor.to_string(),
            product: product.to_string(),
            name: gpus[members[0]].name.map(|n| n.to_string()),
            differing,
            variants,
        });
    }
    drift
}

/// What `--node` and `--decode/--encode/--scale` ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    pub nodes: Vec<String>,
    pub capabilities: Vec<Capability>,
    /// The `--for` files and what their streams are, for the count line; their needs are among
    /// `capabilities` already.
    pub files: Vec<(String, String)>,
}

impl Filter {
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.capabilities.is_empty()
    }

    pub(crate) fn matches(&self, gpu: &Gpu) -> bool {
        (self.nodes.is_empty() || self.nodes.iter().any(|n| *n == gpu.node))
            && self
                .capabilities
                .iter()
                .all(|&c| gpu.states(c) == Some(true))
    }
}

/// How many GPUs and nodes there are, and how many of them a filter keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    pub gpus: usize,
    pub nodes: usize,
    pub matching_gpus: usize,
    pub matching_nodes: usize,
}

impl Inventory {
    /// The GPUs a filter keeps, in inventory order.
    pub(crate) fn select<'a>(&'a self, filter: &'a Filter) -> impl Iterator<Item = &'a Gpu> + 'a {
        self.gpus.iter().filter(move |g| filter.matches(g))
    }

    /// [`Inventory::select`], with each GPU's index in [`Inventory::gpus`].
    pub(crate) fn select_indexed<'a>(
        &'a self,
        filter: &'a Filter,
    ) -> impl Iterator<Item = (usize, &'a Gpu)> + 'a {
        self.gpus
            .iter()
            .enumerate()
            .filter(move |(_, g)| filter.matches(g))
    }

    pub(crate) fn counts(&self, filter: &Filter) -> Counts {
        let nodes: HashSet<&str> = self.gpus.iter().map(|g| g.node.as_str()).collect();
        let matching: Vec<&Gpu> = self.select(filter).collect();
        let matching_nodes: HashSet<&str> = matching.iter().map(|g| g.node.as_str()).collect();
        Counts {
            gpus: self.gpus.len(),
            nodes: nodes.len(),
            matching_gpus: matching.len(),
            matching_nodes: matching_nodes.len(),
        }
    }

    /// Per capability, how many of the selected GPUs state it and on how many nodes.
    pub(crate) fn summary(&self, filter: &Filter) -> Vec<(Capability, usize, usize)> {
        Capability::ALL
            .into_iter()
            .map(|c| {
                let stating: Vec<&Gpu> = self
                    .select(filter)
                    .filter(|g| g.states(c) == Some(true))
                    .collect();
                let nodes: HashSet<&str> = stating.iter().map(|g| g.node.as_str()).collect();
                (c, stating.len(), nodes.len())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::objects::{
        Attributes, Device, Metadata, Pool, QualifiedName, SliceSpec, Stated, Value,
    };

    fn s(text: &str) -> Value {
        Value::String(Ustr::from(text))
    }

    fn device(
        name: &str,
        address: &str,
        model: (&str, &str),
        va: Option<&str>,
        stated: &[Capability],
    ) -> Device {
        let mut attributes = Attributes::default();
        attributes.set_identity(Identity::PciBusId, s(address));
        attributes.set_identity(Identity::Address, s(address));
        attributes.set_identity(Identity::Vendor, s(model.0));
        attributes.set_identity(Identity::Product, s(model.1));
        if let Some(va) = va {
            attributes.set_identity(Identity::VaDriver, s(va));
        }
        for c in Capability::ALL {
            attributes.set_capability(c, Stated::Bool(stated.contains(&c)));
        }
        Device::new(name, attributes)
    }

    fn render_node(address: &str) -> Device {
        let mut attributes = Attributes::default();
        attributes.insert(
            QualifiedName::new("liken.sh", "renderNode"),
            s("/dev/dri/renderD128"),
        );
        attributes.set_identity(Identity::PciBusId, s(address));
        Device::new(&format!("card-{address}"), attributes)
    }

    fn slice(driver: &str, node: &str, generation: i64, devices: Vec<Device>) -> ResourceSlice {
        ResourceSlice {
            metadata: Metadata {
                name: format!("{node}-{driver}-{generation}"),
            },
            spec: SliceSpec {
                driver: driver.into(),
                pool: Pool {
                    name: node.into(),
                    generation,
                    resource_slice_count: 1,
                },
                node_name: Some(node.into()),
                devices,
                ..SliceSpec::default()
            },
        }
    }

    const INTEL: (&str, &str) = ("8086", "56a0");
    use Capability::*;

    /// A vendor driver's device: its `type` (in the driver's domain) and address.
    fn vendor(driver: &str, name: &str, kind: &str, address: Option<&str>) -> Device {
        let mut attributes = Attributes::default();
        attributes.insert(QualifiedName::new(driver, "type"), s(kind));
        if let Some(address) = address {
            attributes.set_identity(Identity::PciBusId, s(address));
        }
        Device::new(name, attributes)
    }

    #[test]
    fn media_devices_pair_with_any_drivers_whole_gpu_and_what_never_pairs_is_kept() {
        let media = |name: &str, address: &str| device(name, address, INTEL, Some("iHD"), &[]);
        let slices = vec![
            slice(
                catalogue::DRIVER,
                "n1",
                1,
                vec![
                    media("pci-a", "0000:03:00.0"),
                    media("pci-b", "0000:83:00.0"),
                    media("pci-c", "0000:c3:00.0"),
                ],
            ),
            slice(
                "gpu.nvidia.com",
                "n1",
                1,
                vec![
                    // Static MIG: only MIG devices at 03; a whole GPU at 83, written in capitals
                    // at c3.
                    vendor(
                        "gpu.nvidia.com",
                        "gpu-0-mig-1g10gb-9-0",
                        "mig",
                        Some("0000:03:00.0"),
                    ),
                    vendor("gpu.nvidia.com", "gpu-1", "gpu", Some("0000:83:00.0")),
                    vendor("gpu.nvidia.com", "gpu-2", "gpu", Some("0000:C3:00.0")),
                ],
            ),
            // liken publishes 83 as well.
            slice(
                crate::render_drivers::LIKEN.name,
                "n1",
                1,
                vec![render_node("0000:83:00.0")],
            ),
            // An Intel release before pciBusID.
            slice(
                "gpu.intel.com",
                "n2",
                1,
                vec![{
                    let mut attributes = Attributes::default();
                    attributes.insert(
                        QualifiedName::new("gpu.intel.com", "pciAddress"),
                        s("0000:00:02.0"),
                    );
                    Device::new("0000-00-02-0-0x56a0", attributes)
                }],
            ),
        ];
        let inventory = build(slices);
        let render: Vec<(&str, Option<String>)> = inventory
            .gpus
            .iter()
            .map(|g| {
                (
                    g.address.as_str(),
                    g.render.map(|r| format!("{}/{}", r.driver, r.device)),
                )
            })
            .collect();
        assert_eq!(
            render,
            [
                ("0000:03:00.0", None),
                (
                    "0000:83:00.0",
                    Some("liken.sh/card-0000:83:00.0".to_string())
                ),
                ("0000:c3:00.0", None),
            ]
        );
        assert!(inventory.gpus.iter().all(|g| g.render_on_node));
        assert_eq!(
            inventory.render_problems.len(),
            3,
            "{:#?}",
            inventory.render_problems
        );
        assert!(
            matches!(
                &inventory.render_problems[0],
                RenderProblem::SharedAddress { address, devices, .. }
                    if address.as_str() == "0000:83:00.0" && devices.len() == 2
            ),
            "{:#?}",
            inventory.render_problems
        );
        assert!(matches!(
            &inventory.render_problems[1],
            RenderProblem::NotCanonical { value, .. } if value.as_str() == "0000:C3:00.0"
        ));
        assert!(matches!(
            &inventory.render_problems[2],
            RenderProblem::NoPciBusId { driver, devices: 1, .. } if driver.name == "gpu.intel.com"
        ));
        // A claim holding the MIG device holds the GPU at its address.
        let index = inventory.device_index();
        let mig = (
            Ustr::from("gpu.nvidia.com"),
            Ustr::from("n1"),
            Ustr::from("gpu-0-mig-1g10gb-9-0"),
        );
        assert_eq!(inventory.gpus[index[&mig]].address.as_str(), "0000:03:00.0");
    }

    #[test]
    fn only_the_highest_generation_of_a_pool_counts() {
        let old = slice(
            catalogue::DRIVER,
            "n1",
            1,
            vec![device("pci-old", "0000:00:02.0", INTEL, Some("iHD"), &[])],
        );
        let new = slice(
            catalogue::DRIVER,
            "n1",
            2,
            vec![device(
                "pci-new",
                "0000:00:02.0",
                INTEL,
                Some("iHD"),
                &[DecodeVP9],
            )],
        );
        let inventory = build(vec![old, new]);
        assert_eq!(inventory.gpus.len(), 1);
        assert_eq!(inventory.gpus[0].device.as_deref(), Some("pci-new"));
    }

    #[test]
    fn render_nodes_join_by_pci_address_and_uncovered_ones_are_marked() {
        let slices = [
            slice(
                catalogue::DRIVER,
                "n1",
                1,
                vec![device(
                    "pci-a",
                    "0000:00:02.0",
                    INTEL,
                    Some("iHD"),
                    &[DecodeVP9],
                )],
            ),
            slice(
                crate::render_drivers::LIKEN.name,
                "n1",
                1,
                vec![render_node("0000:00:02.0"), render_node("0000:03:00.0")],
            ),
            slice(
                crate::render_drivers::LIKEN.name,
                "n2",
                1,
                vec![render_node("0000:00:02.0")],
            ),
        ];
        let inventory = build(slices.to_vec());
        let rows: Vec<(&str, &str, &Status)> = inventory
            .gpus
            .iter()
            .map(|g| (g.node.as_str(), g.address.as_str(), &g.status))
            .collect();
        assert_eq!(
            rows,
            [
                ("n1", "0000:00:02.0", &Status::Described),
                (
                    "n1",
                    "0000:03:00.0",
                    &Status::NotDescribed {
                        agent_on_node: true
                    }
                ),
                (
                    "n2",
                    "0000:00:02.0",
                    &Status::NotDescribed {
                        agent_on_node: false
                    }
                ),
            ]
        );
    }

    #[test]
    fn an_agent_that_found_no_gpu_still_counts_as_present() {
        let slices = vec![
            slice(catalogue::DRIVER, "n1", 1, vec![]),
            slice(
                crate::render_drivers::LIKEN.name,
                "n1",
                1,
                vec![render_node("0000:00:02.0")],
            ),
        ];
        let inventory = build(slices);
        assert_eq!(inventory.gpus.len(), 1);
        assert_eq!(
            inventory.gpus[0].status,
            Status::NotDescribed {
                agent_on_node: true
            }
        );
    }

    #[test]
    fn failed_and_incomplete_devices_are_marked() {
        let mut odd = device("pci-b", "0000:03:00.0", INTEL, None, &[]);
        odd.attributes.set_capability(DecodeVP9, Stated::NotBool);
        let slices = [slice(
            catalogue::DRIVER,
            "n1",
            1,
            vec![device("pci-a", "0000:00:02.0", INTEL, None, &[]), odd],
        )];
        let inventory = build(slices.to_vec());
        assert_eq!(inventory.gpus[0].status, Status::ProbeFailed);
        assert_eq!(
            inventory.gpus[1].status,
            Status::Incomplete {
                unreadable: vec![DecodeVP9]
            }
        );
        assert!(
            inventory.drift.is_empty(),
            "only fully described GPUs are compared"
        );
    }

    #[test]
    fn drift_names_the_differing_capabilities_and_drivers() {
        let slices = [
            slice(
                catalogue::DRIVER,
                "n1",
                1,
                vec![device(
                    "pci-a",
                    "0000:03:00.0",
                    INTEL,
                    Some("iHD 24.2"),
                    &[DecodeAV1Main, EncodeHEVCMain10],
                )],
            ),
            slice(
                catalogue::DRIVER,
                "n2",
                1,
                vec![device(
                    "pci-a",
                    "0000:03:00.0",
                    INTEL,
                    Some("iHD 24.2"),
                    &[DecodeAV1Main, EncodeHEVCMain10],
                )],
            ),
            slice(
                catalogue::DRIVER,
                "n3",
                1,
                vec![device(
                    "pci-a",
                    "0000:03:00.0",
                    INTEL,
                    Some("iHD 23.1"),
                    &[DecodeAV1Main],
                )],
            ),
            slice(
                catalogue::DRIVER,
                "n4",
                1,
                vec![device(
                    "pci-a",
                    "0000:03:00.0",
                    ("1002", "744c"),
                    Some("Mesa"),
                    &[DecodeVP9],
                )],
            ),
        ];
        let inventory = build(slices.to_vec());
        assert_eq!(inventory.drift.len(), 1);
        let drift = &inventory.drift[0];
        assert_eq!((drift.vendor.as_str(), drift.product.as_str()), INTEL);
        assert_eq!(drift.differing, [EncodeHEVCMain10]);
        assert_eq!(drift.variants.len(), 2);
        assert_eq!(drift.variants[0].gpus, 2);
        assert_eq!(
            drift.variants[0].va_drivers.iter().collect::<Vec<_>>(),
            ["iHD 24.2"]
        );
        assert_eq!(drift.variants[1].nodes.iter().collect::<Vec<_>>(), ["n3"]);
        let flagged: Vec<&str> = inventory
            .gpus
            .iter()
            .filter(|g| g.drift.is_some())
            .map(|g| g.node.as_str())
            .collect();
        assert_eq!(flagged, ["n1", "n2", "n3"]);
    }

    #[test]
    fn filters_count_gpus_and_nodes() {
        let slices = [
            slice(
                catalogue::DRIVER,
                "n1",
                1,
                vec![
                    device(
                        "pci-a",
                        "0000:00:02.0",
                        INTEL,
                        Some("iHD"),
                        &[DecodeVP9, Scale8bit],
                    ),
                    device("pci-b", "0000:03:00.0", INTEL, Some("iHD"), &[DecodeVP9]),
                ],
            ),
            slice(
                catalogue::DRIVER,
                "n2",
                1,
                vec![device(
                    "pci-a",
                    "0000:00:02.0",
                    INTEL,
                    Some("iHD"),
                    &[Scale8bit],
                )],
            ),
        ];
        let inventory = build(slices.to_vec());
        let filter = Filter {
            nodes: vec![],
            capabilities: vec![DecodeVP9],
            files: vec![],
        };
        assert_eq!(
            inventory.counts(&filter),
            Counts {
                gpus: 3,
                nodes: 2,
                matching_gpus: 2,
                matching_nodes: 1
            }
        );
        let filter = Filter {
            nodes: vec!["n2".into()],
            capabilities: vec![],
            files: vec![],
        };
        assert_eq!(inventory.select(&filter).count(), 1);
        let summary = inventory.summary(&Filter::default());
        assert!(summary.contains(&(Scale8bit, 2, 2)));
        assert!(summary.contains(&(DecodeVP9, 2, 1)));
        assert!(summary.contains(&(DecodeAV1Main, 0, 0)));
    }

    #[test]
    fn the_fleet_lists_nodes_in_natural_order() {
        let on = |node: &str| {
            slice(
                catalogue::DRIVER,
                node,
                1,
                vec![device("pci-a", "0000:00:02.0", INTEL, Some("iHD"), &[])],
            )
        };
        let inventory = build(vec![on("edge-1-10"), on("edge-1-2"), on("edge-1-1")]);
        let nodes: Vec<&str> = inventory.gpus.iter().map(|g| g.node.as_str()).collect();
        assert_eq!(nodes, ["edge-1-1", "edge-1-2", "edge-1-10"]);
    }

    #[test]
    fn node_names_sort_as_people_read_them() {
        let mut names = vec![
            "edge-1-10",
            "edge-1-2",
            "edge-10-1",
            "edge-2-1",
            "a",
            "edge-1-02",
            "b1",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "a",
                "b1",
                "edge-1-02",
                "edge-1-2",
                "edge-1-10",
                "edge-2-1",
                "edge-10-1"
            ]
        );
        assert_eq!(
            natural_cmp("gpu-node", "gpu-node"),
            std::cmp::Ordering::Equal
        );
    }
}
