//! The allocator's part: node by node, the pod's node filters and the allocation the
//! scheduler's Filter would make; then the attempt error that fails every attempt.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{DeviceClassSpec, ResourceClaimSpec};

use super::NodeInfo;
use super::allocate::{
    self, AllocError, Allocator, Claim, DeviceStatus, Fleet, NodeReport, NodeVerdict,
};
use super::claims::requests;
use super::diagnose::Finding;
use super::filters::pod_filter;
use super::findings::{
    AttemptError, Diagnosis, NodeOutcome, NodePicks, NodeSummary, OutcomeKind, PickedDevice, count,
};
use super::model::{FleetModel, SliceDevice};
use super::pod::Input;
use super::requests::{self as request_report, PCI_BUS_ID};

/// What the allocator's part works on.
pub(super) struct Work<'w, 'o> {
    pub input: &'w Input<'o>,
    pub model: &'w FleetModel<'o>,
    /// Each device's GPU model, by fleet index.
    pub models: &'w [String],
    pub classes: &'w BTreeMap<String, DeviceClassSpec>,
    pub pod: Option<&'o Pod>,
    /// The claims to allocate: (index in the diagnosis, `namespace/name`, spec).
    pub pending: &'w [(usize, String, &'o ResourceClaimSpec)],
    /// The node selectors of the pod's claims already allocated.
    pub bound_nodes: &'w [&'o NodeSelector],
}

/// What the pass over the nodes found.
pub(super) struct NodePass {
    outcomes: BTreeMap<(OutcomeKind, String), Vec<String>>,
    /// Per (claim, request): device index → status, each device once.
    statuses: Vec<BTreeMap<usize, DeviceStatus>>,
    request_keys: Vec<(String, String)>,
    /// Where each key is in `request_keys`: a claim may have thousands of requests, and a scan
    /// per request and node made that minutes.
    request_slots: HashMap<(String, String), usize>,
    attempt_error: Option<AllocError>,
    picks: Vec<NodePicks>,
    /// Nodes the scheduler filters on whose allocation fails with an error.
    erring: usize,
    allocatable: usize,
}

impl NodePass {
    /// Each request's devices, each device with the first status a node gave it.
    fn record(&mut self, report: &NodeReport) {
        for request in &report.requests {
            let key = (request.claim.clone(), request.request.clone());
            let slot = *self.request_slots.entry(key).or_insert_with_key(|key| {
                self.request_keys.push(key.clone());
                self.statuses.push(BTreeMap::new());
                self.statuses.len() - 1
            });
            for (d, status) in &request.devices {
                self.statuses[slot]
                    .entry(*d)
                    .or_insert_with(|| status.clone());
            }
        }
    }
}

/// The allocator's part: node by node, then request by request.
pub(super) fn evaluate(work: &Work<'_, '_>, diagnosis: &mut Diagnosis) {
    let model = work.model;
    let fleet = Fleet {
        devices: &model.devices,
        taken: &model.taken,
        incomplete_pools: &model.incomplete_pools,
    };
    let mut allocator = Allocator::new(fleet, work.classes, work.input.features);
    let claims: Vec<Claim<'_>> = work
        .pending
        .iter()
        .map(|(_, label, spec)| Claim { name: label, spec })
        .collect();
    let pass = nodes(work, &mut allocator, &claims);

    // Per request, against the fleet.
    // Devices of one CEL class (see Allocator::cel_class) fail a selector the same way: each
    // is diagnosed once per class, not once per device.
    let mut diagnoses: HashMap<(String, usize), Finding> = HashMap::new();
    let mut known: Option<HashSet<(String, String)>> = None;
    for (slot, key) in pass.request_keys.iter().enumerate() {
        let statuses = &pass.statuses[slot];
        if let Some((claim_index, report)) = request_report::account(
            work,
            &mut allocator,
            key,
            statuses,
            &mut diagnoses,
            &mut known,
        ) {
            diagnosis.claims[claim_index].requests.push(report);
        }
    }
    summarise(work, &claims, pass, diagnosis);
}

