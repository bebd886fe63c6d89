//! Why a pod's (or one claim's) devices are not allocated: the explanation `kubectl media why`
//! prints, built from the objects alone. Pure: the objects come in (from files or the cluster,
//! read by `fleet`), a [`Diagnosis`] comes out, and `cli::why` renders it; the [`Diagnosis`] is
//! also the documented `-o json|yaml` schema (docs/why-format.md).
//!
//! The order follows the way a pod meets DRA: the pod's claims are found the way the kubelet
//! and the scheduler find them (`status.resourceClaimStatuses` for claims made from templates,
//! never a guessed name), the cases the scheduler is silent about are named (a claim not created
//! yet, missing, being deleted, not owned by the pod; a class that does not exist), claims
//! already allocated are shown with their devices, and the claims still to allocate go to the
//! allocator ([`super::allocate`]), node by node, as the scheduler's Filter does. Then, per
//! request, every device of the fleet is accounted for: how many pass the class's and the
//! request's selectors, and for the others the first clause that is false with the value it
//! read, grouped by reason and GPU model so that a large fleet reads as a few lines.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Event, Node, Pod, Taint, Toleration};
use k8s_openapi::api::resource::v1::{
    DeviceClassSpec, DeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use serde::Serialize;

use super::allocate::{
    AllocError, Allocator, Claim, DeviceStatus, Features, Fleet, NodeVerdict, cel_expressions,
};
use super::diagnose::{self, Finding};
use super::model::{self, FleetModel, SliceDevice};
use super::{DeviceView, NodeInfo};
use crate::fleet::objects::{Kind, Objects, Unparsed, Ustr};

/// The PCI attribute the product's claims constrain on.
const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// liken's render node attribute.
const RENDER_NODE: &str = "liken.sh/renderNode";
/// A `Taken` device that allows one allocation at a time.
const NOT_SHAREABLE: &str = "allocated to other claims, and not shareable";
/// Why a shareable device with capacities is not decided (a device's reason, and the nodes').
const CAPACITY_UNMODELLED: &str = "passes the selectors and is held by no exclusive allocation, but allows multiple allocations and has capacities: whether what one more allocation consumes fits (DRAConsumableCapacity, by requestPolicy) is not modelled by this evaluator, so the search assumes it does";

/// A `Taken` device that allows multiple allocations, held by allocations made without sharing.
const HELD_EXCLUSIVELY: &str =
    "shareable, but held exclusively (the holders' allocations have no shareID)";
/// How many names a grouped line lists before it says "and N more".
const NAMES_SHOWN: usize = 5;

/// What to explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Pod { namespace: String, name: String },
    Claim { namespace: String, name: String },
}

impl Target {
    fn namespace(&self) -> &str {
        match self {
            Target::Pod { namespace, .. } | Target::Claim { namespace, .. } => namespace,
        }
    }
}

/// The analysis' inputs besides the objects.
pub(crate) struct Input<'a> {
    pub objects: &'a Objects,
    pub target: &'a Target,
    pub features: Features,
    /// Kinds that could not be read (for example no permission), with the reason: the
    /// diagnosis says what it lacks because of each.
    pub unread: &'a [(Kind, String)],
    /// Keep every device's line, for `-o wide`.
    pub every_device: bool,
}

/// Why there is nothing to explain.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("pod {namespace}/{name} not found{hint}", hint = not_found_hint(.similar, .elsewhere, "pod", .namespace))]
    PodNotFound {
        namespace: String,
        name: String,
        similar: Vec<String>,
        elsewhere: Vec<String>,
    },
    #[error("resourceclaim {namespace}/{name} not found{hint}", hint = not_found_hint(.similar, .elsewhere, "claim", .namespace))]
    ClaimNotFound {
        namespace: String,
        name: String,
        similar: Vec<String>,
        elsewhere: Vec<String>,
    },
    /// The object asked about, or one it names, is in the input but does not have its kind's
    /// shape: the answer would be built on a misreading (or say "not found").
    #[error(
        "{of}{unparsed} (hint: that field must have the type the Kubernetes API gives it; `kubectl get {plural} -n {namespace} {name} -o yaml` shows the object as the API server keeps it)",
        of = .of.as_deref().map(|of| format!("cannot explain {of}: ")).unwrap_or_default(),
        plural = .unparsed.kind.plural(),
        namespace = .unparsed.namespace,
        name = crate::text::elide(&.unparsed.name, 300),
    )]
    Unparsed {
        unparsed: Unparsed,
        /// `pod ns/name`, when the object that does not parse is one the target names.
        of: Option<String>,
    },
    #[error(
        "pod {namespace}/{name} has no resource claims (spec.resourceClaims is empty), so DRA does not hold it (hint: kubectl describe pod -n {namespace} {name})"
    )]
    NoClaims { namespace: String, name: String },
    /// A kind without which no claim can be evaluated (ResourceSlices, DeviceClasses) could not
    /// be read: a verdict without it would be built on data we lack.
    #[error("cannot explain {target} without {plural}: {why} (hint: {hint})")]
    Unreadable {
        /// `pod ns/name` or `claim ns/name`.
        target: String,
        plural: &'static str,
        why: String,
        hint: String,
    },
}

/// `similar names: A, B; e.g. kubectl media why FLAG EXAMPLE -n NAMESPACE`: the hint of a
/// name not found, with `example` (in `namespace`) as the command to run.
pub(crate) fn similar_names_hint(
    names: &[String],
    flag: &str,
    example: &str,
    namespace: &str,
) -> String {
    format!(
        "similar names: {}; e.g. kubectl media why {flag}{example} -n {namespace}",
        names.join(", ")
    )
}

fn not_found_hint(similar: &[String], elsewhere: &[String], what: &str, namespace: &str) -> String {
    let flag = if what == "pod" { "" } else { "claim/" };
    match (similar.first(), elsewhere.first()) {
        (_, Some(namespace)) => format!(
            " (hint: a {what} of that name is in the namespace {namespace}: add -n {namespace}{more})",
            more = if elsewhere.len() > 1 {
                format!("; also in {}", elsewhere[1..].join(", "))
            } else {
                String::new()
            }
        ),
        (Some(first), None) => format!(
            " (hint: {})",
            similar_names_hint(similar, flag, first, namespace)
        ),
        (None, None) => format!(
            " (hint: check the name and -n, or list them with kubectl get {what}s)",
            what = if what == "pod" {
                "pod"
            } else {
                "resourceclaim"
            }
        ),
    }
}

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

/// The event reasons that matter here.
const EVENT_REASONS: [&str; 4] = [
    "FailedScheduling",
    "FailedResourceClaimCreation",
    "FailedPrepareDynamicResources",
    "FailedUnprepareDynamicResources",
];

/// Explains the target.
pub(crate) fn explain(input: &Input<'_>) -> Result<Diagnosis, TargetError> {
    let objects = input.objects;
    let namespace = input.target.namespace();

    // The claims to explain, each with where it stands.
    let mut used_by = Vec::new();
    // For `why claim/NAME`: what of the pod that uses the claim could not be read.
    let mut unread_user: Option<String> = None;
    // Objects of the input that did not parse, by identity: one asked about is the error.
    let unparsed: HashMap<(Kind, &str, &str), &Unparsed> = objects
        .unparsed
        .iter()
        .map(|u| ((u.kind, u.namespace.as_str(), u.name.as_str()), u))
        .collect();
    let unparsed_error = |kind: Kind, name: &str, of: Option<String>| {
        unparsed
            .get(&(kind, namespace, name))
            .map(|u| TargetError::Unparsed {
                unparsed: (*u).clone(),
                of,
            })
    };
    let (kind, name, pod, entries) = match input.target {
        Target::Pod { name, .. } => {
            if let Some(e) = unparsed_error(Kind::Pod, name, None) {
                return Err(e);
            }
            let pod = objects
                .pods
                .iter()
                .find(|p| meta_is(&p.metadata, namespace, name))
                .ok_or_else(|| TargetError::PodNotFound {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                    similar: similar(
                        objects.pods.iter().map(|p| &p.metadata),
                        Some(namespace),
                        name,
                    ),
                    elsewhere: elsewhere(objects.pods.iter().map(|p| &p.metadata), name),
                })?;
            let mut entries = pod_claims(pod, objects);
            let of = || Some(format!("pod {namespace}/{name}"));
            for entry in &entries {
                let claim = entry
                    .claim_name
                    .as_deref()
                    .filter(|_| entry.claim.is_none())
                    .and_then(|c| c.split_once('/'))
                    .and_then(|(_, claim)| unparsed_error(Kind::ResourceClaim, claim, of()));
                let template = entry
                    .template
                    .as_deref()
                    .filter(|_| entry.spec.is_none())
                    .and_then(|t| unparsed_error(Kind::ResourceClaimTemplate, t, of()));
                if let Some(e) = claim.or(template) {
                    return Err(e);
                }
            }
            if input
                .unread
                .iter()
                .any(|(k, _)| *k == Kind::ResourceClaimTemplate)
            {
                // A template not among the objects may exist: it was not read.
                for entry in entries.iter_mut().filter(|e| {
                    e.state == ClaimState::NotCreated && e.spec.is_none() && e.template.is_some()
                }) {
                    entry.problem = Some(Problem {
                        message: format!(
                            "the claim for {} is not created yet (pod.status.resourceClaimStatuses has no entry), and its template {namespace}/{} was not read, so what it asks for is not evaluated",
                            entry.name,
                            entry.template.as_deref().unwrap_or_default()
                        ),
                        fix: "wait for the resource claim controller; if it stays so, look for FailedResourceClaimCreation events; read the templates too (see the note) to evaluate the claim".to_owned(),
                    });
                }
            }
            if entries.is_empty() {
                return Err(TargetError::NoClaims {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                });
            }
            ("Pod", name, Some(pod), entries)
        }
        Target::Claim { name, .. } => {
            if let Some(e) = unparsed_error(Kind::ResourceClaim, name, None) {
                return Err(e);
            }
            let claim = objects
                .claims
                .iter()
                .find(|c| meta_is(&c.metadata, namespace, name))
                .ok_or_else(|| TargetError::ClaimNotFound {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                    similar: similar(
                        objects.claims.iter().map(|c| &c.metadata),
                        Some(namespace),
                        name,
                    ),
                    elsewhere: elsewhere(objects.claims.iter().map(|c| &c.metadata), name),
                })?;
            let mut entry = Entry {
                name: name.clone(),
                claim: Some(claim),
                claim_name: Some(model::claim_name(claim)),
                template: None,
                spec: Some(&claim.spec),
                state: claim_state(claim, None, false),
                problem: None,
            };
            // The pod that uses the claim: its node filters decide where the claim can be
            // allocated, and its events are the scheduler's words about it.
            let users = claim_users(claim, objects);
            let pods_read =
                !objects.pods.is_empty() && !input.unread.iter().any(|(k, _)| *k == Kind::Pod);
            let allocated = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .is_some();
            match (users.0.first(), users.1) {
                (Some(_), Some(_)) => {}
                // Named, but not read: its node filters are not known.
                (Some(user), None) => {
                    unread_user = Some(format!(
                        "the node filters of pod {user}, which uses the claim (its nodeSelector, affinity and tolerations), as it was not read"
                    ))
                }
                (None, _) if !pods_read => {
                    unread_user = Some(
                        "the pod that uses the claim and its node filters, as no pods were read"
                            .to_owned(),
                    )
                }
                // Nothing uses it: the scheduler allocates a claim only for a pod it schedules.
                (None, _) if !allocated => {
                    entry.problem = Some(Problem {
                        message: format!(
                            "no pod uses it (none in {namespace} names it in spec.resourceClaims, none owns it, and status.reservedFor is empty), and the scheduler allocates a claim only while it schedules a pod that uses it"
                        ),
                        fix: format!(
                            "name it in a pod's spec.resourceClaims (resourceClaimName: {name}); if the pod it was made for is gone, delete the claim"
                        ),
                    });
                }
                (None, _) => {}
            }
            used_by = users.0;
            ("ResourceClaim", name, users.1, vec![entry])
        }
    };
    // Templates matter only for claims not created yet.
    let not_created = entries.iter().any(|e| e.state == ClaimState::NotCreated);
    let notes: Vec<String> = input
        .unread
        .iter()
        .filter(|(kind, _)| *kind != Kind::ResourceClaimTemplate || not_created)
        .map(|(kind, why)| match kind {
            // Claims are only ever unread outside the namespace (`cli::why` falls back to it;
            // without the pod's own claims there is nothing to explain).
            Kind::ResourceClaim if objects.claims.is_empty() => format!(
                "resourceclaims were not read ({why}): devices other claims hold are not known to be taken"
            ),
            Kind::ResourceClaim => format!(
                "resourceclaims outside the namespace {namespace} were not read ({why}): devices they hold are not known to be taken; the namespace's own claims were read"
            ),
            _ => format!("{} were not read ({why}): {}", kind.plural(), lacks(*kind)),
        })
        .collect();
    let full_name = format!("{namespace}/{name}");

    let classes: BTreeMap<String, DeviceClassSpec> = objects
        .classes
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c.spec.clone()))
        .collect();
    let mut claims: Vec<ClaimReport> = Vec::new();
    let mut problems: Vec<Problem> = Vec::new();
    // The claims the allocator works on: pending ones, and those made from a template that
    // does not exist yet (the template's spec is what the claim will ask for).
    let mut pending: Vec<(usize, String, &ResourceClaimSpec)> = Vec::new();
    let mut bound_nodes: Vec<&k8s_openapi::api::core::v1::NodeSelector> = Vec::new();
    let model = model::build(
        &objects.slices,
        &objects.claims,
        &objects.nodes,
        &objects.taint_rules,
        input.features,
    );
    let models = gpu_models(&model);

    for entry in &entries {
        let mut report = ClaimReport {
            name: entry.name.clone(),
            claim: entry.claim_name.clone(),
            template: entry.template.clone(),
            state: entry.state,
            reserved_for: entry.claim.map(reserved_for).unwrap_or_default(),
            problem: entry.problem.clone(),
            allocation: None,
            requests: Vec::new(),
            constraints: Vec::new(),
        };
        if let Some(problem) = &entry.problem {
            problems.push(problem.clone());
        }
        if let Some(spec) = entry.spec {
            report.constraints = spec
                .devices
                .as_ref()
                .and_then(|d| d.constraints.as_deref())
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    let requests = c.requests.as_deref().unwrap_or_default();
                    let over = if requests.is_empty() {
                        "all requests".to_owned()
                    } else {
                        requests.join(", ")
                    };
                    match (&c.match_attribute, &c.distinct_attribute) {
                        (Some(a), _) => format!("matchAttribute {a} over {over}"),
                        (None, Some(a)) => format!("distinctAttribute {a} over {over}"),
                        (None, None) => format!("a constraint over {over}"),
                    }
                })
                .collect();
        }
        match (entry.state, entry.claim) {
            (ClaimState::Reserved | ClaimState::Allocated, Some(claim)) => {
                let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
                if let Some(selector) = allocation.and_then(|a| a.node_selector.as_ref()) {
                    bound_nodes.push(selector);
                }
                report.allocation = Some(allocated(claim, &model));
            }
            (ClaimState::Pending | ClaimState::NotCreated, _) => {
                if let Some(spec) = entry.spec {
                    pending.push((claims.len(), entry.claim_label(namespace), spec));
                }
            }
            _ => {}
        }
        claims.push(report);
    }

    // Classes that do not exist: the scheduler fails the pod with "request %s: device class %s
    // does not exist" before looking at a device.
    for (index, label, spec) in &pending {
        for (request, class) in request_classes(spec) {
            if !classes.contains_key(class) {
                let nearest = nearest(class, classes.keys().map(String::as_str));
                let problem = Problem {
                    message: format!(
                        "claim {label}: request {request}: device class {class} does not exist"
                    ),
                    fix: match nearest {
                        Some(n) => format!(
                            "did you mean {n}? fix deviceClassName, or create the class (kubectl media class ... | kubectl apply -f -)"
                        ),
                        None => "create the DeviceClass (kubectl media class ... | kubectl apply -f -), or fix deviceClassName".to_owned(),
                    },
                };
                if claims[*index].problem.is_none() {
                    claims[*index].problem = Some(problem.clone());
                }
                problems.push(problem);
            }
        }
    }
    if input.unread.iter().any(|(k, _)| *k == Kind::DeviceClass) {
        // Without the classes nothing can be evaluated; the note says so.
        problems.retain(|p| !p.message.contains("does not exist"));
        for report in &mut claims {
            report.problem = report
                .problem
                .take()
                .filter(|p| !p.message.contains("does not exist"));
        }
    }

    let mut diagnosis = Diagnosis {
        kind,
        name: full_name.clone(),
        blocked: false,
        verdict: String::new(),
        claims,
        nodes: None,
        attempt_error: None,
        scheduler: scheduler_words(pod, &objects.events),
        used_by,
        next_steps: Vec::new(),
        unchecked: Vec::new(),
        notes,
    };
    if !model.nodes_known && !pending.is_empty() {
        diagnosis.unchecked.push(
            "the nodes' own filters (the pod's nodeSelector, affinity and tolerations of node taints), as no Node objects were read".to_owned(),
        );
        // Nodes that could not be read have their note already; a list that came back empty
        // is said here.
        if !input.unread.iter().any(|(k, _)| *k == Kind::Node) {
            diagnosis.notes.push(
                "no Node objects were read: the nodes are the ones the slices name, and the pod's nodeSelector, affinity and node taints were not checked".to_owned(),
            );
        }
    }
    if let Some(user) = unread_user.filter(|_| !pending.is_empty()) {
        diagnosis.notes.push(format!("not checked: {user}"));
        diagnosis.unchecked.push(user);
    }
    if !model.ignored_slices.is_empty() && !pending.is_empty() {
        diagnosis.notes.push(format!(
            "Kubernetes 1.{} skips {} {}: {} perDeviceNodeSelection, which its scheduler reads only with the DRAPartitionableDevices feature gate (off by default before 1.36), so none of {} devices is allocated",
            input.features.release,
            if model.ignored_slices.len() == 1 { "ResourceSlice" } else { "ResourceSlices" },
            model.ignored_slices.join(", "),
            if model.ignored_slices.len() == 1 { "it sets" } else { "they set" },
            if model.ignored_slices.len() == 1 { "its" } else { "their" },
        ));
    }
    if input.unread.iter().any(|(k, _)| *k == Kind::ResourceClaim) && !pending.is_empty() {
        diagnosis.unchecked.push(if objects.claims.is_empty() {
            "devices held by other claims, as no resourceclaims were read".to_owned()
        } else {
            format!(
                "devices held by claims outside the namespace {namespace}, as those claims were not read"
            )
        });
    }

    let class_problem = problems
        .iter()
        .any(|p| p.message.contains("does not exist"));
    let can_evaluate = !pending.is_empty()
        && !class_problem
        && !input.unread.iter().any(|(k, _)| *k == Kind::DeviceClass);
    if can_evaluate {
        let work = Work {
            input,
            model: &model,
            models: &models,
            classes: &classes,
            pod,
            pending: &pending,
            bound_nodes: &bound_nodes,
        };
        evaluate(&work, &mut diagnosis);
    }
    conclude(&mut diagnosis, pod, &problems, &pending);
    Ok(diagnosis)
}

