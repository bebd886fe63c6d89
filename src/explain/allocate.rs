//! The scheduler's allocation rules, pure: for one candidate node, can these claims be allocated,
//! and with which devices? A port of k8s.io/dynamic-resource-allocation
//! `structured/internal/{stable,experimental}/allocator_*.go`, quirks included, so that `why`
//! agrees with the scheduler; docs/architecture.md lists the rules and quirks followed.
//!
//! Not modelled: what shareable devices consume of their capacities, and counters (our devices have
//! neither). A search that succeeds only through a shareable device with capacities is
//! [`AllocError::CapacityUnmodelled`]: nothing is guessed.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState as Fast;
use ustr::Ustr;

use k8s_openapi::api::resource::v1::{
    CapacityRequirements, DeviceClassSpec, DeviceConstraint, DeviceRequest, DeviceTaint,
    DeviceToleration, ResourceClaimSpec,
};

use super::cel::{
    ConversionError, DeviceValue, Outcome, Quantity as CelQuantity, Selector, Validation,
};
use super::{AttributeValue, DeviceId, DeviceView, NodeInfo, OwnedAttribute, split_qualified};

mod search;

use search::*;

/// The most devices one claim can be allocated (k8s.io/api resource/v1 `AllocationResultsMaxSize`).
pub(crate) const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// The release whose rules apply when the cluster's version is not known (`-f` without
/// `--kubernetes-version`).
pub const DEFAULT_MINOR: u32 = 36;

/// The feature gates that change the rules, by their defaults for the cluster's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// DRAConsumableCapacity: `allowMultipleAllocations` is honoured (beta, on from 1.36).
    pub consumable_capacity: bool,
    /// DRADeviceTaints: device taints block allocation unless tolerated (beta, on from 1.36).
    pub device_taints: bool,
    /// DRADeviceTaintRules: the scheduler adds each DeviceTaintRule's taint to the devices it
    /// selects (GA, on from 1.37; beta and off in 1.36).
    pub device_taint_rules: bool,
    /// The allocator the release's scheduler picks knows `distinctAttribute` constraints:
    /// structured `NewAllocator` takes the first implementation whose features cover the
    /// enabled ones, which in 1.35 is "incubating" (without them); 1.34's DRAResourceClaimDeviceStatus
    /// picks "experimental", and from 1.36 both know them.
    pub distinct_attribute: bool,
    /// DRAPartitionableDevices: slices with `perDeviceNodeSelection` are read (beta, on from
    /// 1.36); without it the scheduler's GatherPools skips them whole.
    pub partitionable_devices: bool,
    /// The Kubernetes minor version, for what changes by release beyond the gates: the words
    /// of a CEL runtime error (1.37 names the device and hints at `has()`), the order pools
    /// are tried in (fixed from 1.36).
    pub release: u32,
    /// The selectors were read from files, never admitted: the API server's cost estimate
    /// applies to them as to new ones (the cluster's passed it, or predate it).
    pub selectors_new: bool,
}

impl Features {
    /// The defaults of a Kubernetes minor version (the table in docs/operations.md, from each
    /// release's pkg/features/kube_features.go).
    pub fn for_minor(minor: u32) -> Features {
        Features {
            consumable_capacity: minor >= 36,
            device_taints: minor >= 36,
            device_taint_rules: minor >= 37,
            distinct_attribute: minor != 35,
            partitionable_devices: minor >= 36,
            release: minor,
            selectors_new: false,
        }
    }
}

impl Default for Features {
    fn default() -> Self {
        Features::for_minor(DEFAULT_MINOR)
    }
}

/// Where DeviceClasses come from (a map, or the fleet model).
pub trait ClassSource {
    fn class(&self, name: &str) -> Option<&DeviceClassSpec>;
}

impl<S: std::hash::BuildHasher> ClassSource for HashMap<String, DeviceClassSpec, S> {
    fn class(&self, name: &str) -> Option<&DeviceClassSpec> {
        self.get(name)
    }
}

impl ClassSource for std::collections::BTreeMap<String, DeviceClassSpec> {
    fn class(&self, name: &str) -> Option<&DeviceClassSpec> {
        self.get(name)
    }
}

/// A claim to allocate: its `namespace/name` (as the scheduler's messages print it) and spec.
#[derive(Clone, Copy, Debug)]
pub struct Claim<'a> {
    pub name: &'a str,
    pub spec: &'a ResourceClaimSpec,
}

/// The fleet as the allocator sees it.
pub struct Fleet<'a, D> {
    /// Every published device (of every driver), in slice order.
    pub devices: &'a [D],
    /// Devices allocated to other claims without a share ID, with those claims' names.
    pub taken: &'a HashMap<DeviceId, Vec<String>>,
    /// Pools (`driver`, `pool`) whose slices are not all present at their newest generation.
    pub incomplete_pools: &'a HashSet<(String, String)>,
}

// By hand: a derive would ask `D: Copy` of the devices, not of the reference to them.
impl<D> Clone for Fleet<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Fleet<'_, D> {}

/// One allocated device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceResult {
    /// The request, or `request/subrequest` for a firstAvailable choice.
    pub request: String,
    pub device: DeviceId,
}

/// The outcome on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeVerdict {
    /// Every claim can be allocated: per claim, the devices the scheduler would pick.
    Allocated(Vec<Vec<DeviceResult>>),
    /// The scheduler's "cannot allocate all claims".
    CannotAllocate,
    /// Nothing can be allocated and the node has invalid pools, which the search skips: from
    /// 1.35 the scheduler's "invalid resource pools were encountered" (allocator_incubating.go
    /// `Allocate`) instead of "cannot allocate all claims".
    InvalidPools(Vec<InvalidPool>),
}

/// A pool the scheduler does not allocate from on a node (pools_incubating.go `buildPool`
/// `validateDeviceNames`: two devices of its slices for the node share a name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPool {
    /// `driver/pool`.
    pub pool: String,
    /// In the scheduler's words: `duplicate device name NAME`.
    pub reason: String,
}

/// What aborts an attempt: the scheduler fails the scheduling cycle (or the pod) with these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The request names a class that does not exist.
    #[error("request {request}: device class {class} does not exist")]
    ClassNotFound {
        claim: String,
        request: String,
        class: String,
    },
    /// A selector failed at run time on a device, in the scheduler's message form.
    #[error("{}", runtime_message(.0))]
    Runtime(Box<SelectorFailure>),
    /// This evaluator cannot decide a selector on a device: nothing is guessed.
    #[error("{}: selector #{} on device {}: cannot evaluate: {} (expression: {})", .0.scope, .0.index, .0.device, .0.message, crate::text::one_line(&.0.expression, usize::MAX))]
    CannotEvaluate(Box<SelectorFailure>),
    /// `allocationMode: All` while a pool's slices are being updated.
    #[error(
        "claim {claim}, request {request}: asks for all devices, but resource pool {pool} is currently being updated"
    )]
    PoolIncomplete {
        claim: String,
        request: String,
        pool: String,
    },
    /// `allocationMode: All` while a pool of the node is invalid ([`InvalidPool`]).
    #[error(
        "claim {claim}, request {request}: asks for all devices, but resource pool {pool} is currently invalid"
    )]
    PoolInvalidAll {
        claim: String,
        request: String,
        pool: String,
        reason: String,
    },
    /// 1.34: the search reaches an invalid pool ([`InvalidPool`]); the message names the pool
    /// without its driver, as allocator_incubating.go `allocateOne` does.
    #[error("pool {pool} is invalid: {reason}")]
    PoolInvalid {
        driver: String,
        pool: String,
        reason: String,
    },
    /// `allocationMode: All` and a device of it breaks a constraint.
    #[error(
        "claim {claim}, request {request}: cannot add device {device} because a claim constraint would not be satisfied"
    )]
    ConstraintAll {
        claim: String,
        request: String,
        device: DeviceId,
    },
    /// The requests of a claim need more devices than a claim can hold, counting each request's
    /// fewest (a `firstAvailable` request's smallest sub-request, an `All` request's selectable
    /// devices on the node).
    #[error(
        "claim {claim}: number of requested devices {count} exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
    )]
    TooManyDevices { claim: String, count: usize },
    /// An allocation found only on a shareable device with capacities (DRAConsumableCapacity),
    /// whose room this evaluator assumed: not decided.
    #[error(
        "claim {claim}, request {request}: device {device} allows multiple allocations and has capacities: the capacity its allocations consume (DRAConsumableCapacity) is not modelled by this evaluator"
    )]
    CapacityUnmodelled {
        claim: String,
        request: String,
        /// The device, `driver/pool/device`.
        device: String,
    },
    /// The node's search tried [`MAX_SEARCH_STEPS`] devices and calls without an answer: not
    /// decided (the scheduler would go on until its filter timeout).
    #[error(
        "the search for devices on this node tried {steps} combinations without an answer: the scheduler goes on until its filter timeout (DRASchedulerFilterTimeout, 10 s by default, then 'timed out trying to allocate devices'), which this evaluator does not model"
    )]
    SearchTooLong { steps: u64 },
    /// The node was not searched: the explanation had given up on as many nodes' searches as
    /// it spends (`crate::explain::evaluate::MAX_SEARCHES_GIVEN_UP`); not decided.
    #[error(
        "not searched: the search had already hit its step limit on {given_up} nodes, so the explanation stopped searching"
    )]
    NotSearched { given_up: usize },
    /// 1.34: a request asks for capacity while DRAConsumableCapacity is off.
    #[error(
        "claim {claim}, request {request}: has capacity requests, but the DRAConsumableCapacity feature is disabled"
    )]
    CapacityDisabled { claim: String, request: String },
    /// A constraint the release's allocator does not know: neither `matchAttribute` nor, where
    /// it knows them, `distinctAttribute` (`distinct`: it is one, in 1.35).
    #[error("claim {claim}, constraint #{index}: empty constraint (unsupported constraint type?)")]
    EmptyConstraint {
        claim: String,
        index: usize,
        distinct: bool,
    },
    /// A claim shape the allocator refuses, or one this port does not model.
    #[error("claim {claim}, request {request}: {problem}")]
    Unsupported {
        claim: String,
        request: String,
        problem: String,
    },
}

