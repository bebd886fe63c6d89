//! The pod's claims, found as the kubelet and the scheduler find them (never a guessed name),
//! with where each stands and what is wrong with it when something is.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClassSpec, DeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::DeviceView;
use super::findings::{
    AllocatedDevice, Allocation, ClaimProblem, ClaimReport, ClaimState, Constraint, Diagnosis, Step,
};
use super::model::FleetModel;
use crate::catalogue::PCI_BUS_ID;
use crate::fleet::objects::Objects;
use crate::render_drivers::{DeviceKind, RenderDriver};
use crate::text::nearest;

/// liken's render node attribute.
const RENDER_NODE: &str = "liken.sh/renderNode";

/// A claim of the pod, found.
pub(super) struct Entry<'o> {
    pub name: String,
    pub claim: Option<&'o ResourceClaim>,
    pub claim_name: Option<String>,
    pub template: Option<String>,
    pub spec: Option<&'o ResourceClaimSpec>,
    pub state: ClaimState,
    pub problem: Option<ClaimProblem>,
}

impl Entry<'_> {
    pub(super) fn claim_label(&self, namespace: &str) -> String {
        match (&self.claim_name, &self.template) {
            (Some(name), _) => name.clone(),
            (None, Some(template)) => format!("{namespace}/(from template {template})"),
            (None, None) => format!("{namespace}/{}", self.name),
        }
    }
}

/// The pod's claims, each found as the kubelet finds it.
pub(super) fn pod_claims<'o>(pod: &'o Pod, objects: &'o Objects) -> Vec<Entry<'o>> {
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
                        found.problem = Some(ClaimProblem::ClaimMissing {
                            namespace: namespace.to_owned(),
                            claim: claim_name.clone(),
                            entry: entry.name.clone(),
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
                            Some(_) => ClaimProblem::NotCreated {
                                entry: entry.name.clone(),
                            },
                            None => ClaimProblem::TemplateMissing {
                                namespace: namespace.to_owned(),
                                template: template_name.clone(),
                                entry: entry.name.clone(),
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
                                        found.problem = Some(ClaimProblem::NotOwned {
                                            namespace: namespace.to_owned(),
                                            claim: claim_name.clone(),
                                            pod: pod.metadata.name.clone().unwrap_or_default(),
                                        });
                                    }
                                }
                                None => {
                                    found.problem = Some(ClaimProblem::StatusClaimMissing {
                                        namespace: namespace.to_owned(),
                                        claim: claim_name.clone(),
                                    });
                                }
                            }
                        }
                    },
                }
            }
            (None, None) => {
                found.problem = Some(ClaimProblem::NoSource {
                    entry: entry.name.clone(),
                });
            }
        }
        if found.state == ClaimState::BeingDeleted && found.problem.is_none() {
            found.problem = Some(ClaimProblem::BeingDeleted {
                claim: found.claim_name.clone().unwrap_or_default(),
            });
        }
        out.push(found);
    }
    out
}