/// A claim of the pod, found.
struct Entry<'o> {
    name: String,
    claim: Option<&'o ResourceClaim>,
    claim_name: Option<String>,
    template: Option<String>,
    spec: Option<&'o ResourceClaimSpec>,
    state: ClaimState,
    problem: Option<Problem>,
}

impl Entry<'_> {
    fn claim_label(&self, namespace: &str) -> String {
        match (&self.claim_name, &self.template) {
            (Some(name), _) => name.clone(),
            (None, Some(template)) => format!("{namespace}/(from template {template})"),
            (None, None) => format!("{namespace}/{}", self.name),
        }
    }
}

fn meta_is(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    namespace: &str,
    name: &str,
) -> bool {
    meta.name.as_deref() == Some(name)
        && meta.namespace.as_deref().unwrap_or("default") == namespace
}

/// Up to three names close to `name` in `namespace`, closest first; with no namespace (`-A`),
/// in every namespace, each as `namespace/name`.
pub(crate) fn similar<'m>(
    metas: impl Iterator<Item = &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    namespace: Option<&str>,
    name: &str,
) -> Vec<String> {
    let mut scored: Vec<(usize, String)> = metas
        .filter(|m| namespace.is_none_or(|ns| m.namespace.as_deref().unwrap_or("default") == ns))
        .filter_map(|m| {
            let candidate = m.name.as_deref()?;
            let distance = strsim::levenshtein(candidate, name);
            let close = distance <= name.len().max(3) / 3
                || candidate.starts_with(name)
                || name.starts_with(candidate);
            let shown = match namespace {
                Some(_) => candidate.to_owned(),
                None => format!(
                    "{}/{candidate}",
                    m.namespace.as_deref().unwrap_or("default")
                ),
            };
            close.then_some((distance, shown))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

fn elsewhere<'m>(
    metas: impl Iterator<Item = &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
    name: &str,
) -> Vec<String> {
    let mut namespaces: Vec<String> = metas
        .filter(|m| m.name.as_deref() == Some(name))
        .filter_map(|m| m.namespace.clone())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}

/// The pod's claims, each found as the kubelet finds it.
fn pod_claims<'o>(pod: &'o Pod, objects: &'o Objects) -> Vec<Entry<'o>> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    let find = |name: &str| {
        objects
            .claims
            .iter()
            .find(|c| meta_is(&c.metadata, namespace, name))
    };
    let mut out = Vec::new();
    for entry in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
    {
        let mut found = Entry {
            name: entry.name.clone(),
            claim: None,
            claim_name: None,
            template: entry.resource_claim_template_name.clone(),
            spec: None,
            state: ClaimState::Missing,
            problem: None,
        };
        match (
            &entry.resource_claim_name,
            &entry.resource_claim_template_name,
        ) {
            (Some(claim_name), _) => {
                found.claim_name = Some(format!("{namespace}/{claim_name}"));
                match find(claim_name) {
                    Some(claim) => {
                        found.claim = Some(claim);
                        found.spec = Some(&claim.spec);
                        found.state = claim_state(claim, Some(pod), false);
                    }
                    None => {
                        found.problem = Some(Problem {
                            message: format!(
                                "the pod names ResourceClaim {namespace}/{claim_name}, which does not exist; the scheduler waits for it without an event"
                            ),
                            fix: format!(
                                "create the claim {claim_name} in {namespace}, or fix spec.resourceClaims[{}].resourceClaimName",
                                entry.name
                            ),
                        });
                    }
                }
            }
            (None, Some(template_name)) => {
                let template = objects
                    .claim_templates
                    .iter()
                    .find(|t| meta_is(&t.metadata, namespace, template_name));
                let status = statuses.iter().find(|s| s.name == entry.name);
                match status {
                    None => {
                        found.state = ClaimState::NotCreated;
                        found.spec = template.map(|t| &t.spec.spec);
                        found.problem = Some(match template {
                            Some(_) => Problem {
                                message: format!(
                                    "the claim for {} is not created yet (pod.status.resourceClaimStatuses has no entry); the scheduler waits without an event",
                                    entry.name
                                ),
                                fix: "wait for the resource claim controller; if it stays so, look for FailedResourceClaimCreation events and the controller manager's log".to_owned(),
                            },
                            None => Problem {
                                message: format!(
                                    "ResourceClaimTemplate {namespace}/{template_name} does not exist, so no claim can be made for {}",
                                    entry.name
                                ),
                                fix: format!("create the template {template_name} in {namespace} (kubectl media class --claim ...), or fix spec.resourceClaims[{}].resourceClaimTemplateName", entry.name),
                            },
                        });
                    }
                    Some(status) => match &status.resource_claim_name {
                        None => found.state = ClaimState::NotNeeded,
                        Some(claim_name) => {
                            found.claim_name = Some(format!("{namespace}/{claim_name}"));
                            match find(claim_name) {
                                Some(claim) => {
                                    found.claim = Some(claim);
                                    found.spec = Some(&claim.spec);
                                    found.state = claim_state(claim, Some(pod), true);
                                    if found.state == ClaimState::NotOwned {
                                        found.problem = Some(Problem {
                                            message: format!(
                                                "ResourceClaim {namespace}/{claim_name} was not created for pod {namespace}/{} (the pod is not its owner); the scheduler waits without an event",
                                                pod.metadata.name.as_deref().unwrap_or_default()
                                            ),
                                            fix: "delete the claim so that the controller makes the pod's own, or recreate the pod".to_owned(),
                                        });
                                    }
                                }
                                None => {
                                    found.problem = Some(Problem {
                                        message: format!(
                                            "the pod's status names ResourceClaim {namespace}/{claim_name}, which does not exist (deleted?); the scheduler waits without an event"
                                        ),
                                        fix: "recreate the pod, so that its claim is made again"
                                            .to_owned(),
                                    });
                                }
                            }
                        }
                    },
                }
            }
            (None, None) => {
                found.problem = Some(Problem {
                    message: format!(
                        "spec.resourceClaims[{}] names neither a claim nor a template",
                        entry.name
                    ),
                    fix: "set resourceClaimName or resourceClaimTemplateName".to_owned(),
                });
            }
        }
        if found.state == ClaimState::BeingDeleted && found.problem.is_none() {
            found.problem = Some(Problem {
                message: format!(
                    "resourceclaim {} is being deleted",
                    found.claim_name.clone().unwrap_or_default()
                ),
                fix: "wait for the deletion to finish (finalizers), then recreate the pod or the claim".to_owned(),
            });
        }
        out.push(found);
    }
    out
}

/// Where one claim stands, for `pod` (when the pod is known).
fn claim_state(claim: &ResourceClaim, pod: Option<&Pod>, from_template: bool) -> ClaimState {
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimState::BeingDeleted;
    }
    // A claim made from a template belongs to its pod (the kubelet and the scheduler both
    // check the controller reference); one the pod names directly may be anyone's.
    if let Some(pod) = pod
        && from_template
        && !owned_by(claim, pod)
    {
        return ClaimState::NotOwned;
    }
    let status = claim.status.as_ref();
    let allocated = status.and_then(|s| s.allocation.as_ref()).is_some();
    let consumers = status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default();
    // For a pod: reserved for that pod. For a claim on its own: reserved for anyone.
    let reserved = match pod {
        Some(pod) => {
            let uid = pod.metadata.uid.as_deref();
            consumers.iter().any(|r| {
                r.resource == "pods"
                    && (Some(r.uid.as_str()) == uid
                        || (uid.is_none() && Some(&r.name) == pod.metadata.name.as_ref()))
            })
        }
        None => !consumers.is_empty(),
    };
    match (allocated, reserved) {
        (true, true) => ClaimState::Reserved,
        (true, false) => ClaimState::Allocated,
        (false, _) => ClaimState::Pending,
    }
}

/// A claim's `status.reservedFor`, as words: `pod ns/name`, or `RESOURCE name`.
fn reserved_for(claim: &ResourceClaim) -> Vec<String> {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or("default");
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|r| match r.resource.as_str() {
            "pods" => format!("pod {namespace}/{}", r.name),
            other => format!("{other} {}", r.name),
        })
        .collect()
}

/// The pods that use a claim, `namespace/name`: those it is reserved for, its owner, and those
/// that name it (directly, or through their status for a claim made from a template); with the
/// first of them that is among the objects.
pub(crate) fn claim_users<'o>(
    claim: &ResourceClaim,
    objects: &'o Objects,
) -> (Vec<String>, Option<&'o Pod>) {
    let namespace = claim.metadata.namespace.as_deref().unwrap_or("default");
    let claim_name = claim.metadata.name.as_deref().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    let status = claim.status.as_ref();
    for r in status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.resource == "pods")
    {
        names.push(r.name.clone());
    }
    for o in claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|o| o.kind == "Pod" && o.controller == Some(true))
    {
        names.push(o.name.clone());
    }
    for pod in objects
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or("default") == namespace)
    {
        let spec_names = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.resource_claim_name.as_deref() == Some(claim_name));
        let status_names = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.resource_claim_name.as_deref() == Some(claim_name));
        if spec_names || status_names {
            names.extend(pod.metadata.name.clone());
        }
    }
    let mut seen = HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let pod = names.iter().find_map(|n| {
        objects
            .pods
            .iter()
            .find(|p| meta_is(&p.metadata, namespace, n))
    });
    (
        names
            .into_iter()
            .map(|n| format!("{namespace}/{n}"))
            .collect(),
        pod,
    )
}

fn owned_by(claim: &ResourceClaim, pod: &Pod) -> bool {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| {
            o.kind == "Pod"
                && o.controller == Some(true)
                && (pod.metadata.uid.as_deref().is_none_or(|uid| uid == o.uid))
                && Some(&o.name) == pod.metadata.name.as_ref()
        })
}

/// What the analysis cannot say without a kind.
fn lacks(kind: Kind) -> &'static str {
    match kind {
        Kind::ResourceSlice => "no device can be evaluated",
        Kind::DeviceClass => "no selector can be evaluated",
        // Never said: see the note for claims in `explain`.
        Kind::ResourceClaim => "devices held by other namespaces' claims are not known to be taken",
        Kind::ResourceClaimTemplate => "claims not created yet cannot be evaluated",
        Kind::Pod => "the pod cannot be found",
        Kind::Node => "the pod's nodeSelector, affinity and node taints are not checked",
        Kind::Event => "the scheduler's and the kubelet's messages are not shown",
        Kind::DeviceTaintRule => "the taints DeviceTaintRules add to devices are not applied",
    }
}