/// Node by node: the pod's filters, then the allocation.
pub(super) fn nodes(
    work: &Work<'_, '_>,
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
) -> NodePass {
    let mut pass = NodePass {
        outcomes: BTreeMap::new(),
        statuses: Vec::new(),
        request_keys: Vec::new(),
        request_slots: HashMap::new(),
        attempt_error: None,
        picks: Vec::new(),
        erring: 0,
        allocatable: 0,
    };
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
    for candidate in &work.model.nodes {
        let node = &candidate.info;
        // The pod's own node filters (NodeUnschedulable, TaintToleration, NodeAffinity) are
        // plugins that run before DynamicResources: a node they reject is never allocated on,
        // so an error the allocator would meet there never reaches the scheduler. The
        // allocation is still computed, to say what the node would allow without them.
        let filtered = work
            .pod
            .zip(candidate.node)
            .and_then(|(pod, node_object)| pod_filter(pod, node, node_object));
        let report = match allocator.explain(node, claims) {
            Ok(report) => report,
            Err(e) => {
                // The attempt fails on this node; each request's devices are still accounted
                // for, one request at a time (a runtime error shows on the device it hits).
                let report = survey(allocator, node, claims);
                let outcome = match &filtered {
                    Some(filtered) => filtered.clone(),
                    None => {
                        pass.erring += 1;
                        (OutcomeKind::Error, error_summary(&e))
                    }
                };
                if filtered.is_none() {
                    pass.attempt_error.get_or_insert(e);
                }
                pass.outcomes
                    .entry(outcome)
                    .or_default()
                    .push(node.name.clone());
                pass.record(&report);
                continue;
            }
        };
        pass.record(&report);
        let outcome = match filtered {
            Some(filtered) => filtered,
            None => node_outcome(work, allocator, claims, node, &report, distinct, &mut pass),
        };
        pass.outcomes
            .entry(outcome)
            .or_default()
            .push(node.name.clone());
    }
    pass
}

/// Each request's devices on a node where the attempt fails, one request at a time.
pub(super) fn survey(
    allocator: &mut Allocator<'_, SliceDevice<'_>>,
    node: &NodeInfo,
    claims: &[Claim<'_>],
) -> NodeReport {
    let mut surveyed = Vec::new();
    for claim in claims {
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
                    surveyed.push(allocate::RequestReport {
                        claim: claim.name.to_owned(),
                        request: name,
                        devices,
                    });
                }
            }
        }
    }
    NodeReport {
        verdict: NodeVerdict::CannotAllocate,
        requests: surveyed,
        constraints_block: false,
    }
}

/// What a node the pod's filters let through allows.
pub(super) fn node_outcome(
    work: &Work<'_, '_>,
    allocator: &Allocator<'_, SliceDevice<'_>>,
    claims: &[Claim<'_>],
    node: &NodeInfo,
    report: &NodeReport,
    distinct: bool,
    pass: &mut NodePass,
) -> (OutcomeKind, String) {
    if work.bound_nodes.iter().any(|s| !node.matches(s)) {
        return (
            OutcomeKind::ClaimElsewhere,
            "another claim of the pod is allocated on a different node".to_owned(),
        );
    }
    match &report.verdict {
        NodeVerdict::Allocated(results) => {
            pass.allocatable += 1;
            pass.picks.push(NodePicks {
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
            let detail = if work.model.nodes_known {
                "every claim can be allocated now"
            } else {
                "the devices allow every claim (the node's own filters unchecked)"
            };
            (OutcomeKind::Allocatable, detail.to_owned())
        }
        NodeVerdict::CannotAllocate => why_not_on_node(allocator, report, distinct),
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
}

/// The nodes grouped by outcome, and the attempt error with what it does.
pub(super) fn summarise(
    work: &Work<'_, '_>,
    claims: &[Claim<'_>],
    pass: NodePass,
    diagnosis: &mut Diagnosis,
) {
    let input = work.input;
    let NodePass {
        outcomes,
        attempt_error,
        picks,
        erring,
        allocatable,
        ..
    } = pass;
    let total = work.model.nodes.len();

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
    if let Some(note) = all_mode_order_note(input.features.release, claims)
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

/// Before 1.36 the order of a node's pools decides more of an `allocationMode: All` request
/// than which devices serve: whether the search meets a device that breaks a constraint (an
/// error) or one in use first (no error), and, for an `All` sub-request after the first,
/// which single device it takes (allocator_incubating.go v0.35.10 drops the sub-request). The
/// differential test against the real allocator found both (tests/it/oracle/fleets.rs).
pub(super) fn all_mode_order_note(release: u32, claims: &[Claim<'_>]) -> Option<String> {
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

/// k/k pkg/scheduler/schedule_one.go `numFeasibleNodesToFind` with the default
/// percentageOfNodesToScore (0: adaptive): how many feasible nodes the scheduler looks for
/// before it stops filtering.

pub(super) fn num_feasible_nodes_to_find(all: usize) -> usize {
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
pub(super) fn error_summary(error: &AllocError) -> String {
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

/// Why the claims cannot be allocated on a node whose verdict is "cannot allocate".
pub(super) fn why_not_on_node(
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

pub(super) fn attempt(error: &AllocError) -> AttemptError {
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
pub(super) fn pool_fix(pool: &str, reason: &str) -> String {
    match reason.strip_prefix("duplicate device name ") {
        Some(device) => format!(
            "the slices of pool {pool} for the node must name device {device} once: the driver publishes it twice (two slices of one generation, or two publishers of one pool name); fix the driver or delete the stray slice"
        ),
        None => format!("fix the slices of pool {pool}: {reason}"),
    }
}
