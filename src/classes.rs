//! What `kubectl media class` writes, as data: DeviceClasses that select GPUs by capability, the
//! catch-all and render-node classes, and the ResourceClaimTemplate that pairs a render node with
//! a capability statement of the same GPU (product document, steps 2–4).
//!
//! Everything here is pure: names have been validated by the caller, and the objects are the
//! typed Kubernetes API structs so that what we print has the schema's shape by construction.

use std::collections::BTreeSet;

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceConstraint, DeviceRequest,
    DeviceSelector, DeviceToleration, ExactDeviceRequest, ResourceClaimSpec, ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::catalogue::{self, Capability, Group};
use crate::render_drivers::RenderDriver;

/// The class of the agent's own claim, installed as wiring (`deploy/base/deviceclass.yaml`): "not for
/// workloads" (product document, step 2), so `class` never writes or claims through it.
pub const AGENT_CLASS: &str = "media-render";
/// The catch-all class of every `media.liken.sh` device (product document, step 4).
pub(crate) const DEFAULT_BASE_CLASS: &str = "media-gpu";
/// The request for the render node, which the container receives.
pub(crate) const RENDER_REQUEST: &str = "gpu";

/// A non-empty set of capabilities, always kept in catalogue order so that expressions and
/// derived names do not depend on the order of the flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CapabilitySet(BTreeSet<Capability>);

impl CapabilitySet {
    /// `None` when `capabilities` is empty: a class over no capability would select every GPU,
    /// which is what the base class is for.
    pub(crate) fn new(capabilities: impl IntoIterator<Item = Capability>) -> Option<Self> {
        let set: BTreeSet<Capability> = capabilities.into_iter().collect();
        (!set.is_empty()).then_some(CapabilitySet(set))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }

    /// A readable object name made from the capabilities, e.g. `decode-hevcmain10-scale-10bit`.
    /// It is a valid DNS subdomain: 18 capabilities at most keep it far below 253 characters.
    pub(crate) fn derived_name(&self) -> String {
        let mut parts = Vec::new();
        for group in Group::ALL {
            let values: Vec<String> = self
                .iter()
                .filter(|c| c.group() == group)
                .map(|c| c.value().to_ascii_lowercase())
                .collect();
            if !values.is_empty() {
                parts.push(group.as_str().to_string());
                parts.extend(values);
            }
        }
        parts.join("-")
    }

    /// The name of the request that asks for the capability statement: `decodes` as in the
    /// product document, or `encodes`/`scales` when the set asks for no decoder.
    pub(crate) fn request_name(&self) -> &'static str {
        match self.iter().next().map(Capability::group) {
            Some(Group::Encode) => "encodes",
            Some(Group::Scale) => "scales",
            Some(Group::Decode) | None => "decodes",
        }
    }

    fn terms(&self) -> impl Iterator<Item = String> + '_ {
        self.iter().map(catalogue::cel_capability)
    }
}

/// How the claim template asks for the capability statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Statement<'a> {
    /// Through a class that already checks the capabilities (step 3).
    Class(&'a str),
    /// Through a class of every `media.liken.sh` device, narrowed by request selectors (step 4).
    Selectors {
        base_class: &'a str,
        capabilities: &'a CapabilitySet,
    },
}

/// Joins CEL terms one per line, as the product document writes them (a YAML `|` block, so the
/// expression ends with a newline).
fn expression(terms: impl IntoIterator<Item = String>) -> String {
    let mut joined = terms.into_iter().collect::<Vec<_>>().join(" &&\n");
    joined.push('\n');
    joined
}

fn driver_is(driver: &str) -> String {
    format!("device.driver == \"{driver}\"")
}

fn cel_selector(expression: String) -> DeviceSelector {
    DeviceSelector {
        cel: Some(CELDeviceSelector { expression }),
    }
}

fn device_class(name: &str, expression: String) -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: DeviceClassSpec {
            selectors: Some(vec![cel_selector(expression)]),
            ..Default::default()
        },
    }
}

/// A class of the `media.liken.sh` devices of GPUs that state every capability of the set.
pub(crate) fn capability_class(name: &str, capabilities: &CapabilitySet) -> DeviceClass {
    let terms = std::iter::once(driver_is(catalogue::DRIVER)).chain(capabilities.terms());
    device_class(name, expression(terms))
}

/// The class of a render driver's whole GPUs with a render node (liken's: product document,
/// step 2).
pub(crate) fn render_class(name: &str, driver: &RenderDriver) -> DeviceClass {
    device_class(name, driver.whole_gpu_cel())
}

/// The catch-all class of every `media.liken.sh` device, for request-level selectors.
pub(crate) fn base_class(name: &str) -> DeviceClass {
    device_class(name, expression([driver_is(catalogue::DRIVER)]))
}