/// Where one claim stands, for `pod` (when the pod is known).
pub(super) fn claim_state(
    claim: &ResourceClaim,
    pod: Option<&Pod>,
    from_template: bool,
) -> ClaimState {
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
pub(super) fn reserved_for(claim: &ResourceClaim) -> Vec<String> {
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

pub(super) fn owned_by(claim: &ResourceClaim, pod: &Pod) -> bool {
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

/// (request name, class name) of every request and sub-request.
pub(super) fn request_classes(spec: &ResourceClaimSpec) -> Vec<(String, &str)> {
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

/// Whether `meta` names the object `namespace/name` (no namespace is `default`).
pub(super) fn meta_is(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.name.as_deref() == Some(name)
        && meta.namespace.as_deref().unwrap_or("default") == namespace
}

pub(super) fn requests(spec: &ResourceClaimSpec) -> &[DeviceRequest] {
    spec.devices
        .as_ref()
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default()
}

/// What an allocated claim got, with the GPU's address and render node looked up.
pub(super) fn allocated(claim: &ResourceClaim, model: &FleetModel<'_>) -> Allocation {
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let node = allocation
        .and_then(|a| a.node_selector.as_ref())
        .and_then(node_of_selector);
    let results = allocation
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    // The API allows 32 results; past that (a file's claim) each is found by hash, not by a
    // walk over every device of the fleet.
    let index: Option<std::collections::HashMap<(&str, &str, &str), usize>> = (results.len() > 32)
        .then(|| {
            let mut index = std::collections::HashMap::with_capacity(model.devices.len());
            for (i, d) in model.devices.iter().enumerate() {
                index.entry((d.driver(), d.pool(), d.name())).or_insert(i);
            }
            index
        });
    let devices = results
        .iter()
        .map(|r| {
            let device = match &index {
                Some(index) => index
                    .get(&(r.driver.as_str(), r.pool.as_str(), r.device.as_str()))
                    .map(|&i| &model.devices[i]),
                None => model
                    .devices
                    .iter()
                    .find(|d| d.driver() == r.driver && d.pool() == r.pool && d.name() == r.device),
            };
            AllocatedDevice {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                pci_bus_id: device.and_then(|d| d.string(PCI_BUS_ID)).map(str::to_owned),
                render_node: device
                    .and_then(|d| d.string(RENDER_NODE))
                    .map(str::to_owned),
                sub_device: None,
            }
        })
        .collect();
    Allocation { node, devices }
}

/// The node an allocation's node selector names (`metadata.name In [node]`, as the scheduler
/// writes it).
pub(super) fn node_of_selector(selector: &NodeSelector) -> Option<String> {
    selector.node_selector_terms.iter().find_map(|t| {
        t.match_fields
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|r| r.key == "metadata.name" && r.operator == "In")
            .and_then(|r| r.values.as_ref()?.first().cloned())
    })
}

/// The claims sorted for the analysis: their reports, their problems, the ones still to
/// allocate and the nodes the allocated ones are bound to.
pub(super) struct Sorted<'o> {
    pub reports: Vec<ClaimReport>,
    pub problems: Vec<ClaimProblem>,
    /// The claims the allocator works on: (index in `reports`, `namespace/name`, spec):
    /// pending ones, and those made from a template that does not exist yet (the template's
    /// spec is what the claim will ask for).
    pub pending: Vec<(usize, String, &'o ResourceClaimSpec)>,
    /// The node selectors of the claims already allocated.
    pub bound_nodes: Vec<&'o NodeSelector>,
}

/// Each claim's report, and where it goes next.
pub(super) fn sort<'o>(
    entries: &[Entry<'o>],
    namespace: &str,
    model: &FleetModel<'_>,
) -> Sorted<'o> {
    let mut sorted = Sorted {
        reports: Vec::new(),
        problems: Vec::new(),
        pending: Vec::new(),
        bound_nodes: Vec::new(),
    };
    for entry in entries {
        let mut report = ClaimReport {
            name: entry.name.clone(),
            claim: entry.claim_name.clone(),
            template: entry.template.clone(),
            state: entry.state,
            reserved_for: entry.claim.map(reserved_for).unwrap_or_default(),
            problem: entry.problem.clone(),
            allocation: None,
            requests: Vec::new(),
            constraints: entry.spec.map(constraints).unwrap_or_default(),
        };
        if let Some(problem) = &entry.problem {
            sorted.problems.push(problem.clone());
        }
        match (entry.state, entry.claim) {
            (ClaimState::Reserved | ClaimState::Allocated, Some(claim)) => {
                let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
                if let Some(selector) = allocation.and_then(|a| a.node_selector.as_ref()) {
                    sorted.bound_nodes.push(selector);
                }
                report.allocation = Some(allocated(claim, model));
            }
            (ClaimState::Pending | ClaimState::NotCreated, _) => {
                if let Some(spec) = entry.spec {
                    let index = sorted.reports.len();
                    sorted
                        .pending
                        .push((index, entry.claim_label(namespace), spec));
                }
            }
            _ => {}
        }
        sorted.reports.push(report);
    }
    sorted
}

fn constraints(spec: &ResourceClaimSpec) -> Vec<Constraint> {
    spec.devices
        .as_ref()
        .and_then(|d| d.constraints.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let requests = c.requests.clone().unwrap_or_default();
            match (&c.match_attribute, &c.distinct_attribute) {
                (Some(a), _) => Constraint::MatchAttribute {
                    attribute: a.clone(),
                    requests,
                },
                (None, Some(a)) => Constraint::DistinctAttribute {
                    attribute: a.clone(),
                    requests,
                },
                (None, None) => Constraint::Empty { requests },
            }
        })
        .collect()
}

/// Classes that do not exist: the scheduler fails the pod with "request %s: device class %s
/// does not exist" before looking at a device.
pub(super) fn check_classes(sorted: &mut Sorted<'_>, classes: &BTreeMap<String, DeviceClassSpec>) {
    for (index, label, spec) in &sorted.pending {
        for (request, class) in request_classes(spec) {
            if !classes.contains_key(class) {
                let problem = ClaimProblem::ClassMissing {
                    claim: label.clone(),
                    request,
                    class: class.to_owned(),
                    nearest: nearest(class, classes.keys().map(String::as_str)),
                };
                if sorted.reports[*index].problem.is_none() {
                    sorted.reports[*index].problem = Some(problem.clone());
                }
                sorted.problems.push(problem);
            }
        }
    }
}

/// The render drivers' devices of the fleet that are not whole GPUs, by (driver, pool, device):
/// what a render request pairs with when a class selects more than whole GPUs.
fn sub_devices<'m>(model: &'m FleetModel<'_>) -> HashMap<(&'m str, &'m str, &'m str), DeviceKind> {
    let mut found = HashMap::new();
    for device in &model.devices {
        let Some(driver) = RenderDriver::named(device.driver()) else {
            continue;
        };
        let kind = driver.kind(|name| device.string_in(driver.name, name).map(Some));
        if kind != DeviceKind::Gpu {
            found.insert((device.driver(), device.pool(), device.name()), kind);
        }
    }
    found
}