/// A selector that failed on a device: where (`class <name>` or `claim <ns/name>`, the
/// selector's index there), on which device, the expression, and cel-go's message (or, for
/// [`AllocError::CannotEvaluate`], the reason); `release` is the Kubernetes minor version whose
/// words [`AllocError::Runtime`] uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorFailure {
    pub scope: String,
    pub index: usize,
    pub device: DeviceId,
    pub expression: String,
    pub message: String,
    pub release: u32,
}

/// The scheduler's words for a CEL runtime error. 1.34 to 1.36 (allocator_incubating.go
/// `selectorsMatch`): `class X: selector #N: CEL runtime error: ...`, no device. 1.37 adds
/// `on device D` and, to a "no such key" error, cel/errors.go `EnhanceRuntimeError`'s hint.
fn runtime_message(f: &SelectorFailure) -> String {
    if f.release < 37 {
        return format!(
            "{}: selector #{}: CEL runtime error: {}",
            f.scope, f.index, f.message
        );
    }
    let hint = if f.message.contains("no such key:") {
        ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
    } else {
        ""
    };
    format!(
        "{}: selector #{} on device {}: CEL runtime error: {}{hint}",
        f.scope, f.index, f.device, f.message
    )
}

/// One node, explained: see [`Allocator::explain`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeReport {
    pub verdict: NodeVerdict,
    /// Per request (`request` or `request/sub-request`), every device usable from the node
    /// (by fleet index) and how it fares against that request alone.
    pub requests: Vec<RequestReport>,
    /// The claims cannot be allocated, but could be without their constraints: each request is
    /// satisfiable, never on one GPU.
    pub constraints_block: bool,
}

/// How the devices of a node fare against one request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RequestReport {
    pub claim: String,
    pub request: String,
    pub devices: Vec<(usize, DeviceStatus)>,
}

/// Why one device does or does not serve one request, for the diagnosis. The rare variants
/// are boxed: a fleet's 80,000 devices are held per request in 32 bytes each, not 112.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DeviceStatus {
    /// Selected and usable.
    Available,
    /// A selector is false: the class's (`class: Some`) or the request's, by index.
    NotSelected { class: Option<Ustr>, index: usize },
    /// The selector could not be evaluated on it (runtime error or cannot evaluate).
    Failed(Box<AllocError>),
    /// Selected, but allocated to other claims and not shareable.
    Taken { claims: Vec<String> },
    /// In a pool the scheduler does not allocate from on the node.
    PoolInvalid(Box<InvalidPool>),
    /// In a pool being updated (`driver/pool`), which the scheduler skips from 1.35.
    PoolUpdating { pool: String },
    /// Selected, but tainted and the request does not tolerate it.
    Untolerated { taint: Box<DeviceTaint> },
    /// It passes the selectors, but lacks a capacity the request asks for, or has less of it
    /// than asked (DRAConsumableCapacity).
    CapacityShort(Box<Shortfall>),
    /// Selected and free, but shareable with capacities under DRAConsumableCapacity: whether
    /// one more allocation's consumption fits is not modelled (see `capacity_unmodelled`).
    CapacityUnmodelled,
}

/// A capacity a device lacks (`has: None`) or has less of than asked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shortfall {
    pub capacity: String,
    pub asked: String,
    pub has: Option<String>,
}

/// The allocator: selector programs compiled once, device values built once and selector
/// outcomes cached across nodes and calls. [`Allocator::fork`] gives another thread one that
/// shares the fleet's tables and keeps caches of its own.
pub struct Allocator<'a, D: DeviceView> {
    fleet: Fleet<'a, D>,
    classes: &'a (dyn ClassSource + Sync),
    features: Features,
    tables: Arc<Tables>,
    selector_ids: HashMap<String, usize>,
    selectors: Vec<Selector>,
    /// Per class: the CEL value, built from the class's first device.
    values: Vec<Option<Result<DeviceValue<'a>, ConversionError>>>,
    /// Per selector, per class: the selector's outcome on the class, once known.
    outcomes: Vec<Vec<Option<Outcome>>>,
}

/// What the allocator derives from the fleet once, read by every fork.
struct Tables {
    /// [`Fleet::taken`] by device index, so that the search never builds an id to look one up.
    taken: HashMap<usize, Vec<String>>,
    /// Per class, the device its CEL value is built from.
    representatives: Vec<usize>,
    /// Each device's rank in the scheduler's order: by pool (driver, pool), then slice order.
    rank: Vec<usize>,
    /// Devices published for one node, by node name, so that a node's candidates are found
    /// without scanning the fleet (40,000 GPUs, as many nodes).
    by_node: HashMap<String, Vec<usize>, Fast>,
    /// Devices published with a node selector or for all nodes.
    elsewhere: Vec<usize>,
    /// The devices of each slice with `perDeviceNodeSelection`, in slice order.
    per_device: Vec<Vec<usize>>,
    /// Each device's CEL inputs class: devices with the same driver, attributes, capacities
    /// and `allowMultipleAllocations` give every selector the same result (CEL sees nothing
    /// else of a device), so values and outcomes are kept per class, not per device: a fleet
    /// of 80,000 devices has a few dozen classes.
    class_of: Vec<usize>,
}

/// One request or sub-request, prepared.
struct RequestData<'s> {
    base: &'s str,
    sub: Option<&'s str>,
    /// The class's name, interned once: every device a class selector rules out names it.
    class_interned: Ustr,
    class_selectors: Vec<usize>,
    request_selectors: Vec<usize>,
    tolerations: &'s [DeviceToleration],
    admin_access: bool,
    /// With DRAConsumableCapacity, the request's `capacity.requests`: (name as written,
    /// quantity as written, quantity).
    capacity: Option<Vec<(&'s str, &'s str, CelQuantity)>>,
    mode: Mode,
}

impl RequestData<'_> {
    fn name(&self) -> String {
        match self.sub {
            Some(sub) => format!("{}/{}", self.base, sub),
            None => self.base.to_owned(),
        }
    }
    fn own_name(&self) -> &str {
        self.sub.unwrap_or(self.base)
    }
}

enum Mode {
    Count(usize),
    All(Vec<usize>),
}

impl Mode {
    fn len(&self) -> usize {
        match self {
            Mode::Count(n) => *n,
            Mode::All(devices) => devices.len(),
        }
    }
}

impl<'a, D: DeviceView> Allocator<'a, D> {
    /// An allocator over `fleet` with the classes of `classes`.
    pub fn new(
        fleet: Fleet<'a, D>,
        classes: &'a (dyn ClassSource + Sync),
        features: Features,
    ) -> Self {
        // By (driver, pool), then fleet order: the pools are sorted, not the 80,000 devices.
        let mut pools: HashMap<(&str, &str), usize, Fast> = HashMap::default();
        let pool_of: Vec<usize> = fleet
            .devices
            .iter()
            .map(|d| {
                let next = pools.len();
                *pools.entry((d.driver(), d.pool())).or_insert(next)
            })
            .collect();
        let mut sorted: Vec<((&str, &str), usize)> = pools.into_iter().collect();
        sorted.sort_unstable();
        let mut pool_rank = vec![0; sorted.len()];
        for (position, (_, pool)) in sorted.iter().enumerate() {
            pool_rank[*pool] = position;
        }
        let mut order: Vec<usize> = (0..fleet.devices.len()).collect();
        order.sort_by_key(|&d| pool_rank[pool_of[d]]);
        let mut rank = vec![0; order.len()];
        for (position, &d) in order.iter().enumerate() {
            rank[d] = position;
        }
        let mut by_node: HashMap<String, Vec<usize>, Fast> = HashMap::default();
        let mut elsewhere = Vec::new();
        let mut per_device: Vec<Vec<usize>> = Vec::new();
        let mut per_device_slot: HashMap<usize, usize> = HashMap::new();
        for &d in &order {
            if let Some(slice) = fleet.devices[d].per_device_slice() {
                let slot = *per_device_slot.entry(slice).or_insert_with(|| {
                    per_device.push(Vec::new());
                    per_device.len() - 1
                });
                per_device[slot].push(d);
                continue;
            }
            match fleet.devices[d].placement() {
                // Looked up before a key is made: one String per node, not per device.
                super::Placement::Node(name) => match by_node.get_mut(name) {
                    Some(devices) => devices.push(d),
                    None => {
                        by_node.insert(name.to_owned(), vec![d]);
                    }
                },
                _ => elsewhere.push(d),
            }
        }
        let mut classes_seen: HashMap<(u64, u64), usize, Fast> = HashMap::default();
        let mut representatives = Vec::new();
        let seeds = (
            foldhash::quality::RandomState::default(),
            foldhash::quality::RandomState::default(),
        );
        let class_of: Vec<usize> = fleet
            .devices
            .iter()
            .enumerate()
            .map(|(d, device)| {
                *classes_seen
                    .entry(cel_inputs_hash(device, &seeds))
                    .or_insert_with(|| {
                        representatives.push(d);
                        representatives.len() - 1
                    })
            })
            .collect();
        let values = representatives.iter().map(|_| None).collect();
        let taken = if fleet.taken.is_empty() {
            HashMap::new()
        } else {
            fleet
                .devices
                .iter()
                .enumerate()
                .filter_map(|(d, device)| Some((d, fleet.taken.get(&device.id())?.clone())))
                .collect()
        };
        Allocator {
            fleet,
            classes,
            features,
            tables: Arc::new(Tables {
                taken,
                representatives,
                rank,
                by_node,
                elsewhere,
                per_device,
                class_of,
            }),
            selector_ids: HashMap::new(),
            selectors: Vec::new(),
            values,
            outcomes: Vec::new(),
        }
    }