/// (request name, class name) of every request and sub-request.
fn request_classes(spec: &ResourceClaimSpec) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    for request in requests(spec) {
        if let Some(exact) = &request.exactly {
            out.push((request.name.clone(), exact.device_class_name.as_str()));
        }
        for sub in request.first_available.as_deref().unwrap_or_default() {
            out.push((
                format!("{}/{}", request.name, sub.name),
                sub.device_class_name.as_str(),
            ));
        }
    }
    out
}

fn requests(spec: &ResourceClaimSpec) -> &[DeviceRequest] {
    spec.devices
        .as_ref()
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default()
}

/// What an allocated claim got, with the GPU's address and render node looked up.
fn allocated(claim: &ResourceClaim, model: &FleetModel<'_>) -> Allocation {
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let node = allocation
        .and_then(|a| a.node_selector.as_ref())
        .and_then(node_of_selector);
    let devices = allocation
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let device = model
                .devices
                .iter()
                .find(|d| d.driver() == r.driver && d.pool() == r.pool && d.name() == r.device);
            AllocatedDevice {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                pci_bus_id: device.and_then(|d| d.string(PCI_BUS_ID)).map(str::to_owned),
                render_node: device
                    .and_then(|d| d.string(RENDER_NODE))
                    .map(str::to_owned),
            }
        })
        .collect();
    Allocation { node, devices }
}

/// The node an allocation's node selector names (`metadata.name In [node]`, as the scheduler
/// writes it).
fn node_of_selector(selector: &k8s_openapi::api::core::v1::NodeSelector) -> Option<String> {
    selector.node_selector_terms.iter().find_map(|t| {
        t.match_fields
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|r| r.key == "metadata.name" && r.operator == "In")
            .and_then(|r| r.values.as_ref()?.first().cloned())
    })
}

/// A GPU's model name for each device: a media.liken.sh device's `name` attribute, and for
/// other drivers' devices the name of the media device at the same node and PCI address.
fn gpu_models(model: &FleetModel<'_>) -> Vec<String> {
    let name_attribute = format!("{}/name", crate::catalogue::DRIVER);
    let mut by_address: HashMap<(Option<&str>, &str), &str> = HashMap::new();
    for device in &model.devices {
        if device.driver() == crate::catalogue::DRIVER
            && let (Some(pci), Some(name)) =
                (device.string(PCI_BUS_ID), device.string(&name_attribute))
        {
            by_address.insert((device.node().map(|n| n.as_str()), pci), name);
        }
    }
    model
        .devices
        .iter()
        .map(|device| {
            let own = (device.driver() == crate::catalogue::DRIVER)
                .then(|| device.string(&name_attribute))
                .flatten();
            let joined = device.string(PCI_BUS_ID).and_then(|pci| {
                by_address
                    .get(&(device.node().map(|n| n.as_str()), pci))
                    .copied()
            });
            match own.or(joined) {
                Some(name) => name.to_owned(),
                None => format!("{} device", device.driver()),
            }
        })
        .collect()
}

/// A group of devices that fail a request the same way: (reason, selector, clause, detail,
/// model).
type GroupKey = (ReasonKind, String, String, String, String);

/// A reason without its model: (reason, selector, clause, detail).
pub(crate) type ReasonKey = (ReasonKind, Option<String>, Option<String>, String);

/// What a group counts.
#[derive(Default)]
struct Group {
    devices: usize,
    /// Interned: a fleet's devices name a few thousand nodes tens of thousands of times.
    nodes: HashSet<Ustr>,
    claims: BTreeSet<String>,
}

/// What the allocator's part works on.
struct Work<'w, 'o> {
    input: &'w Input<'o>,
    model: &'w FleetModel<'o>,
    /// Each device's GPU model, by fleet index.
    models: &'w [String],
    classes: &'w BTreeMap<String, DeviceClassSpec>,
    pod: Option<&'o Pod>,
    /// The claims to allocate: (index in the diagnosis, `namespace/name`, spec).
    pending: &'w [(usize, String, &'o ResourceClaimSpec)],
    /// The node selectors of the pod's claims already allocated.
    bound_nodes: &'w [&'o k8s_openapi::api::core::v1::NodeSelector],
}

