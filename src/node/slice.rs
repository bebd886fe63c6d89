//! Pure: the node's GPUs in, the `media.liken.sh` ResourceSlice the agent wants out (publishing is
//! the agent's job; the example fleet is built with this too). One pool named after the node, whose
//! generation the publisher bumps; `spec.nodeName`; one device per GPU with
//! `allowMultipleAllocations: true` (a statement can back any number of claims); owned by the Node,
//! so it is garbage-collected with it. The name is [`slice_name`]'s. A GPU whose probe failed
//! carries the agent's taint, unless the node has more GPUs than a slice with taints may hold
//! ([`taints_fit`]).

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::catalogue;
use crate::names::MAX_SUBDOMAIN_LENGTH;
use crate::node::device::{AttrValue, GpuDevice};

/// The suffix of the slice name, after the node name.
const NAME_SUFFIX: &str = "-media.liken.sh";

/// The Node that owns the slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub uid: String,
}

/// The slice's name for a node: `<node>-media.liken.sh`; past 253 characters, the node part is
/// cut and a hash keeps it unique: `<first part of node>-<8 hex of FNV-1a(node)>-media.liken.sh`.
pub(crate) fn slice_name(node: &str) -> String {
    let plain = format!("{node}{NAME_SUFFIX}");
    if plain.len() <= MAX_SUBDOMAIN_LENGTH {
        return plain;
    }
    let hash = format!("{:08x}", fnv1a(node.as_bytes()) as u32);
    let room = MAX_SUBDOMAIN_LENGTH - NAME_SUFFIX.len() - hash.len() - 1;
    // Node names are ASCII (DNS subdomains), so any byte index is a char boundary; trailing
    // dots or dashes would break the name's rules, so they go too.
    let head = node[..room.min(node.len())].trim_end_matches(['.', '-']);
    format!("{head}-{hash}{NAME_SUFFIX}")
}

/// FNV-1a, 64 bit: a stable hash that needs no dependency and never changes between releases
/// (the name must stay the same across agent versions).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The most devices a slice may hold once one of them has taints, from Kubernetes 1.35 on
/// (k8s.io/api resource/v1 `ResourceSliceMaxDevicesWithAdvancedFeatures`; 1.34 allows 128).
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;

/// Whether a slice of `gpus` may carry taints: the agent publishes one slice per node, so past
/// [`MAX_DEVICES_WITH_TAINTS`] GPUs the taints are left out (the agent says so) and the failed
/// GPUs are unselectable by capability alone (every capability false).
pub fn taints_fit(gpus: &[GpuDevice]) -> bool {
    gpus.len() <= MAX_DEVICES_WITH_TAINTS
}

