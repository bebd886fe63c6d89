//! The verdict: one sentence on whether something keeps the claims from being allocated, and
//! the scheduler's and the kubelet's own words about the pod.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::resource::v1::ResourceClaimSpec;

use super::findings::{
    ConditionWords, Diagnosis, EventWords, NodeOutcome, OutcomeKind, Problem, ReasonKind,
    SchedulerWords, count, shorten,
};
use super::next_steps::{describe_target, reallocate_step, unknown_steps};
use super::requests::{HELD_EXCLUSIVELY, NOT_SHAREABLE};

/// The event reasons that matter here.
const EVENT_REASONS: [&str; 4] = [
    "FailedScheduling",
    "FailedResourceClaimCreation",
    "FailedPrepareDynamicResources",
    "FailedUnprepareDynamicResources",
];

pub(super) fn scheduler_words(pod: Option<&Pod>, events: &[Event]) -> SchedulerWords {
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
pub(super) fn conclude(
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

/// The reasons of a FailedScheduling message (`0/9 nodes are available: 2 node(s) didn't match
/// Pod's node affinity/selector, 7 cannot allocate all claims. ...`) that come from the nodes'
/// own filters rather than from the devices.
pub(super) fn node_side_reasons(message: &str) -> Vec<String> {
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
