//! What `why` finds, as data: the [`Diagnosis`] and its parts, every finding an enum with its
//! data and a code. The analysis fills it in; `cli::why` words it (text, and the `sentence`
//! beside each code in `-o json|yaml`, docs/why-format.md).

use serde::{Serialize, Serializer};

use crate::fleet::objects::Kind;
use crate::render_drivers::DeviceKind;

/// The whole explanation; serialised as is for `-o json|yaml`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Diagnosis {
    pub kind: TargetKind,
    /// `namespace/name`.
    pub name: String,
    /// Whether something in the fleet keeps a claim from being allocated (exit code 3).
    pub blocked: bool,
    pub verdict: Verdict,
    pub claims: Vec<ClaimReport>,
    /// How the candidate nodes fare with the claims still to allocate; absent when none are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeSummary>,
    /// An error that makes every scheduling attempt fail (a CEL runtime error, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_error: Option<AttemptError>,
    /// The scheduler's and the kubelet's own words (for `why claim/NAME`, about the pod that
    /// uses the claim).
    pub scheduler: SchedulerWords,
    /// For `why claim/NAME`: the pods that use the claim (`status.reservedFor`, its owner, or
    /// naming it), `namespace/name`; the first one found among the objects lends its node
    /// filters and scheduler messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub used_by: Vec<String>,
    pub next_steps: Vec<Step>,
    /// What could keep the claims from being allocated and was not checked (the nodes' own
    /// filters, devices held by claims of other namespaces); with some, a verdict that nothing
    /// blocks the claims is not given (exit code 4).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unchecked: Vec<Unchecked>,
    /// What the analysis lacks or assumed.
    pub notes: Vec<Note>,
}

/// One claim of the pod.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimReport {
    /// The name in the pod's `spec.resourceClaims` (the claim's name for `why claim/NAME`).
    pub name: String,
    /// The ResourceClaim, `namespace/name`, when there is one.
    pub claim: Option<String>,
    /// The ResourceClaimTemplate it is made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    pub state: ClaimState,
    /// `status.reservedFor`: `pod namespace/name` for pods, `RESOURCE name` for other users.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_for: Vec<String>,
    /// What is wrong with the claim itself, when something is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<ClaimProblem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// Per request (and firstAvailable sub-request), for claims still to allocate.
    pub requests: Vec<RequestAccount>,
    pub constraints: Vec<Constraint>,
}

/// Where a claim stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum ClaimState {
    /// Allocated and reserved for the pod.
    Reserved,
    /// Allocated, not (yet) reserved for the pod.
    Allocated,
    /// Not allocated: the allocator's findings follow.
    Pending,
    /// Made from a template, and the claim controller has not created it yet.
    NotCreated,
    /// Named by the pod (or its status), and not in the cluster.
    Missing,
    /// Has a deletion timestamp.
    BeingDeleted,
    /// Made from a template, but not owned by this pod.
    NotOwned,
    /// The claim controller decided that no claim is needed.
    NotNeeded,
}

/// What an allocated claim got.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Allocation {
    pub node: Option<String>,
    pub devices: Vec<AllocatedDevice>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AllocatedDevice {
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(rename = "pciBusID", skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub render_node: Option<String>,
    /// What a render driver's device is when it is not a whole GPU (a MIG device, a partition,
    /// a VF or a VFIO-bound GPU whose address the constraint matched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_device: Option<DeviceKind>,
}

/// One request of a claim still to allocate, against the whole fleet.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestAccount {
    /// `request`, or `request/sub-request` for a firstAvailable choice.
    pub name: String,
    pub class: String,
    /// `ExactCount` or `All`.
    pub allocation_mode: String,
    pub count: i64,
    /// Devices of the fleet (every driver's) on the candidate nodes.
    pub total: usize,
    /// Devices that pass the class's and the request's selectors.
    pub qualifying: usize,
    /// Qualifying devices that are free: not held by other claims, no untolerated taint.
    pub available: usize,
    /// The nodes of the qualifying devices, in natural order.
    pub qualifying_nodes: Vec<String>,
    /// Why the others do not serve, grouped.
    pub reasons: Vec<Reason>,
    /// Attributes the selectors read that no device of the fleet has.
    pub unknown_attributes: Vec<UnknownAttribute>,
    /// A clause that, dropped, would let devices qualify.
    pub relaxations: Vec<Relaxation>,
    /// Every device, with `-o wide` only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceLine>,
}

