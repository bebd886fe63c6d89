//! Kubernetes objects as `kubectl media` reads them, and the one reader that turns API responses
//! and files into them. Lists, multi-document YAML and single objects are routed by `kind` and
//! `apiVersion`; the few small kinds are the `k8s-openapi` types, ResourceSlices a model of their
//! own read in one pass, every attribute under its qualified name, strings interned ([`Ustr`]). Odd
//! content never fails a listing: an unreadable value is [`Value::Invalid`], a misshapen object is
//! skipped with a note, unknown kinds are passed over.

use std::fmt;

use k8s_openapi::api::core::v1::{Event, Node, NodeSelector, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use ustr::Ustr;

use crate::catalogue::{self, Capability, Identity};
use crate::fleet::allocated::{AllocatedClaim, ClaimStatus};

/// The API group and version whose DRA objects we read.
pub(crate) const RESOURCE_API_VERSION: &str = "resource.k8s.io/v1";

/// The kinds the reader keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    ResourceSlice,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    Pod,
    Node,
    Event,
    /// resource.k8s.io/v1 from Kubernetes 1.37 (DRADeviceTaintRules GA).
    DeviceTaintRule,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::ResourceSlice,
        Kind::DeviceClass,
        Kind::ResourceClaim,
        Kind::ResourceClaimTemplate,
        Kind::Pod,
        Kind::Node,
        Kind::Event,
        Kind::DeviceTaintRule,
    ];

    /// The object's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ResourceSlice => "ResourceSlice",
            Kind::DeviceClass => "DeviceClass",
            Kind::ResourceClaim => "ResourceClaim",
            Kind::ResourceClaimTemplate => "ResourceClaimTemplate",
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::Event => "Event",
            Kind::DeviceTaintRule => "DeviceTaintRule",
        }
    }

    /// The API group; empty for the core group.
    pub(crate) fn group(self) -> &'static str {
        match self {
            Kind::ResourceSlice
            | Kind::DeviceClass
            | Kind::ResourceClaim
            | Kind::ResourceClaimTemplate
            | Kind::DeviceTaintRule => "resource.k8s.io",
            Kind::Pod | Kind::Node | Kind::Event => "",
        }
    }

    /// The one `apiVersion` read for this kind.
    pub(crate) fn api_version(self) -> &'static str {
        if self.group().is_empty() {
            "v1"
        } else {
            RESOURCE_API_VERSION
        }
    }

    /// The resource's plural name, as in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ResourceSlice => "resourceslices",
            Kind::DeviceClass => "deviceclasses",
            Kind::ResourceClaim => "resourceclaims",
            Kind::ResourceClaimTemplate => "resourceclaimtemplates",
            Kind::Pod => "pods",
            Kind::Node => "nodes",
            Kind::Event => "events",
            Kind::DeviceTaintRule => "devicetaintrules",
        }
    }

    /// `resourceslices.resource.k8s.io`, or `pods` for the core group, as kubectl and the API
    /// server's messages name a resource.
    pub(crate) fn resource(self) -> &'static str {
        match self {
            Kind::ResourceSlice => "resourceslices.resource.k8s.io",
            Kind::DeviceClass => "deviceclasses.resource.k8s.io",
            Kind::ResourceClaim => "resourceclaims.resource.k8s.io",
            Kind::ResourceClaimTemplate => "resourceclaimtemplates.resource.k8s.io",
            Kind::Pod => "pods",
            Kind::Node => "nodes",
            Kind::Event => "events",
            Kind::DeviceTaintRule => "devicetaintrules.resource.k8s.io",
        }
    }

    /// Whether its objects live in namespaces.
    pub(crate) fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::ResourceClaim | Kind::ResourceClaimTemplate | Kind::Pod | Kind::Event
        )
    }

    pub fn from_name(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == kind)
    }
}

/// A set of kinds to keep; the others are skipped without being parsed. ResourceClaims are
/// kept whole, or as their allocations only ([`AllocatedClaim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kinds {
    bits: u8,
    allocations_only: bool,
}

impl Kinds {
    pub(crate) const ALL: Kinds = Kinds {
        bits: 0xff,
        allocations_only: false,
    };

    pub(crate) fn only(kinds: &[Kind]) -> Kinds {
        Kinds {
            bits: kinds.iter().fold(0, |bits, k| bits | (1 << *k as u8)),
            allocations_only: false,
        }
    }

    /// ResourceClaims read into [`Objects::allocated`], not [`Objects::claims`].
    pub(crate) fn claims_as_allocations(self) -> Kinds {
        Kinds {
            allocations_only: true,
            ..self
        }
    }

    pub(crate) fn contains(self, kind: Kind) -> bool {
        self.bits & (1 << kind as u8) != 0
    }

    /// Whether ResourceClaims are read for their allocations only.
    pub(crate) fn allocations_only(self) -> bool {
        self.allocations_only
    }
}

impl Default for Kinds {
    fn default() -> Self {
        Kinds::ALL
    }
}

/// An attribute's or capacity's fully qualified name: `liken.sh/renderNode` is domain
/// `liken.sh`, name `renderNode` — CEL's `device.attributes["liken.sh"].renderNode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QualifiedName {
    pub domain: Ustr,
    pub name: Ustr,
}

impl QualifiedName {
    pub fn new(domain: &str, name: &str) -> QualifiedName {
        QualifiedName {
            domain: Ustr::from(domain),
            name: Ustr::from(name),
        }
    }

    /// Splits a name at its first `/` as the scheduler does; an unqualified name belongs to
    /// `driver`.
    pub fn parse(full: &str, driver: &str) -> QualifiedName {
        match full.split_once('/') {
            Some((domain, name)) => QualifiedName::new(domain, name),
            None => QualifiedName::new(driver, full),
        }
    }

    /// A name read before its slice's driver was: its domain is filled in by `qualify`.
    fn unqualified(name: &str) -> QualifiedName {
        QualifiedName {
            domain: Ustr::default(),
            name: Ustr::from(name),
        }
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.name)
    }
}

impl fmt::Debug for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// An attribute value as the API states it (`{bool: true}`, `{string: "..."}`), or `Invalid`
/// when it has no value we can read (another type, several types, none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    String(Ustr),
    /// A semantic version, as given.
    Version(Ustr),
    Invalid,
}

impl Value {
    pub fn as_str(&self) -> Option<&'static str> {
        self.as_ustr().map(|s| s.as_str())
    }

    /// A string or version, interned.
    pub(crate) fn as_ustr(&self) -> Option<Ustr> {
        match self {
            Value::String(s) | Value::Version(s) => Some(*s),
            _ => None,
        }
    }
}

/// What a device says of one catalogue capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Stated {
    /// The device has no such attribute.
    #[default]
    Absent,
    Bool(bool),
    /// The attribute is there, but not a bool (or not one value).
    NotBool,
}