    /// An allocator over the same fleet for another thread: the tables are shared, selectors,
    /// values and outcomes are its own (they are the same whoever computes them).
    pub(crate) fn fork(&self) -> Self {
        Allocator {
            fleet: self.fleet,
            classes: self.classes,
            features: self.features,
            tables: Arc::clone(&self.tables),
            selector_ids: HashMap::new(),
            selectors: Vec::new(),
            values: self.tables.representatives.iter().map(|_| None).collect(),
            outcomes: Vec::new(),
        }
    }

    /// The devices the scheduler gathers for `node` (pools_incubating.go `GatherPools`), in
    /// its order: those of the slices for the node, and every device of a
    /// `perDeviceNodeSelection` slice one of whose devices is for the node. The devices of such
    /// a slice that are for other nodes are in `off_node`: their selectors still run, and can
    /// fail the attempt, before their own node rules them out (allocator_incubating.go
    /// `isSelectable`).
    fn gather(&self, node: &NodeInfo) -> Gathered {
        let mut devices: Vec<usize> = self
            .tables
            .by_node
            .get(&node.name)
            .cloned()
            .unwrap_or_default();
        let mut off_node = HashSet::default();
        if !self.tables.elsewhere.is_empty() || !self.tables.per_device.is_empty() {
            devices.extend(
                self.tables
                    .elsewhere
                    .iter()
                    .copied()
                    .filter(|&d| node.can_use(self.fleet.devices[d].placement())),
            );
            for slice in &self.tables.per_device {
                let (here, there): (Vec<usize>, Vec<usize>) = slice
                    .iter()
                    .partition(|&&d| node.can_use(self.fleet.devices[d].placement()));
                if !here.is_empty() {
                    devices.extend(slice);
                    off_node.extend(there);
                }
            }
            devices.sort_by_key(|&d| self.tables.rank[d]);
        }
        let (invalid, invalid_of) = self.invalid_pools(&devices);
        Gathered {
            devices,
            off_node,
            invalid,
            invalid_of,
        }
    }

    /// pools_incubating.go `buildPool` `validateDeviceNames`: a pool whose slices for the node
    /// (every device of them, another node's too) name one device twice is invalid there; the
    /// first name seen twice, in the scheduler's order, is the reason. From 1.35 a pool being
    /// updated is never validated (GatherPools returns it as incomplete only); 1.34 marks both.
    /// (Shared counters, which 1.36 validates too, are not read by the fleet model.)
    fn invalid_pools(&self, devices: &[usize]) -> (Vec<InvalidPool>, HashMap<usize, usize, Fast>) {
        // Mostly no name repeats within a pool: one sort says so without the sets below.
        let mut named: Vec<(&str, &str, &str)> = devices
            .iter()
            .map(|&d| {
                let device = &self.fleet.devices[d];
                (device.driver(), device.pool(), device.name())
            })
            .collect();
        named.sort_unstable();
        if named.windows(2).all(|w| w[0] != w[1]) {
            return (Vec::new(), HashMap::default());
        }
        let mut names: HashMap<(&str, &str), HashSet<&str, Fast>, Fast> = HashMap::default();
        let mut invalid: Vec<InvalidPool> = Vec::new();
        let mut invalid_pool: HashMap<(&str, &str), usize, Fast> = HashMap::default();
        for &d in devices {
            let device = &self.fleet.devices[d];
            let key = (device.driver(), device.pool());
            if invalid_pool.contains_key(&key)
                || (self.features.release >= 35 && self.pool_incomplete(d))
            {
                continue;
            }
            if !names.entry(key).or_default().insert(device.name()) {
                invalid_pool.insert(key, invalid.len());
                invalid.push(InvalidPool {
                    pool: format!("{}/{}", key.0, key.1),
                    reason: format!("duplicate device name {}", device.name()),
                });
            }
        }
        let invalid_of = if invalid.is_empty() {
            HashMap::default()
        } else {
            devices
                .iter()
                .filter_map(|&d| {
                    let device = &self.fleet.devices[d];
                    Some((d, *invalid_pool.get(&(device.driver(), device.pool()))?))
                })
                .collect()
        };
        (invalid, invalid_of)
    }