/// A group of devices that do not serve a request for the same reason.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Reason {
    pub reason: ReasonKind,
    /// The selector the devices fail, with the first false clause as written.
    #[serde(flatten)]
    pub at: Option<Place>,
    /// What the devices have: the values the clause read, the error, the taint.
    pub detail: Detail,
    /// The GPU model (or the driver, for devices no GPU name describes).
    pub model: String,
    pub devices: usize,
    pub nodes: usize,
    /// Claims holding the devices (`Taken`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) enum ReasonKind {
    /// A selector is false.
    SelectorFalse,
    /// A selector is false on the device's driver alone (`device.driver == "..."`): the
    /// device is another driver's.
    OtherDriver,
    /// A selector fails at run time on the device (the whole attempt fails).
    RuntimeError,
    /// This evaluator cannot decide.
    CannotEvaluate,
    /// Allocated to other claims and not shareable.
    Taken,
    /// A taint the request does not tolerate.
    Untolerated,
    /// In a resource pool the scheduler does not allocate from on the node (duplicate device
    /// names in its slices).
    PoolInvalid,
    /// In a resource pool being updated (not all its slices published), which the scheduler
    /// does not allocate from (from 1.35).
    PoolUpdating,
    /// Passes the selectors, but lacks a capacity the request asks for, or has less of it.
    CapacityShort,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UnknownAttribute {
    /// `domain/name` as the selector reads it.
    pub attribute: String,
    pub selector: SelectorRef,
    /// The nearest name some device has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nearest: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Relaxation {
    pub selector: SelectorRef,
    pub clause: String,
    /// Devices that would qualify without it.
    pub qualifying: usize,
    /// Of those, free ones.
    pub available: usize,
    pub nodes: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceLine {
    pub node: String,
    pub device: String,
    #[serde(rename = "pciBusID")]
    pub pci_bus_id: Option<String>,
    pub model: String,
    /// Why it does not serve; none when it is available.
    pub status: Option<DeviceReason>,
}

/// The candidate nodes, grouped by outcome.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeSummary {
    pub total: usize,
    pub allocatable: usize,
    pub outcomes: Vec<NodeOutcome>,
    /// Per allocatable node (natural order), the devices the search picks there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub picks: Vec<NodePicks>,
}

/// The devices the allocator's search picks on one node, as the scheduler would write them
/// into the claims' `status.allocation`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodePicks {
    pub node: String,
    pub devices: Vec<PickedDevice>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PickedDevice {
    /// `namespace/name`.
    pub claim: String,
    /// `request`, or `request/sub-request` for a firstAvailable choice.
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    /// As [`AllocatedDevice::sub_device`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_device: Option<DeviceKind>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeOutcome {
    pub outcome: OutcomeKind,
    pub detail: NodeFinding,
    pub count: usize,
    pub nodes: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) enum OutcomeKind {
    /// Every claim can be allocated there now.
    Allocatable,
    /// The pod's nodeSelector rules it out.
    NodeSelector,
    /// The pod's required node affinity rules it out.
    NodeAffinity,
    /// A node taint the pod does not tolerate.
    NodeTaint,
    /// An allocated claim of the pod is bound to another node.
    ClaimElsewhere,
    /// A request has no free device there that passes its selectors.
    RequestUnsatisfied,
    /// Each request can be served, never together under the claim's constraints.
    Constraint,
    /// The devices do not add up (counts, exclusive devices shared by requests).
    CannotAllocate,
    /// Nothing can be allocated and the node has invalid pools (1.35+: the scheduler's
    /// "invalid resource pools were encountered").
    InvalidPools,
    /// The attempt fails with an error there.
    Error,
}

