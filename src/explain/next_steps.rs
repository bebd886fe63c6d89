//! What to do next, most specific first: each step follows from the verdict and the findings
//! behind it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use super::findings::{
    ClaimProblem, Detail, Diagnosis, NodeFinding, OutcomeKind, ReasonKind, RequestAccount, Step,
    TargetKind, Verdict,
};
use super::verdict::{last_word, node_side_reasons, pod_filter};

/// The next steps for `verdict`.
pub(super) fn steps(
    diagnosis: &Diagnosis,
    verdict: &Verdict,
    pod: Option<&Pod>,
    problems: &[ClaimProblem],
) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    match verdict {
        Verdict::ClaimProblem { .. } => {
            // The claim controller's own words, when it failed to make a claim.
            if let Some(event) = diagnosis
                .scheduler
                .events
                .iter()
                .rev()
                .find(|e| e.reason == "FailedResourceClaimCreation")
            {
                steps.push(Step::ClaimControllerSays {
                    message: event.message.clone(),
                });
            }
            steps.extend(
                problems
                    .iter()
                    .map(|p| Step::FixClaim { problem: p.clone() }),
            );
        }
        Verdict::Undecided { .. } | Verdict::AttemptsFail { .. } => {
            steps.extend(unknown_steps(diagnosis));
            if let Some(error) = &diagnosis.attempt_error {
                steps.push(Step::FixAttempt {
                    error: error.error.clone(),
                });
            }
        }
        Verdict::ClaimAllocated { .. } | Verdict::PodRunning { .. } => {}
        Verdict::CannotPrepare { .. } => steps.push(Step::CheckPlugins),
        Verdict::WaitsForOther { .. } => {
            let (namespace, name) = diagnosis
                .name
                .split_once('/')
                .unwrap_or(("default", &diagnosis.name));
            steps.push(Step::Describe {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        Verdict::UncheckedMayBlock { .. } => {
            if let Some(message) = last_word(diagnosis) {
                let reasons = node_side_reasons(&message);
                steps.push(if reasons.is_empty() {
                    Step::SchedulerSaid { message }
                } else {
                    Step::SchedulerNodeSide { reasons }
                });
            }
            steps.push(Step::ReadUnchecked);
        }
        Verdict::Allocatable { .. } => {
            if let Some(message) = last_word(diagnosis)
                && message.contains(" nodes are available")
            {
                steps.push(Step::SchedulerDisagrees { message });
            }
        }
        Verdict::NoNode { .. } => blocked_steps(diagnosis, &mut steps),
    }
    if diagnosis.kind != TargetKind::Pod
        && let Some(user) = diagnosis.used_by.first()
    {
        let (namespace, name) = user.split_once('/').unwrap_or(("default", user));
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        // A pod that was not read cannot be explained either: the step says what to read.
        steps.push(if pod.is_some() {
            Step::UsedBy {
                namespace,
                name,
                filters_applied: diagnosis.nodes.is_some(),
            }
        } else {
            Step::ReadUser { namespace, name }
        });
    }
    steps
}

/// The steps when no node can allocate the claims.
fn blocked_steps(diagnosis: &Diagnosis, steps: &mut Vec<Step>) {
    let nodes = diagnosis.nodes.as_ref();
    steps.extend(unknown_steps(diagnosis));
    for request in diagnosis.claims.iter().flat_map(|c| &c.requests) {
        // Only for the requests that block: one no device serves, or one the nodes fail on.
        let blocking = request.available == 0
            || nodes.is_some_and(|n| {
                n.outcomes.iter().any(|o| {
                    matches!(&o.detail, NodeFinding::RequestUnsatisfied { request: r, .. } if *r == request.name)
                })
            });
        if let Some(r) = request.relaxations.first().filter(|_| blocking) {
            steps.push(Step::Relax {
                request: request.name.clone(),
                selector: r.selector.clone(),
                clause: r.clause.clone(),
                qualifying: r.qualifying,
                available: r.available,
                nodes: r.nodes,
            });
        }
        if request.qualifying > 0 && request.available == 0 {
            held_steps(request, steps);
        }
        // Tainted devices that qualify may be what the pod lacks even where others are free:
        // a request for more devices than are untainted, or the one GPU whose other device
        // passes the constraint.
        tolerate_step(request, steps);
    }
    if let Some(nodes) = nodes {
        let any = |kind: OutcomeKind| nodes.outcomes.iter().any(|o| o.outcome == kind);
        if nodes.outcomes.iter().any(pod_filter) {
            steps.push(Step::RelaxNodeFilters);
        }
        if any(OutcomeKind::Constraint) {
            steps.push(Step::ConstraintOneGpu);
        }
        if any(OutcomeKind::InvalidPools) {
            steps.push(Step::FixInvalidPools);
        }
    }
    if diagnosis
        .claims
        .iter()
        .flat_map(|c| &c.requests)
        .flat_map(|r| &r.reasons)
        .any(|r| r.reason == ReasonKind::PoolUpdating)
    {
        steps.push(Step::WaitForPool);
    }
    steps.push(Step::Fallback);
}

/// For a request whose qualifying devices are all unavailable: who holds them.
fn held_steps(request: &RequestAccount, steps: &mut Vec<Step>) {
    let holders = |shareable: bool| -> Vec<String> {
        let set: BTreeSet<&String> = request
            .reasons
            .iter()
            .filter(|r| r.reason == ReasonKind::Taken && r.detail == Detail::Taken { shareable })
            .flat_map(|r| &r.claims)
            .collect();
        set.into_iter().cloned().collect()
    };
    let exclusive = holders(false);
    if !exclusive.is_empty() {
        steps.push(Step::WaitForHolders {
            request: request.name.clone(),
            holders: exclusive,
        });
    }
    let unshared = holders(true);
    if !unshared.is_empty() {
        steps.push(reallocate_step(&request.name, unshared));
    }
}

/// For a request some of whose qualifying devices carry taints it does not tolerate: which.
fn tolerate_step(request: &RequestAccount, steps: &mut Vec<Step>) {
    let mut taints: Vec<String> = Vec::new();
    for reason in &request.reasons {
        if let Detail::Untolerated { key, value, effect } = &reason.detail {
            let written = crate::fleet::objects::written_taint(key, value.as_deref(), effect);
            if !taints.contains(&written) {
                taints.push(written);
            }
        }
    }
    if !taints.is_empty() {
        steps.push(Step::Tolerate {
            request: request.name.clone(),
            taints,
        });
    }
}

/// What to do when shareable devices are held by allocations without a share ID: allocate the
/// holders again (the scheduler gives a shareable device a share ID only when it allocates it).
fn reallocate_step(request: &str, holders: Vec<String>) -> Step {
    // The agents' own claims are made from the DaemonSet's template: restarting the DaemonSet
    // makes them again.
    let agents: BTreeSet<&str> = holders
        .iter()
        .filter_map(|h| h.split_once('/'))
        .filter(|(_, name)| name.starts_with("media-capabilities-"))
        .map(|(namespace, _)| namespace)
        .collect();
    let agents = agents.into_iter().map(str::to_owned).collect();
    Step::ReallocateHolders {
        request: request.to_owned(),
        holders,
        agents,
    }
}

/// A step per attribute name no device has.
fn unknown_steps(diagnosis: &Diagnosis) -> Vec<Step> {
    let mut seen = BTreeSet::new();
    let mut steps = Vec::new();
    for request in diagnosis.claims.iter().flat_map(|c| &c.requests) {
        for unknown in &request.unknown_attributes {
            let key = (&unknown.attribute, &unknown.selector, &unknown.nearest);
            if seen.insert(key) {
                steps.push(Step::UnknownAttribute {
                    attribute: unknown.attribute.clone(),
                    selector: unknown.selector.clone(),
                    nearest: unknown.nearest.clone(),
                });
            }
        }
    }
    steps
}