/// Marks the allocated and picked devices that are sub-devices of a GPU, and adds a next step
/// for each request that holds or would get one.
pub(super) fn mark_sub_devices(diagnosis: &mut Diagnosis, model: &FleetModel<'_>) {
    let picked = diagnosis
        .nodes
        .as_ref()
        .is_some_and(|n| !n.picks.is_empty());
    let allocated = diagnosis.claims.iter().any(|c| c.allocation.is_some());
    if !picked && !allocated {
        return;
    }
    let kinds = sub_devices(model);
    if kinds.is_empty() {
        return;
    }
    let mut steps = Vec::new();
    for claim in &mut diagnosis.claims {
        let name = claim.claim.clone().unwrap_or_else(|| claim.name.clone());
        for device in claim.allocation.iter_mut().flat_map(|a| &mut a.devices) {
            device.sub_device = kinds
                .get(&(
                    device.driver.as_str(),
                    device.pool.as_str(),
                    device.device.as_str(),
                ))
                .copied();
            if let Some(kind) = device.sub_device {
                steps.push(Step::SubDevice {
                    claim: name.clone(),
                    request: device.request.clone(),
                    driver: device.driver.clone(),
                    device: device.device.clone(),
                    kind,
                    allocated: true,
                    node: None,
                });
            }
        }
    }
    for picks in diagnosis.nodes.iter_mut().flat_map(|n| &mut n.picks) {
        for device in &mut picks.devices {
            device.sub_device = kinds
                .get(&(
                    device.driver.as_str(),
                    device.pool.as_str(),
                    device.device.as_str(),
                ))
                .copied();
            // The first node's picks stand for all: one step per request, not per node.
            if let Some(kind) = device.sub_device
                && !steps.iter().any(|s| {
                    matches!(s, Step::SubDevice { claim, request, .. }
                        if *claim == device.claim && *request == device.request)
                })
            {
                steps.push(Step::SubDevice {
                    claim: device.claim.clone(),
                    request: device.request.clone(),
                    driver: device.driver.clone(),
                    device: device.device.clone(),
                    kind,
                    allocated: false,
                    node: Some(picks.node.clone()),
                });
            }
        }
    }
    diagnosis.next_steps.extend(steps);
}