/// An error that aborts scheduling attempts, or one that keeps this evaluator from deciding.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct AttemptError {
    /// Which error, with its data.
    pub error: AttemptCode,
    /// In the scheduler's words.
    pub message: String,
    /// Whether every attempt fails: false when the scheduler may find enough feasible nodes
    /// before it checks one where the error occurs (more than 100 nodes).
    pub always: bool,
    /// Whether it is this evaluator's limit, not the scheduler's error: then nothing is
    /// decided (the verdict says so, and the exit code is 4).
    #[serde(skip)]
    pub undecided: bool,
    /// When not every attempt fails: how many nodes err, how many can take the pod, and how
    /// many feasible nodes the scheduler looks for.
    #[serde(skip)]
    pub odds: Option<Odds>,
}

/// How likely an attempt is to meet an erring node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Odds {
    pub erring: usize,
    pub allocatable: usize,
    pub to_find: usize,
}

/// What the scheduler and the kubelet said about the pod.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SchedulerWords {
    /// The PodScheduled condition, when the pod has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionWords>,
    /// FailedScheduling, FailedResourceClaimCreation, FailedPrepareDynamicResources and the
    /// like, newest last.
    pub events: Vec<EventWords>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ConditionWords {
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct EventWords {
    pub reason: String,
    pub message: String,
    pub count: i32,
}

/// A reason without its model: (reason, where, detail).
pub(crate) type ReasonKey = (ReasonKind, Option<Place>, Detail);

/// What a reason says, without the model: the lines `why` prints under one heading.
pub(crate) fn reason_key(r: &Reason) -> ReasonKey {
    (r.reason, r.at.clone(), r.detail.clone())
}

/// What is explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum TargetKind {
    Pod,
    ResourceClaim,
}

/// The verdict: whether something keeps the claims from being allocated, and what.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Verdict {
    /// A claim itself keeps the pod waiting (the first of the claims' problems).
    ClaimProblem { problem: ClaimProblem },
    /// This evaluator cannot decide (the attempt error's message).
    Undecided { message: String },
    /// Scheduling attempts fail with an error, every one or some.
    AttemptsFail { always: bool, message: String },
    /// `why claim/NAME`: the claim is allocated.
    ClaimAllocated {
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// The pod runs with its claims allocated.
    PodRunning {
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// The claims are allocated, and the kubelet cannot prepare them.
    CannotPrepare {
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        message: String,
    },
    /// The claims are allocated; the pod waits for something else.
    WaitsForOther {
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
    /// The devices allow the claims on some nodes, but what was not read may still block them.
    UncheckedMayBlock {
        allocatable: usize,
        total: usize,
        /// The allocatable nodes, when at most three.
        nodes: Vec<String>,
    },
    /// Nothing blocks the claims.
    Allocatable { allocatable: usize, total: usize },
    /// No node can allocate the claims: the most telling outcome, with how many nodes it has.
    NoNode {
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<NodeFinding>,
        count: usize,
        total: usize,
    },
}

/// What is wrong with a claim itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum ClaimProblem {
    /// The pod names a ResourceClaim that does not exist.
    ClaimMissing {
        namespace: String,
        claim: String,
        entry: String,
    },
    /// The claim controller has not created the claim yet.
    NotCreated { entry: String },
    /// Not created yet, and its template was not read.
    NotCreatedTemplateUnread {
        entry: String,
        namespace: String,
        template: String,
    },
    /// The template the claim is to be made from does not exist.
    TemplateMissing {
        namespace: String,
        template: String,
        entry: String,
    },
    /// The claim the pod's status names was not made for the pod.
    NotOwned {
        namespace: String,
        claim: String,
        pod: String,
    },
    /// The claim the pod's status names does not exist.
    StatusClaimMissing { namespace: String, claim: String },
    /// The pod's entry names neither a claim nor a template.
    NoSource { entry: String },
    /// The claim is being deleted.
    BeingDeleted { claim: String },
    /// `why claim/NAME`: no pod uses the claim.
    Unused { namespace: String, name: String },
    /// A request names a DeviceClass that does not exist.
    ClassMissing {
        claim: String,
        request: String,
        class: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        nearest: Option<String>,
    },
}

impl ClaimProblem {
    /// Whether it names an object that does not exist: the claims are not evaluated then, and
    /// with the classes unread it is not said.
    pub(crate) fn names_missing_object(&self) -> bool {
        matches!(
            self,
            ClaimProblem::ClaimMissing { .. }
                | ClaimProblem::TemplateMissing { .. }
                | ClaimProblem::StatusClaimMissing { .. }
                | ClaimProblem::ClassMissing { .. }
        )
    }
}

/// A claim's constraint, over some of its requests (all when none are named).
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Constraint {
    MatchAttribute {
        attribute: String,
        requests: Vec<String>,
    },
    DistinctAttribute {
        attribute: String,
        requests: Vec<String>,
    },
    /// Neither attribute set.
    Empty { requests: Vec<String> },
}

/// Which selector: the class's, the request's, or as the allocator names it (`class X`,
/// `claim NS/NAME`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "of", rename_all = "camelCase")]
pub(crate) enum SelectorRef {
    Class { class: String, index: usize },
    Request { index: usize },
    Scope { scope: String, index: usize },
}

/// Where devices fail: the selector, and the first false clause as written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) struct Place {
    pub selector: SelectorRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clause: Option<String>,
}