fn exact_request(name: &str, class: &str, selectors: Option<Vec<DeviceSelector>>) -> DeviceRequest {
    DeviceRequest {
        name: name.to_string(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            selectors,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The template of step 3: the render node and the capability statement, constrained to the
/// same GPU by `resource.kubernetes.io/pciBusID`. `tolerations` go on both requests: the
/// agent taints the media device, a vendor's driver (or an operator) the render device.
pub(crate) fn claim_template(
    name: &str,
    render_class: &str,
    request_name: &str,
    statement: &Statement<'_>,
    tolerations: &[DeviceToleration],
) -> ResourceClaimTemplate {
    let statement_request = match statement {
        Statement::Class(class) => exact_request(request_name, class, None),
        Statement::Selectors {
            base_class,
            capabilities,
        } => exact_request(
            request_name,
            base_class,
            Some(vec![cel_selector(expression(capabilities.terms()))]),
        ),
    };
    let mut requests = vec![
        exact_request(RENDER_REQUEST, render_class, None),
        statement_request,
    ];
    if !tolerations.is_empty() {
        for request in &mut requests {
            if let Some(exactly) = request.exactly.as_mut() {
                exactly.tolerations = Some(tolerations.to_vec());
            }
        }
    }
    ResourceClaimTemplate {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: ResourceClaimTemplateSpec {
            metadata: None,
            spec: ResourceClaimSpec {
                devices: Some(DeviceClaim {
                    requests: Some(requests),
                    constraints: Some(vec![DeviceConstraint {
                        requests: Some(vec![RENDER_REQUEST.to_string(), request_name.to_string()]),
                        match_attribute: Some(catalogue::PCI_BUS_ID.to_string()),
                        ..Default::default()
                    }]),
                    config: None,
                }),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Capability::*;

    fn set(capabilities: &[Capability]) -> CapabilitySet {
        CapabilitySet::new(capabilities.iter().copied()).unwrap()
    }

    #[test]
    fn an_empty_set_is_refused() {
        assert_eq!(CapabilitySet::new([]), None);
    }

    #[test]
    fn sets_follow_catalogue_order_whatever_the_flag_order() {
        let a = set(&[Scale10bit, DecodeHEVCMain10, DecodeAV1Main]);
        let b = set(&[DecodeAV1Main, Scale10bit, DecodeHEVCMain10, Scale10bit]);
        assert_eq!(a, b);
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [DecodeAV1Main, DecodeHEVCMain10, Scale10bit]
        );
    }

    #[test]
    fn derived_names_read_as_the_flags_and_are_valid() {
        assert_eq!(
            set(&[DecodeHEVCMain10, Scale10bit]).derived_name(),
            "decode-hevcmain10-scale-10bit"
        );
        assert_eq!(
            set(&[EncodeH264LowPower]).derived_name(),
            "encode-h264lowpower"
        );
        let all = CapabilitySet::new(Capability::ALL).unwrap();
        assert_eq!(crate::names::check_subdomain(&all.derived_name()), Ok(()));
    }

    #[test]
    fn request_names_follow_the_first_group() {
        assert_eq!(set(&[DecodeVP9, EncodeH264]).request_name(), "decodes");
        assert_eq!(set(&[EncodeH264, Scale8bit]).request_name(), "encodes");
        assert_eq!(set(&[Scale8bit]).request_name(), "scales");
    }

    #[test]
    fn capability_class_checks_the_driver_then_each_capability() {
        let class = capability_class("decode-10bit", &set(&[Scale10bit, DecodeHEVCMain10]));
        let selectors = class.spec.selectors.unwrap();
        assert_eq!(selectors.len(), 1);
        assert_eq!(
            selectors[0].cel.as_ref().unwrap().expression,
            "device.driver == \"media.liken.sh\" &&\n\
             device.attributes[\"media.liken.sh\"].decodeHEVCMain10 &&\n\
             device.attributes[\"media.liken.sh\"].scale10bit\n"
        );
    }

    #[test]
    fn selectors_leave_the_driver_check_to_the_base_class() {
        let capabilities = set(&[DecodeVP9, Scale8bit]);
        let template = claim_template(
            "vp9",
            "gpu-render",
            capabilities.request_name(),
            &Statement::Selectors {
                base_class: "media-gpu",
                capabilities: &capabilities,
            },
            &[],
        );
        let devices = template.spec.spec.devices.unwrap();
        let requests = devices.requests.unwrap();
        let exactly = requests[1].exactly.as_ref().unwrap();
        assert_eq!(exactly.device_class_name, "media-gpu");
        assert_eq!(
            exactly.selectors.as_ref().unwrap()[0]
                .cel
                .as_ref()
                .unwrap()
                .expression,
            "device.attributes[\"media.liken.sh\"].decodeVP9 &&\n\
             device.attributes[\"media.liken.sh\"].scale8bit\n"
        );
        let constraint = &devices.constraints.unwrap()[0];
        assert_eq!(
            constraint.match_attribute.as_deref(),
            Some("resource.kubernetes.io/pciBusID")
        );
        assert_eq!(constraint.requests.as_deref().unwrap(), ["gpu", "decodes"]);
    }
}