    /// Decides whether `claims` can all be allocated on `node`, as the scheduler's Filter does.
    pub fn allocate(
        &mut self,
        node: &NodeInfo,
        claims: &[Claim<'_>],
    ) -> Result<NodeVerdict, AllocError> {
        let gathered = self.gather(node);
        self.allocate_gathered(&gathered, claims, true)
    }

    /// [`Self::allocate`] on devices already gathered; without `constrained`, as if the claims
    /// had no constraints (for the diagnosis: whether they are what blocks the claims).
    fn allocate_gathered(
        &mut self,
        gathered: &Gathered,
        claims: &[Claim<'_>],
        constrained: bool,
    ) -> Result<NodeVerdict, AllocError> {
        let mut search = Search {
            claims,
            gathered,
            requests: Vec::new(),
            constraints: Vec::new(),
            allocating: HashMap::default(),
            result: vec![Vec::new(); claims.len()],
            steps: 0,
        };
        for claim in claims {
            let mut requests = Vec::new();
            for request in claim
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.requests.as_deref())
                .unwrap_or_default()
            {
                requests.push(self.prepare_request(&search, claim, request)?);
            }
            // allocator_incubating.go `Allocate`: before the search, a claim whose requests
            // need more devices than a claim holds is an error (the scheduler's SchedulerError),
            // not "cannot allocate".
            let fewest: usize = requests
                .iter()
                .map(|subs: &Vec<RequestData<'_>>| {
                    subs.iter().map(|s| s.mode.len()).min().unwrap_or(0)
                })
                .fold(0, usize::saturating_add);
            if fewest > ALLOCATION_RESULTS_MAX_SIZE {
                return Err(AllocError::TooManyDevices {
                    claim: claim.name.to_owned(),
                    count: fewest,
                });
            }
            search.requests.push(requests);
            let constraints = claim
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.constraints.as_deref())
                .filter(|_| constrained)
                .unwrap_or_default();
            search.constraints.push(prepare_constraints(
                claim,
                constraints,
                self.features.distinct_attribute,
                self.features.release,
            )?);
        }
        match self.allocate_one(&mut search, Call::first(0, 0)) {
            // Found, but on a device whose room was assumed: not decided.
            Ok(true)
                if let Some(e) = search.result.iter().enumerate().find_map(|(c, devices)| {
                    devices.iter().find_map(|(request, d)| {
                        self.capacity_unmodelled_in(claims[c].name, request, *d)
                    })
                }) =>
            {
                Err(e)
            }
            Ok(true) => Ok(NodeVerdict::Allocated(
                search
                    .result
                    .iter()
                    .map(|devices| {
                        devices
                            .iter()
                            .map(|(request, d)| DeviceResult {
                                request: request.clone(),
                                device: self.fleet.devices[*d].id(),
                            })
                            .collect()
                    })
                    .collect(),
            )),
            // allocator_incubating.go `Allocate` (1.35+): when nothing is found and the node
            // has invalid pools, the node's reason says so.
            Ok(false) | Err(Stop::MaxSize)
                if self.features.release >= 35 && !gathered.invalid.is_empty() =>
            {
                Ok(NodeVerdict::InvalidPools(gathered.invalid.clone()))
            }
            Ok(false) | Err(Stop::MaxSize) => Ok(NodeVerdict::CannotAllocate),
            Err(Stop::Error(e)) => Err(e),
        }
    }

    /// Everything the diagnosis needs about one node: the verdict, how every device fares
    /// against every request and sub-request, and, when the claims cannot be allocated,
    /// whether the constraints are what blocks them (they could be without them).
    pub(crate) fn explain(
        &mut self,
        node: &NodeInfo,
        claims: &[Claim<'_>],
    ) -> Result<NodeReport, AllocError> {
        let gathered = self.gather(node);
        let verdict = self.allocate_gathered(&gathered, claims, true)?;
        let mut requests = Vec::new();
        for claim in claims {
            for request in claim
                .spec
                .devices
                .as_ref()
                .and_then(|d| d.requests.as_deref())
                .unwrap_or_default()
            {
                let subs = request.first_available.as_ref().map_or(0, Vec::len);
                for sub in (0..subs.max(1)).map(|i| (subs > 0).then_some(i)) {
                    requests.push(RequestReport {
                        claim: claim.name.to_owned(),
                        request: match sub {
                            Some(i) => format!(
                                "{}/{}",
                                request.name,
                                request.first_available.as_ref().expect("counted")[i].name
                            ),
                            None => request.name.clone(),
                        },
                        devices: self.survey_gathered(&gathered, *claim, request, sub)?,
                    });
                }
            }
        }
        let constraints_block = matches!(
            verdict,
            NodeVerdict::CannotAllocate | NodeVerdict::InvalidPools(_)
        ) && matches!(
            self.allocate_gathered(&gathered, claims, false),
            Ok(NodeVerdict::Allocated(_))
        );
        Ok(NodeReport {
            verdict,
            requests,
            constraints_block,
        })
    }

    /// For the diagnosis: how each device usable from `node` fares against one request (or
    /// `firstAvailable` sub-request, by index), ignoring the other requests and constraints.
    pub(crate) fn survey(
        &mut self,
        node: &NodeInfo,
        claim: Claim<'_>,
        request: &DeviceRequest,
        sub_request: Option<usize>,
    ) -> Result<Vec<(usize, DeviceStatus)>, AllocError> {
        let gathered = self.gather(node);
        self.survey_gathered(&gathered, claim, request, sub_request)
    }

    /// [`Self::survey`] on devices already gathered.
    fn survey_gathered(
        &mut self,
        gathered: &Gathered,
        claim: Claim<'_>,
        request: &DeviceRequest,
        sub_request: Option<usize>,
    ) -> Result<Vec<(usize, DeviceStatus)>, AllocError> {
        let claims = [claim];
        let search = Search {
            claims: &claims,
            gathered,
            requests: Vec::new(),
            constraints: Vec::new(),
            allocating: HashMap::default(),
            result: Vec::new(),
            steps: 0,
        };
        let prepared = self.prepare_request(&search, &claim, request)?;
        let data = prepared
            .get(sub_request.unwrap_or(0))
            .ok_or_else(|| unsupported(&claim, &request.name, "no such sub-request"))?;
        let mut statuses = Vec::new();
        for &d in &search.gathered.devices {
            // The scheduler never evaluates a device of an invalid pool: it skips the pool
            // (1.35+) or fails on reaching it (1.34, and allocationMode All).
            if let Some(&i) = search.gathered.invalid_of.get(&d) {
                let pool = &search.gathered.invalid[i];
                statuses.push((d, DeviceStatus::PoolInvalid(Box::new(pool.clone()))));
                continue;
            }
            if self.features.release >= 35 && self.pool_incomplete(d) {
                let device = &self.fleet.devices[d];
                statuses.push((
                    d,
                    DeviceStatus::PoolUpdating {
                        pool: format!("{}/{}", device.driver(), device.pool()),
                    },
                ));
                continue;
            }
            let status = match self.selector_verdict(claim.name, data, d) {
                Err(e) => DeviceStatus::Failed(Box::new(e)),
                // Another node's device serves nothing here; only an error shows.
                Ok(_) if search.gathered.off_node.contains(&d) => continue,
                Ok(Some(failed)) => failed,
                // Taken or untainted is decided first; only a device that would otherwise be
                // free is undecided for its capacity.
                Ok(None) => match self.usability(&search, 0, data, d) {
                    DeviceStatus::Available
                        if self.capacity_unmodelled(claim.name, data, d).is_some() =>
                    {
                        DeviceStatus::CapacityUnmodelled
                    }
                    status => status,
                },
            };
            statuses.push((d, status));
        }
        Ok(statuses)
    }

    /// The first false (or failing) clause of `expression` on the device at `index`, with the
    /// values it read, reusing the compiled selector and the device's CEL value.
    pub(crate) fn diagnose(&mut self, expression: &str, index: usize) -> super::diagnose::Finding {
        let selector = self.selector_id(expression);
        let class = self.ensure_value(index);
        match self.values[class].as_ref().expect("built above") {
            Ok(value) => super::diagnose::diagnose(
                &self.selectors[selector],
                value,
                &self.fleet.devices[index],
            ),
            // The scheduler fails the same way: its DeviceMatches returns the conversion error.
            Err(e) => super::diagnose::Finding::RuntimeError {
                clause: super::diagnose::Clause {
                    index: 0,
                    text: expression.to_owned(),
                    reads: Vec::new(),
                },
                message: e.to_string(),
            },
        }
    }

    /// Each clause of `expression`'s top-level `&&` chain on the device at `index` (see
    /// [`super::diagnose::clause_values`]), reusing the compiled selector and device value.
    pub(crate) fn clause_values(
        &mut self,
        expression: &str,
        index: usize,
    ) -> Option<Vec<Option<bool>>> {
        let selector = self.selector_id(expression);
        let class = self.ensure_value(index);
        match self.values[class].as_ref().expect("built above") {
            Ok(value) => super::diagnose::clause_values(&self.selectors[selector], value),
            Err(_) => None,
        }
    }

    /// The compiled selector of `expression` (compiled once, shared with the search).
    pub(crate) fn selector(&mut self, expression: &str) -> &Selector {
        let id = self.selector_id(expression);
        &self.selectors[id]
    }

    /// The CEL class of the device at `index`: devices of one class give every selector the
    /// same result (same driver, attributes, capacities and `allowMultipleAllocations`).
    pub(crate) fn cel_class(&self, index: usize) -> usize {
        self.tables.class_of[index]
    }

    /// The device at `index` of the fleet.
    pub(crate) fn device(&self, index: usize) -> &D {
        &self.fleet.devices[index]
    }

    fn selector_id(&mut self, expression: &str) -> usize {
        if let Some(&id) = self.selector_ids.get(expression) {
            return id;
        }
        let id = self.selectors.len();
        let validation = if self.features.selectors_new {
            Validation::New {
                minor: self.features.release,
            }
        } else {
            Validation::Stored
        };
        self.selectors
            .push(Selector::compile_as(expression, validation));
        self.outcomes
            .push(vec![None; self.tables.representatives.len()]);
        self.selector_ids.insert(expression.to_owned(), id);
        id
    }

    fn prepare_request<'s>(
        &mut self,
        search: &Search<'_>,
        claim: &Claim<'s>,
        request: &'s DeviceRequest,
    ) -> Result<Vec<RequestData<'s>>, AllocError> {
        // 1.34's allocator ("experimental", see Features::distinct_attribute) refuses capacity
        // requests while DRAConsumableCapacity is off, before it reads the request; 1.35's
        // ("incubating") does not look at them.
        let capacity = request
            .exactly
            .as_ref()
            .is_some_and(|e| e.capacity.is_some())
            || request
                .first_available
                .iter()
                .flatten()
                .any(|s| s.capacity.is_some());
        if capacity && !self.features.consumable_capacity && self.features.release == 34 {
            return Err(AllocError::CapacityDisabled {
                claim: claim.name.to_owned(),
                request: request.name.clone(),
            });
        }
        let mut out = Vec::new();
        match (&request.exactly, &request.first_available) {
            (Some(exact), None) => out.push(self.prepare_one(
                search,
                claim,
                &request.name,
                None,
                Spec {
                    class: &exact.device_class_name,
                    select_class: &exact.device_class_name,
                    select_selectors: exact.selectors.as_deref().unwrap_or_default(),
                    mode: exact.allocation_mode.as_deref(),
                    count: exact.count,
                    tolerations: exact.tolerations.as_deref().unwrap_or_default(),
                    admin_access: exact.admin_access.unwrap_or(false),
                    capacity: exact.capacity.as_ref(),
                },
            )?),
            (None, Some(subs)) if !subs.is_empty() => {
                for (i, sub) in subs.iter().enumerate() {
                    let source = &subs[stale_selection(self.features.release, subs, i)];
                    out.push(self.prepare_one(
                        search,
                        claim,
                        &request.name,
                        Some(&sub.name),
                        Spec {
                            class: &sub.device_class_name,
                            select_class: &source.device_class_name,
                            select_selectors: source.selectors.as_deref().unwrap_or_default(),
                            mode: sub.allocation_mode.as_deref(),
                            count: sub.count,
                            tolerations: sub.tolerations.as_deref().unwrap_or_default(),
                            admin_access: false,
                            capacity: sub.capacity.as_ref(),
                        },
                    )?);
                }
            }
            _ => {
                return Err(unsupported(
                    claim,
                    &request.name,
                    "exactly one of exactly or firstAvailable must be set",
                ));
            }
        }
        Ok(out)
    }

    fn prepare_one<'s>(
        &mut self,
        search: &Search<'_>,
        claim: &Claim<'s>,
        base: &'s str,
        sub: Option<&'s str>,
        spec: Spec<'s>,
    ) -> Result<RequestData<'s>, AllocError> {
        let name = sub.map_or_else(|| base.to_owned(), |s| format!("{base}/{s}"));
        let capacity = match spec.capacity {
            Some(capacity) if self.features.consumable_capacity => {
                let mut requests = Vec::new();
                for (capacity, quantity) in capacity.requests.iter().flatten() {
                    let parsed = CelQuantity::parse(&quantity.0)
                        .ok()
                        .filter(|q| CelQuantity::parse("0").is_ok_and(|zero| *q >= zero))
                        .ok_or_else(|| {
                            unsupported(
                                claim,
                                &name,
                                &format!("capacity request {capacity}: {:?} is not a quantity of zero or more", quantity.0),
                            )
                        })?;
                    requests.push((capacity.as_str(), quantity.0.as_str(), parsed));
                }
                Some(requests)
            }
            _ => None,
        };
        let class = self
            .classes
            .class(spec.class)
            .ok_or_else(|| AllocError::ClassNotFound {
                claim: claim.name.to_owned(),
                request: name.clone(),
                class: spec.class.to_owned(),
            })?;
        let class = match self.classes.class(spec.select_class) {
            Some(select) => select,
            None => class,
        };
        let class_selectors = cel_expressions(class.selectors.as_deref().unwrap_or_default())
            .ok_or_else(|| {
                unsupported(
                    claim,
                    &name,
                    "CEL expression empty (unsupported selector type?)",
                )
            })?;
        let request_selectors = cel_expressions(spec.select_selectors).ok_or_else(|| {
            unsupported(
                claim,
                &name,
                "CEL expression empty (unsupported selector type?)",
            )
        })?;
        let mut data = RequestData {
            base,
            sub,
            class_interned: Ustr::from(spec.class),
            class_selectors: class_selectors
                .iter()
                .map(|e| self.selector_id(e))
                .collect(),
            request_selectors: request_selectors
                .iter()
                .map(|e| self.selector_id(e))
                .collect(),
            tolerations: spec.tolerations,
            admin_access: spec.admin_access,
            capacity,
            mode: Mode::Count(0),
        };
        data.mode = match spec.mode.unwrap_or("ExactCount") {
            "ExactCount" => {
                Mode::Count(usize::try_from(spec.count.unwrap_or(1)).unwrap_or(usize::MAX))
            }
            "All" => {
                let mut all = Vec::new();
                let mut pools_checked = HashSet::new();
                for &d in &search.gathered.devices {
                    let device = &self.fleet.devices[d];
                    let pool = (device.driver().to_owned(), device.pool().to_owned());
                    // validateDeviceRequest, pool by pool: being updated, then invalid.
                    if pools_checked.insert(pool.clone()) {
                        if self.fleet.incomplete_pools.contains(&pool) {
                            return Err(AllocError::PoolIncomplete {
                                claim: claim.name.to_owned(),
                                request: name,
                                pool: format!("{}/{}", pool.0, pool.1),
                            });
                        }
                        if let Some(&i) = search.gathered.invalid_of.get(&d) {
                            return Err(AllocError::PoolInvalidAll {
                                claim: claim.name.to_owned(),
                                request: name,
                                pool: search.gathered.invalid[i].pool.clone(),
                                reason: search.gathered.invalid[i].reason.clone(),
                            });
                        }
                    }
                    if self.selector_verdict(claim.name, &data, d)?.is_none()
                        && !search.gathered.off_node.contains(&d)
                    {
                        if let Some(e) = self.capacity_unmodelled(claim.name, &data, d) {
                            return Err(e);
                        }
                        all.push(d);
                    }
                }
                Mode::All(all)
            }
            other => {
                return Err(unsupported(
                    claim,
                    &name,
                    &format!("unsupported count mode {other}"),
                ));
            }
        };
        Ok(data)
    }

    /// `None` when every selector holds; the first false one otherwise; an error when one
    /// cannot be decided (which aborts the attempt).
    fn selector_verdict(
        &mut self,
        claim: &str,
        data: &RequestData<'_>,
        d: usize,
    ) -> Result<Option<DeviceStatus>, AllocError> {
        let groups = [
            (Some(data.class_interned), &data.class_selectors),
            (None, &data.request_selectors),
        ];
        for (class, selectors) in groups {
            for (index, &selector) in selectors.iter().enumerate() {
                let scope = || match class {
                    Some(class) => format!("class {class}"),
                    None => format!("claim {claim}"),
                };
                match self.outcome(selector, d) {
                    Outcome::Match(true) => {}
                    Outcome::Match(false) => {
                        return Ok(Some(DeviceStatus::NotSelected { class, index }));
                    }
                    failed => {
                        let (runtime, message) = match failed.clone() {
                            Outcome::RuntimeError(message) => (true, message),
                            Outcome::CannotEvaluate(reason) => (false, reason),
                            Outcome::Match(_) => unreachable!("matched above"),
                        };
                        let failure = Box::new(SelectorFailure {
                            scope: scope(),
                            index,
                            device: self.fleet.devices[d].id(),
                            expression: self.selectors[selector].expression().to_owned(),
                            message,
                            release: self.features.release,
                        });
                        return Err(if runtime {
                            AllocError::Runtime(failure)
                        } else {
                            AllocError::CannotEvaluate(failure)
                        });
                    }
                }
            }
        }
        Ok(self.capacity_short(data, d))
    }

    /// consumable_capacity.go `CmpRequestOverCapacity` for what is decided here: a request's
    /// capacities on an exclusive device (no requestPolicy, never shared: each capacity
    /// consumes what is asked, or all of it) or on a shareable one without capacities. A
    /// shareable device with capacities passes: its room is assumed and said
    /// ([`Self::capacity_unmodelled`]).
    fn capacity_short(&self, data: &RequestData<'_>, d: usize) -> Option<DeviceStatus> {
        let requests = data.capacity.as_ref()?;
        let device = &self.fleet.devices[d];
        if self.shareable(d) && device.capacities().next().is_some() {
            return None;
        }
        for &(name, asked, requested) in requests {
            let has = device
                .capacities_written()
                .find(|(n, _)| *n == name)
                .map(|(_, q)| q);
            let short = match has {
                None => true,
                // A quantity the slice states but no parser reads: the scheduler would not
                // have read the slice; nothing serves from it.
                Some(has) => CelQuantity::parse(has).map_or(true, |has| requested > has),
            };
            if short {
                return Some(DeviceStatus::CapacityShort(Box::new(Shortfall {
                    capacity: name.to_owned(),
                    asked: asked.to_owned(),
                    has: has.map(str::to_owned),
                })));
            }
        }
        None
    }

    fn outcome(&mut self, selector: usize, d: usize) -> &Outcome {
        let class = self.tables.class_of[d];
        if self.outcomes[selector][class].is_none() {
            let value = {
                let class = self.ensure_value(d);
                self.values[class].as_ref().expect("built above")
            };
            let outcome = match value {
                Ok(value) => self.selectors[selector].evaluate(value),
                // The scheduler fails the same way: DeviceMatches returns the conversion error.
                Err(e) => Outcome::RuntimeError(e.to_string()),
            };
            self.outcomes[selector][class] = Some(outcome);
        }
        self.outcomes[selector][class]
            .as_ref()
            .expect("stored above")
    }

    /// Builds, once, the CEL value of the device at `d`'s class; returns the class.
    fn ensure_value(&mut self, d: usize) -> usize {
        let class = self.tables.class_of[d];
        let representative = self.tables.representatives[class];
        let (devices, minor) = (self.fleet.devices, self.features.release);
        self.values[class].get_or_insert_with(|| DeviceValue::new(&devices[representative], minor));
        class
    }

    fn pool_incomplete(&self, d: usize) -> bool {
        let device = &self.fleet.devices[d];
        !self.fleet.incomplete_pools.is_empty()
            && self
                .fleet
                .incomplete_pools
                .contains(&(device.driver().to_owned(), device.pool().to_owned()))
    }

    fn shareable(&self, d: usize) -> bool {
        self.features.consumable_capacity
            && self.fleet.devices[d].allow_multiple_allocations() == Some(true)
    }

    /// With DRAConsumableCapacity, every allocation of a shareable device consumes its
    /// capacities (consumable_capacity.go `CmpRequestOverCapacity`: the request's amount, else
    /// the requestPolicy's default, else the whole value), summed over the claims holding it
    /// and the ones being allocated. The fleet model reads neither requestPolicy nor consumed
    /// capacity, so such a device is not decided here: an error naming it, never a guess.
    /// (An exclusive device cannot have a requestPolicy and is never shared: its full value
    /// always fits.)
    fn capacity_unmodelled(
        &self,
        claim: &str,
        data: &RequestData<'_>,
        d: usize,
    ) -> Option<AllocError> {
        self.capacity_unmodelled_in(claim, &data.name(), d)
    }

    /// [`Self::capacity_unmodelled`] by request name.
    fn capacity_unmodelled_in(&self, claim: &str, request: &str, d: usize) -> Option<AllocError> {
        let device = &self.fleet.devices[d];
        (self.shareable(d) && device.capacities().next().is_some()).then(|| {
            AllocError::CapacityUnmodelled {
                claim: claim.to_owned(),
                request: request.to_owned(),
                device: device.id().to_string(),
            }
        })
    }

    fn in_use(
        &self,
        search: &Search<'_>,
        claim: usize,
        data: &RequestData<'_>,
        d: usize,
    ) -> Option<Vec<String>> {
        if data.admin_access {
            let same_claim = !self.shareable(d)
                && search
                    .allocating
                    .get(&d)
                    .is_some_and(|c| c.contains(&claim));
            return same_claim.then(|| vec![search.claims[claim].name.to_owned()]);
        }
        if let Some(claims) = self.tables.taken.get(&d) {
            return Some(claims.clone());
        }
        search
            .allocating
            .get(&d)
            .filter(|c| !c.is_empty())
            .map(|c| {
                c.iter()
                    .map(|&i| search.claims[i].name.to_owned())
                    .collect()
            })
    }

    fn untolerated(&self, data: &RequestData<'_>, d: usize) -> Option<DeviceTaint> {
        if !self.features.device_taints {
            return None;
        }
        self.fleet.devices[d]
            .taints()
            .iter()
            .find(|t| {
                matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                    && !data.tolerations.iter().any(|tol| tolerates(tol, t))
            })
            .cloned()
    }

    fn usability(
        &self,
        search: &Search<'_>,
        claim: usize,
        data: &RequestData<'_>,
        d: usize,
    ) -> DeviceStatus {
        if let Some(claims) = self.in_use(search, claim, data, d) {
            return DeviceStatus::Taken { claims };
        }
        if let Some(taint) = self.untolerated(data, d) {
            return DeviceStatus::Untolerated {
                taint: Box::new(taint),
            };
        }
        DeviceStatus::Available
    }
}