/// One value a clause read from a device; `value` as CEL literal text, none when unset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub(crate) struct ReadValue {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// What devices that do not serve have.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Detail {
    /// The clause is false with these values (none read: it is false as written).
    Reads {
        reads: Vec<ReadValue>,
    },
    /// A CEL runtime error.
    RuntimeError {
        message: String,
    },
    /// This evaluator cannot decide.
    CannotEvaluate {
        message: String,
    },
    /// Another error of the allocator, in its words.
    Failed {
        message: String,
    },
    /// Allocated to other claims: not shareable, or shareable but held exclusively.
    Taken {
        shareable: bool,
    },
    /// Shareable with capacities: whether one more allocation fits is not modelled.
    CapacityUnmodelled,
    /// A capacity the request asks for is missing or short.
    CapacityShort {
        capacity: String,
        asked: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        has: Option<String>,
    },
    PoolInvalid {
        pool: String,
        reason: String,
    },
    PoolUpdating {
        pool: String,
    },
    /// A taint the request does not tolerate.
    Untolerated {
        key: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<String>,
        effect: String,
    },
}

/// Why one device does not serve (`-o wide`).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DeviceReason {
    #[serde(flatten)]
    pub at: Option<Place>,
    pub detail: Detail,
}

/// How a node fares with the claims; the order is [`OutcomeKind`]'s.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum NodeFinding {
    /// Every claim can be allocated there (`checked`: the node's own filters too).
    Allocatable {
        checked: bool,
    },
    /// The pod's nodeSelector wants these labels, which the node lacks.
    NodeSelector {
        wants: Vec<Label>,
    },
    NodeAffinity,
    /// `spec.unschedulable`.
    Cordoned,
    NodeTaint {
        key: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
    ClaimElsewhere,
    /// A request has no free device there.
    RequestUnsatisfied {
        request: String,
        why: Unsatisfied,
    },
    /// Each request can be served, never together: the GPUs each could use.
    Constraint {
        distinct: bool,
        requests: Vec<RequestGpus>,
    },
    CannotAllocate,
    InvalidPools {
        pools: Vec<PoolReason>,
    },
    /// The attempt fails with this error there.
    Error {
        error: ErrorSummary,
    },
}