impl Stated {
    fn of(value: Option<&Value>) -> Stated {
        match value {
            None => Stated::Absent,
            Some(Value::Bool(b)) => Stated::Bool(*b),
            Some(_) => Stated::NotBool,
        }
    }

    pub(crate) fn as_bool(self) -> Option<bool> {
        match self {
            Stated::Bool(b) => Some(b),
            Stated::Absent | Stated::NotBool => None,
        }
    }
}

/// A device's attributes, every domain's, in the order given. A device has at most 32, so a
/// lookup is a short scan comparing interned pointers: cheaper than any index.
///
/// The names are a shape shared by every device that lists the same names in the same order
/// (nearly all of a fleet's devices of one driver): a device then costs its values alone.
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    names: std::sync::Arc<[QualifiedName]>,
    values: Box<[Value]>,
}

/// A map: the same attributes in another order are the same (YAML read through a sorted map,
/// JSON as written).
impl PartialEq for Attributes {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl Eq for Attributes {}

/// The catalogue's names, interned once.
struct CatalogueNames {
    identity: [QualifiedName; Identity::ALL.len()],
    capabilities: [QualifiedName; Capability::ALL.len()],
}

fn catalogue_names() -> &'static CatalogueNames {
    static NAMES: std::sync::OnceLock<CatalogueNames> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| CatalogueNames {
        identity: Identity::ALL.map(|i| QualifiedName::parse(i.attribute(), catalogue::DRIVER)),
        capabilities: Capability::ALL
            .map(|c| QualifiedName::parse(c.attribute(), catalogue::DRIVER)),
    })
}

impl Attributes {
    /// The attribute of that fully qualified name.
    pub fn get(&self, name: QualifiedName) -> Option<&Value> {
        self.values.get(self.position(name)?)
    }

    /// Where `name` sits among the names; devices of one shape have it at the same place.
    pub(crate) fn position(&self, name: QualifiedName) -> Option<usize> {
        self.names.iter().position(|n| *n == name)
    }

    /// The value at a position [`Attributes::position`] gave.
    pub(crate) fn value_at(&self, i: usize) -> Option<&Value> {
        self.values.get(i)
    }

    /// Looks an attribute up by its text name (`liken.sh/renderNode`), without interning it.
    pub fn get_named(&self, full: &str) -> Option<&Value> {
        let (domain, name) = full.split_once('/')?;
        self.get_in(domain, name)
    }

    /// Looks an attribute up by its domain and name, without interning either.
    pub(crate) fn get_in(&self, domain: &str, name: &str) -> Option<&Value> {
        let i = self
            .names
            .iter()
            .position(|n| n.name == name && n.domain == domain)?;
        self.values.get(i)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (QualifiedName, &Value)> {
        self.names.iter().copied().zip(self.values.iter())
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The names, in order: one allocation shared by every device of the same shape, so a
    /// reader that derives something from the names (`why` joins them) does it once per shape.
    pub(crate) fn shape(&self) -> std::sync::Arc<[QualifiedName]> {
        self.names.clone()
    }

    /// Sets an attribute, replacing one of the same name (for building devices by hand: it
    /// copies the shape).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, name: QualifiedName, value: Value) {
        let mut entries: Vec<(QualifiedName, Value)> = self.iter().map(|(n, v)| (n, *v)).collect();
        match entries.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => entries.push((name, value)),
        }
        *self = Attributes::from_entries(entries);
    }

    #[cfg(test)]
    fn from_entries(entries: Vec<(QualifiedName, Value)>) -> Attributes {
        let (names, values): (Vec<QualifiedName>, Vec<Value>) = entries.into_iter().unzip();
        Attributes {
            names: names.into(),
            values: values.into(),
        }
    }

    /// A catalogue identity attribute of a `media.liken.sh` device (`pciBusID` in its own
    /// domain).
    pub(crate) fn identity(&self, attribute: Identity) -> Option<&Value> {
        self.get(catalogue_names().identity[attribute as usize])
    }

    /// Every catalogue attribute of a `media.liken.sh` device at once. Where the catalogue's
    /// names sit in a shape is found once per shape (the last one is kept per thread: a fleet's
    /// media devices nearly all share one), instead of one scan of the names for each of the
    /// catalogue's attributes of each device: `caps` reads all of them for 40,000 GPUs.
    pub(crate) fn catalogue(&self) -> CatalogueView<'_> {
        thread_local! {
            static LAST: std::cell::RefCell<Option<(std::sync::Arc<[QualifiedName]>, Positions)>> =
                const { std::cell::RefCell::new(None) };
        }
        let positions = LAST.with_borrow_mut(|last| match last {
            Some((shape, positions)) if std::sync::Arc::ptr_eq(shape, &self.names) => *positions,
            _ => {
                let names = catalogue_names();
                let at = |wanted: &QualifiedName| self.names.iter().position(|n| n == wanted);
                let positions = Positions {
                    identity: names.identity.each_ref().map(at),
                    capabilities: names.capabilities.each_ref().map(at),
                };
                *last = Some((self.names.clone(), positions));
                positions
            }
        });
        CatalogueView {
            values: &self.values,
            positions,
        }
    }

    /// The identity attribute when it is a string or version.
    #[cfg(test)]
    pub(crate) fn string(&self, attribute: Identity) -> Option<&'static str> {
        self.identity(attribute).and_then(Value::as_str)
    }

    #[cfg(test)]
    pub(crate) fn set_identity(&mut self, attribute: Identity, value: Value) {
        self.insert(catalogue_names().identity[attribute as usize], value);
    }

    #[cfg(test)]
    pub(crate) fn set_capability(&mut self, capability: Capability, stated: Stated) {
        let name = catalogue_names().capabilities[capability as usize];
        match stated {
            Stated::Absent => {
                let kept = self
                    .iter()
                    .filter(|(n, _)| *n != name)
                    .map(|(n, v)| (n, *v));
                *self = Attributes::from_entries(kept.collect());
            }
            Stated::Bool(b) => self.insert(name, Value::Bool(b)),
            Stated::NotBool => self.insert(name, Value::Invalid),
        }
    }

    /// Files the unqualified names read under the slice's driver (a new shape, shared by the
    /// slice's devices of the same names).
    fn qualify(&mut self, driver: Ustr, last: &mut Option<std::sync::Arc<[QualifiedName]>>) {
        if !self.names.iter().any(|n| n.domain.is_empty()) {
            return;
        }
        let qualified = self.names.iter().map(|n| QualifiedName {
            domain: if n.domain.is_empty() {
                driver
            } else {
                n.domain
            },
            name: n.name,
        });
        match last {
            Some(shape) if shape.iter().copied().eq(qualified.clone()) => {
                self.names = shape.clone()
            }
            _ => {
                let shape: std::sync::Arc<[QualifiedName]> = qualified.collect();
                *last = Some(shape.clone());
                self.names = shape;
            }
        }
    }
}

/// Where the catalogue's attributes sit in a shape.
#[derive(Clone, Copy)]
struct Positions {
    identity: [Option<usize>; Identity::ALL.len()],
    capabilities: [Option<usize>; Capability::ALL.len()],
}

