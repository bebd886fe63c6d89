//! What `why` finds, as data: the [`Diagnosis`] and its parts. The analysis fills it in,
//! `cli::why` words it; `-o json|yaml` serialises it (docs/why-format.md).

use serde::Serialize;

/// How many names a grouped line lists before it says "and N more".
const NAMES_SHOWN: usize = 5;

/// The whole explanation; serialised as is for `-o json|yaml`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Diagnosis {
    /// `Pod` or `ResourceClaim`.
    pub kind: &'static str,
    /// `namespace/name`.
    pub name: String,
    /// Whether something in the fleet keeps a claim from being allocated (exit code 3).
    pub blocked: bool,
    /// One sentence.
    pub verdict: String,
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
    pub next_steps: Vec<String>,
    /// What could keep the claims from being allocated and was not checked (the nodes' own
    /// filters, devices held by claims of other namespaces); with some, a verdict that nothing
    /// blocks the claims is not given (exit code 4).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unchecked: Vec<String>,
    /// What the analysis lacks or assumed.
    pub notes: Vec<String>,
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
    pub problem: Option<Problem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<Allocation>,
    /// Per request (and firstAvailable sub-request), for claims still to allocate.
    pub requests: Vec<RequestReport>,
    pub constraints: Vec<String>,
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

/// Something wrong, the words to say it and the fix.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Problem {
    pub message: String,
    pub fix: String,
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
}

/// One request of a claim still to allocate, against the whole fleet.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestReport {
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
    /// `class decode-10bit selector #0` or `request selector #0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The first false clause, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clause: Option<String>,
    /// What the device has: `scale10bit is false`, the error, the claims holding it.
    pub detail: String,
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
    pub selector: String,
    /// The nearest name some device has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nearest: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Relaxation {
    pub selector: String,
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
    /// `Available`, or the reason.
    pub status: String,
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
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeOutcome {
    pub outcome: OutcomeKind,
    pub detail: String,
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
    /// In the scheduler's words.
    pub message: String,
    /// Whether every attempt fails: false when the scheduler may find enough feasible nodes
    /// before it checks one where the error occurs (more than 100 nodes).
    pub always: bool,
    /// Whether it is this evaluator's limit, not the scheduler's error: then nothing is
    /// decided (the verdict says so, and the exit code is 4).
    #[serde(skip)]
    pub undecided: bool,
    pub consequence: String,
    pub fix: String,
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

/// A reason without its model: (reason, selector, clause, detail).
pub(crate) type ReasonKey = (ReasonKind, Option<String>, Option<String>, String);

/// What a reason says, without the model: the lines `why` prints under one heading.
pub(crate) fn reason_key(r: &Reason) -> ReasonKey {
    (
        r.reason,
        r.selector.clone(),
        r.clause.clone(),
        r.detail.clone(),
    )
}

/// `1 device`, `2 devices`.
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A list of names, the first few and how many more.
pub(crate) fn shorten(names: Vec<String>) -> String {
    if names.len() <= NAMES_SHOWN {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..NAMES_SHOWN].join(", "),
        names.len() - NAMES_SHOWN
    )
}
