//! `why`'s pure core: whether a pod's claims can be allocated on a node, decided as the scheduler
//! decides, and why not. [`cel`] evaluates selectors, [`allocate`] applies the allocation rules,
//! [`diagnose`] names a selector's first false clause, and [`pod`] runs the rooms into
//! [`findings`]. No I/O and no sentences here: gathering is `fleet`'s, wording is `cli`'s. A device
//! is anything implementing [`DeviceView`], read in place; claims and classes are the `k8s-openapi`
//! types.

pub mod allocate;
pub mod cel;
pub(crate) mod claims;
pub mod diagnose;
mod evaluate;
mod filters;
pub(crate) mod findings;
pub(crate) mod model;
mod next_steps;
pub(crate) mod pod;
mod requests;
pub(crate) mod target;
mod verdict;
mod work;

use std::fmt;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::DeviceTaint;

/// One typed attribute value, as a ResourceSlice states it (`bool`, `int`, `string`, `version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttributeValue<'a> {
    Bool(bool),
    Int(i64),
    String(&'a str),
    /// A semantic version, as published (`1.2.3`); CEL sees it as a `semver` value.
    Version(&'a str),
}

impl fmt::Display for AttributeValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Bool(b) => write!(f, "{b}"),
            AttributeValue::Int(i) => write!(f, "{i}"),
            AttributeValue::String(s) => write!(f, "{s:?}"),
            AttributeValue::Version(v) => write!(f, "{v}"),
        }
    }
}

/// Which nodes a device can be used from: its slice's `nodeName`, `nodeSelector` or `allNodes`
/// (or, with `perDeviceNodeSelection`, the device's own fields).
#[derive(Clone, Copy, Debug)]
pub enum Placement<'a> {
    Node(&'a str),
    Selector(&'a NodeSelector),
    AllNodes,
}

/// What the evaluation reads of one device. Kept small so that the fleet model implements it
/// directly; every name is as published (qualified or not). `Sync` because CEL values are.
pub trait DeviceView: Sync {
    /// The slice's `spec.driver`; also the domain of unqualified attribute names.
    fn driver(&self) -> &str;
    /// The slice's `spec.pool.name`.
    fn pool(&self) -> &str;
    /// The device's `name`.
    fn name(&self) -> &str;
    /// Every attribute, under the name the slice uses (`decodeH264`,
    /// `resource.kubernetes.io/pciBusID`).
    fn attributes(&self) -> Box<dyn Iterator<Item = (&str, AttributeValue<'_>)> + '_>;
    /// Every capacity, under the name the slice uses, with its quantity as written (`16Gi`).
    fn capacities(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_>;
    /// `allowMultipleAllocations` as stored (`None` when absent, e.g. dropped by a 1.34/1.35 API
    /// server whose DRAConsumableCapacity gate is off).
    fn allow_multiple_allocations(&self) -> Option<bool>;
    /// The device's taints.
    fn taints(&self) -> &[DeviceTaint];
    /// The nodes this device can be used from.
    fn placement(&self) -> Placement<'_>;
    /// The name of an attribute whose value has no type the scheduler converts (none, several,
    /// a list while DRAListTypeAttributes is off): dra cel/compile.go `getAttributeValue`
    /// fails every selector on such a device. [`DeviceView::attributes`] leaves it out.
    fn unsupported_attribute(&self) -> Option<&str> {
        None
    }
    /// With `perDeviceNodeSelection`, an id of the device's slice (equal for the devices of
    /// one slice): the scheduler (pools_incubating.go `GatherPools`) gathers such a slice
    /// whole for a node one of its devices is for, and checks each device's own node only
    /// after its selectors (allocator_incubating.go `isSelectable`).
    fn per_device_slice(&self) -> Option<usize> {
        None
    }

    /// Every capacity under its name as the slice wrote it (`memory` or `liken.sh/memory`):
    /// the allocator looks a request's capacity names up as plain strings
    /// (consumable_capacity.go `requestsContainNonExistCapacity`).
    fn capacities_written(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        self.capacities()
    }

    /// The attribute `domain`/`name` as CEL's `device.attributes[domain][name]` sees it: a name
    /// without a domain belongs to the driver's domain.
    fn attribute(&self, domain: &str, name: &str) -> Option<AttributeValue<'_>> {
        self.attributes()
            .find(|(qualified, _)| split_qualified(qualified, self.driver()) == (domain, name))
            .map(|(_, value)| value)
    }

    /// Feeds `h` what CEL sees of the device (driver, attributes, capacities,
    /// `allowMultipleAllocations`, the unsupported attribute): devices fed alike are one CEL
    /// class for the allocator. A view of interned text may feed each text's address instead.
    fn hash_cel_inputs<H: std::hash::Hasher>(&self, h: &mut H)
    where
        Self: Sized,
    {
        use std::hash::Hash;
        self.driver().hash(h);
        for (name, value) in self.attributes() {
            name.hash(h);
            value.hash(h);
        }
        0xffu8.hash(h);
        for (name, quantity) in self.capacities() {
            name.hash(h);
            quantity.hash(h);
        }
        self.allow_multiple_allocations().hash(h);
        self.unsupported_attribute().hash(h);
    }

    /// The device's identity, `driver/pool/device`, as the scheduler prints it.
    fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.driver().to_owned(),
            pool: self.pool().to_owned(),
            device: self.name().to_owned(),
        }
    }
}