/// A device's catalogue attributes, by position ([`Attributes::catalogue`]).
pub(crate) struct CatalogueView<'a> {
    values: &'a [Value],
    positions: Positions,
}

impl CatalogueView<'_> {
    /// As [`Attributes::identity`].
    pub(crate) fn identity(&self, attribute: Identity) -> Option<&Value> {
        self.values
            .get(self.positions.identity[attribute as usize]?)
    }

    /// As [`Attributes::capability`].
    pub(crate) fn capability(&self, capability: Capability) -> Stated {
        Stated::of(
            self.positions.capabilities[capability as usize].and_then(|i| self.values.get(i)),
        )
    }
}

/// A ResourceSlice as the fleet model keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceSlice {
    pub metadata: Metadata,
    pub spec: SliceSpec,
}

/// The metadata of a slice that anything reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Metadata {
    pub name: String,
}

/// `spec` of a ResourceSlice (resource.k8s.io/v1).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "SpecFields")]
pub struct SliceSpec {
    pub driver: Ustr,
    pub pool: Pool,
    /// Exactly one of these four says where the devices are (k8s.io/api
    /// resource/v1 `ResourceSliceSpec`).
    pub node_name: Option<Ustr>,
    pub node_selector: Option<NodeSelector>,
    pub all_nodes: bool,
    /// Each device says for itself ([`Device::node_name`] and the like).
    pub per_device_node_selection: bool,
    pub devices: Vec<Device>,
}

/// The fields as read, in whatever order they came: `qualify` runs once the driver is known
/// (kubectl's YAML sorts `devices` before `driver`).
/// The protobuf reader ([`crate::fleet::protobuf`]) fills the same fields.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SpecFields {
    pub(crate) driver: Ustr,
    pub(crate) pool: Pool,
    pub(crate) node_name: Option<Ustr>,
    pub(crate) node_selector: Option<NodeSelector>,
    pub(crate) all_nodes: Option<bool>,
    pub(crate) per_device_node_selection: Option<bool>,
    pub(crate) devices: Vec<Device>,
}

impl From<SpecFields> for SliceSpec {
    fn from(fields: SpecFields) -> SliceSpec {
        let mut devices = fields.devices;
        let mut shape = LAST_QUALIFIED.take();
        for device in &mut devices {
            device.attributes.qualify(fields.driver, &mut shape);
            if let Some(more) = &mut device.more {
                for (name, _) in &mut more.capacity {
                    if name.domain.is_empty() {
                        name.domain = fields.driver;
                    }
                }
            }
        }
        LAST_QUALIFIED.set(shape);
        SliceSpec {
            driver: fields.driver,
            pool: fields.pool,
            node_name: fields.node_name,
            node_selector: fields.node_selector,
            all_nodes: fields.all_nodes == Some(true),
            per_device_node_selection: fields.per_device_node_selection == Some(true),
            devices,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pool {
    pub name: Ustr,
    pub generation: i64,
    pub resource_slice_count: i64,
}

/// One device of a slice.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "DeviceFields")]
pub struct Device {
    pub name: Ustr,
    pub attributes: Attributes,
    /// `None` when absent: a 1.34/1.35 API server with DRAConsumableCapacity off drops it.
    pub allow_multiple_allocations: Option<bool>,
    /// What few devices have, kept aside so that a fleet's devices stay small.
    more: Option<Box<More>>,
}

/// The fields of a device that most devices lack.
#[derive(Clone, Debug, Default, PartialEq)]
struct More {
    capacity: Vec<(QualifiedName, Ustr)>,
    /// Each capacity's name as written (`memory` or `liken.sh/memory`): the allocator matches
    /// a request's capacity names to these as plain strings.
    capacity_written: Vec<Ustr>,
    taints: Vec<Taint>,
    node_name: Option<Ustr>,
    node_selector: Option<NodeSelector>,
    all_nodes: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct DeviceFields {
    pub(crate) name: Ustr,
    pub(crate) attributes: Attributes,
    /// Sorted by name as written, as a map (JSON's and protobuf's order alike).
    #[serde(deserialize_with = "capacities")]
    pub(crate) capacity: Vec<CapacityEntry>,
    pub(crate) allow_multiple_allocations: Option<bool>,
    pub(crate) taints: Vec<Taint>,
    pub(crate) node_name: Option<Ustr>,
    pub(crate) node_selector: Option<NodeSelector>,
    pub(crate) all_nodes: Option<bool>,
}

/// One capacity of a device as read: its name qualified like an attribute's, the name as written
/// (`memory` or `liken.sh/memory`), and the quantity as given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CapacityEntry {
    pub(crate) name: QualifiedName,
    pub(crate) written: Ustr,
    pub(crate) quantity: Ustr,
}

impl From<DeviceFields> for Device {
    fn from(f: DeviceFields) -> Device {
        let more = More {
            capacity_written: f.capacity.iter().map(|c| c.written).collect(),
            capacity: f.capacity.iter().map(|c| (c.name, c.quantity)).collect(),
            taints: f.taints,
            node_name: f.node_name,
            node_selector: f.node_selector,
            all_nodes: f.all_nodes,
        };
        Device {
            name: f.name,
            attributes: f.attributes,
            allow_multiple_allocations: f.allow_multiple_allocations,
            more: (more != More::default()).then(|| Box::new(more)),
        }
    }
}

impl Device {
    /// A device with these attributes and nothing else.
    pub fn new(name: &str, attributes: Attributes) -> Device {
        Device {
            name: Ustr::from(name),
            attributes,
            ..Device::default()
        }
    }

    /// Capacities by qualified name, each quantity as given (`"1"`, `"16Gi"`).
    pub(crate) fn capacities(&self) -> &[(QualifiedName, Ustr)] {
        self.more.as_ref().map_or(&[], |m| &m.capacity)
    }

    /// Capacities by name as written (see `More::capacity_written`), each quantity as given.
    pub(crate) fn capacities_written(&self) -> impl Iterator<Item = (Ustr, Ustr)> + '_ {
        self.more.iter().flat_map(|m| {
            m.capacity_written
                .iter()
                .zip(&m.capacity)
                .map(|(w, (_, q))| (*w, *q))
        })
    }

    /// A capacity's quantity, by qualified name.
    pub fn capacity(&self, name: QualifiedName) -> Option<Ustr> {
        self.capacities()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, q)| *q)
    }

    pub fn taints(&self) -> &[Taint] {
        self.more.as_ref().map_or(&[], |m| &m.taints)
    }

    /// With the slice's `perDeviceNodeSelection`: where this device is.
    pub(crate) fn node_name(&self) -> Option<Ustr> {
        self.more.as_ref().and_then(|m| m.node_name)
    }

    pub(crate) fn node_selector(&self) -> Option<&NodeSelector> {
        self.more.as_ref().and_then(|m| m.node_selector.as_ref())
    }