/// The allocator's part: node by node, then request by request.
fn evaluate(work: &Work<'_, '_>, diagnosis: &mut Diagnosis) {
    let Work {
        input,
        model,
        models,
        classes,
        pod,
        pending,
        bound_nodes,
    } = *work;
    let fleet = Fleet {
        devices: &model.devices,
        taken: &model.taken,
        incomplete_pools: &model.incomplete_pools,
    };
    let mut allocator = Allocator::new(fleet, classes, input.features);
    let claims: Vec<Claim<'_>> = pending
        .iter()
        .map(|(_, label, spec)| Claim { name: label, spec })
        .collect();

    // Per node.
    let mut outcomes: BTreeMap<(OutcomeKind, String), Vec<String>> = BTreeMap::new();
    // Per (claim, request): device index → status, each device once.
    let mut statuses: Vec<BTreeMap<usize, DeviceStatus>> = Vec::new();
    let mut request_keys: Vec<(String, String)> = Vec::new();
    // Where each key is in `request_keys`: a claim may have thousands of requests, and a scan
    // per request and node made that minutes.
    let mut request_slots: HashMap<(String, String), usize> = HashMap::new();
    let mut attempt_error: Option<AllocError> = None;
    let mut picks: Vec<NodePicks> = Vec::new();
    // A distinctAttribute constraint keeps requests apart rather than on one GPU.
    let distinct = claims.iter().any(|c| {
        c.spec
            .devices
            .as_ref()
            .and_then(|d| d.constraints.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.match_attribute.is_none())
    });
    // Nodes the scheduler filters on whose allocation fails with an error.
    let mut erring = 0;
    let mut allocatable = 0;
    for candidate in &model.nodes {
        let node = &candidate.info;
        // The pod's own node filters (NodeUnschedulable, TaintToleration, NodeAffinity) are
        // plugins that run before DynamicResources: a node they reject is never allocated on,
        // so an error the allocator would meet there never reaches the scheduler. The
        // allocation is still computed, to say what the node would allow without them.
        let filtered = pod
            .zip(candidate.node)
            .and_then(|(pod, node_object)| pod_filter(pod, node, node_object));
        let (report, failed) = match allocator.explain(node, &claims) {
            Ok(report) => (report, false),
            Err(e) => {
                // The attempt fails on this node; each request's devices are still accounted
                // for, one request at a time (a runtime error shows on the device it hits).
                let mut surveyed = Vec::new();
                for claim in &claims {
                    for request in requests(claim.spec) {
                        let subs = request.first_available.as_ref().map_or(0, Vec::len);
                        for sub in (0..subs.max(1)).map(|i| (subs > 0).then_some(i)) {
                            let name = match sub {
                                Some(i) => format!(
                                    "{}/{}",
                                    request.name,
                                    request.first_available.as_deref().unwrap_or_default()[i].name
                                ),
                                None => request.name.clone(),
                            };
                            if let Ok(devices) = allocator.survey(node, *claim, request, sub) {
                                surveyed.push(super::allocate::RequestReport {
                                    claim: claim.name.to_owned(),
                                    request: name,
                                    devices,
                                });
                            }
                        }
                    }
                }
                let outcome = match &filtered {
                    Some(filtered) => filtered.clone(),
                    None => {
                        erring += 1;
                        (OutcomeKind::Error, error_summary(&e))
                    }
                };
                if filtered.is_none() {
                    attempt_error.get_or_insert(e);
                }
                outcomes.entry(outcome).or_default().push(node.name.clone());
                let report = super::allocate::NodeReport {
                    verdict: NodeVerdict::CannotAllocate,
                    requests: surveyed,
                    constraints_block: false,
                };
                (report, true)
            }
        };
        for request in &report.requests {
            let key = (request.claim.clone(), request.request.clone());
            let slot = *request_slots.entry(key).or_insert_with_key(|key| {
                request_keys.push(key.clone());
                statuses.push(BTreeMap::new());
                statuses.len() - 1
            });
            for (d, status) in &request.devices {
                statuses[slot].entry(*d).or_insert_with(|| status.clone());
            }
        }
        if failed {
            continue;
        }
        let bound_elsewhere = bound_nodes.iter().any(|s| !node.matches(s));
        let (kind, detail) = if let Some(filtered) = filtered {
            filtered
        } else if bound_elsewhere {
            (
                OutcomeKind::ClaimElsewhere,
                "another claim of the pod is allocated on a different node".to_owned(),
            )
        } else {
            match &report.verdict {
                NodeVerdict::Allocated(results) => {
                    allocatable += 1;
                    picks.push(NodePicks {
                        node: node.name.clone(),
                        devices: claims
                            .iter()
                            .zip(results)
                            .flat_map(|(claim, results)| {
                                results.iter().map(|r| PickedDevice {
                                    claim: claim.name.to_owned(),
                                    request: r.request.clone(),
                                    driver: r.device.driver.clone(),
                                    pool: r.device.pool.clone(),
                                    device: r.device.device.clone(),
                                })
                            })
                            .collect(),
                    });
                    let detail = if model.nodes_known {
                        "every claim can be allocated now"
                    } else {
                        "the devices allow every claim (the node's own filters unchecked)"
                    };
                    (OutcomeKind::Allocatable, detail.to_owned())
                }
                NodeVerdict::CannotAllocate => why_not_on_node(&allocator, &report, distinct),
                NodeVerdict::InvalidPools(pools) => (
                    OutcomeKind::InvalidPools,
                    format!(
                        "invalid resource pools were encountered: {}",
                        pools
                            .iter()
                            .map(|p| format!("pool {} ({})", p.pool, p.reason))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
        };
        outcomes
            .entry((kind, detail))
            .or_default()
            .push(node.name.clone());
    }

    // Per request, against the fleet.
    // Devices of one CEL class (see Allocator::cel_class) fail a selector the same way: each
    // is diagnosed once per class, not once per device.
    let mut diagnoses: HashMap<(String, usize), Finding> = HashMap::new();
    let mut known: Option<HashSet<(String, String)>> = None;
    for (slot, (claim_label, request_name)) in request_keys.iter().enumerate() {
        let Some(&(claim_index, _, spec)) = pending.iter().find(|(_, l, _)| l == claim_label)
        else {
            continue;
        };
        let Some((class_name, request_selectors, mode, count)) = request_shape(spec, request_name)
        else {
            continue;
        };
        let class_selectors = classes
            .get(class_name)
            .and_then(|c| cel_expressions(c.selectors.as_deref().unwrap_or_default()))
            .unwrap_or_default();
        let mut report = RequestReport {
            name: request_name.clone(),
            class: class_name.to_owned(),
            allocation_mode: mode.to_owned(),
            count,
            total: statuses[slot].len(),
            qualifying: 0,
            available: 0,
            qualifying_nodes: Vec::new(),
            reasons: Vec::new(),
            unknown_attributes: Vec::new(),
            relaxations: Vec::new(),
            devices: Vec::new(),
        };
        let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
        let mut qualifying_nodes: HashSet<Ustr> = HashSet::new();
        let any_node = Ustr::from("(any node)");
        // Devices that fail selectors: their clause vectors, for the relaxations.
        let mut failing: Vec<usize> = Vec::new();
        for (&d, status) in &statuses[slot] {
            let (node_name, device_signature) = {
                let device = allocator.device(d);
                (device.node().unwrap_or(any_node), allocator.cel_class(d))
            };
            let (kind, selector, clause, detail, claims_holding) = match status {
                DeviceStatus::Available => {
                    report.qualifying += 1;
                    qualifying_nodes.insert(node_name);
                    report.available += 1;
                    if input.every_device {
                        report.devices.push(device_line(
                            allocator.device(d),
                            &models[d],
                            "Available".to_owned(),
                        ));
                    }
                    continue;
                }
                DeviceStatus::Taken { claims } => {
                    report.qualifying += 1;
                    qualifying_nodes.insert(node_name);
                    // A shareable device is taken only by an allocation without a share ID
                    // (allocateddevices.go: with DRAConsumableCapacity on, a result with a
                    // shareID is a shared allocation; one without is exclusive, as every
                    // allocation made while the gate was off is).
                    let shareable = input.features.consumable_capacity
                        && allocator.device(d).allow_multiple_allocations() == Some(true);
                    let detail = if shareable {
                        HELD_EXCLUSIVELY
                    } else {
                        NOT_SHAREABLE
                    };
                    (
                        ReasonKind::Taken,
                        None,
                        None,
                        detail.to_owned(),
                        claims.clone(),
                    )
                }
                DeviceStatus::CapacityUnmodelled => {
                    // It passes the selectors and is assumed to have room (what is not known).
                    report.qualifying += 1;
                    report.available += 1;
                    qualifying_nodes.insert(node_name);
                    (
                        ReasonKind::CannotEvaluate,
                        None,
                        None,
                        CAPACITY_UNMODELLED.to_owned(),
                        Vec::new(),
                    )
                }
                DeviceStatus::CapacityShort {
                    capacity,
                    asked,
                    has,
                } => (
                    ReasonKind::CapacityShort,
                    None,
                    None,
                    match has {
                        Some(has) => {
                            format!("capacity {capacity} is {has}, less than the {asked} asked")
                        }
                        None => format!("no capacity {capacity} (the request asks for {asked})"),
                    },
                    Vec::new(),
                ),
                DeviceStatus::PoolInvalid { pool, reason } => (
                    ReasonKind::PoolInvalid,
                    None,
                    None,
                    format!(
                        "resource pool {pool} is invalid on the node ({reason}): the scheduler allocates nothing from it"
                    ),
                    Vec::new(),
                ),
                DeviceStatus::PoolUpdating { pool } => (
                    ReasonKind::PoolUpdating,
                    None,
                    None,
                    format!(
                        "resource pool {pool} is being updated (not all its slices are published): the scheduler allocates nothing from it until it is complete"
                    ),
                    Vec::new(),
                ),
                DeviceStatus::Untolerated { taint } => {
                    report.qualifying += 1;
                    qualifying_nodes.insert(node_name);
                    (
                        ReasonKind::Untolerated,
                        None,
                        None,
                        format!(
                            "taint {}{}:{} is not tolerated",
                            taint.key,
                            taint
                                .value
                                .as_deref()
                                .map(|v| format!("={v}"))
                                .unwrap_or_default(),
                            taint.effect
                        ),
                        Vec::new(),
                    )
                }
                DeviceStatus::NotSelected { class, index } => {
                    failing.push(d);
                    let (scope, expression) = match class {
                        Some(class) => (
                            format!("class {class} selector #{index}"),
                            class_selectors.get(*index).copied(),
                        ),
                        None => (
                            format!("request selector #{index}"),
                            request_selectors.get(*index).copied(),
                        ),
                    };
                    let expression = expression.unwrap_or_default();
                    let finding = diagnoses
                        .entry((expression.to_owned(), device_signature))
                        .or_insert_with(|| allocator.diagnose(expression, d))
                        .clone();
                    match finding {
                        Finding::False { clause }
                            if clause.reads.len() == 1 && clause.reads[0].domain.is_none() =>
                        {
                            let detail = clause.reads[0].to_string();
                            (
                                ReasonKind::OtherDriver,
                                Some(scope),
                                Some(clause.text),
                                detail,
                                Vec::new(),
                            )
                        }
                        Finding::False { clause } => {
                            let detail = if clause.reads.is_empty() {
                                "is false".to_owned()
                            } else {
                                clause
                                    .reads
                                    .iter()
                                    .map(ToString::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            };
                            (
                                ReasonKind::SelectorFalse,
                                Some(scope),
                                Some(clause.text),
                                detail,
                                Vec::new(),
                            )
                        }
                        Finding::RuntimeError { clause, message } => (
                            ReasonKind::RuntimeError,
                            Some(scope),
                            Some(clause.text),
                            format!("CEL runtime error: {message}"),
                            Vec::new(),
                        ),
                        Finding::CannotEvaluate { reason } => (
                            ReasonKind::CannotEvaluate,
                            Some(scope),
                            None,
                            format!("cannot evaluate: {reason}"),
                            Vec::new(),
                        ),
                        Finding::Selected => (
                            ReasonKind::SelectorFalse,
                            Some(scope),
                            None,
                            "is false".to_owned(),
                            Vec::new(),
                        ),
                    }
                }
                DeviceStatus::Failed(e) => {
                    let (kind, detail) = match e {
                        AllocError::Runtime(f) => (
                            ReasonKind::RuntimeError,
                            format!("CEL runtime error: {}", f.message),
                        ),
                        AllocError::CannotEvaluate(f) => (
                            ReasonKind::CannotEvaluate,
                            format!("cannot evaluate: {}", f.message),
                        ),
                        other => (ReasonKind::CannotEvaluate, other.to_string()),
                    };
                    let selector = match e {
                        AllocError::Runtime(f) | AllocError::CannotEvaluate(f) => {
                            Some(format!("{} selector #{}", f.scope, f.index))
                        }
                        _ => None,
                    };
                    (kind, selector, None, detail, Vec::new())
                }
            };
            if input.every_device {
                let text = match (&selector, &clause) {
                    (Some(s), Some(c)) => format!("{s}: {c}: {detail}"),
                    (Some(s), None) => format!("{s}: {detail}"),
                    _ => detail.clone(),
                };
                report
                    .devices
                    .push(device_line(allocator.device(d), &models[d], text));
            }
            let model = if kind == ReasonKind::OtherDriver {
                format!("{} devices", allocator.device(d).driver())
            } else {
                models[d].clone()
            };
            let entry = groups
                .entry((
                    kind,
                    selector.unwrap_or_default(),
                    clause.unwrap_or_default(),
                    detail,
                    model,
                ))
                .or_default();
            entry.devices += 1;
            entry.nodes.insert(node_name);
            entry.claims.extend(claims_holding);
        }
        let mut reasons: Vec<Reason> = groups
            .into_iter()
            .map(
                |((reason, selector, clause, detail, model), group)| Reason {
                    reason,
                    selector: (!selector.is_empty()).then_some(selector),
                    clause: (!clause.is_empty()).then_some(clause),
                    detail,
                    model,
                    devices: group.devices,
                    nodes: group.nodes.len(),
                    claims: group.claims.into_iter().collect(),
                },
            )
            .collect();
        // Grouped by reason (the most devices first), models within; other drivers' devices last.
        let mut totals: HashMap<ReasonKey, usize> = HashMap::new();
        for r in &reasons {
            *totals.entry(reason_key(r)).or_default() += r.devices;
        }
        reasons.sort_by(|a, b| {
            let (ta, tb) = (totals[&reason_key(a)], totals[&reason_key(b)]);
            (a.reason == ReasonKind::OtherDriver)
                .cmp(&(b.reason == ReasonKind::OtherDriver))
                .then(tb.cmp(&ta))
                .then(reason_key(a).cmp(&reason_key(b)))
                .then(b.devices.cmp(&a.devices))
                .then(a.model.cmp(&b.model))
        });
        report.reasons = reasons;
        let mut nodes: Vec<String> = qualifying_nodes.iter().map(|n| n.to_string()).collect();
        nodes.sort_by(|a, b| crate::fleet::inventory::natural_cmp(a, b));
        report.qualifying_nodes = nodes;

        // Names no device has (the fleet's names, gathered once for every request).
        let known = known.get_or_insert_with(|| known_attributes(model));
        let selectors = class_selectors
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("class {class_name} selector #{i}"), *e))
            .chain(
                request_selectors
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (format!("request selector #{i}"), *e)),
            );
        let selectors: Vec<(String, &str)> = selectors.collect();
        for (scope, expression) in &selectors {
            for (domain, name) in diagnose::attribute_names(allocator.selector(expression)) {
                if known.contains(&(domain.clone(), name.clone())) {
                    continue;
                }
                let nearest = nearest(
                    &format!("{domain}/{name}"),
                    known
                        .iter()
                        .map(|(d, n)| format!("{d}/{n}"))
                        .collect::<Vec<_>>()
                        .iter()
                        .map(String::as_str),
                );
                report.unknown_attributes.push(UnknownAttribute {
                    attribute: format!("{domain}/{name}"),
                    selector: scope.clone(),
                    nearest,
                });
            }
        }

        // Relaxations: a clause whose removal alone lets failing devices qualify.
        report.relaxations = relaxations(&mut allocator, &selectors, &failing, model);
        diagnosis.claims[claim_index].requests.push(report);
    }

    let total = model.nodes.len();
    let mut node_outcomes: Vec<NodeOutcome> = outcomes
        .into_iter()
        .map(|((outcome, detail), nodes)| NodeOutcome {
            outcome,
            detail,
            count: nodes.len(),
            nodes,
        })
        .collect();
    node_outcomes.sort_by(|a, b| a.outcome.cmp(&b.outcome).then(b.count.cmp(&a.count)));
    diagnosis.nodes = Some(NodeSummary {
        total,
        allocatable,
        outcomes: node_outcomes,
        picks,
    });
    if let Some(note) = all_mode_order_note(input.features.release, &claims)
        && !matches!(
            attempt_error,
            Some(AllocError::Runtime(_) | AllocError::PoolInvalid { .. })
        )
    {
        diagnosis.notes.push(note);
    }
    if let Some(error) = attempt_error {
        if input.features.release < 36 && matches!(error, AllocError::Runtime(_)) {
            diagnosis.notes.push(format!(
                "Kubernetes 1.{} tries a node's resource pools in no fixed order (pools_incubating.go GatherPools builds them from a map; 1.36 sorts them): on a node where a selector fails on one device and other devices could serve, an attempt may meet either first; why tries pools by driver and pool name",
                input.features.release
            ));
        }
        if matches!(error, AllocError::PoolInvalid { .. }) {
            diagnosis.notes.push(format!(
                "Kubernetes 1.{} tries a node's resource pools in no fixed order and fails the attempt when it reaches an invalid one: on a node where a valid pool could serve, an attempt may reach that first and succeed; why tries pools by driver and pool name",
                input.features.release
            ));
        }
        let mut attempt = attempt(&error);
        // The scheduler filters nodes until it has found numFeasibleNodesToFind feasible ones
        // (k/k pkg/scheduler/schedule_one.go, default percentageOfNodesToScore); an error on
        // any node it checks fails the attempt. With fewer feasible nodes than that it checks
        // every node, so every attempt fails; with as many, it may stop before an erring one.
        // (Not for what this evaluator cannot decide: that is no scheduler error.)
        let to_find = num_feasible_nodes_to_find(total);
        let schedulers = !matches!(
            error,
            AllocError::CannotEvaluate(_)
                | AllocError::Unsupported { .. }
                | AllocError::CapacityUnmodelled { .. }
                | AllocError::SearchTooLong { .. }
        );
        if schedulers && allocatable >= to_find {
            attempt.always = false;
            attempt.consequence = format!(
                "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError) when it checks one of the {} where this error occurs; with {allocatable} nodes that can take the pod it may stop after finding {to_find} of them first (numFeasibleNodesToFind, with the default percentageOfNodesToScore), so an attempt may succeed",
                count(erring, "node", "nodes")
            );
        }
        diagnosis.attempt_error = Some(attempt);
    }
}

/// k/k pkg/scheduler/schedule_one.go `numFeasibleNodesToFind` with the default
/// percentageOfNodesToScore (0: adaptive): how many feasible nodes the scheduler looks for
/// before it stops filtering.
/// Before 1.36 the order of a node's pools decides more of an `allocationMode: All` request
/// than which devices serve: whether the search meets a device that breaks a constraint (an
/// error) or one in use first (no error), and, for an `All` sub-request after the first,
/// which single device it takes (allocator_incubating.go v0.35.10 drops the sub-request). The
/// differential test against the real allocator found both (tests/it/oracle/fleets.rs).
fn all_mode_order_note(release: u32, claims: &[Claim<'_>]) -> Option<String> {
    let all = |mode: &Option<String>| mode.as_deref() == Some("All");
    let any_all = claims.iter().any(|c| {
        c.spec.devices.as_ref().is_some_and(|d| {
            d.requests.as_deref().unwrap_or_default().iter().any(|r| {
                r.exactly.as_ref().is_some_and(|e| all(&e.allocation_mode))
                    || r.first_available
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .any(|s| all(&s.allocation_mode))
            })
        })
    });
    (release < 36 && any_all).then(|| {
        format!(
            "Kubernetes 1.{release} tries a node's resource pools in no fixed order (pools_incubating.go GatherPools builds them from a map; 1.36 sorts them): with allocationMode All, the order can decide whether an attempt meets a device that breaks a constraint (an error) or one in use first, and which device an All sub-request after the first takes; why tries pools by driver and pool name"
        )
    })
}

fn num_feasible_nodes_to_find(all: usize) -> usize {
    const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
    const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let percentage = 50usize
        .saturating_sub(all / 125)
        .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// An attempt error without the device it was met on, so that nodes group by it.
fn error_summary(error: &AllocError) -> String {
    match error {
        AllocError::Runtime(f) => format!(
            "{} selector #{}: CEL runtime error: {}",
            f.scope, f.index, f.message
        ),
        AllocError::CannotEvaluate(f) => format!(
            "{} selector #{}: cannot evaluate: {}",
            f.scope, f.index, f.message
        ),
        // One line for every node where only such devices would serve.
        AllocError::CapacityUnmodelled { claim, request, .. } => format!(
            "claim {claim}, request {request}: only shareable devices with capacities would serve it, and whether they have room (DRAConsumableCapacity) is not modelled"
        ),
        other => other.to_string(),
    }
}

/// What a reason says, without the model: the lines `why` prints under one heading.
pub(crate) fn reason_key(r: &Reason) -> ReasonKey {
    (
        r.reason,
        r.selector.clone(),
        r.clause.clone(),
        r.detail.clone(),
    )
}

/// The request (or `request/sub`) of a spec: class, request selectors, mode and count.
fn request_shape<'s>(
    spec: &'s ResourceClaimSpec,
    name: &str,
) -> Option<(&'s str, Vec<&'s str>, &'s str, i64)> {
    let (base, sub) = match name.split_once('/') {
        Some((b, s)) => (b, Some(s)),
        None => (name, None),
    };
    let request = requests(spec).iter().find(|r| r.name == base)?;
    match sub {
        None => {
            let exact = request.exactly.as_ref()?;
            Some((
                &exact.device_class_name,
                cel_expressions(exact.selectors.as_deref().unwrap_or_default())?,
                exact.allocation_mode.as_deref().unwrap_or("ExactCount"),
                exact.count.unwrap_or(1),
            ))
        }
        Some(sub) => {
            let sub = request
                .first_available
                .as_deref()?
                .iter()
                .find(|s| s.name == sub)?;
            Some((
                &sub.device_class_name,
                cel_expressions(sub.selectors.as_deref().unwrap_or_default())?,
                sub.allocation_mode.as_deref().unwrap_or("ExactCount"),
                sub.count.unwrap_or(1),
            ))
        }
    }
}

fn device_line(device: &SliceDevice<'_>, model: &str, status: String) -> DeviceLine {
    DeviceLine {
        node: device
            .node()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "(any node)".to_owned()),
        device: device.id().to_string(),
        pci_bus_id: device.string(PCI_BUS_ID).map(str::to_owned),
        model: model.to_owned(),
        status,
    }
}

/// Every (domain, name) some device of the fleet has.
fn known_attributes(model: &FleetModel<'_>) -> HashSet<(String, String)> {
    let mut seen = HashSet::new();
    let mut known = HashSet::new();
    for device in &model.devices {
        // Devices of one shape share their names: each shape is read once.
        if !seen.insert(device.shape_id()) {
            continue;
        }
        for (name, _) in device.attributes() {
            let (domain, id) = super::split_qualified(name, device.driver());
            known.insert((domain.to_owned(), id.to_owned()));
        }
    }
    known
}

/// The nearest of `candidates` to `typed` (case-insensitive edit distance), when it is close.
fn nearest<'c>(typed: &str, candidates: impl Iterator<Item = &'c str>) -> Option<String> {
    let lower = typed.to_lowercase();
    candidates
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(typed.len()) / 3).max(2))
        .min()
        .map(|(_, c)| c.to_owned())
}