/// The devices of the slice, one per GPU, sorted by name so that the same GPUs always give the
/// same spec.
pub(crate) fn devices(gpus: &[GpuDevice]) -> Vec<Device> {
    let with_taints = taints_fit(gpus);
    let mut devices: Vec<Device> = gpus
        .iter()
        .map(|gpu| Device {
            name: gpu.name.clone(),
            allow_multiple_allocations: Some(true),
            taints: gpu.taint.as_ref().filter(|_| with_taints).map(|taint| {
                vec![DeviceTaint {
                    key: taint.key.clone(),
                    value: Some(taint.value.as_str().to_string()),
                    effect: taint.effect.as_str().to_string(),
                    // The API server sets it (at create or update, when absent).
                    time_added: None,
                }]
            }),
            attributes: Some(
                gpu.attributes
                    .iter()
                    .map(|(name, value)| ((*name).to_string(), attribute(value)))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

fn attribute(value: &AttrValue) -> DeviceAttribute {
    match value {
        AttrValue::Bool(b) => DeviceAttribute {
            bool: Some(*b),
            ..Default::default()
        },
        AttrValue::String(s) => DeviceAttribute {
            string: Some(s.clone()),
            ..Default::default()
        },
    }
}

/// The whole slice the agent wants for `node`, at pool generation `generation`.
pub fn desired(node: &NodeRef, gpus: &[GpuDevice], generation: i64) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&node.name)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.name.clone(),
                uid: node.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: catalogue::DRIVER.into(),
            node_name: Some(node.name.clone()),
            pool: ResourcePool {
                name: node.name.clone(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(devices(gpus)),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::check_subdomain;

    #[test]
    fn names_follow_the_node() {
        assert_eq!(slice_name("gpu-node-1"), "gpu-node-1-media.liken.sh");
        assert_eq!(check_subdomain(&slice_name("gpu-node-1")), Ok(()));
    }

    #[test]
    fn long_node_names_get_a_deterministic_valid_name() {
        let long = format!("{}.example.com", "a".repeat(240));
        let name = slice_name(&long);
        assert!(name.len() <= 253, "{}", name.len());
        assert_eq!(check_subdomain(&name), Ok(()));
        assert_eq!(name, slice_name(&long), "same node, same name");
        let other = format!("{}.example.org", "a".repeat(240));
        assert_ne!(name, slice_name(&other), "different nodes, different names");
        assert!(name.ends_with("-media.liken.sh"));
        // A cut that lands on a dot or dash does not leave it at the end of a label.
        let dotted = format!("{}.{}", "b".repeat(228), "c".repeat(20));
        assert_eq!(check_subdomain(&slice_name(&dotted)), Ok(()));
    }

    fn gpu(name: &str, attributes: &[(&'static str, AttrValue)]) -> GpuDevice {
        GpuDevice {
            name: name.into(),
            render_node: "/dev/dri/renderD128".into(),
            attributes: attributes.iter().cloned().collect(),
            failure: None,
            taint: None,
            trimmed: Vec::new(),
        }
    }

    #[test]
    fn devices_carry_every_attribute_typed_and_are_sorted() {
        let gpus = [
            gpu("pci-0000-03-00-0", &[("decodeVP9", AttrValue::Bool(false))]),
            gpu(
                "pci-0000-00-02-0",
                &[
                    ("address", AttrValue::String("0000:00:02.0".into())),
                    ("decodeVP9", AttrValue::Bool(true)),
                    (
                        catalogue::PCI_BUS_ID,
                        AttrValue::String("0000:00:02.0".into()),
                    ),
                ],
            ),
        ];
        let devices = devices(&gpus);
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["pci-0000-00-02-0", "pci-0000-03-00-0"]);
        let first = serde_json::to_value(&devices[0]).unwrap();
        assert_eq!(
            first,
            serde_json::json!({
                "name": "pci-0000-00-02-0",
                "allowMultipleAllocations": true,
                "attributes": {
                    "address": {"string": "0000:00:02.0"},
                    "decodeVP9": {"bool": true},
                    "resource.kubernetes.io/pciBusID": {"string": "0000:00:02.0"},
                }
            })
        );
    }

    fn failed(name: &str) -> GpuDevice {
        use crate::node::failure::{Failure, FailureKind};
        GpuDevice {
            failure: Some(Failure::new(FailureKind::NotAnswering, "timed out")),
            ..gpu(name, &[("decodeVP9", AttrValue::Bool(false))])
        }
        .tainted(&crate::node::taint::TaintPolicy::default())
    }

    #[test]
    fn a_failed_gpu_carries_the_taint_and_the_others_none() {
        let devices = devices(&[failed("pci-0000-03-00-0"), gpu("pci-0000-00-02-0", &[])]);
        assert_eq!(devices[0].taints, None);
        assert_eq!(
            serde_json::to_value(&devices[1].taints).unwrap(),
            serde_json::json!([{
                "key": "media.liken.sh/unhealthy",
                "value": "not-answering",
                "effect": "NoSchedule",
            }])
        );
    }

    #[test]
    fn past_64_gpus_no_device_has_taints() {
        let mut gpus: Vec<GpuDevice> = (0..MAX_DEVICES_WITH_TAINTS)
            .map(|i| gpu(&format!("pci-0000-{i:02x}-00-0"), &[]))
            .collect();
        gpus[0] = failed("pci-0000-00-00-0");
        assert!(taints_fit(&gpus));
        assert!(devices(&gpus).iter().any(|d| d.taints.is_some()));
        gpus.push(gpu("pci-0000-ff-00-0", &[]));
        assert!(!taints_fit(&gpus));
        let devices = devices(&gpus);
        assert_eq!(devices.len(), 65);
        assert!(devices.iter().all(|d| d.taints.is_none()));
    }

    #[test]
    fn an_empty_node_still_publishes_a_slice() {
        let node = NodeRef {
            name: "n1".into(),
            uid: "u1".into(),
        };
        let slice = desired(&node, &[], 1);
        assert_eq!(slice.spec.devices.as_deref(), Some(&[][..]));
        assert_eq!(slice.spec.pool.name, "n1");
        assert_eq!(slice.spec.node_name.as_deref(), Some("n1"));
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Node", "u1", Some(true))
        );
    }
}