    pub(crate) fn all_nodes(&self) -> Option<bool> {
        self.more.as_ref().and_then(|m| m.all_nodes)
    }
}

/// A device taint (resource.k8s.io/v1 `DeviceTaint`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Taint {
    pub key: Ustr,
    pub value: Option<Ustr>,
    /// `NoSchedule` or `NoExecute` (or another, as given).
    pub effect: Ustr,
    /// RFC 3339, as given.
    pub time_added: Option<String>,
}

/// A taint as kubectl writes one (and `class --tolerate` takes it): `key=value:effect`, or
/// `key:effect` without a value.
pub(crate) fn written_taint(key: &str, value: Option<&str>, effect: &str) -> String {
    match value.filter(|v| !v.is_empty()) {
        Some(value) => format!("{key}={value}:{effect}"),
        None => format!("{key}:{effect}"),
    }
}

/// A DeviceTaintRule (resource.k8s.io/v1): its taint is added to every device its selector
/// names (driver, pool and device name, each optional; no selector names no device).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DeviceTaintRule {
    pub metadata: Metadata,
    pub spec: TaintRuleSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TaintRuleSpec {
    pub device_selector: Option<TaintSelector>,
    pub taint: Taint,
}

/// Which devices a DeviceTaintRule taints: those of the driver, pool and name given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct TaintSelector {
    pub driver: Option<String>,
    pub pool: Option<String>,
    pub device: Option<String>,
}

/// A map key as read: borrowed from the text when it has no escapes (serde_json's `from_str`
/// hands those over as they are), owned otherwise. serde's own `Cow<str>` always copies, and a
/// fleet has millions of keys.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl std::ops::Deref for Key<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl AsRef<str> for Key<'_> {
    fn as_ref(&self) -> &str {
        self
    }
}

impl PartialEq<&str> for Key<'_> {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

thread_local! {
    /// The names of the last device read on this thread, by position: the devices of a fleet
    /// list their attributes in the same order, so a name is nearly always a byte comparison
    /// away from its interned form, with no hashing.
    static LAST_NAMES: std::cell::RefCell<Vec<(Box<str>, QualifiedName)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The interned form of an attribute name read at `position` in its device.
pub(crate) fn attribute_name(key: &str, position: usize) -> QualifiedName {
    LAST_NAMES.with_borrow_mut(|last| {
        if let Some((text, name)) = last.get(position)
            && **text == *key
        {
            return *name;
        }
        let name = written_name(key);
        if position < last.len() {
            last[position] = (key.into(), name);
        } else if position == last.len() && position < 64 {
            last.push((key.into(), name));
        }
        name
    })
}

thread_local! {
    /// The last shape qualified on this thread: the next slice's devices most likely have it.
    static LAST_QUALIFIED: std::cell::Cell<Option<std::sync::Arc<[QualifiedName]>>> =
        const { std::cell::Cell::new(None) };

    /// The shape of the last device read on this thread: the next device of the fleet most
    /// likely has the same.
    static LAST_SHAPE: std::cell::RefCell<Option<std::sync::Arc<[QualifiedName]>>> =
        const { std::cell::RefCell::new(None) };
}

impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AttributesVisitor;
        impl<'de> Visitor<'de> for AttributesVisitor {
            type Value = Attributes;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of attributes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attributes, A::Error> {
                let mut names: Vec<QualifiedName> = Vec::with_capacity(32);
                let mut values: Vec<Value> = Vec::with_capacity(32);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    let name = attribute_name(&key, names.len());
                    let value = map.next_value_seed(ValueAt(names.len()))?;
                    // The API server refuses a device that names one attribute twice; of a
                    // hand-written one, the first is kept.
                    if !names.contains(&name) {
                        names.push(name);
                        values.push(value);
                    }
                }
                Ok(Attributes::shaped(&names, &values))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Attributes, E> {
                Ok(Attributes::default())
            }
        }
        deserializer.deserialize_any(AttributesVisitor)
    }
}

impl Attributes {
    /// Attributes read in this order, their names' shape shared with the last device read on
    /// this thread when it is the same.
    pub(crate) fn shaped(names: &[QualifiedName], values: &[Value]) -> Attributes {
        let names = LAST_SHAPE.with_borrow_mut(|last| match last {
            Some(shape) if **shape == *names => shape.clone(),
            _ => {
                let shape: std::sync::Arc<[QualifiedName]> = names.into();
                *last = Some(shape.clone());
                shape
            }
        });
        Attributes {
            names,
            values: values.into(),
        }
    }
}

/// A capacity's or attribute's name as written: `domain/name`, or a name of the slice's driver.
pub(crate) fn written_name(name: &str) -> QualifiedName {
    match name.split_once('/') {
        Some((domain, name)) => QualifiedName::new(domain, name),
        None => QualifiedName::unqualified(name),
    }
}

thread_local! {
    /// The capacity names of the last device read on this thread, by position, as
    /// [`LAST_NAMES`] keeps attribute names: (as written, qualified, interned as written).
    static LAST_CAPACITY_NAMES: std::cell::RefCell<Vec<(Box<str>, QualifiedName, Ustr)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The capacity of name `key` (as written) read at `position` in its device, with its quantity.
pub(crate) fn capacity_entry(key: &str, position: usize, quantity: Ustr) -> CapacityEntry {
    LAST_CAPACITY_NAMES.with_borrow_mut(|last| {
        if let Some((text, name, written)) = last.get(position)
            && **text == *key
        {
            return CapacityEntry {
                name: *name,
                written: *written,
                quantity,
            };
        }
        let (name, written) = (written_name(key), Ustr::from(key));
        if position < last.len() {
            last[position] = (key.into(), name, written);
        } else if position == last.len() && position < 64 {
            last.push((key.into(), name, written));
        }
        CapacityEntry {
            name,
            written,
            quantity,
        }
    })
}

/// Capacities as a map: sorted by name as written, the last of a name kept (as a `BTreeMap`
/// collects them).
pub(crate) fn capacities_as_map(entries: &mut Vec<CapacityEntry>) {
    if entries.is_sorted_by(|a, b| a.written.as_str() < b.written.as_str()) {
        return;
    }
    // Stable: of equal names the last read stays last, and is the one kept.
    entries.sort_by(|a, b| a.written.as_str().cmp(b.written.as_str()));
    let mut kept: Vec<CapacityEntry> = Vec::with_capacity(entries.len());
    for entry in entries.drain(..) {
        match kept.last_mut() {
            Some(last) if last.written == entry.written => *last = entry,
            _ => kept.push(entry),
        }
    }
    *entries = kept;
}

/// `capacity: {name: {value: "1"}}`, names qualified like attributes; a capacity without a
/// value is left out.
fn capacities<'de, D: de::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<CapacityEntry>, D::Error> {
    #[derive(Deserialize)]
    struct Capacity {
        #[serde(default)]
        value: Option<Quantity>,
    }
    /// A quantity as given: the API writes a string; hand-written YAML may hold a number, kept
    /// as JSON writes it.
    struct Quantity(Ustr);
    impl<'de> Deserialize<'de> for Quantity {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct QuantityVisitor;
            impl<'de> Visitor<'de> for QuantityVisitor {
                type Value = Quantity;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a quantity")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from(s)))
                }
                fn visit_bool<E: de::Error>(self, b: bool) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from(
                        &serde_json::Value::from(b).to_string(),
                    )))
                }
                fn visit_i64<E: de::Error>(self, i: i64) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from(&i.to_string())))
                }
                fn visit_u64<E: de::Error>(self, u: u64) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from(&u.to_string())))
                }
                fn visit_f64<E: de::Error>(self, f: f64) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from(
                        &serde_json::Value::from(f).to_string(),
                    )))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Quantity, E> {
                    Ok(Quantity(Ustr::from("null")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Quantity, A::Error> {
                    let value =
                        serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                    Ok(Quantity(Ustr::from(&value.to_string())))
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Quantity, A::Error> {
                    let value =
                        serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
                    Ok(Quantity(Ustr::from(&value.to_string())))
                }
            }
            d.deserialize_any(QuantityVisitor)
        }
    }
    struct CapacitiesVisitor;
    impl<'de> Visitor<'de> for CapacitiesVisitor {
        type Value = Vec<CapacityEntry>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of capacities")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::new();
            let mut position = 0;
            while let Some(key) = map.next_key::<Key<'de>>()? {
                let capacity = map.next_value::<Capacity>()?;
                if let Some(Quantity(quantity)) = capacity.value {
                    entries.push(capacity_entry(&key, position, quantity));
                }
                position += 1;
            }
            capacities_as_map(&mut entries);
            Ok(entries)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }
    deserializer.deserialize_option(CapacitiesVisitor)
}