/// For the clauses of the request's selectors: how many failing devices would qualify were
/// that one clause dropped (every other clause true).
fn relaxations(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    selectors: &[(String, &str)],
    failing: &[usize],
    model: &FleetModel<'_>,
) -> Vec<Relaxation> {
    let texts: Vec<Vec<String>> = selectors
        .iter()
        .map(|(_, e)| diagnose::clause_texts(allocator.selector(e)).unwrap_or_default())
        .collect();
    let mut memo: HashMap<usize, Option<(usize, usize)>> = HashMap::new();
    let mut gains: BTreeMap<(usize, usize), (usize, usize, BTreeSet<String>)> = BTreeMap::new();
    for &d in failing {
        let key = allocator.cel_class(d);
        let only = match memo.get(&key) {
            Some(only) => *only,
            None => {
                let mut false_clauses = Vec::new();
                let mut undecided = false;
                for (s, (_, expression)) in selectors.iter().enumerate() {
                    match allocator.clause_values(expression, d) {
                        Some(values) => {
                            for (c, v) in values.iter().enumerate() {
                                match v {
                                    Some(true) => {}
                                    Some(false) => false_clauses.push((s, c)),
                                    None => undecided = true,
                                }
                            }
                        }
                        None => undecided = true,
                    }
                }
                let only = (!undecided && false_clauses.len() == 1).then(|| false_clauses[0]);
                memo.insert(key, only);
                only
            }
        };
        if let Some(position) = only {
            let device = allocator.device(d);
            let free = !model.taken.contains_key(&device.id()) && device.taints().is_empty();
            let entry = gains.entry(position).or_default();
            entry.0 += 1;
            entry.1 += usize::from(free);
            if let Some(node) = device.node() {
                entry.2.insert(node.to_string());
            }
        }
    }
    let mut out: Vec<Relaxation> = gains
        .into_iter()
        // Dropping the class's driver clause is not a way forward: it picks other drivers.
        .filter(|((s, c), _)| {
            !texts[*s]
                .get(*c)
                .is_some_and(|t| t.starts_with("device.driver"))
        })
        .map(|((s, c), (qualifying, available, nodes))| Relaxation {
            selector: selectors[s].0.clone(),
            clause: texts[s].get(c).cloned().unwrap_or_default(),
            qualifying,
            available,
            nodes: nodes.len(),
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(r.qualifying));
    out
}

/// Why the claims cannot be allocated on a node whose verdict is "cannot allocate".
fn why_not_on_node(
    allocator: &Allocator<'_, SliceDevice<'_>>,
    report: &super::allocate::NodeReport,
    distinct: bool,
) -> (OutcomeKind, String) {
    if report.constraints_block {
        // Each request is served alone; show the addresses each could use.
        let parts: Vec<String> = report
            .requests
            .iter()
            .map(|r| {
                let mut addresses: Vec<&str> = r
                    .devices
                    .iter()
                    .filter(|(_, s)| *s == DeviceStatus::Available)
                    .map(|(d, _)| {
                        allocator
                            .device(*d)
                            .string(PCI_BUS_ID)
                            .unwrap_or("(no pciBusID)")
                    })
                    .collect();
                addresses.sort_unstable();
                addresses.dedup();
                // `request decodes on GPU ...`: a request's name alone reads as a verb.
                let gpus = if addresses.len() == 1 { "GPU" } else { "GPUs" };
                format!("request {} on {gpus} {}", r.request, addresses.join(", "))
            })
            .collect();
        return (
            OutcomeKind::Constraint,
            format!(
                "each request can be served, never {} ({})",
                if distinct {
                    "together under the claim's constraints"
                } else {
                    "on one GPU"
                },
                parts.join("; ")
            ),
        );
    }
    for r in &report.requests {
        // firstAvailable: the request fails only if every sub-request does; the first
        // sub-request stands for the request here.
        // (A device whose room is assumed is not why a node fails: the search assumed it.)
        if r.devices.iter().any(|(_, s)| {
            matches!(
                s,
                DeviceStatus::Available | DeviceStatus::CapacityUnmodelled
            )
        }) {
            continue;
        }
        let passing = r
            .devices
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    DeviceStatus::Taken { .. }
                        | DeviceStatus::Untolerated { .. }
                        | DeviceStatus::CapacityUnmodelled
                )
            })
            .count();
        let pooled = r
            .devices
            .iter()
            .filter(|(_, s)| {
                matches!(
                    s,
                    DeviceStatus::PoolInvalid { .. } | DeviceStatus::PoolUpdating { .. }
                )
            })
            .count();
        let detail = if r.devices.is_empty() {
            format!("request {}: the node has no devices", r.request)
        } else if pooled == r.devices.len() {
            format!(
                "request {}: every device of the node is in a resource pool being updated or invalid",
                r.request
            )
        } else if passing == 0 {
            format!("request {}: no device passes the selectors", r.request)
        } else {
            format!(
                "request {}: every device that passes the selectors is taken or tainted",
                r.request
            )
        };
        if r.request.contains('/')
            && report.requests.iter().any(|o| {
                o.request.split('/').next() == r.request.split('/').next()
                    && o.devices.iter().any(|(_, s)| *s == DeviceStatus::Available)
            })
        {
            continue;
        }
        return (OutcomeKind::RequestUnsatisfied, detail);
    }
    (
        OutcomeKind::CannotAllocate,
        "the devices do not add up: counts, or exclusive devices wanted by several requests"
            .to_owned(),
    )
}

/// The pod's own node filters on one node, in the scheduler's plugin order: NodeUnschedulable,
/// nodeSelector and required node affinity (NodeAffinity), taints (TaintToleration).
fn pod_filter(pod: &Pod, info: &NodeInfo, node: &Node) -> Option<(OutcomeKind, String)> {
    let spec = pod.spec.as_ref()?;
    // NodeUnschedulable: a cordoned node, unless the pod tolerates the unschedulable taint.
    let cordoned = Taint {
        key: "node.kubernetes.io/unschedulable".to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Default::default()
    };
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
        && !spec
            .tolerations
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|tol| pod_tolerates(tol, &cordoned))
    {
        return Some((
            OutcomeKind::NodeTaint,
            "the node is cordoned (spec.unschedulable)".to_owned(),
        ));
    }
    if let Some(selector) = &spec.node_selector {
        let missing: Vec<String> = selector
            .iter()
            .filter(|(k, v)| info.labels.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !missing.is_empty() {
            return Some((
                OutcomeKind::NodeSelector,
                format!("the pod's nodeSelector wants {}", missing.join(", ")),
            ));
        }
    }
    if let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        && !info.matches(required)
    {
        return Some((
            OutcomeKind::NodeAffinity,
            "the pod's required node affinity does not match".to_owned(),
        ));
    }
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(taint) = taints.iter().find(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|tol| pod_tolerates(tol, t))
    }) {
        return Some((
            OutcomeKind::NodeTaint,
            format!(
                "untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            ),
        ));
    }
    None
}

/// k8s.io/api core/v1 `Toleration.ToleratesTaint`.
fn pod_tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

fn attempt(error: &AllocError) -> AttemptError {
    match error {
        AllocError::Runtime(f) => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the whole scheduling attempt (PodScheduled reason SchedulerError), on every node, not just this device".to_owned(),
            fix: match f.message.strip_prefix("no such key: ") {
                Some(key) => format!(
                    "if the name is right and only some devices have it, guard the read in {} selector #{}: has(device.attributes[...].{key}) && ..., or device.attributes[...].?{key}.orValue(false)",
                    f.scope, f.index
                ),
                None => format!("fix {} selector #{} for the devices it fails on", f.scope, f.index),
            },
        },
        AllocError::SearchTooLong { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: true,
            consequence: "kubectl media cannot decide this claim on such nodes; nothing about it is guessed".to_owned(),
            fix: "check the scheduler's events for its verdict; fewer claims competing for the same exclusive devices shorten the search".to_owned(),
        },
        AllocError::CannotEvaluate(_)
        | AllocError::Unsupported { .. }
        | AllocError::CapacityUnmodelled { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: true,
            consequence: "kubectl media cannot decide this claim; nothing about it is guessed".to_owned(),
            fix: "check the scheduler's events for its verdict".to_owned(),
        },
        AllocError::PoolIncomplete { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler does not allocate allocationMode All while a pool's slices are being updated".to_owned(),
            fix: "wait for the driver to finish publishing the pool".to_owned(),
        },
        AllocError::PoolInvalidAll { pool, reason, .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: format!(
                "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError): allocationMode All is not allocated while a pool of the node is invalid ({pool}: {reason})"
            ),
            fix: pool_fix(pool, reason),
        },
        AllocError::PoolInvalid {
            driver,
            pool,
            reason,
        } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: format!(
                "the scheduler fails the scheduling attempt (PodScheduled reason SchedulerError) when its search reaches the invalid pool {driver}/{pool} ({reason}); Kubernetes 1.35 skips such pools instead"
            ),
            fix: pool_fix(&format!("{driver}/{pool}"), reason),
        },
        AllocError::ConstraintAll { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the attempt: allocationMode All takes every matching device, and one breaks the constraint".to_owned(),
            fix: "narrow the request's selectors to devices that share the attribute, or drop the constraint".to_owned(),
        },
        AllocError::TooManyDevices { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the whole scheduling attempt (PodScheduled reason SchedulerError): a claim holds at most 32 devices".to_owned(),
            fix: "ask for at most 32 devices per claim: lower the counts, or split the requests over several claims".to_owned(),
        },
        AllocError::EmptyConstraint { distinct, .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the whole scheduling attempt (PodScheduled reason SchedulerError): its allocator does not know the constraint".to_owned(),
            fix: if *distinct {
                "Kubernetes 1.35's scheduler knows distinctAttribute only with the DRAConsumableCapacity feature gate on (1.36 on by default): turn it on, or drop the constraint".to_owned()
            } else {
                "give the constraint matchAttribute (or distinctAttribute)".to_owned()
            },
        },
        AllocError::CapacityDisabled { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the whole scheduling attempt (PodScheduled reason SchedulerError)".to_owned(),
            fix: "turn the DRAConsumableCapacity feature gate on (on by default from Kubernetes 1.36), or drop the request's capacity".to_owned(),
        },
        AllocError::ClassNotFound { .. } => AttemptError {
            message: error.to_string(),
            always: true,
            undecided: false,
            consequence: "the scheduler fails the pod".to_owned(),
            fix: "create the class or fix deviceClassName".to_owned(),
        },
    }
}

/// What fixes an invalid pool: only its driver (or whoever publishes the slices) can.
fn pool_fix(pool: &str, reason: &str) -> String {
    match reason.strip_prefix("duplicate device name ") {
        Some(device) => format!(
            "the slices of pool {pool} for the node must name device {device} once: the driver publishes it twice (two slices of one generation, or two publishers of one pool name); fix the driver or delete the stray slice"
        ),
        None => format!("fix the slices of pool {pool}: {reason}"),
    }
}

fn scheduler_words(pod: Option<&Pod>, events: &[Event]) -> SchedulerWords {
    let Some(pod) = pod else {
        return SchedulerWords::default();
    };
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status != "True")
        .map(|c| ConditionWords {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        });
    let mut found: Vec<(&Event, EventWords)> = events
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("Pod")
                && e.involved_object.name == pod.metadata.name
                && e.involved_object.namespace == pod.metadata.namespace
                && e.reason
                    .as_deref()
                    .is_some_and(|r| EVENT_REASONS.contains(&r))
        })
        .map(|e| {
            (
                e,
                EventWords {
                    reason: e.reason.clone().unwrap_or_default(),
                    message: e.message.clone().unwrap_or_default(),
                    count: e.count.unwrap_or(1),
                },
            )
        })
        .collect();
    found.sort_by_key(|(e, _)| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    SchedulerWords {
        condition,
        events: found.into_iter().map(|(_, w)| w).collect(),
    }
}