/// Splits a qualified name at its first `/` (dra cel/compile.go `parseQualifiedName`); a name
/// without a domain belongs to `default_domain`.
pub(crate) fn split_qualified<'a>(name: &'a str, default_domain: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (default_domain, name),
    }
}

/// A device's identity: driver, pool and device name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// A candidate node: its name and labels, for slices published with a `nodeSelector`.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

impl NodeInfo {
    /// Whether a device placed at `placement` can be used from this node.
    pub(crate) fn can_use(&self, placement: Placement<'_>) -> bool {
        match placement {
            Placement::Node(name) => name == self.name,
            Placement::AllNodes => true,
            Placement::Selector(selector) => self.matches(selector),
        }
    }
}

/// A device as plain owned data: the form fixtures, tests and the benchmark build, and what a
/// caller without a model of its own can fill in.
#[derive(Clone, Debug, Default)]
pub struct DeviceRecord {
    pub driver: String,
    pub pool: String,
    pub name: String,
    /// Attributes under their published names.
    pub attributes: Vec<(String, OwnedAttribute)>,
    /// Capacities under their published names, as quantities (`16Gi`).
    pub capacities: Vec<(String, String)>,
    pub allow_multiple_allocations: Option<bool>,
    pub taints: Vec<DeviceTaint>,
    pub placement: OwnedPlacement,
}

/// An owned [`AttributeValue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedAttribute {
    Bool(bool),
    Int(i64),
    String(String),
    Version(String),
}

/// An owned [`Placement`].
#[derive(Clone, Debug)]
pub enum OwnedPlacement {
    Node(String),
    Selector(NodeSelector),
    AllNodes,
}

impl Default for OwnedPlacement {
    fn default() -> Self {
        OwnedPlacement::Node(String::new())
    }
}

impl DeviceView for DeviceRecord {
    fn driver(&self) -> &str {
        &self.driver
    }
    fn pool(&self) -> &str {
        &self.pool
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn attributes(&self) -> Box<dyn Iterator<Item = (&str, AttributeValue<'_>)> + '_> {
        Box::new(self.attributes.iter().map(|(name, value)| {
            let value = match value {
                OwnedAttribute::Bool(b) => AttributeValue::Bool(*b),
                OwnedAttribute::Int(i) => AttributeValue::Int(*i),
                OwnedAttribute::String(s) => AttributeValue::String(s),
                OwnedAttribute::Version(v) => AttributeValue::Version(v),
            };
            (name.as_str(), value)
        }))
    }
    fn capacities(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        Box::new(
            self.capacities
                .iter()
                .map(|(n, q)| (n.as_str(), q.as_str())),
        )
    }
    fn allow_multiple_allocations(&self) -> Option<bool> {
        self.allow_multiple_allocations
    }
    fn taints(&self) -> &[DeviceTaint] {
        &self.taints
    }
    fn placement(&self) -> Placement<'_> {
        match &self.placement {
            OwnedPlacement::Node(n) => Placement::Node(n),
            OwnedPlacement::Selector(s) => Placement::Selector(s),
            OwnedPlacement::AllNodes => Placement::AllNodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unqualified_names_belong_to_the_driver() {
        let d = DeviceRecord {
            driver: "media.liken.sh".into(),
            attributes: vec![
                ("scale10bit".into(), OwnedAttribute::Bool(true)),
                (
                    "resource.kubernetes.io/pciBusID".into(),
                    OwnedAttribute::String("0000:00:02.0".into()),
                ),
            ],
            ..Default::default()
        };
        assert_eq!(
            d.attribute("media.liken.sh", "scale10bit"),
            Some(AttributeValue::Bool(true))
        );
        assert_eq!(
            d.attribute("resource.kubernetes.io", "pciBusID"),
            Some(AttributeValue::String("0000:00:02.0"))
        );
        assert_eq!(d.attribute("liken.sh", "scale10bit"), None);
    }
}