thread_local! {
    /// The string values of the last device read on this thread, by position: a fleet's devices
    /// mostly state the same strings at the same places (a product's name, a driver's version),
    /// so a value is nearly always a byte comparison away from its interned form.
    static LAST_STRINGS: std::cell::RefCell<Vec<Option<Ustr>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The interned form of a string value read at `position` among its device's attributes.
pub(crate) fn string_at(s: &str, position: usize) -> Ustr {
    LAST_STRINGS.with_borrow_mut(|last| {
        if let Some(Some(interned)) = last.get(position)
            && interned.as_str() == s
        {
            return *interned;
        }
        let interned = Ustr::from(s);
        if position < last.len() {
            last[position] = Some(interned);
        } else if position < 64 {
            last.resize(position, None);
            last.push(Some(interned));
        }
        interned
    })
}

/// An attribute's value read at `position` among its device's attributes (see [`string_at`]).
struct ValueAt(usize);

impl<'de> DeserializeSeed<'de> for ValueAt {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        value(deserializer, Some(self.0))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        value(deserializer, None)
    }
}

/// An attribute value; its strings interned through [`string_at`] when its position is known.
fn value<'de, D: de::Deserializer<'de>>(
    deserializer: D,
    position: Option<usize>,
) -> Result<Value, D::Error> {
    struct ValueVisitor(Option<usize>);
    impl<'de> Visitor<'de> for ValueVisitor {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an attribute value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut found: Option<Value> = None;
            let mut types = 0;
            while let Some(key) = map.next_key::<Key<'de>>()? {
                let scalar = map.next_value_seed(ScalarAt(self.0))?;
                let value = match (key.as_ref(), scalar) {
                    ("bool", Scalar::Bool(b)) => Value::Bool(b),
                    ("int", Scalar::Int(i)) => Value::Int(i),
                    ("string", Scalar::String(s)) => Value::String(s),
                    ("version", Scalar::String(s)) => Value::Version(s),
                    (_, Scalar::Null) => continue,
                    _ => Value::Invalid,
                };
                types += 1;
                found = Some(value);
            }
            // Exactly one type may be set (the API server enforces it); anything else is
            // content we do not trust.
            Ok(match (types, found) {
                (1, Some(value)) => value,
                _ => Value::Invalid,
            })
        }
        fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_str<E>(self, _: &str) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Invalid)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Value::Invalid)
        }
    }
    deserializer.deserialize_any(ValueVisitor(position))
}

/// One scalar inside an attribute value, of whatever type it turned out to be.
enum Scalar {
    Bool(bool),
    Int(i64),
    String(Ustr),
    Null,
    Other,
}

/// A [`Scalar`] of the attribute at this position, if known (see [`string_at`]).
struct ScalarAt(Option<usize>);

impl<'de> DeserializeSeed<'de> for ScalarAt {
    type Value = Scalar;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Scalar, D::Error> {
        struct ScalarVisitor(Option<usize>);
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(i))
            }
            fn visit_u64<E>(self, u: u64) -> Result<Scalar, E> {
                Ok(i64::try_from(u).map_or(Scalar::Other, Scalar::Int))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::String(match self.0 {
                    Some(position) => string_at(s, position),
                    None => Ustr::from(s),
                }))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor(self.0))
    }
}

mod read;
pub use read::*;

#[cfg(test)]
mod tests {
    use super::*;