struct Spec<'s> {
    class: &'s str,
    /// The class and selectors that decide which devices it selects: its own, but for the
    /// sub-requests [`stale_selection`] names.
    select_class: &'s str,
    select_selectors: &'s [k8s_openapi::api::resource::v1::DeviceSelector],
    mode: Option<&'s str>,
    count: Option<i64>,
    tolerations: &'s [DeviceToleration],
    admin_access: bool,
    capacity: Option<&'s CapacityRequirements>,
}

/// Whose selection sub-request `i` of a `firstAvailable` request gets. 1.34 and 1.35 cache
/// each device's selector verdict by sub-request while they build the device lists of `All`
/// sub-requests, but build the second one's under the first one's key
/// (allocator_incubating.go v0.35.10 `Allocate` sets `subRequestIndex` after
/// `validateDeviceRequest`; the cache is cleared before the search; fixed in 1.36): an `All`
/// sub-request second after an `All` first takes the first's devices. Found by the
/// differential test against the real allocator (tests/it/oracle/fleets.rs).
fn stale_selection(
    release: u32,
    subs: &[k8s_openapi::api::resource::v1::DeviceSubRequest],
    i: usize,
) -> usize {
    let all = |j: usize| {
        subs.get(j)
            .is_some_and(|s| s.allocation_mode.as_deref() == Some("All"))
    };
    if release < 36 && i == 1 && all(0) && all(1) {
        0
    } else {
        i
    }
}

