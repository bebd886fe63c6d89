//! What the passes over the nodes ([`super::evaluate`]) and over each request's devices
//! ([`super::requests`]) work from: the input, the fleet's model and the claims to allocate.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{DeviceClassSpec, ResourceClaimSpec};
use ustr::Ustr;

use super::model::FleetModel;
use super::target::Input;

/// What the allocator's part works on.
pub(super) struct Work<'w, 'o> {
    pub input: &'w Input<'o>,
    pub model: &'w FleetModel<'o>,
    /// Each device's GPU model, by fleet index.
    pub models: &'w [Ustr],
    pub classes: &'w BTreeMap<String, DeviceClassSpec>,
    pub pod: Option<&'o Pod>,
    /// The claims to allocate: (index in the diagnosis, `namespace/name`, spec).
    pub pending: &'w [(usize, String, &'o ResourceClaimSpec)],
    /// The node selectors of the pod's claims already allocated.
    pub bound_nodes: &'w [&'o NodeSelector],
}
