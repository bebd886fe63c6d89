//! GPUs the agent cannot see: the agent's pod gets its render nodes from a claim allocated once,
//! so a GPU
//! the render driver publishes later (hot-plug, a new card) may never reach the container, and
//! nothing else would say why. This loop lists the render driver's slices of the node (at start,
//! when the GPUs change, every resync) and compares the `pciBusID`s of its whole GPUs
//! ([`RenderDriver::kind`]: never a MIG device, a partition or a VFIO-bound GPU) with the agent's
//! GPUs; more is said once (WARN, a metric, a `/readyz` warning) and once when it is over. A
//! list, not a watch: hot-plug is rare, and a watch per node would double the fleet's watches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use kube::api::{Api, ListParams};
use tokio::sync::watch;
use tracing::{Level, info, warn};

use crate::agent::api::{API_CALL_TIMEOUT, ApiCause, Problem, api_answered, api_unanswered};
use crate::agent::health::Health;
use crate::agent::liveness::Heartbeat;
use crate::catalogue::PCI_BUS_ID;
use crate::node::device::{AttrValue, GpuDevice};
use crate::render_drivers::{DeviceKind, RenderDriver, canonical_pci_bus_id};

/// What a device of `driver` is, read from its attributes of the driver's domain (unqualified,
/// or qualified with the driver's name).
pub(crate) fn kind_of(driver: &RenderDriver, device: &Device) -> DeviceKind {
    let attributes = device.attributes.as_ref();
    let qualified = |name: &str| format!("{}/{name}", driver.name);
    driver.kind(|name| {
        let attribute = attributes?
            .get(name)
            .or_else(|| attributes?.get(&qualified(name)))?;
        Some(attribute.string.as_deref())
    })
}

/// The PCI addresses of the whole GPUs `driver` publishes for the node, from its slices, in the
/// canonical form the agent publishes (a driver writing capitals is still compared).
pub(crate) fn render_addresses(
    driver: &RenderDriver,
    slices: &[ResourceSlice],
) -> BTreeSet<String> {
    slices
        .iter()
        .filter(|s| s.spec.driver == driver.name)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter(|d| kind_of(driver, d) == DeviceKind::Gpu)
        .filter_map(|d| d.attributes.as_ref()?.get(PCI_BUS_ID)?.string.as_deref())
        .map(|a| canonical_pci_bus_id(a).unwrap_or_else(|| a.to_string()))
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

/// The message for GPUs the render driver publishes that the agent does not have, if any.
pub(crate) fn not_seen(
    driver: &RenderDriver,
    published: &BTreeSet<String>,
    agent: &BTreeSet<String>,
) -> Option<String> {
    let missing: Vec<&str> = published.difference(agent).map(String::as_str).collect();
    if missing.is_empty() {
        return None;
    }
    let why = driver.render_node_caveat.unwrap_or(
        "its render-node claim was allocated when the pod started, before they appeared",
    );
    let hint = "delete this agent's pod so that the DaemonSet makes a new one with a new claim: \
                kubectl -n liken-system delete pod <this pod>";
    Some(format!(
        "{} publishes {} GPU(s) on this node that this agent's container does not have: {} ({why}), \
         so their capabilities are not published (hint: {hint})",
        driver.called(),
        missing.len(),
        missing.join(", ")
    ))
}

/// Compares the render driver's GPUs with the agent's until `gpus` is dropped.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn follow(
    client: kube::Client,
    driver: &'static RenderDriver,
    node: String,
    api_url: String,
    mut gpus: watch::Receiver<Option<Vec<GpuDevice>>>,
    health: Arc<Health>,
    interval: Duration,
    heartbeat: Heartbeat,
) {
    let slices: Api<ResourceSlice> = Api::all(client);
    let params =
        ListParams::default().fields(&format!("spec.nodeName={node},spec.driver={driver}"));
    let mut problem = Problem::new("compare the render driver's GPUs with this agent's");
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
                    &format!(
                        "list ResourceSlices (spec.driver={driver}, spec.nodeName={node}): {cause}"
                    ),
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
        let published = render_addresses(driver, &listed);
        let note = not_seen(driver, &published, &ours);
        health
            .metrics
            .gpus_not_in_claim
            .set(published.difference(&ours).count() as i64);
        if Health::set_note(&health.not_in_claim, note.clone()) {
            match note {
                Some(note) => warn!("{note}"),
                None => {
                    info!(
                        "every GPU {} publishes on this node is in this agent's container",
                        driver.called()
                    )
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
        let liken = &crate::render_drivers::LIKEN;
        let slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "n1-liken.sh"},
            "spec": {"driver": "liken.sh", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "renderd128", "attributes": {"renderNode": {"string": "/dev/dri/renderD128"}, "resource.kubernetes.io/pciBusID": {"string": "0000:03:00.0"}}},
                    {"name": "renderd129", "attributes": {"renderNode": {"string": "/dev/dri/renderD129"}, "resource.kubernetes.io/pciBusID": {"string": "0000:04:00.0"}}},
                    {"name": "card0", "attributes": {"resource.kubernetes.io/pciBusID": {"string": "0000:05:00.0"}}},
                    {"name": "vgem", "attributes": {}}
                ]}
        }))
        .unwrap();
        let published = render_addresses(liken, &[slice]);
        assert_eq!(
            published.len(),
            2,
            "a device without a PCI address or a render node is not compared"
        );
        let agent: BTreeSet<String> = ["0000:03:00.0".to_string()].into();
        let note = not_seen(liken, &published, &agent).expect("one GPU missing");
        assert!(
            note.contains("1 GPU(s)") && note.contains("0000:04:00.0"),
            "{note}"
        );
        assert!(note.starts_with("liken publishes"), "{note}");
        assert!(note.contains("delete this agent's pod"), "{note}");
        assert_eq!(not_seen(liken, &agent, &agent), None);
        // The agent seeing more than liken is `caps`'s drift, not a claim problem.
        assert_eq!(not_seen(liken, &BTreeSet::new(), &agent), None);
    }

    #[test]
    fn only_a_vendors_whole_gpus_are_compared_in_the_canonical_form() {
        let nvidia = &crate::render_drivers::NVIDIA;
        let slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "n1-gpu.nvidia.com-abcde"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "resource.kubernetes.io/pciBusID": {"string": "0000:0A:00.0"}}},
                    {"name": "gpu-0-mig-1g-10gb-0", "attributes": {"type": {"string": "mig"}, "resource.kubernetes.io/pciBusID": {"string": "0000:0b:00.0"}}},
                    {"name": "gpu-1", "attributes": {"gpu.nvidia.com/type": {"string": "vfio"}, "resource.kubernetes.io/pciBusID": {"string": "0000:0c:00.0"}}}
                ]}
        }))
        .unwrap();
        let published = render_addresses(nvidia, std::slice::from_ref(&slice));
        assert_eq!(published, BTreeSet::from(["0000:0a:00.0".to_string()]));
        let note = not_seen(nvidia, &published, &BTreeSet::new()).unwrap();
        assert!(note.contains("nvidia-drm"), "{note}");
        // Another driver's slices are not this one's.
        assert!(render_addresses(&crate::render_drivers::LIKEN, &[slice]).is_empty());
    }
}