fn unsupported(claim: &Claim<'_>, request: &str, problem: &str) -> AllocError {
    AllocError::Unsupported {
        claim: claim.name.to_owned(),
        request: request.to_owned(),
        problem: problem.to_owned(),
    }
}

/// A 128-bit hash of what CEL sees of a device: its driver, attributes, capacities and
/// `allowMultipleAllocations` (two passes with independently seeded hashers, the same for every
/// device of the fleet; a collision, which would merge two devices' outcomes, is out of reach
/// at fleet sizes).
fn cel_inputs_hash<D: DeviceView>(
    device: &D,
    seeds: &(
        foldhash::quality::RandomState,
        foldhash::quality::RandomState,
    ),
) -> (u64, u64) {
    let hash = |seed: &foldhash::quality::RandomState| {
        let mut h = seed.build_hasher();
        device.hash_cel_inputs(&mut h);
        std::hash::Hasher::finish(&h)
    };
    (hash(&seeds.0), hash(&seeds.1))
}

/// allocator.go `lookupAttribute`: the fully qualified name, or, in the driver's own domain,
/// the unqualified name.
pub(crate) fn lookup_attribute<'d>(
    device: &'d dyn DeviceView,
    qualified: &str,
) -> Option<AttributeValue<'d>> {
    let (domain, id) = qualified.split_once('/')?;
    if let Some((_, value)) = device.attributes().find(|(name, _)| *name == qualified) {
        return Some(value);
    }
    if domain != device.driver() {
        return None;
    }
    device
        .attributes()
        .find(|(name, _)| *name == id && split_qualified(name, device.driver()).0 == domain)
        .map(|(_, value)| value)
}

fn owned(value: AttributeValue<'_>) -> OwnedAttribute {
    match value {
        AttributeValue::Bool(b) => OwnedAttribute::Bool(b),
        AttributeValue::Int(i) => OwnedAttribute::Int(i),
        AttributeValue::String(s) => OwnedAttribute::String(s.to_owned()),
        AttributeValue::Version(v) => OwnedAttribute::Version(v.to_owned()),
    }
}