/// The verdict, the exit status and the next steps.
fn conclude(
    diagnosis: &mut Diagnosis,
    pod: Option<&Pod>,
    problems: &[Problem],
    pending: &[(usize, String, &ResourceClaimSpec)],
) {
    let what = if diagnosis.kind == "Pod" {
        format!("pod {}", diagnosis.name)
    } else {
        format!("claim {}", diagnosis.name)
    };
    let running = pod
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running" || p == "Succeeded");
    let scheduled_on = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.node_name.clone());
    let mut steps: Vec<String> = Vec::new();
    let prepare_failures: Vec<&EventWords> = diagnosis
        .scheduler
        .events
        .iter()
        .filter(|e| e.reason == "FailedPrepareDynamicResources")
        .collect();

    if let Some(problem) = problems.first() {
        diagnosis.blocked = true;
        diagnosis.verdict = format!("{what} waits: {}.", problem.message);
        // The claim controller's own words, when it failed to make a claim.
        if let Some(event) = diagnosis
            .scheduler
            .events
            .iter()
            .rev()
            .find(|e| e.reason == "FailedResourceClaimCreation")
        {
            steps.push(format!(
                "the resource claim controller says: {}",
                event.message
            ));
        }
        steps.extend(problems.iter().map(|p| p.fix.clone()));
    } else if let Some(error) = diagnosis.attempt_error.as_ref().filter(|e| e.undecided) {
        // This evaluator's limit, not the scheduler's error: nothing is decided.
        diagnosis.verdict = format!("undecided for {what}: {}.", error.message);
        let message = error.message.clone();
        let fix = error.fix.clone();
        diagnosis.unchecked.push(message);
        steps.extend(unknown_steps(diagnosis));
        steps.push(fix);
    } else if let Some(error) = &diagnosis.attempt_error {
        diagnosis.blocked = true;
        diagnosis.verdict = if error.always {
            format!(
                "every scheduling attempt for {what} fails: {}.",
                error.message
            )
        } else {
            format!(
                "scheduling attempts for {what} may fail: {}.",
                error.message
            )
        };
        steps.extend(unknown_steps(diagnosis));
        steps.push(error.fix.clone());
    } else if pending.is_empty() {
        // Every claim is allocated (or needs none).
        let node = diagnosis
            .claims
            .iter()
            .find_map(|c| c.allocation.as_ref().and_then(|a| a.node.clone()))
            .or(scheduled_on.clone());
        let on = node.map(|n| format!(" on node {n}")).unwrap_or_default();
        if diagnosis.kind != "Pod" {
            diagnosis.verdict = format!("{what} is allocated{on}; DRA does not hold it.");
        } else if running {
            diagnosis.verdict =
                format!("the claims of {what} are allocated{on}; DRA does not hold it.");
        } else if let Some(failure) = prepare_failures.last() {
            diagnosis.verdict = format!(
                "the claims of {what} are allocated{on}, but the kubelet there cannot prepare them: {}.",
                failure.message
            );
            steps.push("check that the DRA drivers' kubelet plugins run on that node: kubectl -n liken-system get pods -o wide --field-selector spec.nodeName=<node> (media.liken.sh is the media-capabilities agent)".to_owned());
        } else {
            diagnosis.verdict = format!(
                "the claims of {what} are allocated{on}; the pod waits for something other than its devices."
            );
            steps.push(format!("kubectl describe {}", describe_target(diagnosis)));
        }
    } else {
        let nodes = diagnosis.nodes.as_ref();
        let allocatable = nodes.map_or(0, |n| n.allocatable);
        let last_word = diagnosis
            .scheduler
            .events
            .iter()
            .rev()
            .find(|e| e.reason == "FailedScheduling")
            .map(|e| e.message.clone())
            .or_else(|| {
                let c = diagnosis.scheduler.condition.as_ref()?;
                (c.reason.as_deref() == Some("Unschedulable"))
                    .then(|| c.message.clone())
                    .flatten()
            });
        if allocatable > 0 && !diagnosis.unchecked.is_empty() {
            // What was not read can only rule nodes out, never in: a node the devices allow
            // may still be closed to the pod. No verdict that nothing blocks it, then.
            let total = nodes.map_or(0, |n| n.total);
            let names = nodes
                .and_then(|n| {
                    n.outcomes
                        .iter()
                        .find(|o| o.outcome == OutcomeKind::Allocatable)
                })
                .filter(|o| o.nodes.len() <= 3)
                .map(|o| format!(" ({})", o.nodes.join(", ")))
                .unwrap_or_default();
            diagnosis.verdict = format!(
                "undecided for {what}: the devices allow {} on {allocatable} of {total} nodes{names}, but what was not checked may still block it: {}.",
                if diagnosis.kind == "Pod" {
                    "its claims"
                } else {
                    "it"
                },
                diagnosis.unchecked.join("; ")
            );
            if let Some(message) = &last_word {
                let reasons = node_side_reasons(message);
                if reasons.is_empty() {
                    steps.push(format!("the scheduler's last word was {message:?}"));
                } else {
                    steps.push(format!(
                        "the scheduler says {}: that is the side this explanation could not check; the nodes the devices allow may be among those",
                        reasons.join(", ")
                    ));
                }
            }
            steps.push("read what was not checked (see the notes) and run why again".to_owned());
        } else if allocatable > 0 {
            diagnosis.verdict = format!(
                "nothing in the fleet blocks {what}: {} be allocated now on {allocatable} of {} nodes.",
                if diagnosis.kind == "Pod" {
                    "its claims can"
                } else {
                    "it can"
                },
                nodes.map_or(0, |n| n.total)
            );
            if let Some(message) = &last_word
                && message.contains(" nodes are available")
            {
                steps.push(format!(
                    "this is not what the scheduler last said ({message:?}): if that is older than the devices' release, it retries on its own; if it stays, the scheduler sees something these objects do not show"
                ));
            }
        } else {
            diagnosis.blocked = true;
            // The nodes the pod may use explain more than those its own filters rule out.
            let pod_filter = |o: &NodeOutcome| {
                matches!(
                    o.outcome,
                    OutcomeKind::NodeSelector | OutcomeKind::NodeAffinity | OutcomeKind::NodeTaint
                )
            };
            let main = nodes
                .and_then(|n| {
                    n.outcomes
                        .iter()
                        .filter(|o| o.outcome != OutcomeKind::Allocatable)
                        .max_by_key(|o| (!pod_filter(o), o.count))
                })
                .map(|o| {
                    format!(
                        "{} ({} of {} nodes)",
                        o.detail,
                        o.count,
                        nodes.map_or(0, |n| n.total)
                    )
                })
                .unwrap_or_else(|| "no node has devices".to_owned());
            diagnosis.verdict = if diagnosis.kind == "Pod" {
                format!("no node can allocate the claims of {what}: {main}.")
            } else {
                format!("no node can allocate {what}: {main}.")
            };
            steps.extend(unknown_steps(diagnosis));
            for claim in &diagnosis.claims {
                for request in &claim.requests {
                    // Only for the requests that block: one no device serves, or one the
                    // nodes fail on.
                    let blocking = request.available == 0
                        || nodes.is_some_and(|n| {
                            n.outcomes.iter().any(|o| {
                                o.outcome == OutcomeKind::RequestUnsatisfied
                                    && o.detail.starts_with(&format!("request {}:", request.name))
                            })
                        });
                    if let Some(r) = request.relaxations.first().filter(|_| blocking) {
                        steps.push(format!(
                            "without {} (in {} of request {}), {} would qualify on {}, {} of them free",
                            r.clause,
                            r.selector,
                            request.name,
                            count(r.qualifying, "device", "devices"),
                            count(r.nodes, "node", "nodes"),
                            r.available
                        ));
                    }
                    if request.qualifying > 0 && request.available == 0 {
                        let holders = |detail: &str| -> Vec<String> {
                            let set: BTreeSet<&String> = request
                                .reasons
                                .iter()
                                .filter(|r| r.reason == ReasonKind::Taken && r.detail == detail)
                                .flat_map(|r| &r.claims)
                                .collect();
                            set.into_iter().cloned().collect()
                        };
                        let exclusive = holders(NOT_SHAREABLE);
                        if !exclusive.is_empty() {
                            steps.push(format!(
                                "the devices that qualify for request {} are held by {}: wait for them, or make the devices shareable (allowMultipleAllocations needs DRAConsumableCapacity, on by default from Kubernetes 1.36)",
                                request.name,
                                shorten(exclusive)
                            ));
                        }
                        let unshared = holders(HELD_EXCLUSIVELY);
                        if !unshared.is_empty() {
                            steps.push(reallocate_step(&request.name, unshared));
                        }
                        if request
                            .reasons
                            .iter()
                            .any(|r| r.reason == ReasonKind::Untolerated)
                        {
                            steps.push(format!(
                                "tolerate the devices' taint in request {} (exactly.tolerations), or clear the taint",
                                request.name
                            ));
                        }
                    }
                }
            }
            if let Some(nodes) = nodes {
                if nodes.outcomes.iter().any(|o| {
                    matches!(
                        o.outcome,
                        OutcomeKind::NodeSelector
                            | OutcomeKind::NodeAffinity
                            | OutcomeKind::NodeTaint
                    )
                }) {
                    steps.push("some nodes are ruled out by the pod's own nodeSelector, affinity or tolerations: relax them to reach those nodes' GPUs".to_owned());
                }
                if nodes
                    .outcomes
                    .iter()
                    .any(|o| o.outcome == OutcomeKind::Constraint)
                {
                    steps.push("the constraint keeps the requests on one GPU (matchAttribute): the GPUs that pass one request are not the ones that pass the other".to_owned());
                }
                if nodes
                    .outcomes
                    .iter()
                    .any(|o| o.outcome == OutcomeKind::InvalidPools)
                {
                    steps.push("the scheduler allocates nothing from an invalid pool (see the nodes): each pool's slices for a node must name every device once; fix the driver that publishes them twice, or delete the stray slice".to_owned());
                }
            }
            if diagnosis
                .claims
                .iter()
                .flat_map(|c| &c.requests)
                .flat_map(|r| &r.reasons)
                .any(|r| r.reason == ReasonKind::PoolUpdating)
            {
                steps.push("wait for the driver to publish every slice of the pool being updated (its resourceSliceCount): the scheduler allocates from it once it is complete; if it stays incomplete, the driver's publishing is stuck".to_owned());
            }
            steps.push("or give the workload a way forward without such a GPU: a second claim on any render node (class gpu-render) that it uses with its own fallback path, or no claim and work on the CPU; the workload's controller chooses, not the scheduler".to_owned());
        }
    }
    if diagnosis.kind != "Pod"
        && let Some(user) = diagnosis.used_by.first()
    {
        let (namespace, name) = user.split_once('/').unwrap_or(("default", user));
        let applied = if diagnosis.nodes.is_some() && pod.is_some() {
            " (its node filters are applied here)"
        } else {
            ""
        };
        // A pod that was not read cannot be explained either: the step says what to read.
        steps.push(if pod.is_some() {
            format!(
                "the claim is used by pod {user}{applied}; for all of the pod's claims: kubectl media why {name} -n {namespace}"
            )
        } else {
            format!(
                "the claim is used by pod {user}, which was not read: read the pod too (from files: kubectl get pods -n {namespace} -o yaml, added with -f) to apply its node filters"
            )
        });
    }
    diagnosis.next_steps = steps;
}

/// What to do when shareable devices are held by allocations without a share ID: allocate the
/// holders again (the scheduler gives a shareable device a share ID only when it allocates it).
fn reallocate_step(request: &str, holders: Vec<String>) -> String {
    // The agents' own claims are made from the DaemonSet's template: restarting the DaemonSet
    // makes them again.
    let agents: BTreeSet<&str> = holders
        .iter()
        .filter_map(|h| h.split_once('/'))
        .filter(|(_, name)| name.starts_with("media-capabilities-"))
        .map(|(namespace, _)| namespace)
        .collect();
    let restart = agents
        .iter()
        .map(|ns| {
            format!("; for the media-capabilities agents, kubectl -n {ns} rollout restart daemonset/media-capabilities")
        })
        .collect::<String>();
    format!(
        "the devices that qualify for request {request} allow multiple allocations, but {} hold them exclusively: their allocations have no shareID (made while DRAConsumableCapacity was off), which the scheduler counts as exclusive. Have the holders allocated again, shared: recreate the pods that use them{restart}",
        shorten(holders)
    )
}

/// The reasons of a FailedScheduling message (`0/9 nodes are available: 2 node(s) didn't match
/// Pod's node affinity/selector, 7 cannot allocate all claims. ...`) that come from the nodes'
/// own filters rather than from the devices.
fn node_side_reasons(message: &str) -> Vec<String> {
    let Some((_, rest)) = message.split_once(" nodes are available: ") else {
        return Vec::new();
    };
    // The reasons end at the first sentence; preemption's own count follows.
    let reasons = rest.split(". ").next().unwrap_or(rest);
    reasons
        .split(", ")
        .map(|r| r.trim_end_matches('.'))
        .filter(|r| {
            r.contains("node affinity/selector")
                || r.contains("untolerated taint")
                || r.contains("node(s) were unschedulable")
        })
        .map(|r| format!("\"{r}\""))
        .collect()
}

/// `1 device`, `2 devices`.
pub(crate) fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A step per attribute name no device has.
fn unknown_steps(diagnosis: &Diagnosis) -> Vec<String> {
    let mut steps = Vec::new();
    for request in diagnosis.claims.iter().flat_map(|c| &c.requests) {
        for unknown in &request.unknown_attributes {
            let step = match &unknown.nearest {
                Some(n) => format!(
                    "no device in the fleet has {} ({}): did you mean {n}?",
                    unknown.attribute, unknown.selector
                ),
                None => format!(
                    "no device in the fleet has {} ({}): check the name against kubectl media caps -o json",
                    unknown.attribute, unknown.selector
                ),
            };
            if !steps.contains(&step) {
                steps.push(step);
            }
        }
    }
    steps
}

fn describe_target(diagnosis: &Diagnosis) -> String {
    let (namespace, name) = diagnosis
        .name
        .split_once('/')
        .unwrap_or(("default", &diagnosis.name));
    format!("pod -n {namespace} {name}")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::model::tests::objects;

    /// Two nodes, a GPU each with its render node: n1's decodes and scales 10-bit, n2's only
    /// decodes.
    const FLEET: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-liken}
spec:
  driver: liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: renderd128
    allowMultipleAllocations: true
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-media}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-a
    allowMultipleAllocations: true
    attributes:
      name: {string: Arc A770}
      decodeHEVCMain10: {bool: true}
      scale10bit: {bool: true}
      resource.kubernetes.io/pciBusID: {string: "0000:03:00.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-liken}
spec:
  driver: liken.sh
  nodeName: n2
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices:
  - name: renderd128
    allowMultipleAllocations: true
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n2-media}
spec:
  driver: media.liken.sh
  nodeName: n2
  pool: {name: n2, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-b
    allowMultipleAllocations: true
    attributes:
      name: {string: UHD 630}
      decodeHEVCMain10: {bool: true}
      scale10bit: {bool: false}
      resource.kubernetes.io/pciBusID: {string: "0000:00:02.0"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: decode-10bit}
spec:
  selectors:
  - cel:
      expression: |
        device.driver == "media.liken.sh" &&
        device.attributes["media.liken.sh"].decodeHEVCMain10 &&
        device.attributes["media.liken.sh"].scale10bit
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu-render}
spec:
  selectors:
  - cel: {expression: 'device.driver == "liken.sh"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: media}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu-render}
      - name: decodes
        exactly: {deviceClassName: decode-10bit}
      constraints:
      - {requests: [gpu, decodes], matchAttribute: resource.kubernetes.io/pciBusID}
"#;

    fn pod(extra_status: &str) -> String {
        format!(
            r#"
---
apiVersion: v1
kind: Pod
metadata: {{name: p, namespace: media, uid: pod-uid}}
spec:
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: t}}]
  containers: [{{name: c, image: i}}]