impl NodeFinding {
    /// The outcome it is a case of.
    pub(crate) fn kind(&self) -> OutcomeKind {
        match self {
            NodeFinding::Allocatable { .. } => OutcomeKind::Allocatable,
            NodeFinding::NodeSelector { .. } => OutcomeKind::NodeSelector,
            NodeFinding::NodeAffinity => OutcomeKind::NodeAffinity,
            NodeFinding::Cordoned | NodeFinding::NodeTaint { .. } => OutcomeKind::NodeTaint,
            NodeFinding::ClaimElsewhere => OutcomeKind::ClaimElsewhere,
            NodeFinding::RequestUnsatisfied { .. } => OutcomeKind::RequestUnsatisfied,
            NodeFinding::Constraint { .. } => OutcomeKind::Constraint,
            NodeFinding::CannotAllocate => OutcomeKind::CannotAllocate,
            NodeFinding::InvalidPools { .. } => OutcomeKind::InvalidPools,
            NodeFinding::Error { .. } => OutcomeKind::Error,
        }
    }
}

/// A node label: `key=value`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Label {
    pub key: String,
    pub value: String,
}

/// Why a request has no free device on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Unsatisfied {
    NoDevices,
    PoolsUnusable,
    NonePass,
    TakenOrTainted,
}

/// A request and the GPUs (PCI addresses) it could use on a node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct RequestGpus {
    pub request: String,
    /// `None` for a device without a pciBusID.
    pub gpus: Vec<Option<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct PoolReason {
    pub pool: String,
    pub reason: String,
}

/// An attempt error without the device it was met on, so that nodes group by it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum ErrorSummary {
    RuntimeError {
        selector: SelectorRef,
        message: String,
    },
    CannotEvaluate {
        selector: SelectorRef,
        message: String,
    },
    CapacityUnmodelled {
        claim: String,
        request: String,
    },
    /// Another error, in the allocator's words.
    Other {
        message: String,
    },
}

/// Which attempt error, with what its consequence and fix need.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum AttemptCode {
    RuntimeError {
        selector: SelectorRef,
        /// The key of a `no such key` error.
        #[serde(skip_serializing_if = "Option::is_none")]
        missing_key: Option<String>,
    },
    SearchTooLong,
    CannotEvaluate,
    Unsupported,
    CapacityUnmodelled,
    PoolIncomplete,
    PoolInvalidAll {
        pool: String,
        reason: String,
    },
    PoolInvalid {
        pool: String,
        reason: String,
    },
    ConstraintAll,
    TooManyDevices,
    EmptyConstraint {
        distinct: bool,
    },
    CapacityDisabled,
    ClassNotFound,
}

/// What could keep the claims from being allocated and was not checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Unchecked {
    /// No Node objects: the pod's node filters.
    NodeFilters,
    /// `why claim/NAME`: the pod that uses the claim was not read.
    UserUnread { pod: String },
    /// `why claim/NAME`: no pods were read.
    NoPods,
    /// No claims were read: devices other claims hold.
    OtherClaims,
    /// Claims outside the namespace were not read.
    ClaimsOutside { namespace: String },
    /// This evaluator could not decide (the attempt error's message).
    Undecided { message: String },
}

