//! The verdict: whether something keeps the claims from being allocated, and what; with the
//! scheduler's and the kubelet's own words about the pod.

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::resource::v1::ResourceClaimSpec;

use super::findings::{
    ClaimProblem, ConditionWords, Diagnosis, EventWords, NodeOutcome, OutcomeKind, SchedulerWords,
    TargetKind, Unchecked, Verdict,
};

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

/// The verdict and the exit status ([`super::next_steps`] follows from them).
pub(super) fn conclude(
    diagnosis: &mut Diagnosis,
    pod: Option<&Pod>,
    problems: &[ClaimProblem],
    pending: &[(usize, String, &ResourceClaimSpec)],
) {
    let verdict = decide(diagnosis, pod, problems, pending.is_empty());
    if let Verdict::Undecided { message } = &verdict {
        diagnosis.unchecked.push(Unchecked::Undecided {
            message: message.clone(),
        });
    }
    diagnosis.blocked = matches!(
        verdict,
        Verdict::ClaimProblem { .. } | Verdict::AttemptsFail { .. } | Verdict::NoNode { .. }
    );
    diagnosis.verdict = verdict;
}

/// The verdict, from the claims' problems, the attempt error and the nodes.
fn decide(
    diagnosis: &Diagnosis,
    pod: Option<&Pod>,
    problems: &[ClaimProblem],
    none_pending: bool,
) -> Verdict {
    if let Some(problem) = problems.first() {
        return Verdict::ClaimProblem {
            problem: problem.clone(),
        };
    }
    if let Some(error) = &diagnosis.attempt_error {
        // This evaluator's limit, not the scheduler's error: nothing is decided.
        return if error.undecided {
            Verdict::Undecided {
                message: error.message.clone(),
            }
        } else {
            Verdict::AttemptsFail {
                always: error.always,
                message: error.message.clone(),
            }
        };
    }
    if none_pending {
        return allocated(diagnosis, pod);
    }
    let nodes = diagnosis.nodes.as_ref();
    let allocatable = nodes.map_or(0, |n| n.allocatable);
    let total = nodes.map_or(0, |n| n.total);
    if allocatable > 0 && !diagnosis.unchecked.is_empty() {
        // What was not read can only rule nodes out, never in: a node the devices allow
        // may still be closed to the pod. No verdict that nothing blocks it, then.
        let shown = nodes
            .and_then(|n| {
                n.outcomes
                    .iter()
                    .find(|o| o.outcome == OutcomeKind::Allocatable)
            })
            .filter(|o| o.nodes.len() <= 3)
            .map(|o| o.nodes.clone())
            .unwrap_or_default();
        return Verdict::UncheckedMayBlock {
            allocatable,
            total,
            nodes: shown,
        };
    }
    if allocatable > 0 {
        return Verdict::Allocatable { allocatable, total };
    }
    // The nodes the pod may use explain more than those its own filters rule out.
    let main = nodes.and_then(|n| {
        n.outcomes
            .iter()
            .filter(|o| o.outcome != OutcomeKind::Allocatable)
            .max_by_key(|o| (!pod_filter(o), o.count))
    });
    Verdict::NoNode {
        outcome: main.map(|o| o.detail.clone()),
        count: main.map_or(0, |o| o.count),
        total,
    }
}

/// Whether the pod's own node filters rule the nodes of an outcome out.
pub(super) fn pod_filter(o: &NodeOutcome) -> bool {
    matches!(
        o.outcome,
        OutcomeKind::NodeSelector | OutcomeKind::NodeAffinity | OutcomeKind::NodeTaint
    )
}

/// Every claim is allocated (or needs none): where, and what the pod waits for.
fn allocated(diagnosis: &Diagnosis, pod: Option<&Pod>) -> Verdict {
    let running = pod
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running" || p == "Succeeded");
    let scheduled_on = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.node_name.clone());
    let node = diagnosis
        .claims
        .iter()
        .find_map(|c| c.allocation.as_ref().and_then(|a| a.node.clone()))
        .or(scheduled_on);
    if diagnosis.kind != TargetKind::Pod {
        return Verdict::ClaimAllocated { node };
    }
    if running {
        return Verdict::PodRunning { node };
    }
    match prepare_failure(diagnosis) {
        Some(failure) => Verdict::CannotPrepare {
            node,
            message: failure.message.clone(),
        },
        None => Verdict::WaitsForOther { node },
    }
}

/// The kubelet's last word on preparing the claims, when it failed.
pub(super) fn prepare_failure(diagnosis: &Diagnosis) -> Option<&EventWords> {
    diagnosis
        .scheduler
        .events
        .iter()
        .rfind(|e| e.reason == "FailedPrepareDynamicResources")
}

/// The scheduler's last word on why the pod does not fit: its newest FailedScheduling event,
/// or the PodScheduled condition's message when it is Unschedulable.
pub(super) fn last_word(diagnosis: &Diagnosis) -> Option<String> {
    diagnosis
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
        })
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
        .map(str::to_owned)
        .collect()
}
