//! What to do next, most specific first.

use std::collections::BTreeSet;

use super::findings::{Diagnosis, shorten};

/// What to do when shareable devices are held by allocations without a share ID: allocate the
/// holders again (the scheduler gives a shareable device a share ID only when it allocates it).
pub(super) fn reallocate_step(request: &str, holders: Vec<String>) -> String {
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

/// A step per attribute name no device has.
pub(super) fn unknown_steps(diagnosis: &Diagnosis) -> Vec<String> {
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

pub(super) fn describe_target(diagnosis: &Diagnosis) -> String {
    let (namespace, name) = diagnosis
        .name
        .split_once('/')
        .unwrap_or(("default", &diagnosis.name));
    format!("pod -n {namespace} {name}")
}