status:
  phase: Pending
{extra_status}
"#
        )
    }

    fn claim(name: &str, spec: &str, extra: &str) -> String {
        format!(
            r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: {name}
  namespace: media
  ownerReferences: [{{apiVersion: v1, kind: Pod, name: p, uid: pod-uid, controller: true}}]
{extra}
spec:
{spec}
"#
        )
    }

    const SPEC: &str = r#"  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu-render}
    - name: decodes
      exactly: {deviceClassName: decode-10bit}
    constraints:
    - {requests: [gpu, decodes], matchAttribute: resource.kubernetes.io/pciBusID}"#;

    const STATUS: &str = "  resourceClaimStatuses: [{name: gpu, resourceClaimName: p-gpu-x}]";

    fn explain_pod(text: &str) -> Result<Diagnosis, TargetError> {
        let objects = objects(text);
        explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[],
            every_device: false,
        })
    }

    fn outcome_kinds(d: &Diagnosis) -> Vec<(OutcomeKind, Vec<String>)> {
        d.nodes
            .as_ref()
            .expect("nodes")
            .outcomes
            .iter()
            .map(|o| (o.outcome, o.nodes.clone()))
            .collect()
    }

    #[test]
    fn a_pending_claim_allocatable_on_one_node() {
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(!d.blocked, "{d:#?}");
        assert_eq!(d.claims[0].state, ClaimState::Pending);
        let decodes = &d.claims[0].requests[1];
        assert_eq!(
            (decodes.qualifying, decodes.available, decodes.total),
            (1, 1, 4)
        );
        // gpu-b: the first false clause with the value it read.
        let reason = decodes
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::SelectorFalse)
            .expect("a false clause");
        assert_eq!(reason.detail, "scale10bit is false");
        assert_eq!(reason.model, "UHD 630");
        assert_eq!(
            reason.clause.as_deref(),
            Some(r#"device.attributes["media.liken.sh"].scale10bit"#)
        );
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n1".to_owned()]),
                (OutcomeKind::RequestUnsatisfied, vec!["n2".to_owned()]),
            ]
        );
    }

    #[test]
    fn allocatable_is_never_said_on_what_was_not_read() {
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.3, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedScheduling
message: "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 cannot allocate all claims. still not schedulable, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
"#;
        // No Node objects: the node side is unchecked, and the scheduler's reason is named.
        let text = format!(
            "{FLEET}{}{}{event}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        );
        let d = explain_pod(&text).unwrap();
        assert!(!d.blocked);
        assert_eq!(d.unchecked.len(), 1, "{:?}", d.unchecked);
        assert!(
            d.verdict.starts_with(
                "undecided for pod media/p: the devices allow its claims on 1 of 2 nodes (n1)"
            ),
            "{}",
            d.verdict
        );
        assert!(
            d.next_steps[0].starts_with(
                "the scheduler says \"1 node(s) didn't match Pod's node affinity/selector\""
            ),
            "{:?}",
            d.next_steps
        );
        // With the nodes: allocatable, and the disagreement with the scheduler is said.
        let nodes = "\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\n";
        let d = explain_pod(&format!("{text}{nodes}")).unwrap();
        assert!(d.unchecked.is_empty(), "{:?}", d.unchecked);
        assert!(
            d.verdict
                .starts_with("nothing in the fleet blocks pod media/p"),
            "{}",
            d.verdict
        );
        assert!(
            d.next_steps[0].starts_with("this is not what the scheduler last said"),
            "{:?}",
            d.next_steps
        );
        // Claims of other namespaces not read: a device they hold may be taken. Undecided.
        let objects = objects(&format!("{text}{nodes}"));
        let d = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[(Kind::ResourceClaim, "forbidden".to_owned())],
            every_device: false,
        })
        .unwrap();
        assert!(!d.blocked);
        assert_eq!(
            d.unchecked,
            ["devices held by claims outside the namespace media, as those claims were not read"]
        );
        assert!(
            d.verdict.starts_with("undecided for pod media/p"),
            "{}",
            d.verdict
        );
    }

    #[test]
    fn a_template_not_read_is_not_said_missing() {
        // The pod's claim is not created yet and its template is not among the objects.
        let text = FLEET.replace(
            "kind: ResourceClaimTemplate\nmetadata: {name: t,",
            "kind: ResourceClaimTemplate\nmetadata: {name: other,",
        );
        assert_ne!(text, FLEET);
        let text = format!("{text}{}", pod(""));
        let objects = objects(&text);
        let explain_with = |unread: &[(Kind, String)]| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: "media".into(),
                    name: "p".into(),
                },
                features: Features::default(),
                unread,
                every_device: false,
            })
            .unwrap()
        };
        // Read, and not there: it does not exist.
        let d = explain_with(&[]);
        assert!(
            d.verdict
                .contains("ResourceClaimTemplate media/t does not exist"),
            "{}",
            d.verdict
        );
        // Not read: the claim is not created yet, and what it asks for is not evaluated.
        let d = explain_with(&[(Kind::ResourceClaimTemplate, "forbidden".to_owned())]);
        assert!(d.blocked);
        assert!(!d.verdict.contains("does not exist"), "{}", d.verdict);
        assert!(
            d.verdict.contains("its template media/t was not read"),
            "{}",
            d.verdict
        );
        assert_eq!(
            d.notes[0],
            "resourceclaimtemplates were not read (forbidden): claims not created yet cannot be evaluated"
        );
        // A claim that exists needs no template: no note.
        let text = format!("{FLEET}{}{}", pod(STATUS), claim("p-gpu-x", SPEC, ""));
        let objects = crate::explain::model::tests::objects(&text);
        let d = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[(Kind::ResourceClaimTemplate, "forbidden".to_owned())],
            every_device: false,
        })
        .unwrap();
        assert!(
            !d.notes.iter().any(|n| n.contains("resourceclaimtemplates")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn the_silent_cases_are_named() {
        // Not created yet: no status entry. The template's requests are still evaluated.
        let d = explain_pod(&format!("{FLEET}{}", pod(""))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::NotCreated);
        assert!(d.blocked);
        assert!(d.verdict.contains("not created yet"), "{}", d.verdict);
        assert_eq!(d.claims[0].requests.len(), 2);

        // ... and the claim controller's complaint, when there is one, leads the steps.
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.2, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedResourceClaimCreation
message: 'PodResourceClaim gpu: resourceclaims.resource.k8s.io is forbidden: exceeded quota'
"#;
        let d = explain_pod(&format!("{FLEET}{}{event}", pod(""))).unwrap();
        assert!(
            d.next_steps[0].contains("the resource claim controller says: PodResourceClaim gpu:"),
            "{:?}",
            d.next_steps
        );

        // The status names a claim that does not exist.
        let d = explain_pod(&format!("{FLEET}{}", pod(STATUS))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::Missing);
        assert!(d.verdict.contains("does not exist"), "{}", d.verdict);

        // Being deleted.
        let deleting = "  deletionTimestamp: 2026-11-02T09:00:00Z";
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, deleting)
        ))
        .unwrap();
        assert_eq!(d.claims[0].state, ClaimState::BeingDeleted);
        assert!(d.verdict.contains("being deleted"), "{}", d.verdict);

        // Not owned by the pod (another pod's uid).
        let other = claim("p-gpu-x", SPEC, "").replace("uid: pod-uid", "uid: other-uid");
        let d = explain_pod(&format!("{FLEET}{}{other}", pod(STATUS))).unwrap();
        assert_eq!(d.claims[0].state, ClaimState::NotOwned);
        assert!(d.verdict.contains("not created for pod"), "{}", d.verdict);

        // The template does not exist.
        let text = format!("{FLEET}{}", pod("")).replace(
            "resourceClaimTemplateName: t",
            "resourceClaimTemplateName: t2",
        );
        let d = explain_pod(&text).unwrap();
        assert!(
            d.verdict
                .contains("ResourceClaimTemplate media/t2 does not exist"),
            "{}",
            d.verdict
        );
    }

    #[test]
    fn a_missing_class_is_named_with_the_nearest() {
        let spec = SPEC.replace(
            "deviceClassName: decode-10bit",
            "deviceClassName: decode-10bits",
        );
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &spec, "")
        ))
        .unwrap();
        assert!(d.blocked);
        assert_eq!(
            d.verdict,
            "pod media/p waits: claim media/p-gpu-x: request decodes: device class decode-10bits does not exist."
        );
        assert!(
            d.next_steps[0].contains("did you mean decode-10bit?"),
            "{:?}",
            d.next_steps
        );
    }

    #[test]
    fn an_allocated_claim_shows_what_it_got() {
        let allocated = r#"status:
  allocation:
    devices:
      results:
      - {request: gpu, driver: liken.sh, pool: n1, device: renderd128}
      - {request: decodes, driver: media.liken.sh, pool: n1, device: gpu-a}
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]
  reservedFor: [{resource: pods, name: p, uid: pod-uid}]"#;
        let text = format!("{FLEET}{}{}", pod(STATUS), claim("p-gpu-x", SPEC, "")) + allocated;
        let running = text.replace("phase: Pending", "phase: Running");
        let d = explain_pod(&running).unwrap();
        assert!(!d.blocked);
        assert_eq!(d.claims[0].state, ClaimState::Reserved);
        let allocation = d.claims[0].allocation.as_ref().unwrap();
        assert_eq!(allocation.node.as_deref(), Some("n1"));
        assert_eq!(
            allocation.devices[0].render_node.as_deref(),
            Some("/dev/dri/renderD128")
        );
        assert_eq!(
            allocation.devices[1].pci_bus_id.as_deref(),
            Some("0000:03:00.0")
        );
        assert!(d.nodes.is_none());

        // Still Pending with the kubelet's complaint: the verdict points at the kubelet.
        let event = r#"
---
apiVersion: v1
kind: Event
metadata: {name: p.1, namespace: media}
involvedObject: {kind: Pod, name: p, namespace: media}
reason: FailedPrepareDynamicResources
message: 'Failed to prepare dynamic resources: DRA driver media.liken.sh is not registered'
count: 3
"#;
        let d = explain_pod(&(text + event)).unwrap();
        assert!(!d.blocked);
        assert!(
            d.verdict.contains("the kubelet there cannot prepare them"),
            "{}",
            d.verdict
        );
        assert!(d.verdict.contains("not registered"), "{}", d.verdict);
    }

    #[test]
    fn taken_devices_name_the_claims_that_hold_them() {
        // Exclusive render nodes (no allowMultipleAllocations), n1's held by another claim.
        let fleet = FLEET.replace(
            "    allowMultipleAllocations: true\n    attributes:\n      renderNode",
            "    attributes:\n      renderNode",
        );
        let other = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: other, namespace: batch}
spec: {}
status:
  allocation:
    devices:
      results: [{request: r, driver: liken.sh, pool: n1, device: renderd128}]
"#;
        let d = explain_pod(&format!(
            "{fleet}{}{}{other}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked, "{d:#?}");
        let gpu = &d.claims[0].requests[0];
        assert_eq!((gpu.qualifying, gpu.available), (2, 1));
        let taken = gpu
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Taken)
            .unwrap();
        assert_eq!(taken.claims, ["batch/other"]);
        assert_eq!(taken.model, "Arc A770");
    }

    #[test]
    fn the_pod_s_own_allocated_claim_holds_its_device() {
        // Claim a holds n1's only GPU (no share ID); claim b, pending, wants one more. The
        // scheduler counts every allocated claim's devices as in use, the pod's own too.
        let text = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu0}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: media}
spec:
  selectors: [{cel: {expression: 'device.driver == "media.liken.sh"'}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: media, uid: pod-uid}
spec:
  resourceClaims: [{name: a, resourceClaimName: a}, {name: b, resourceClaimName: b}]
  containers: [{name: c, image: i}]
status: {phase: Pending}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: a, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: media}}]
status:
  allocation:
    devices:
      results: [{request: r, driver: media.liken.sh, pool: n1, device: gpu0}]
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n1]}]}]
  reservedFor: [{resource: pods, name: p, uid: pod-uid}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: b, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: media}}]
"#;
        let d = explain_pod(text).unwrap();
        assert!(d.blocked, "{d:#?}");
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::RequestUnsatisfied, vec!["n1".to_owned()])]
        );
        let taken = d.claims[1].requests[0]
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Taken)
            .expect("gpu0 is taken");
        assert_eq!(taken.claims, ["media/a"]);
    }

    #[test]
    fn the_pod_s_node_filters_rule_nodes_out() {
        let nodes = r#"
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {pool: edge}}
spec:
  taints: [{key: dedicated, value: edge, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {pool: dc}}
spec: {}
"#;
        let d = explain_pod(&format!(
            "{FLEET}{nodes}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::NodeTaint, vec!["n1".to_owned()]),
                (OutcomeKind::RequestUnsatisfied, vec!["n2".to_owned()]),
            ]
        );
        // Tolerated, the taint does not count; a nodeSelector does.
        let tolerant = pod(STATUS).replace(
            "  containers:",
            "  tolerations: [{key: dedicated, operator: Exists}]\n  nodeSelector: {pool: dc}\n  containers:",
        );
        let d = explain_pod(&format!(
            "{FLEET}{nodes}{tolerant}{}",
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert_eq!(
            outcome_kinds(&d)[0],
            (OutcomeKind::NodeSelector, vec!["n1".to_owned()])
        );
    }

    #[test]
    fn unknown_names_and_relaxations_lead_somewhere() {
        let spec = SPEC.replace(
            "exactly: {deviceClassName: decode-10bit}",
            "exactly: {deviceClassName: decode-10bit, selectors: [{cel: {expression: 'device.attributes[\"media.liken.sh\"].?decodeAv1Main.orValue(false)'}}]}",
        );
        let d = explain_pod(&format!(
            "{FLEET}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &spec, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let decodes = &d.claims[0].requests[1];
        assert_eq!(decodes.unknown_attributes.len(), 1);
        assert_eq!(
            decodes.unknown_attributes[0].attribute,
            "media.liken.sh/decodeAv1Main"
        );
        assert!(
            d.next_steps[0].contains("no device in the fleet has media.liken.sh/decodeAv1Main"),
            "{:?}",
            d.next_steps
        );
        // Dropping the request's clause lets gpu-a qualify.
        let relaxation = &decodes.relaxations[0];
        assert_eq!(relaxation.selector, "request selector #0");
        assert_eq!((relaxation.qualifying, relaxation.available), (1, 1));
    }

    #[test]
    fn a_cel_runtime_error_fails_the_attempt() {
        let fleet = FLEET.replace(
            "device.attributes[\"media.liken.sh\"].scale10bit\n",
            "device.attributes[\"media.liken.sh\"].scale10Bit\n",
        );
        let d = explain_pod(&format!(
            "{fleet}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert_eq!(
            error.message,
            "class decode-10bit: selector #0: CEL runtime error: no such key: scale10Bit"
        );
        assert!(
            d.next_steps[0].contains("did you mean media.liken.sh/scale10bit?"),
            "{:?}",
            d.next_steps
        );
    }

    /// A slice for node `node` with one media.liken.sh GPU, `decode: true` or no `decode`.
    fn one_gpu(node: &str, decode: bool) -> String {
        let attributes = if decode {
            "{decode: {bool: true}}"
        } else {
            "{}"
        };
        format!(
            r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {{name: {node}}}
spec:
  driver: media.liken.sh
  nodeName: {node}
  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}
  devices: [{{name: gpu0, attributes: {attributes}}}]
"#
        )
    }

    /// A class reading `decode` unguarded, a pod and its pending claim of that class.
    const DECODE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: decode}
spec:
  selectors: [{cel: {expression: 'device.attributes["media.liken.sh"].decode'}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: media, uid: pod-uid}
spec:
  resourceClaims: [{name: b, resourceClaimName: b}]
  containers: [{name: c, image: i}]
status: {phase: Pending}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: b, namespace: media}
spec:
  devices:
    requests: [{name: r, exactly: {deviceClassName: decode}}]
"#;

    #[test]
    fn a_runtime_error_on_a_node_the_pod_s_filters_reject_does_not_count() {
        // n1's GPU lacks `decode` (a runtime error), but n1 carries a taint the pod does not
        // tolerate: TaintToleration rejects it before DynamicResources runs there.
        let nodes = r#"
---
apiVersion: v1
kind: Node
metadata: {name: n1}
spec:
  taints: [{key: dedicated, value: edge, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: n2}
spec: {}
"#;
        let text = format!(
            "{}{}{nodes}{DECODE}",
            one_gpu("n1", false),
            one_gpu("n2", true)
        );
        let d = explain_pod(&text).unwrap();
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert!(!d.blocked, "{}", d.verdict);
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n2".to_owned()]),
                (OutcomeKind::NodeTaint, vec!["n1".to_owned()]),
            ]
        );
        // A cordoned node is not checked either (NodeUnschedulable).
        let cordoned = text.replace(
            "  taints: [{key: dedicated, value: edge, effect: NoSchedule}]",
            "  unschedulable: true",
        );
        let d = explain_pod(&cordoned).unwrap();
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d)[1],
            (OutcomeKind::NodeTaint, vec!["n1".to_owned()])
        );
        // Tolerated, n1 is checked and the error fails every attempt.
        let tolerant = text.replace(
            "  containers:",
            "  tolerations: [{operator: Exists}]\n  containers:",
        );
        let d = explain_pod(&tolerant).unwrap();
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert!(error.always);
        assert!(
            d.verdict.starts_with("every scheduling attempt"),
            "{}",
            d.verdict
        );
    }

    #[test]
    fn before_1_36_the_pool_order_is_not_fixed() {
        let text = format!("{}{}{DECODE}", one_gpu("n1", false), one_gpu("n2", true));
        let objects = objects(&text);
        let explain_for = |minor| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: "media".into(),
                    name: "p".into(),
                },
                features: Features::for_minor(minor),
                unread: &[],
                every_device: false,
            })
            .unwrap()
        };
        let old = explain_for(35);
        assert!(old.attempt_error.is_some());
        assert!(
            old.notes.iter().any(|n| n.contains("in no fixed order")),
            "{:?}",
            old.notes
        );
        assert!(
            !explain_for(36)
                .notes
                .iter()
                .any(|n| n.contains("in no fixed order"))
        );
    }

    /// One slice with perDeviceNodeSelection: gpu-n2 (for n2, without `decode`) listed
    /// before gpu-n1 (for n1, with it).
    const PER_DEVICE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: shared}