/// What the analysis lacks or assumed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Note {
    /// A kind could not be read.
    Unread {
        #[serde(serialize_with = "kind_name")]
        kind: Kind,
        why: String,
    },
    /// No resourceclaims were read.
    ClaimsUnread {
        why: String,
    },
    /// Resourceclaims outside the namespace were not read.
    ClaimsOutsideUnread {
        namespace: String,
        why: String,
    },
    /// The Node list came back empty.
    NoNodes,
    NotChecked {
        unchecked: Unchecked,
    },
    /// Slices with perDeviceNodeSelection this release skips.
    SlicesSkipped {
        release: u32,
        slices: Vec<String>,
    },
    /// Before 1.36, pool order decides parts of allocationMode All.
    AllModeOrder {
        release: u32,
    },
    /// Before 1.36, pool order decides which of a runtime error and a device comes first.
    RuntimeErrorOrder {
        release: u32,
    },
    /// Pool order decides whether an attempt reaches an invalid pool.
    InvalidPoolOrder {
        release: u32,
    },
    /// The slices were not read: allocated devices lack addresses and render nodes.
    SlicesUnread {
        why: String,
    },
    /// DRAConsumableCapacity taken as on, from what the server stored.
    ConsumableCapacityAssumed,
    /// DRADeviceTaints taken as on: the server stored device taints, which it drops without it.
    DeviceTaintsAssumed,
    /// No release given: 1.36's feature gates assumed.
    DefaultGates,
    /// The search hit its step limit on `given_up` nodes: the nodes after them (of `total`,
    /// `searched` were) were not searched, and are undecided.
    SearchStopped {
        searched: usize,
        total: usize,
        given_up: usize,
    },
}

fn kind_name<S: Serializer>(kind: &Kind, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(kind.name())
}

/// What to do next.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub(crate) enum Step {
    /// The claim controller's own words on a claim it failed to make.
    ClaimControllerSays { message: String },
    /// The fix of a claim's problem.
    FixClaim { problem: ClaimProblem },
    /// A selector reads an attribute no device has.
    UnknownAttribute {
        attribute: String,
        selector: SelectorRef,
        #[serde(skip_serializing_if = "Option::is_none")]
        nearest: Option<String>,
    },
    /// The fix of the attempt error.
    FixAttempt { error: AttemptCode },
    /// Check the DRA drivers' kubelet plugins on the node.
    CheckPlugins,
    /// `kubectl describe pod`.
    Describe { namespace: String, name: String },
    /// The scheduler's last word, of no node-side reason.
    SchedulerSaid { message: String },
    /// The scheduler names node-side reasons, which were not checked.
    SchedulerNodeSide { reasons: Vec<String> },
    /// Read what was not checked and run why again.
    ReadUnchecked,
    /// The scheduler said otherwise, earlier.
    SchedulerDisagrees { message: String },
    /// Dropping one clause would let devices qualify.
    Relax {
        request: String,
        selector: SelectorRef,
        clause: String,
        qualifying: usize,
        available: usize,
        nodes: usize,
    },
    /// The qualifying devices are held by other claims.
    WaitForHolders {
        request: String,
        holders: Vec<String>,
    },
    /// Shareable devices held exclusively: allocate the holders again.
    ReallocateHolders {
        request: String,
        holders: Vec<String>,
        /// The namespaces of the media-capabilities agents among the holders.
        agents: Vec<String>,
    },
    /// The qualifying devices carry taints the request does not tolerate.
    Tolerate {
        request: String,
        /// Each distinct taint, `key=value:effect` as kubectl writes taints (what
        /// `class --tolerate` takes), in the order met.
        taints: Vec<String>,
    },
    /// The pod's own node filters rule nodes out.
    RelaxNodeFilters,
    /// The constraint keeps the requests on one GPU.
    ConstraintOneGpu,
    /// Invalid pools: fix the driver or the stray slice.
    FixInvalidPools,
    /// A pool being updated: wait for the driver.
    WaitForPool,
    /// A way forward without such a GPU.
    Fallback,
    /// `why claim/NAME`: the pod that uses the claim, read.
    UsedBy {
        namespace: String,
        name: String,
        filters_applied: bool,
    },
    /// `why claim/NAME`: the pod that uses the claim, not read.
    ReadUser { namespace: String, name: String },
    /// A request holds, or would get, a render driver's sub-device whose address matched, not
    /// the whole GPU.
    SubDevice {
        claim: String,
        request: String,
        driver: String,
        device: String,
        kind: DeviceKind,
        /// Allocated already; else the device the search picks on `node`.
        allocated: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<String>,
    },
}
