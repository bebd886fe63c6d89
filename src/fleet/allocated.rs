//! What `caps` reads of a ResourceClaim: its name, the devices allocated to it
//! (`status.allocation.devices.results`) and what it is reserved for (`status.reservedFor`),
//! read straight from the text as the reader meets them. Nothing of the spec: a fleet has as
//! many claims as GPUs, and the whole typed claim is read through a map of JSON values first
//! (`why` reads whole claims; it reads few). `caps --claims` on 40,000 claims: benches/caps.rs.

use serde::Deserialize;

use crate::fleet::objects::Ustr;

/// A ResourceClaim as `caps` keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatedClaim {
    pub namespace: String,
    pub name: String,
    /// Empty when the claim is not allocated.
    pub results: Vec<DeviceResult>,
    pub reserved_for: Vec<Consumer>,
}

impl AllocatedClaim {
    pub(crate) fn new(namespace: String, name: String, status: ClaimStatus) -> AllocatedClaim {
        AllocatedClaim {
            namespace,
            name,
            results: status
                .allocation
                .and_then(|a| a.devices)
                .and_then(|d| d.results)
                .unwrap_or_default(),
            reserved_for: status.reserved_for.unwrap_or_default(),
        }
    }
}

/// One allocated device (resource.k8s.io/v1 `DeviceRequestAllocationResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DeviceResult {
    pub request: String,
    pub driver: Ustr,
    pub pool: Ustr,
    pub device: Ustr,
}

/// What a claim is reserved for (`ResourceClaimConsumerReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Consumer {
    #[serde(default)]
    pub api_group: Option<String>,
    pub resource: String,
    pub name: String,
}

/// `status` of a ResourceClaim, the fields `caps` reads; `null` where a list may be is none, as
/// k8s-openapi reads it.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ClaimStatus {
    pub(crate) allocation: Option<Allocation>,
    pub(crate) reserved_for: Option<Vec<Consumer>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
pub(crate) struct Allocation {
    devices: Option<DeviceAllocation>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct DeviceAllocation {
    results: Option<Vec<DeviceResult>>,
}