spec:
  driver: media.liken.sh
  perDeviceNodeSelection: true
  pool: {name: shared, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: gpu-n2, nodeName: n2, attributes: {}}
  - {name: gpu-n1, nodeName: n1, attributes: {decode: {bool: true}}}
"#;

    fn explain_for(text: &str, minor: u32) -> Diagnosis {
        let objects = objects(text);
        explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::for_minor(minor),
            unread: &[],
            every_device: false,
        })
        .unwrap()
    }

    #[test]
    fn a_per_device_slice_is_gathered_whole_and_its_selectors_run_first() {
        // pools_incubating.go GatherPools takes the whole slice for n1 (one device is for
        // it); allocator_incubating.go isSelectable runs the selectors on gpu-n2 before
        // checking gpu-n2's own node: the runtime error fails the attempt on n1 too.
        let text = format!("{PER_DEVICE}{DECODE}");
        let d = explain_for(&text, 36);
        let error = d
            .attempt_error
            .as_ref()
            .expect("the selector fails on gpu-n2");
        assert!(error.message.contains("no such key: decode"), "{error:?}");
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Error, vec!["n1".to_owned(), "n2".to_owned()])]
        );
        // Without the error, gpu-n2 is not for n1: n1 gets gpu-n1, n2 nothing.
        let d = explain_for(
            &text.replace(
                "gpu-n2, nodeName: n2, attributes: {}",
                "gpu-n2, nodeName: n2, attributes: {decode: {bool: false}}",
            ),
            36,
        );
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d)[0],
            (OutcomeKind::Allocatable, vec!["n1".to_owned()])
        );
        assert_eq!(d.nodes.as_ref().expect("nodes").allocatable, 1);
    }

    #[test]
    fn before_1_36_a_per_device_slice_is_skipped() {
        // DRAPartitionableDevices is off by default in 1.34 and 1.35: GatherPools skips a
        // slice that sets perDeviceNodeSelection, so nothing of it is allocated or evaluated.
        let text = format!("{PER_DEVICE}{DECODE}");
        for minor in [34, 35] {
            let d = explain_for(&text, minor);
            assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
            assert!(
                d.notes
                    .iter()
                    .any(|n| n.contains("skips ResourceSlice shared")
                        && n.contains("DRAPartitionableDevices")),
                "{:?}",
                d.notes
            );
            assert!(
                d.nodes.as_ref().is_none_or(|n| n.allocatable == 0),
                "{:?}",
                d.nodes
            );
        }
        let d = explain_for(&text, 36);
        assert!(
            !d.notes
                .iter()
                .any(|n| n.contains("DRAPartitionableDevices"))
        );
    }

    /// Pool n1 lists gpu0 in both of its slices for n1; pool shared lists gpu0 once for n1
    /// and once for n2, which is no duplicate on either node.
    const DUPLICATE: &str = r#"
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-a}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu0, attributes: {decode: {bool: true}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-b}
spec:
  driver: media.liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu0, attributes: {decode: {bool: true}}}]
"#;

    #[test]
    fn an_invalid_pool_is_not_allocated_from() {
        // pools_incubating.go validateDeviceNames: "duplicate device name gpu0" makes pool n1
        // invalid on n1; from 1.35 allocateOne skips it and Allocate says "invalid resource
        // pools were encountered" (ErrFailedAllocationOnNode: the node is unschedulable).
        let text = format!("{DUPLICATE}{DECODE}");
        for minor in [35, 36] {
            let d = explain_for(&text, minor);
            assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
            assert!(d.blocked, "{}", d.verdict);
            let nodes = d.nodes.as_ref().expect("nodes");
            assert_eq!(nodes.outcomes.len(), 1, "{:?}", nodes.outcomes);
            assert_eq!(nodes.outcomes[0].outcome, OutcomeKind::InvalidPools);
            assert_eq!(
                nodes.outcomes[0].detail,
                "invalid resource pools were encountered: pool media.liken.sh/n1 (duplicate device name gpu0)"
            );
            let request = &d.claims[0].requests[0];
            assert_eq!(request.reasons[0].reason, ReasonKind::PoolInvalid);
            assert!(
                d.next_steps.iter().any(|s| s.contains("invalid pool")),
                "{:?}",
                d.next_steps
            );
        }
        // 1.34 fails the attempt when the search reaches the pool, naming it without its driver.
        let d = explain_for(&text, 34);
        let error = d
            .attempt_error
            .as_ref()
            .expect("the search reaches pool n1");
        assert_eq!(
            error.message,
            "pool n1 is invalid: duplicate device name gpu0"
        );
        // allocationMode All errors on an invalid pool, in every release.
        let all = text.replace(
            "requests: [{name: r, exactly: {deviceClassName: decode}}]",
            "requests: [{name: r, exactly: {deviceClassName: decode, allocationMode: All}}]",
        );
        for minor in [34, 35, 36] {
            let d = explain_for(&all, minor);
            let error = d.attempt_error.as_ref().expect("All over an invalid pool");
            assert_eq!(
                error.message,
                "claim media/b, request r: asks for all devices, but resource pool media.liken.sh/n1 is currently invalid"
            );
        }
    }

    #[test]
    fn an_invalid_pool_is_invalid_only_where_its_slices_name_a_device_twice() {
        // The same name in slices for different nodes is no duplicate: validateDeviceNames
        // reads the slices gathered for the node only.
        let across = DUPLICATE
            .replacen("metadata: {name: n1-b}", "metadata: {name: n2}", 1)
            .replacen("  nodeName: n1\n  pool", "  nodeName: n2\n  pool", 2)
            .replacen("  nodeName: n2\n  pool", "  nodeName: n1\n  pool", 1);
        assert!(across.contains("nodeName: n2"), "{across}");
        let text = format!("{across}{DECODE}");
        let d = explain_for(&text, 36);
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            d.nodes.as_ref().expect("nodes").allocatable,
            2,
            "{:?}",
            d.nodes
        );
        // A valid pool on the node serves while the invalid one is skipped (1.35+).
        let text = format!(
            "{DUPLICATE}{DECODE}{}",
            one_gpu("n1", true)
                .replace("name: n1, generation", "name: n1-z, generation")
                .replace("metadata: {name: n1}", "metadata: {name: n1-z}")
        );
        let d = explain_for(&text, 36);
        assert!(d.attempt_error.is_none(), "{:?}", d.attempt_error);
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Allocatable, vec!["n1".to_owned()])]
        );
        // 1.34 reaches pool n1 first here (why's order), and says its order is not fixed.
        let d = explain_for(&text, 34);
        assert!(d.attempt_error.is_some());
        assert!(
            d.notes.iter().any(|n| n.contains("no fixed order")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn a_pool_being_updated_is_skipped_from_1_35() {
        // One slice of two: allocator_incubating.go allocateOne skips IsIncomplete pools from
        // 1.35; 1.34's checks only IsInvalid and allocates from them.
        let text = format!("{}{DECODE}", one_gpu("n1", true))
            .replace("resourceSliceCount: 1", "resourceSliceCount: 2");
        let d = explain_for(&text, 34);
        assert_eq!(
            outcome_kinds(&d),
            [(OutcomeKind::Allocatable, vec!["n1".to_owned()])]
        );
        for minor in [35, 36] {
            let d = explain_for(&text, minor);
            assert_eq!(
                d.nodes.as_ref().expect("nodes").allocatable,
                0,
                "{:?}",
                d.nodes
            );
            let request = &d.claims[0].requests[0];
            assert_eq!(request.reasons[0].reason, ReasonKind::PoolUpdating);
            assert_eq!(
                d.nodes.as_ref().expect("nodes").outcomes[0].detail,
                "request r: every device of the node is in a resource pool being updated or invalid"
            );
            assert!(
                d.next_steps
                    .iter()
                    .any(|s| s.contains("resourceSliceCount")),
                "{:?}",
                d.next_steps
            );
        }
    }

    #[test]
    fn with_enough_feasible_nodes_an_erring_node_may_be_missed() {
        // 101 nodes: the scheduler stops after 100 feasible ones (numFeasibleNodesToFind),
        // which it can find without checking n0, where the selector fails.
        let mut text: String = (1..=100).map(|i| one_gpu(&format!("n{i}"), true)).collect();
        text += &one_gpu("n0", false);
        text += DECODE;
        let d = explain_pod(&text).unwrap();
        let error = d.attempt_error.as_ref().expect("n0 errs");
        assert!(!error.always, "{error:?}");
        assert!(
            d.verdict
                .starts_with("scheduling attempts for pod media/p may fail"),
            "{}",
            d.verdict
        );
        // What this evaluator cannot decide is no scheduler error: no "may" for it.
        let undecided = text.replace(
            "devices: [{name: gpu0, attributes: {}}]",
            "devices: [{name: gpu0, allowMultipleAllocations: true, attributes: {decode: {bool: true}}, capacity: {memory: {value: 1Gi}}}]",
        );
        let d = explain_pod(&undecided).unwrap();
        let error = d.attempt_error.as_ref().expect("n0 is not decided");
        assert!(error.message.contains("is not modelled"), "{error:?}");
        assert!(error.always, "{error:?}");
        // ...and no verdict either way: undecided, with what was not decided.
        assert!(error.undecided, "{error:?}");
        assert!(!d.blocked, "{}", d.verdict);
        assert!(
            d.verdict.starts_with("undecided for pod media/p: "),
            "{}",
            d.verdict
        );
        assert!(d.unchecked.contains(&error.message), "{:?}", d.unchecked);
        // With one feasible node fewer, the scheduler checks them all: every attempt fails.
        let text = text.replacen(
            "devices: [{name: gpu0, attributes: {decode: {bool: true}}}]",
            "devices: []",
            1,
        );
        let d = explain_pod(&text).unwrap();
        assert!(d.attempt_error.as_ref().expect("n0 errs").always);
    }

    #[test]
    fn feasible_nodes_to_find_follows_the_scheduler() {
        assert_eq!(num_feasible_nodes_to_find(99), 99);
        assert_eq!(num_feasible_nodes_to_find(100), 100);
        assert_eq!(num_feasible_nodes_to_find(500), 230);
        assert_eq!(num_feasible_nodes_to_find(5000), 500);
        assert_eq!(num_feasible_nodes_to_find(100_000), 5000);
    }

    #[test]
    fn first_available_all_and_taints() {
        // firstAvailable: the 10-bit GPU first, any media device second; the second serves on
        // n2, the first only on n1.
        let spec = r#"  devices:
    requests:
    - name: decodes
      firstAvailable:
      - {name: ten-bit, deviceClassName: decode-10bit}
      - {name: any, deviceClassName: gpu-render, count: 2}"#;
        // Exclusive render nodes, so that a count of two needs two of them.
        let exclusive = FLEET.replace(
            "    allowMultipleAllocations: true\n    attributes:\n      renderNode",
            "    attributes:\n      renderNode",
        );
        assert_ne!(exclusive, FLEET);
        let d = explain_pod(&format!(
            "{exclusive}{}{}",
            pod(STATUS),
            claim("p-gpu-x", spec, "")
        ))
        .unwrap();
        let names: Vec<&str> = d.claims[0]
            .requests
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["decodes/ten-bit", "decodes/any"]);
        assert_eq!(d.claims[0].requests[1].count, 2);
        // n1 by the first sub-request; n2 has one render node, and the second asks for two:
        // every request has a usable device there, the counts do not add up.
        assert_eq!(
            outcome_kinds(&d),
            [
                (OutcomeKind::Allocatable, vec!["n1".to_owned()]),
                (OutcomeKind::CannotAllocate, vec!["n2".to_owned()]),
            ]
        );

        // allocationMode All while n1's media pool is being updated: the attempt fails.
        let all = SPEC.replace(
            "exactly: {deviceClassName: decode-10bit}",
            "exactly: {deviceClassName: decode-10bit, allocationMode: All}",
        );
        let updating = FLEET.replacen(
            "pool: {name: n1, generation: 1, resourceSliceCount: 1}\n  devices:\n  - name: gpu-a",
            "pool: {name: n1, generation: 1, resourceSliceCount: 2}\n  devices:\n  - name: gpu-a",
            1,
        );
        assert_ne!(updating, FLEET);
        let d = explain_pod(&format!(
            "{updating}{}{}",
            pod(STATUS),
            claim("p-gpu-x", &all, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let error = d.attempt_error.as_ref().expect("the attempt fails");
        assert!(
            error.message.contains("currently being updated"),
            "{}",
            error.message
        );

        // A device taint the request does not tolerate.
        let tainted = FLEET.replace(
            "  - name: gpu-a\n    allowMultipleAllocations: true\n",
            "  - name: gpu-a\n    allowMultipleAllocations: true\n    taints: [{key: maintenance, value: firmware, effect: NoSchedule}]\n",
        );
        assert_ne!(tainted, FLEET);
        let d = explain_pod(&format!(
            "{tainted}{}{}",
            pod(STATUS),
            claim("p-gpu-x", SPEC, "")
        ))
        .unwrap();
        assert!(d.blocked);
        let decodes = &d.claims[0].requests[1];
        assert_eq!((decodes.qualifying, decodes.available), (1, 0));
        let reason = decodes
            .reasons
            .iter()
            .find(|r| r.reason == ReasonKind::Untolerated)
            .unwrap();
        assert_eq!(
            reason.detail,
            "taint maintenance=firmware:NoSchedule is not tolerated"
        );
        assert!(
            d.next_steps
                .iter()
                .any(|s| s.contains("tolerate the devices' taint")),
            "{:?}",
            d.next_steps
        );
    }

    #[test]
    fn targets_that_are_not_there() {
        let text = format!("{FLEET}{}", pod(STATUS));
        let objects = objects(&text);
        let explain_target = |namespace: &str, name: &str| {
            explain(&Input {
                objects: &objects,
                target: &Target::Pod {
                    namespace: namespace.into(),
                    name: name.into(),
                },
                features: Features::default(),
                unread: &[],
                every_device: false,
            })
        };
        let e = explain_target("default", "p").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pod default/p not found (hint: a pod of that name is in the namespace media: add -n media)"
        );
        let e = explain_target("media", "pp").unwrap_err();
        assert!(e.to_string().contains("similar names: p"), "{e}");
        let no_claims = text.replace(
            "  resourceClaims: [{name: gpu, resourceClaimTemplateName: t}]\n",
            "",
        );
        let objects = crate::explain::model::tests::objects(&no_claims);
        let e = explain(&Input {
            objects: &objects,
            target: &Target::Pod {
                namespace: "media".into(),
                name: "p".into(),
            },
            features: Features::default(),
            unread: &[],
            every_device: false,
        })
        .unwrap_err();
        assert!(matches!(e, TargetError::NoClaims { .. }), "{e}");
    }
}
