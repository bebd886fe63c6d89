//! GPUs the claim did not bring: the agent's pod gets its render nodes from a claim allocated once,
//! so a GPU liken publishes later (hot-plug, a new card) never reaches the container, and nothing
//! else would say why. This loop lists liken's slices of the node (at start, when the GPUs change,
//! every resync) and compares their `pciBusID`s with the agent's GPUs; more is said once (WARN, a
//! metric, a `/readyz` warning) and once when it is over. A list, not a watch: hot-plug is rare,
//! and a watch per node would double the fleet's watches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ListParams};
use tokio::sync::watch;
use tracing::{Level, info, warn};

use crate::agent::api::{API_CALL_TIMEOUT, ApiCause, Problem, api_answered, api_unanswered};
use crate::agent::health::{Health, Heartbeat};
use crate::catalogue::{PCI_BUS_ID, RENDER_DRIVER};
use crate::node::device::{AttrValue, GpuDevice};

/// The PCI addresses liken publishes for the node, from its slices.
pub(crate) fn liken_addresses(slices: &[ResourceSlice]) -> BTreeSet<String> {
    slices
        .iter()
        .filter(|s| s.spec.driver == RENDER_DRIVER)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter_map(|d| d.attributes.as_ref()?.get(PCI_BUS_ID)?.string.clone())
        .collect()
}

/// The PCI addresses of the GPUs the agent found (and so can open).
pub(crate) fn agent_addresses(gpus: &[GpuDevice]) -> BTreeSet<String> {
    gpus.iter()
        .filter_map(|g| match g.attributes.get(PCI_BUS_ID) {
            Some(AttrValue::String(address)) => Some(address.clone()),
            _ => None,
        })
        .collect()
}

/// The message for GPUs liken publishes that the agent does not have, if any.
pub(crate) fn not_in_claim(liken: &BTreeSet<String>, agent: &BTreeSet<String>) -> Option<String> {
    let missing: Vec<&str> = liken.difference(agent).map(String::as_str).collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "liken publishes {} GPU(s) on this node that this agent's container does not have: {} (its render-node claim was allocated when the pod started, before they appeared), so their capabilities are not published (hint: delete this agent's pod so that the DaemonSet makes a new one with a new claim: kubectl -n liken-system delete pod <this pod>)",
        missing.len(),
        missing.join(", ")
    ))
}

/// Compares liken's render nodes with the agent's GPUs until `gpus` is dropped.
pub(crate) async fn follow(
    client: kube::Client,
    node: String,
    api_url: String,
    mut gpus: watch::Receiver<Option<Vec<GpuDevice>>>,
    health: Arc<Health>,
    interval: Duration,
    heartbeat: Heartbeat,
) {
    let slices: Api<ResourceSlice> = Api::all(client);
    let params =
        ListParams::default().fields(&format!("spec.nodeName={node},spec.driver={RENDER_DRIVER}"));
    let mut problem = Problem::new("compare liken's render nodes with this agent's GPUs");
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        heartbeat.beat(interval).await;
        tokio::select! {
            changed = gpus.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
        let Some(ours) = gpus.borrow().as_deref().map(agent_addresses) else {
            continue;
        };
        heartbeat.busy(API_CALL_TIMEOUT);
        let listed = match tokio::time::timeout(API_CALL_TIMEOUT, slices.list(&params)).await {
            Ok(Ok(list)) => list.items,
            Ok(Err(e)) => {
                let cause = ApiCause::from_kube(&e, &api_url);
                if api_unanswered(&health, &api_url, &cause) {
                    continue;
                }
                api_answered(&health, &api_url);
                problem.report(
                    Level::WARN,
                    &cause.class(),
                    &format!("list ResourceSlices (spec.driver={RENDER_DRIVER}, spec.nodeName={node}): {cause}"),
                );
                continue;
            }
            Err(_) => {
                let cause = ApiCause::TimedOut {
                    url: api_url.clone(),
                    after: API_CALL_TIMEOUT,
                };
                api_unanswered(&health, &api_url, &cause);
                continue;
            }
        };
        api_answered(&health, &api_url);
        problem.ok();
        let liken = liken_addresses(&listed);
        let note = not_in_claim(&liken, &ours);
        health
            .metrics
            .gpus_not_in_claim
            .set(liken.difference(&ours).count() as i64);
        if Health::set_note(&health.not_in_claim, note.clone()) {
            match note {
                Some(note) => warn!("{note}"),
                None => {
                    info!("every GPU liken publishes on this node is in this agent's container")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_gpu_liken_has_and_the_agent_lacks_is_named_with_the_fix() {
        let slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "n1-liken.sh"},
            "spec": {"driver": "liken.sh", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "renderd128", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:03:00.0"}}},
                    {"name": "renderd129", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:04:00.0"}}},
                    {"name": "vgem", "attributes": {}}
                ]}
        }))
        .unwrap();
        let liken = liken_addresses(&[slice]);
        assert_eq!(
            liken.len(),
            2,
            "a device without a PCI address is not compared"
        );
        let agent: BTreeSet<String> = ["0000:03:00.0".to_string()].into();
        let note = not_in_claim(&liken, &agent).expect("one GPU missing");
        assert!(
            note.contains("1 GPU(s)") && note.contains("0000:04:00.0"),
            "{note}"
        );
        assert!(note.contains("delete this agent's pod"), "{note}");
        assert_eq!(not_in_claim(&agent, &agent), None);
        // The agent seeing more than liken is `caps`'s drift, not a claim problem.
        assert_eq!(not_in_claim(&BTreeSet::new(), &agent), None);
    }
}