/// k8s.io/dynamic-resource-allocation `resourceclaim.ToleratesTaint`.
pub(crate) fn tolerates(toleration: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    if toleration
        .key
        .as_deref()
        .is_some_and(|k| !k.is_empty() && k != taint.key)
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The CEL expressions of `selectors`, in order; `None` when one is not a CEL selector (the only
/// kind the API defines today), which the caller reports as unsupported.
pub(crate) fn cel_expressions(
    selectors: &[k8s_openapi::api::resource::v1::DeviceSelector],
) -> Option<Vec<&str>> {
    selectors
        .iter()
        .map(|s| s.cel.as_ref().map(|c| c.expression.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::{DeviceRecord, OwnedPlacement};
    use serde_json::json;

    const MEDIA: &str = "media.liken.sh";
    const LIKEN: &str = "liken.sh";
    const PCI: &str = "resource.kubernetes.io/pciBusID";

    fn media(node: &str, name: &str, pci: &str, scale10: bool) -> DeviceRecord {
        DeviceRecord {
            driver: MEDIA.into(),
            pool: node.into(),
            name: name.into(),
            attributes: vec![
                ("decodeHEVCMain10".into(), OwnedAttribute::Bool(true)),
                ("scale10bit".into(), OwnedAttribute::Bool(scale10)),
                (PCI.into(), OwnedAttribute::String(pci.into())),
            ],
            allow_multiple_allocations: Some(true),
            placement: OwnedPlacement::Node(node.into()),
            ..Default::default()
        }
    }

    fn render(node: &str, name: &str, pci: &str) -> DeviceRecord {
        DeviceRecord {
            driver: LIKEN.into(),
            pool: node.into(),
            name: name.into(),
            attributes: vec![
                (
                    "renderNode".into(),
                    OwnedAttribute::String(format!("/dev/dri/{name}")),
                ),
                (PCI.into(), OwnedAttribute::String(pci.into())),
            ],
            allow_multiple_allocations: Some(true),
            placement: OwnedPlacement::Node(node.into()),
            ..Default::default()
        }
    }

    fn classes() -> HashMap<String, DeviceClassSpec> {
        let class = |expr: &str| {
            serde_json::from_value(json!({"selectors": [{"cel": {"expression": expr}}]})).unwrap()
        };
        HashMap::from([
            (
                "decode-10bit".to_owned(),
                class(
                    r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].decodeHEVCMain10 && device.attributes["media.liken.sh"].scale10bit"#,
                ),
            ),
            (
                "gpu-render".to_owned(),
                class(
                    r#"device.driver == "liken.sh" && has(device.attributes["liken.sh"].renderNode)"#,
                ),
            ),
            (
                "media-gpu".to_owned(),
                class(r#"device.driver == "media.liken.sh""#),
            ),
            (
                "typo".to_owned(),
                class(
                    r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].decodeAV2"#,
                ),
            ),
        ])
    }

    fn claim(spec: serde_json::Value) -> ResourceClaimSpec {
        serde_json::from_value(json!({ "devices": spec })).unwrap()
    }

    fn product_claim() -> ResourceClaimSpec {
        claim(json!({
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu-render"}},
                {"name": "decodes", "exactly": {"deviceClassName": "decode-10bit"}},
            ],
            "constraints": [{"requests": ["gpu", "decodes"], "matchAttribute": PCI}],
        }))
    }

    fn node(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            ..Default::default()
        }
    }

    struct World {
        devices: Vec<DeviceRecord>,
        taken: HashMap<DeviceId, Vec<String>>,
        incomplete: HashSet<(String, String)>,
        classes: HashMap<String, DeviceClassSpec>,
    }

    impl World {
        fn new(devices: Vec<DeviceRecord>) -> World {
            World {
                devices,
                taken: HashMap::new(),
                incomplete: HashSet::new(),
                classes: classes(),
            }
        }
        fn run(
            &self,
            features: Features,
            node_name: &str,
            specs: &[ResourceClaimSpec],
        ) -> Result<NodeVerdict, AllocError> {
            let fleet = Fleet {
                devices: &self.devices,
                taken: &self.taken,
                incomplete_pools: &self.incomplete,
            };
            let mut allocator = Allocator::new(fleet, &self.classes, features);
            let names: Vec<String> = (0..specs.len()).map(|i| format!("ns/claim-{i}")).collect();
            let claims: Vec<Claim> = specs
                .iter()
                .zip(&names)
                .map(|(spec, name)| Claim { name, spec })
                .collect();
            allocator.allocate(&node(node_name), &claims)
        }
        fn devices_of(&self, specs: &[ResourceClaimSpec]) -> Vec<Vec<(String, String)>> {
            match self.run(Features::default(), "n1", specs).unwrap() {
                NodeVerdict::Allocated(claims) => claims
                    .into_iter()
                    .map(|c| {
                        c.into_iter()
                            .map(|r| (r.request, r.device.device))
                            .collect()
                    })
                    .collect(),
                other => panic!("expected an allocation, not {other:?}"),
            }
        }
    }

    #[test]
    fn the_constraint_keeps_both_devices_on_one_gpu() {
        let world = World::new(vec![
            render("n1", "card0", "0000:00:02.0"),
            render("n1", "card1", "0000:03:00.0"),
            media("n1", "gpu-a", "0000:00:02.0", false),
            media("n1", "gpu-b", "0000:03:00.0", true),
        ]);
        // card0 is tried first; gpu-a fails the class and gpu-b the constraint with card0, so
        // the search backtracks to card1.
        assert_eq!(
            world.devices_of(&[product_claim()]),
            vec![vec![
                ("gpu".into(), "card1".into()),
                ("decodes".into(), "gpu-b".into())
            ]]
        );
    }

    #[test]
    fn requests_satisfiable_apart_but_never_on_one_gpu() {
        let world = World::new(vec![
            render("n1", "card0", "0000:00:02.0"),
            media("n1", "gpu-b", "0000:03:00.0", true),
        ]);
        assert_eq!(
            world.run(Features::default(), "n1", &[product_claim()]),
            Ok(NodeVerdict::CannotAllocate)
        );
        // A device without the attribute is never chosen.
        let mut no_pci = media("n1", "gpu-c", "", true);
        no_pci.attributes.retain(|(n, _)| n != PCI);
        let world = World::new(vec![render("n1", "card0", "0000:00:02.0"), no_pci]);
        assert_eq!(
            world.run(Features::default(), "n1", &[product_claim()]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    #[test]
    fn explain_blames_the_constraint_when_it_is_what_blocks() {
        let world = World::new(vec![
            render("n1", "card0", "0000:00:02.0"),
            media("n1", "gpu-b", "0000:03:00.0", true),
        ]);
        let fleet = Fleet {
            devices: &world.devices,
            taken: &world.taken,
            incomplete_pools: &world.incomplete,
        };
        let mut allocator = Allocator::new(fleet, &world.classes, Features::default());
        let spec = product_claim();
        let report = allocator
            .explain(
                &node("n1"),
                &[Claim {
                    name: "ns/x",
                    spec: &spec,
                }],
            )
            .unwrap();
        assert_eq!(report.verdict, NodeVerdict::CannotAllocate);
        assert!(report.constraints_block);
        let available = |r: &RequestReport| {
            r.devices
                .iter()
                .filter(|(_, s)| *s == DeviceStatus::Available)
                .count()
        };
        assert_eq!(
            report
                .requests
                .iter()
                .map(|r| (r.request.as_str(), available(r)))
                .collect::<Vec<_>>(),
            [("gpu", 1), ("decodes", 1)]
        );
        // No qualifying GPU at all: not the constraint's fault.
        let world = World::new(vec![
            render("n1", "card0", "a"),
            media("n1", "gpu-a", "a", false),
        ]);
        let fleet = Fleet {
            devices: &world.devices,
            taken: &world.taken,
            incomplete_pools: &world.incomplete,
        };
        let mut allocator = Allocator::new(fleet, &world.classes, Features::default());
        let report = allocator
            .explain(
                &node("n1"),
                &[Claim {
                    name: "ns/x",
                    spec: &spec,
                }],
            )
            .unwrap();
        assert!(!report.constraints_block);
    }

    #[test]
    fn other_nodes_devices_are_not_candidates() {
        let world = World::new(vec![
            render("n2", "card0", "0000:00:02.0"),
            media("n2", "gpu-a", "0000:00:02.0", true),
        ]);
        assert_eq!(
            world.run(Features::default(), "n1", &[product_claim()]),
            Ok(NodeVerdict::CannotAllocate)
        );
        assert!(matches!(
            world.run(Features::default(), "n2", &[product_claim()]),
            Ok(NodeVerdict::Allocated(_))
        ));
    }

    #[test]
    fn a_runtime_error_aborts_the_attempt_in_the_schedulers_words() {
        let world = World::new(vec![media("n1", "gpu-a", "0000:00:02.0", true)]);
        let spec = claim(
            json!({"requests": [{"name": "decodes", "exactly": {"deviceClassName": "typo"}}]}),
        );
        // 1.34 to 1.36 (allocator_incubating.go v0.36): no device in the message.
        for release in [34, 35, 36] {
            let error = world
                .run(
                    Features::for_minor(release),
                    "n1",
                    std::slice::from_ref(&spec),
                )
                .unwrap_err();
            assert_eq!(
                error.to_string(),
                "class typo: selector #0: CEL runtime error: no such key: decodeAV2"
            );
        }
        // 1.37 names the device and adds EnhanceRuntimeError's hint to "no such key".
        let error = world
            .run(Features::for_minor(37), "n1", &[spec])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "class typo: selector #0 on device media.liken.sh/n1/gpu-a: CEL runtime error: no such key: decodeAV2. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
        );
        let spec = claim(
            json!({"requests": [{"name": "decodes", "exactly": {"deviceClassName": "media-gpu",
            "selectors": [{"cel": {"expression": "device.attributes[\"media.liken.sh\"].nope"}}]}}]}),
        );
        assert_eq!(
            world
                .run(Features::default(), "n1", &[spec])
                .unwrap_err()
                .to_string(),
            "claim ns/claim-0: selector #0: CEL runtime error: no such key: nope"
        );
    }

    #[test]
    fn a_false_class_selector_stops_before_the_request_selectors() {
        // gpu-a fails the class (scale10bit false): the request's erroring selector is never run.
        let world = World::new(vec![media("n1", "gpu-a", "0000:00:02.0", false)]);
        let spec = claim(
            json!({"requests": [{"name": "decodes", "exactly": {"deviceClassName": "decode-10bit",
            "selectors": [{"cel": {"expression": "device.attributes[\"media.liken.sh\"].nope"}}]}}]}),
        );
        assert_eq!(
            world.run(Features::default(), "n1", &[spec]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    #[test]
    fn taken_devices_are_skipped_before_their_selectors_run() {
        let mut world = World::new(vec![
            media("n1", "gpu-a", "0000:00:02.0", true),
            media("n1", "gpu-b", "0000:03:00.0", true),
        ]);
        world.devices[0]
            .attributes
            .retain(|(n, _)| n != "scale10bit");
        world
            .taken
            .insert(world.devices[0].id(), vec!["other/claim".into()]);
        let spec = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "decode-10bit"}}]}),
        );
        assert_eq!(
            world.devices_of(&[spec]),
            vec![vec![("d".into(), "gpu-b".into())]]
        );
    }

    /// Thousands of claims (a pod may name any number) and requests: the search's depth
    /// is on the heap, so a test thread's 2 MiB stack is enough, and the answer is the Go
    /// allocator's: every claim on the one shareable GPU, and with one exclusive claim too many,
    /// none.
    #[test]
    fn thousands_of_claims_search_without_recursion() {
        let shared = World::new(vec![media("n1", "gpu-a", "0000:00:02.0", true)]);
        let requests: Vec<serde_json::Value> = (0..4)
            .map(|i| json!({"name": format!("r{i}"), "exactly": {"deviceClassName": "media-gpu"}}))
            .collect();
        let spec = claim(json!({ "requests": requests }));
        let claims = vec![spec; 5000];
        match shared.run(Features::default(), "n1", &claims) {
            Ok(NodeVerdict::Allocated(results)) => {
                assert_eq!(results.len(), 5000);
                assert!(results.iter().all(|r| r.len() == 4));
            }
            other => panic!("{other:?}"),
        }
        let mut exclusive = shared;
        exclusive.devices[0].allow_multiple_allocations = None;
        let one = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        assert_eq!(
            exclusive.run(Features::default(), "n1", &vec![one; 3000]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    /// One claim more than there are exclusive GPUs: the Go search tries every order of the
    /// GPUs (12! here) before it fails; this one gives up after its step budget, undecided.
    #[test]
    fn an_exponential_search_is_given_up_undecided() {
        let devices = (0..12)
            .map(|i| {
                let mut d = media(
                    "n1",
                    &format!("gpu-{i}"),
                    &format!("0000:{i:02x}:00.0"),
                    true,
                );
                d.allow_multiple_allocations = None;
                d
            })
            .collect();
        let one = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        let started = std::time::Instant::now();
        assert_eq!(
            World::new(devices).run(Features::default(), "n1", &vec![one; 13]),
            Err(AllocError::SearchTooLong {
                steps: MAX_SEARCH_STEPS
            })
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(60));
    }

    #[test]
    fn exclusive_and_shareable_devices() {
        let one = |shareable: Option<bool>| {
            let mut d = media("n1", "gpu-a", "0000:00:02.0", true);
            d.allow_multiple_allocations = shareable;
            World::new(vec![d])
        };
        let spec = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        let two_claims = [spec.clone(), spec.clone()];
        // Shareable: both claims get it.
        assert!(matches!(
            one(Some(true)).run(Features::default(), "n1", &two_claims),
            Ok(NodeVerdict::Allocated(_))
        ));
        // Exclusive (field absent, e.g. dropped by a 1.35 API server): one claim at a time.
        assert_eq!(
            one(None).run(Features::default(), "n1", &two_claims),
            Ok(NodeVerdict::CannotAllocate)
        );
        // The field is ignored while DRAConsumableCapacity is off.
        assert_eq!(
            one(Some(true)).run(Features::for_minor(35), "n1", &two_claims),
            Ok(NodeVerdict::CannotAllocate)
        );
        // A shareable device that another claim holds exclusively is taken.
        let mut world = one(Some(true));
        world
            .taken
            .insert(world.devices[0].id(), vec!["other/claim".into()]);
        assert_eq!(
            world.run(Features::default(), "n1", &[spec]),
            Ok(NodeVerdict::CannotAllocate)
        );
        // A request takes a shareable device once: from 1.36 its next device is searched after
        // the previous one (the oracle found this; 1.34 and 1.35 have no shareable devices).
        let count2 = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu", "count": 2}}]}),
        );
        assert_eq!(
            one(Some(true)).run(Features::default(), "n1", std::slice::from_ref(&count2)),
            Ok(NodeVerdict::CannotAllocate)
        );
        assert_eq!(
            one(Some(false)).run(Features::default(), "n1", &[count2]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    #[test]
    fn allocation_mode_all() {
        let mut world = World::new(vec![
            media("n1", "gpu-a", "a", true),
            media("n1", "gpu-b", "b", true),
            media("n1", "gpu-c", "c", false),
        ]);
        for d in &mut world.devices {
            d.allow_multiple_allocations = None;
        }
        let all = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "decode-10bit", "allocationMode": "All"}}]}),
        );
        assert_eq!(
            world.devices_of(std::slice::from_ref(&all)),
            vec![vec![
                ("d".into(), "gpu-a".into()),
                ("d".into(), "gpu-b".into())
            ]]
        );
        // One matching device taken: All fails.
        world
            .taken
            .insert(world.devices[1].id(), vec!["other/claim".into()]);
        assert_eq!(
            world.run(Features::default(), "n1", std::slice::from_ref(&all)),
            Ok(NodeVerdict::CannotAllocate)
        );
        world.taken.clear();
        // A pool being updated: an error, not a "no".
        world.incomplete.insert((MEDIA.into(), "n1".into()));
        assert!(matches!(
            world.run(Features::default(), "n1", std::slice::from_ref(&all)),
            Err(AllocError::PoolIncomplete { .. })
        ));
        // ExactCount just skips that pool's devices.
        let one = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "decode-10bit"}}]}),
        );
        assert_eq!(
            world.run(Features::default(), "n1", &[one]),
            Ok(NodeVerdict::CannotAllocate)
        );
        world.incomplete.clear();
        // A constraint that the set breaks: an error.
        let constrained = claim(json!({
            "requests": [{"name": "d", "exactly": {"deviceClassName": "decode-10bit", "allocationMode": "All"}}],
            "constraints": [{"matchAttribute": PCI}],
        }));
        assert!(matches!(
            world.run(Features::default(), "n1", &[constrained]),
            Err(AllocError::ConstraintAll { .. })
        ));
        // No matching device at all: cannot allocate.
        let none = World::new(vec![media("n1", "gpu-c", "c", false)]);
        assert_eq!(
            none.run(Features::default(), "n1", &[all]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    #[test]
    fn first_available_tries_sub_requests_in_order() {
        let world = World::new(vec![media("n1", "gpu-a", "a", false)]);
        let spec = claim(json!({"requests": [{"name": "d", "firstAvailable": [
            {"name": "ten-bit", "deviceClassName": "decode-10bit"},
            {"name": "any", "deviceClassName": "media-gpu"},
        ]}]}));
        assert_eq!(
            world.devices_of(&[spec]),
            vec![vec![("d/any".into(), "gpu-a".into())]]
        );
    }

    #[test]
    fn untolerated_taints_block() {
        let taint: DeviceTaint = serde_json::from_value(
            json!({"key": "broken", "value": "yes", "effect": "NoSchedule"}),
        )
        .unwrap();
        let mut world = World::new(vec![media("n1", "gpu-a", "a", true)]);
        world.devices[0].taints = vec![taint];
        let plain = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        assert_eq!(
            world.run(Features::default(), "n1", std::slice::from_ref(&plain)),
            Ok(NodeVerdict::CannotAllocate)
        );
        // Off before 1.36.
        assert!(matches!(
            world.run(Features::for_minor(35), "n1", &[plain]),
            Ok(NodeVerdict::Allocated(_))
        ));
        for toleration in [
            json!({"key": "broken", "operator": "Exists"}),
            json!({"key": "broken", "value": "yes"}),
            json!({"operator": "Exists", "effect": "NoSchedule"}),
        ] {
            let spec = claim(
                json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu", "tolerations": [toleration]}}]}),
            );
            assert!(matches!(
                world.run(Features::default(), "n1", &[spec]),
                Ok(NodeVerdict::Allocated(_))
            ));
        }
        let wrong = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu", "tolerations": [{"key": "broken", "value": "no"}]}}]}),
        );
        assert_eq!(
            world.run(Features::default(), "n1", &[wrong]),
            Ok(NodeVerdict::CannotAllocate)
        );
    }

    #[test]
    fn an_attribute_cel_cannot_take_is_a_runtime_error() {
        let mut world = World::new(vec![media("n1", "gpu-a", "a", true)]);
        world.devices[0]
            .attributes
            .push(("firmware".into(), OwnedAttribute::Version("one".into())));
        let spec = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        let error = world
            .run(Features::for_minor(37), "n1", &[spec])
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("class media-gpu: selector #0 on device media.liken.sh/n1/gpu-a: CEL runtime error: attribute firmware: parse semantic version: "),
            "{error}"
        );
    }

    #[test]
    fn a_missing_class_is_named() {
        let world = World::new(vec![]);
        let spec =
            claim(json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "nope"}}]}));
        assert_eq!(
            world
                .run(Features::default(), "n1", &[spec])
                .unwrap_err()
                .to_string(),
            "request d: device class nope does not exist"
        );
    }

    #[test]
    fn shareable_devices_with_capacities_are_not_guessed() {
        // With DRAConsumableCapacity every allocation of gpu-a consumes its memory (the whole
        // 16Gi, without a requestPolicy): whether one more fits is not modelled.
        let mut world = World::new(vec![media("n1", "gpu-a", "a", true)]);
        world.devices[0].capacities = vec![("memory".into(), "16Gi".into())];
        let spec = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu"}}]}),
        );
        assert_eq!(
            world.run(Features::for_minor(36), "n1", std::slice::from_ref(&spec)),
            Err(AllocError::CapacityUnmodelled {
                claim: "ns/claim-0".into(),
                request: "d".into(),
                device: "media.liken.sh/n1/gpu-a".into(),
            })
        );
        // Without the gate (1.35) the device is exclusive and its capacities do not count.
        assert!(matches!(
            world.run(Features::for_minor(35), "n1", std::slice::from_ref(&spec)),
            Ok(NodeVerdict::Allocated(_))
        ));
        // A search that fails even with room assumed on it fails for the scheduler too:
        // decided, whatever the device's room.
        let hopeless = claim(json!({"requests": [
            {"name": "d", "exactly": {"deviceClassName": "media-gpu"}},
            {"name": "e", "exactly": {"deviceClassName": "media-gpu",
                "selectors": [{"cel": {"expression": "false"}}]}},
        ]}));
        assert_eq!(
            world.run(Features::for_minor(36), "n1", &[hopeless]),
            Ok(NodeVerdict::CannotAllocate)
        );
        // Nor do they for a shareable device without capacities.
        world.devices[0].capacities.clear();
        assert!(matches!(
            world.run(Features::for_minor(36), "n1", &[spec]),
            Ok(NodeVerdict::Allocated(_))
        ));
    }

    #[test]
    fn at_most_32_devices_per_claim() {
        let devices = (0..40)
            .map(|i| {
                let mut d = media("n1", &format!("gpu-{i}"), "a", true);
                d.allow_multiple_allocations = None;
                d
            })
            .collect();
        let world = World::new(devices);
        let spec = |n: i64| {
            claim(
                json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "media-gpu", "count": n}}]}),
            )
        };
        assert!(matches!(
            world.run(Features::default(), "n1", &[spec(32)]),
            Ok(NodeVerdict::Allocated(_))
        ));
        // More than a claim holds is an error that aborts the attempt (SchedulerError).
        assert_eq!(
            world.run(Features::default(), "n1", &[spec(33)]),
            Err(AllocError::TooManyDevices {
                claim: "ns/claim-0".into(),
                count: 33
            })
        );
        assert_eq!(
            world
                .run(Features::default(), "n1", &[spec(33)])
                .unwrap_err()
                .to_string(),
            "claim ns/claim-0: number of requested devices 33 exceeds the claim limit of 32"
        );
        // Each request counts at its fewest: a firstAvailable request its smallest sub-request.
        let first_available = |a: i64, b: i64| {
            claim(json!({"requests": [
                {"name": "x", "exactly": {"deviceClassName": "media-gpu", "count": 20}},
                {"name": "y", "firstAvailable": [
                    {"name": "big", "deviceClassName": "media-gpu", "count": a},
                    {"name": "small", "deviceClassName": "media-gpu", "count": b},
                ]},
            ]}))
        };
        // 20 + 12 fits: the 20 + 20 choice is backtracked over, the small one taken.
        assert!(matches!(
            world.run(Features::default(), "n1", &[first_available(20, 12)]),
            Ok(NodeVerdict::Allocated(ref claims)) if claims[0].len() == 32
        ));
        assert!(matches!(
            world.run(Features::default(), "n1", &[first_available(20, 13)]),
            Err(AllocError::TooManyDevices { count: 33, .. })
        ));
    }

    #[test]
    fn survey_says_why_each_device_does_not_serve() {
        let mut world = World::new(vec![
            media("n1", "gpu-a", "a", false),
            media("n1", "gpu-b", "b", true),
            media("n1", "gpu-c", "c", true),
        ]);
        world.devices[2].allow_multiple_allocations = None;
        world
            .taken
            .insert(world.devices[2].id(), vec!["ns/holder".into()]);
        let spec = claim(
            json!({"requests": [{"name": "d", "exactly": {"deviceClassName": "decode-10bit"}}]}),
        );
        let fleet = Fleet {
            devices: &world.devices,
            taken: &world.taken,
            incomplete_pools: &world.incomplete,
        };
        let mut allocator = Allocator::new(fleet, &world.classes, Features::default());
        let request = &spec.devices.as_ref().unwrap().requests.as_ref().unwrap()[0];
        let survey = allocator
            .survey(
                &node("n1"),
                Claim {
                    name: "ns/x",
                    spec: &spec,
                },
                request,
                None,
            )
            .unwrap();
        let finding = allocator.diagnose(
            world.classes["decode-10bit"].selectors.as_ref().unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression
                .as_str(),
            survey[0].0,
        );
        let crate::explain::diagnose::Finding::False { clause } = finding else {
            panic!("{finding:?}")
        };
        assert_eq!(clause.reads[0].to_string(), "scale10bit is false");
        assert_eq!(
            survey.into_iter().map(|(_, s)| s).collect::<Vec<_>>(),
            vec![
                DeviceStatus::NotSelected {
                    class: Some(Ustr::from("decode-10bit")),
                    index: 0
                },
                DeviceStatus::Available,
                DeviceStatus::Taken {
                    claims: vec!["ns/holder".into()]
                },
            ]
        );
    }
}