    const SLICE: &str = r#"{
      "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
      "metadata": {"name": "node-a-media.liken.sh", "uid": "x"},
      "spec": {"driver": "media.liken.sh", "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
        "devices": [{"name": "pci-0000-00-02-0", "allowMultipleAllocations": true, "attributes": {
          "address": {"string": "0000:00:02.0"},
          "decodeHEVCMain10": {"bool": true},
          "media.liken.sh/scale10bit": {"bool": false},
          "decodeVP9": {"string": "yes"},
          "decodeAV1Main": {"bool": true, "string": "x"},
          "encodeH264": {"bool": null},
          "resource.kubernetes.io/pciBusID": {"string": "0000:00:02.0"},
          "somethingElse": {"int": 3},
          "gpu.example.com/firmware": {"version": "1.2.3"}
        }}]}}"#;

    fn name(full: &str) -> QualifiedName {
        QualifiedName::parse(full, "unused.example.com")
    }

    #[test]
    fn reads_a_slice_keeping_every_attribute_typed_and_qualified() {
        let mut objects = Objects::default();
        assert_eq!(objects.add_json(SLICE).unwrap(), None);
        assert_eq!(objects.slices.len(), 1);
        let slice = &objects.slices[0];
        assert_eq!(slice.spec.node_name.map(|n| n.as_str()), Some("node-a"));
        assert_eq!(slice.spec.pool.generation, 3);
        let device = &slice.spec.devices[0];
        assert_eq!(device.allow_multiple_allocations, Some(true));
        let a = &device.attributes;
        assert_eq!(a.len(), 9);
        // Every attribute, under its qualified name, with its type.
        assert_eq!(
            a.get(name("media.liken.sh/somethingElse")),
            Some(&Value::Int(3))
        );
        assert_eq!(
            a.get(name("gpu.example.com/firmware")),
            Some(&Value::Version("1.2.3".into()))
        );
        assert_eq!(
            a.get_named("media.liken.sh/address"),
            Some(&Value::String("0000:00:02.0".into()))
        );
        // The catalogue's fast paths read the same model.
        assert_eq!(a.string(Identity::Address), Some("0000:00:02.0"));
        assert_eq!(a.string(Identity::PciBusId), Some("0000:00:02.0"));
        let c = a.catalogue();
        assert_eq!(
            c.identity(Identity::Address),
            Some(&Value::String("0000:00:02.0".into()))
        );
        assert_eq!(
            c.capability(Capability::DecodeHEVCMain10),
            Stated::Bool(true)
        );
        assert_eq!(c.capability(Capability::Scale10bit), Stated::Bool(false));
        // Wrong type, two types, and null: never a crash, never a guess.
        assert_eq!(c.capability(Capability::DecodeVP9), Stated::NotBool);
        assert_eq!(c.capability(Capability::DecodeAV1Main), Stated::NotBool);
        assert_eq!(c.capability(Capability::EncodeH264), Stated::NotBool);
        assert_eq!(c.capability(Capability::DecodeH264), Stated::Absent);
    }

    #[test]
    fn the_catalogue_view_follows_each_devices_own_shape() {
        // Two shapes, the same names in other orders and one lacking a name, read in turns:
        // the positions found for one shape must never answer for another.
        let mut objects = Objects::default();
        objects
            .add_json(
                r#"{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
              "metadata": {"name": "n-media.liken.sh"},
              "spec": {"driver": "media.liken.sh", "nodeName": "n",
                "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                  {"name": "a", "attributes": {"address": {"string": "0000:00:02.0"},
                    "decodeH264": {"bool": true}, "scale10bit": {"bool": false}}},
                  {"name": "b", "attributes": {"scale10bit": {"bool": true},
                    "address": {"string": "0000:03:00.0"}, "decodeH264": {"bool": false}}},
                  {"name": "c", "attributes": {"decodeH264": {"bool": true}}},
                  {"name": "d", "attributes": {"address": {"string": "0000:04:00.0"},
                    "decodeH264": {"bool": false}, "scale10bit": {"bool": true}}}
                ]}}"#,
            )
            .unwrap();
        let devices = &objects.slices[0].spec.devices;
        for device in devices.iter().chain(devices.iter().rev()) {
            let a = &device.attributes;
            let c = a.catalogue();
            for identity in Identity::ALL {
                assert_eq!(
                    c.identity(identity),
                    a.identity(identity),
                    "{}",
                    device.name
                );
            }
            for capability in Capability::ALL {
                let name = QualifiedName::parse(capability.attribute(), catalogue::DRIVER);
                assert_eq!(
                    c.capability(capability),
                    Stated::of(a.get(name)),
                    "{} {capability:?}",
                    device.name
                );
            }
        }
        let scale = |i: usize| {
            devices[i]
                .attributes
                .catalogue()
                .capability(Capability::Scale10bit)
        };
        assert_eq!(
            [scale(0), scale(1), scale(2), scale(3)],
            [
                Stated::Bool(false),
                Stated::Bool(true),
                Stated::Absent,
                Stated::Bool(true)
            ]
        );
    }

    #[test]
    fn unqualified_names_belong_to_the_slices_driver_whatever_the_field_order() {
        // kubectl's YAML sorts keys: `devices` comes before `driver`.
        let yaml = "
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-liken.sh}
spec:
  devices:
  - name: card0
    attributes:
      renderNode: {string: /dev/dri/renderD128}
      resource.kubernetes.io/pciBusID: {string: '0000:00:02.0'}
    capacity:
      memory: {value: 16Gi}
      example.com/slots: {value: 4}
    taints:
    - {key: example.com/broken, value: 'yes', effect: NoSchedule, timeAdded: '2026-01-02T03:04:05Z'}
  driver: liken.sh
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
";
        let value: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        let mut objects = Objects::default();
        objects.add_value(&value);
        assert!(objects.notes.is_empty(), "{:?}", objects.notes);
        let device = &objects.slices[0].spec.devices[0];
        assert_eq!(
            device.attributes.get(name("liken.sh/renderNode")),
            Some(&Value::String("/dev/dri/renderD128".into()))
        );
        // Not ours: liken's unqualified names are never filed under media.liken.sh.
        assert_eq!(
            device.attributes.get(name("media.liken.sh/renderNode")),
            None
        );
        assert_eq!(device.capacity(name("liken.sh/memory")).unwrap(), "16Gi");
        assert_eq!(device.capacity(name("example.com/slots")).unwrap(), "4");
        // As written, for the allocator's plain lookup of a request's capacity names.
        assert_eq!(
            device.capacities_written().collect::<Vec<_>>(),
            [
                ("example.com/slots".into(), "4".into()),
                ("memory".into(), "16Gi".into())
            ]
        );
        assert_eq!(device.allow_multiple_allocations, None);
        assert_eq!(
            device.taints(),
            [Taint {
                key: "example.com/broken".into(),
                value: Some("yes".into()),
                effect: "NoSchedule".into(),
                time_added: Some("2026-01-02T03:04:05Z".into()),
            }]
        );
        // The same text as JSON reads the same.
        let mut from_json = Objects::default();
        from_json.add_json(&value.to_string()).unwrap();
        assert_eq!(from_json.slices, objects.slices);
    }

    #[test]
    fn where_the_devices_are() {
        let mut objects = Objects::default();
        objects
            .add_json(
                r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSliceList","metadata":{},"items":[
                {"metadata":{"name":"a"},"spec":{"driver":"d","pool":{"name":"p"},"allNodes":true}},
                {"metadata":{"name":"b"},"spec":{"driver":"d","pool":{"name":"q"},
                  "nodeSelector":{"nodeSelectorTerms":[{"matchLabels":{}, "matchExpressions":[{"key":"k","operator":"In","values":["v"]}]}]}}},
                {"metadata":{"name":"c"},"spec":{"driver":"d","pool":{"name":"r"},"perDeviceNodeSelection":true,
                  "devices":[{"name":"x","nodeName":"n2"},{"name":"y","allNodes":true}]}}]}"#,
            )
            .unwrap();
        let [a, b, c] = &objects.slices[..] else {
            panic!("{:?}", objects.slices)
        };
        assert!(a.spec.all_nodes && a.spec.node_name.is_none());
        let terms = &b.spec.node_selector.as_ref().unwrap().node_selector_terms;
        assert_eq!(terms[0].match_expressions.as_ref().unwrap()[0].key, "k");
        assert!(c.spec.per_device_node_selection);
        assert_eq!(c.spec.devices[0].node_name().unwrap(), "n2");
        assert_eq!(c.spec.devices[1].all_nodes(), Some(true));
    }

    /// `kubectl get pods,resourceclaims,...,events -A -o json` writes one `List` whose items carry
    /// their own kind; an API server's typed lists carry none on their items.
    #[test]
    fn routes_every_kind_from_lists_and_single_objects() {
        let list = format!(
            r#"{{"apiVersion":"v1","items":[
              {{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns"}},
                "spec":{{"containers":[{{"name":"c"}}],"resourceClaims":[{{"name":"gpu","resourceClaimTemplateName":"t"}}]}},
                "status":{{"resourceClaimStatuses":[{{"name":"gpu","resourceClaimName":"p-gpu-x"}}]}}}},
              {{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{{"name":"p-gpu-x","namespace":"ns"}},
                "spec":{{"devices":{{"requests":[{{"name":"gpu","exactly":{{"deviceClassName":"c"}}}}]}}}}}},
              {{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{{"name":"t","namespace":"ns"}},
                "spec":{{"spec":{{"devices":{{"requests":[{{"name":"gpu","exactly":{{"deviceClassName":"c"}}}}]}}}}}}}},
              {{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{{"name":"c"}},
                "spec":{{"selectors":[{{"cel":{{"expression":"device.driver == 'media.liken.sh'"}}}}]}}}},
              {SLICE},
              {{"apiVersion":"v1","kind":"Node","metadata":{{"name":"node-a","labels":{{"x":"y"}}}}}},
              {{"apiVersion":"v1","kind":"Event","metadata":{{"name":"e","namespace":"ns"}},"reason":"FailedScheduling",
                "message":"0/1 nodes are available","involvedObject":{{"kind":"Pod","name":"p","namespace":"ns"}}}},
              {{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"skipped-silently"}}}}
            ],"kind":"List","metadata":{{"resourceVersion":""}}}}"#
        );
        let mut objects = Objects::default();
        objects.add_json(&list).unwrap();
        assert!(objects.notes.is_empty(), "{:?}", objects.notes);
        assert_eq!(objects.pods.len(), 1);
        let statuses = objects.pods[0].status.as_ref().unwrap();
        assert_eq!(
            statuses.resource_claim_statuses.as_ref().unwrap()[0]
                .resource_claim_name
                .as_deref(),
            Some("p-gpu-x")
        );
        assert_eq!(objects.claims.len(), 1);
        assert_eq!(objects.claim_templates.len(), 1);
        assert_eq!(objects.classes[0].metadata.name.as_deref(), Some("c"));
        assert_eq!(objects.slices.len(), 1);
        assert_eq!(objects.nodes[0].metadata.name.as_deref(), Some("node-a"));
        assert_eq!(
            objects.events[0].reason.as_deref(),
            Some("FailedScheduling")
        );

        // A typed list: items without kind or apiVersion.
        let mut typed = Objects::default();
        typed
            .add_json(r#"{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"next"},"items":[{"metadata":{"name":"q","namespace":"ns"},"spec":{"containers":[]}}]}"#)
            .map(|token| assert_eq!(token.as_deref(), Some("next")))
            .unwrap();
        assert_eq!(typed.pods[0].metadata.name.as_deref(), Some("q"));

        // kind after the items, and the items kindless: read once the List's kind is known.
        let mut late = Objects::default();
        late.add_json(
            r#"{"items":[{"metadata":{"name":"n"}}],"kind":"NodeList","apiVersion":"v1"}"#,
        )
        .unwrap();
        assert_eq!(late.nodes[0].metadata.name.as_deref(), Some("n"));
    }

    #[test]
    fn odd_objects_are_skipped_with_a_note_and_the_rest_survive() {
        let bad_slice = SLICE.replace(r#""generation": 3"#, r#""generation": "three""#);
        let old_slice = SLICE.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1");
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{bad_slice},{old_slice},{SLICE},
              {{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns"}},"spec":{{"containers":"none"}}}},
              {{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{{"name":"e","namespace":"ns"}}}},
              {{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"fine","namespace":"ns"}}}}]}}"#
        );
        let mut objects = Objects::default();
        objects.add_json(&list).unwrap();
        assert_eq!(objects.slices.len(), 1);
        assert_eq!(objects.pods.len(), 1);
        assert_eq!(objects.notes.len(), 4, "{:#?}", objects.notes);
        assert_eq!(
            objects.notes[0],
            "skipped ResourceSlice \"node-a-media.liken.sh\": spec.pool.generation: invalid type: \
             string \"three\", expected i64"
        );
        assert!(
            objects.notes[1]
                .contains("it is resource.k8s.io/v1beta1, and only resource.k8s.io/v1 is read")
        );
        assert_eq!(
            objects.notes[2],
            "skipped Pod \"ns/p\": spec.containers: invalid type: string \"none\", expected a \
             sequence"
        );
        assert_eq!(
            objects.notes[3],
            "skipped Event \"ns/e\": it is events.k8s.io/v1, and only v1 is read (hint: kubectl get events -o yaml)"
        );

        // The same from YAML (already parsed), item by item.
        let value: serde_json::Value = serde_json::from_str(&list).unwrap();
        let mut from_value = Objects::default();
        from_value.add_value(&value);
        assert_eq!(from_value.slices, objects.slices);
        assert_eq!(from_value.pods, objects.pods);
        assert_eq!(from_value.notes, objects.notes);
        assert_eq!(from_value.unparsed, objects.unparsed);
        let unparsed: Vec<String> = objects.unparsed.iter().map(|u| u.to_string()).collect();
        assert_eq!(
            unparsed,
            [
                "resourceslice node-a-media.liken.sh: spec.pool.generation: invalid type: string \
                 \"three\", expected i64",
                "pod ns/p: spec.containers: invalid type: string \"none\", expected a sequence",
            ]
        );

        // A kind that is read, without an apiVersion: skipped with a note; a kind that is not
        // read, with or without one: passed over in silence.
        let mut objects = Objects::default();
        objects
            .add_json(r#"{"kind":"ResourceSlice","metadata":{"name":"x"},"spec":{}}"#)
            .unwrap();
        objects
            .add_json(r#"{"kind":"ConfigMap","metadata":{"name":"c"}}"#)
            .unwrap();
        assert_eq!(
            objects.notes,
            [
                "skipped ResourceSlice \"x\": it has no apiVersion, and only resource.k8s.io/v1 is \
              read (hint: kubectl get resourceslices.v1.resource.k8s.io -o yaml)"
            ]
        );
    }

    #[test]
    fn kinds_not_wanted_are_not_read() {
        // caps reads only slices: a malformed pod beside them costs nothing, not even a note.
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{SLICE},
              {{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p"}},"spec":{{"containers":"none"}}}}]}}"#
        );
        let mut objects = Objects::wanting(Kinds::only(&[Kind::ResourceSlice]));
        objects.add_json(&list).unwrap();
        assert_eq!(objects.slices.len(), 1);
        assert!(
            objects.pods.is_empty() && objects.notes.is_empty(),
            "{:?}",
            objects.notes
        );
        assert!(Kinds::ALL.contains(Kind::Event));
        assert!(!Kinds::only(&[Kind::Pod]).contains(Kind::Node));
    }

    #[test]
    fn continue_tokens_are_read_without_the_items() {
        assert_eq!(
            continue_token(r#"{"kind":"L","metadata":{"continue":"abc"},"items":[{"broken":]}"#)
                .unwrap(),
            Some("abc".to_string()),
            "reading stops at metadata"
        );
        assert_eq!(
            continue_token(r#"{"items":[],"metadata":{"continue":"x"}}"#).unwrap(),
            Some("x".into())
        );
        assert_eq!(
            continue_token(r#"{"metadata":{"continue":""},"items":[]}"#).unwrap(),
            None
        );
        assert_eq!(continue_token(r#"{"items":[]}"#).unwrap(), None);
        assert!(continue_token(r#"{"items":[}"#).is_err());
        assert!(continue_token("[]").is_err());
    }

    #[test]
    fn kinds_name_their_resources() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
            assert!(kind.resource().starts_with(kind.plural()));
        }
        assert_eq!(Kind::Event.api_version(), "v1");
        assert!(Kind::Pod.namespaced() && !Kind::ResourceSlice.namespaced());
    }

    /// Values of the wrong type, made for each kind that is read, at each depth: each is named
    /// with its path and field, in JSON read in one pass and in YAML read as a value, and a
    /// huge value is never repeated whole.
    #[test]
    fn an_object_that_does_not_parse_is_named_with_its_field() {
        let huge = "x".repeat(1 << 20);
        let cases = [
            (
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"media"},"spec":{"nodeSelector":{"a":null},"containers":[]}}"#.to_string(),
                "pod media/p: spec.nodeSelector.a: invalid type: null, expected a string",
            ),
            (
                r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"media"},"spec":{"devices":{"requests":[{"name":"r","exactly":{"deviceClassName":"x","count":"3"}}]}}}"#.to_string(),
                "resourceclaim media/c: spec.devices.requests[0].exactly.count: invalid type: string \"3\", expected i64",
            ),
            (
                r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"taints":[{"key":"k","effect":7}]}}"#.to_string(),
                "node n: spec.taints[0].effect: invalid type: integer `7`, expected a string",
            ),
            (
                format!(r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{{"name":"s"}},"spec":{{"driver":"d","pool":{{"name":"p","generation":"{huge}","resourceSliceCount":1}}}}}}"#),
                "resourceslice s: spec.pool.generation: invalid type: string \"xxx",
            ),
        ];
        for (text, want) in cases {
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut from_json = Objects::default();
            from_json.add_json(&text).unwrap();
            let mut from_value = Objects::default();
            from_value.add_value(&value);
            for objects in [&from_json, &from_value] {
                assert_eq!(objects.unparsed.len(), 1, "{want}");
                let said = objects.unparsed[0].to_string();
                assert!(said.starts_with(want), "{said}");
                assert!(said.len() < 1000, "{}", said.len());
                assert!(objects.notes[0].len() < 1000, "{}", objects.notes[0].len());
            }
        }
    }

    #[test]
    fn device_taint_rules_are_read_as_resource_k8s_io_v1_only() {
        let mut objects = Objects::default();
        for (version, name) in [("v1", "maintenance"), ("v1beta2", "older")] {
            objects.add_value(&serde_json::json!({
                "apiVersion": format!("resource.k8s.io/{version}"), "kind": "DeviceTaintRule",
                "metadata": {"name": name},
                "spec": {"deviceSelector": {"driver": "media.liken.sh", "device": "gpu0"},
                         "taint": {"key": "maintenance", "effect": "NoExecute"}}}));
        }
        assert_eq!(objects.taint_rules.len(), 1);
        let rule = &objects.taint_rules[0];
        assert_eq!(rule.metadata.name, "maintenance");
        let selector = rule.spec.device_selector.as_ref().unwrap();
        assert_eq!(selector.driver.as_deref(), Some("media.liken.sh"));
        assert_eq!(
            (selector.pool.as_deref(), selector.device.as_deref()),
            (None, Some("gpu0"))
        );
        assert_eq!(rule.spec.taint.effect, "NoExecute");
        assert_eq!(objects.notes.len(), 1, "{:?}", objects.notes);
        assert!(
            objects.notes[0].contains("DeviceTaintRule \"older\""),
            "{:?}",
            objects.notes
        );
    }

    #[test]
    fn devices_of_one_shape_keep_their_own_strings_and_capacities() {
        // The per-position caches must never hand one device's value to the next: the same
        // names at the same places, other strings, and capacities out of order, twice and as
        // numbers (as a BTreeMap would collect them: sorted, the last of a name kept).
        let mut objects = Objects::default();
        let text = r#"{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
          "metadata": {"name": "n-gpu.example.com"},
          "spec": {"driver": "gpu.example.com", "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [
              {"name": "a", "attributes": {"model": {"string": "A380"}, "uuid": {"string": "u-1"}},
               "capacity": {"memory": {"value": "6Gi"}, "cores": {"value": "8"}}},
              {"name": "b", "attributes": {"model": {"string": "A380"}, "uuid": {"string": "u-2"}},
               "capacity": {"memory": {"value": 6}, "gpu.example.com/cores": {"value": 1.5},
                            "memory": {"value": "7Gi"}}},
              {"name": "c", "attributes": {"uuid": {"string": "A380"}, "model": {"version": "u-1"}}}
            ]}}"#;
        assert_eq!(objects.add_json(text).unwrap(), None);
        let devices = &objects.slices[0].spec.devices;
        let string = |d: usize, n: &str| {
            devices[d]
                .attributes
                .get(name(&format!("gpu.example.com/{n}")))
                .cloned()
        };
        assert_eq!(string(0, "uuid"), Some(Value::String("u-1".into())));
        assert_eq!(string(1, "uuid"), Some(Value::String("u-2".into())));
        assert_eq!(string(1, "model"), Some(Value::String("A380".into())));
        assert_eq!(string(2, "uuid"), Some(Value::String("A380".into())));
        assert_eq!(string(2, "model"), Some(Value::Version("u-1".into())));
        let written = |d: usize| -> Vec<(String, String)> {
            devices[d]
                .capacities_written()
                .map(|(n, q)| (n.to_string(), q.to_string()))
                .collect()
        };
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(n, q)| (n.to_string(), q.to_string()))
                .collect()
        };
        assert_eq!(written(0), pairs(&[("cores", "8"), ("memory", "6Gi")]));
        assert_eq!(
            written(1),
            pairs(&[("gpu.example.com/cores", "1.5"), ("memory", "7Gi")])
        );
        assert_eq!(
            devices[1].capacity(name("gpu.example.com/cores")),
            Some(Ustr::from("1.5"))
        );
        assert_eq!(
            devices[0].capacity(name("gpu.example.com/memory")),
            Some(Ustr::from("6Gi"))
        );
        assert!(written(2).is_empty());
    }
}
