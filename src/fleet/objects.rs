//! Lean, read-only views of the API objects `kubectl media` reads, and the one parser that turns
//! API responses and files (`-f`) into them, so that a file gives the same result as a cluster.
//!
//! Fleets are large (thousands of slices, tens of thousands of devices), so a device keeps only
//! the attributes of our catalogue, already typed, and parsing goes straight from text to these
//! views: no intermediate JSON tree for JSON input. Odd content never fails a whole listing: an
//! attribute of the wrong type is kept as [`Value::Invalid`], and an object that does not have
//! the shape of its kind is skipped with a note naming it.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::catalogue::{Capability, Identity, PCI_BUS_ID};

/// The API group and version whose ResourceSlices we read.
pub const RESOURCE_API_VERSION: &str = "resource.k8s.io/v1";

/// A ResourceSlice, reduced to what the inventory needs.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ResourceSlice {
    pub metadata: Metadata,
    pub spec: SliceSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Metadata {
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SliceSpec {
    pub driver: String,
    pub pool: Pool,
    pub node_name: Option<String>,
    pub devices: Vec<Device>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pool {
    pub name: String,
    pub generation: i64,
    pub resource_slice_count: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Device {
    pub name: String,
    pub attributes: Attributes,
}

/// An attribute value as the API states it (`{bool: true}`, `{string: "..."}`), or `Invalid`
/// when it has no value we can read (another type, several types, none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    String(String),
    Version(String),
    Invalid,
}

impl Value {
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Version(s) => Some(s),
            _ => None,
        }
    }
}

/// The attributes of our catalogue that a device carries; others are dropped while parsing.
/// Unqualified names are matched as-is and also as `media.liken.sh/<name>`, and the PCI bus ID
/// under its qualified name, as the scheduler matches them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    identity: [Option<Value>; Identity::ALL.len()],
    /// A byte or two each rather than a [`Value`]: a fleet has 18 of these per GPU.
    capabilities: [Stated; Capability::ALL.len()],
}

/// What a device says of one capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stated {
    /// The device has no such attribute.
    #[default]
    Absent,
    Bool(bool),
    /// The attribute is there, but not a bool (or not one value).
    NotBool,
}

impl Stated {
    pub fn as_bool(self) -> Option<bool> {
        match self {
            Stated::Bool(b) => Some(b),
            Stated::Absent | Stated::NotBool => None,
        }
    }
}

/// Where an attribute of a device goes, by its name.
enum Slot {
    Identity(usize),
    Capability(usize),
}

impl Attributes {
    pub fn identity(&self, attribute: Identity) -> Option<&Value> {
        self.identity[attribute as usize].as_ref()
    }

    /// The identity attribute when it is a string.
    pub fn string(&self, attribute: Identity) -> Option<&str> {
        self.identity(attribute).and_then(Value::as_str)
    }

    /// Takes the identity attribute's string out, leaving it absent.
    pub fn take_string(&mut self, attribute: Identity) -> Option<String> {
        match self.identity[attribute as usize].take() {
            Some(Value::String(s) | Value::Version(s)) => Some(s),
            _ => None,
        }
    }

    pub fn capability(&self, capability: Capability) -> Stated {
        self.capabilities[capability as usize]
    }

    pub fn set_identity(&mut self, attribute: Identity, value: Value) {
        self.identity[attribute as usize] = Some(value);
    }

    pub fn set_capability(&mut self, capability: Capability, stated: Stated) {
        self.capabilities[capability as usize] = stated;
    }

    fn slot(name: &str) -> Option<Slot> {
        let local = name
            .strip_prefix(crate::catalogue::DRIVER)
            .and_then(|n| n.strip_prefix('/'))
            .unwrap_or(name);
        if name == PCI_BUS_ID {
            return Some(Slot::Identity(Identity::PciBusId as usize));
        }
        if let Some(i) = Identity::ALL
            .iter()
            .position(|i| i.attribute() == local && *i != Identity::PciBusId)
        {
            return Some(Slot::Identity(i));
        }
        Capability::from_attribute(local).map(|c| Slot::Capability(c as usize))
    }
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
                let mut attributes = Attributes::default();
                while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match Attributes::slot(&name) {
                        Some(Slot::Identity(i)) => {
                            attributes.identity[i] = Some(map.next_value::<Value>()?)
                        }
                        Some(Slot::Capability(i)) => {
                            attributes.capabilities[i] = match map.next_value::<Value>()? {
                                Value::Bool(b) => Stated::Bool(b),
                                _ => Stated::NotBool,
                            }
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(attributes)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Attributes, E> {
                Ok(Attributes::default())
            }
        }
        deserializer.deserialize_any(AttributesVisitor)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an attribute value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut found: Option<Value> = None;
                let mut types = 0;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let scalar = map.next_value::<Scalar>()?;
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
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Value::Invalid)
            }
        }
        deserializer.deserialize_any(ValueVisitor)
    }
}

/// One scalar inside an attribute value, of whatever type it turned out to be.
enum Scalar {
    Bool(bool),
    Int(i64),
    String(String),
    Null,
    Other,
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
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
                Ok(Scalar::String(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::String(s))
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// Everything read from a cluster or from files: the objects of the kinds we use, and a note
/// for each object we had to pass over.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub slices: Vec<ResourceSlice>,
    /// One line per object that was skipped, naming it and why.
    pub notes: Vec<String>,
}

/// Just enough of an object to route it: its kind, version and name, or a List's items.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
    #[serde(default)]
    metadata: Option<NameOnly>,
}

#[derive(Deserialize)]
struct NameOnly {
    #[serde(default)]
    name: Option<String>,
    /// A List's paging token (`metadata.continue`).
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// A document read in one pass, every object's spec read as a ResourceSlice's.
#[derive(Deserialize)]
struct OnePass {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<NameOnly>,
    #[serde(default)]
    spec: Option<SliceSpec>,
    #[serde(default)]
    items: Option<Vec<OnePass>>,
}

fn head_name(head: &Head<'_>) -> String {
    head.metadata
        .as_ref()
        .and_then(|m| m.name.clone())
        .unwrap_or_default()
}

/// A List's `metadata.continue` token. The API server writes `metadata` before `items` (Go's
/// field order), so reading stops at `metadata` instead of skipping megabytes of items: the
/// next page is asked for that much sooner. A list that puts `items` first is still read whole.
pub fn continue_token(text: &str) -> Result<Option<String>, serde_json::Error> {
    /// Carries the token out of the visitor, which stops the parse early by failing on purpose.
    struct Early<'a>(&'a mut Option<Option<String>>);

    impl<'de> Visitor<'de> for Early<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a List")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "metadata" {
                    let metadata: Option<NameOnly> = map.next_value()?;
                    *self.0 = Some(metadata.and_then(|m| m.continue_token));
                    return Err(de::Error::custom(STOPPED));
                }
                map.next_value::<IgnoredAny>()?;
            }
            *self.0 = Some(None);
            Ok(())
        }
    }

    const STOPPED: &str = "stopped after metadata";
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    match de::Deserializer::deserialize_map(&mut deserializer, Early(&mut found)) {
        Err(e) if found.is_none() || !e.to_string().starts_with(STOPPED) => Err(e),
        _ => Ok(found.flatten().filter(|t| !t.is_empty())),
    }
}

/// An API server's typed list (`ResourceSliceList`) leaves kind and apiVersion off its items;
/// `kubectl get -o json` (a `List`) puts them on each item.
fn list_item_kind(list_kind: Option<&str>) -> Option<&str> {
    list_kind
        .and_then(|k| k.strip_suffix("List"))
        .filter(|k| !k.is_empty())
}

impl Objects {
    /// Adds the objects of one JSON document: a single object, or a List (including the
    /// `ResourceSliceList` an API server returns). Returns the List's `metadata.continue` token
    /// when there is one, for paging through a cluster.
    ///
    /// The common case (every object readable as a ResourceSlice, which other kinds usually
    /// are, their fields being ignored) is read in one pass; a document where that fails is read
    /// again object by object, so that one odd object costs a note, not the listing.
    pub fn add_json(&mut self, text: &str) -> Result<Option<String>, serde_json::Error> {
        match serde_json::from_str::<OnePass>(text) {
            Ok(mut document) => {
                let continue_token = document
                    .metadata
                    .as_ref()
                    .and_then(|m| m.continue_token.clone());
                match document.items.take() {
                    Some(items) => {
                        let item_kind = list_item_kind(document.kind.as_deref()).map(str::to_owned);
                        for mut item in items {
                            if item.kind.is_none() {
                                item.kind.clone_from(&item_kind);
                                item.api_version.clone_from(&document.api_version);
                            }
                            self.add_read(item);
                        }
                    }
                    None => self.add_read(document),
                }
                Ok(continue_token.filter(|t| !t.is_empty()))
            }
            Err(_) => self.add_json_by_object(text),
        }
    }

    /// Keeps an object the one-pass read produced, if it is a ResourceSlice we read.
    fn add_read(&mut self, object: OnePass) {
        let name = object.metadata.and_then(|m| m.name).unwrap_or_default();
        let spec = object.spec.unwrap_or_default();
        self.add_item(
            object.kind.as_deref(),
            object.api_version.as_deref(),
            &name.clone(),
            || {
                Ok(ResourceSlice {
                    metadata: Metadata { name },
                    spec,
                })
            },
        );
    }

    /// The slow, forgiving path of [`Objects::add_json`]: each object parsed on its own.
    fn add_json_by_object(&mut self, text: &str) -> Result<Option<String>, serde_json::Error> {
        let head: Head = serde_json::from_str(text)?;
        let continue_token = head
            .metadata
            .as_ref()
            .and_then(|m| m.continue_token.clone());
        match head.items {
            Some(items) => {
                let item_kind = list_item_kind(head.kind.as_deref());
                for item in items {
                    let mut item_head: Head = serde_json::from_str(item.get())?;
                    if item_head.kind.is_none() {
                        item_head.kind = item_kind.map(str::to_owned);
                        item_head.api_version.clone_from(&head.api_version);
                    }
                    let name = head_name(&item_head);
                    self.add_item(
                        item_head.kind.as_deref(),
                        item_head.api_version.as_deref(),
                        &name,
                        || serde_json::from_str(item.get()),
                    );
                }
            }
            None => {
                let name = head_name(&head);
                self.add_item(
                    head.kind.as_deref(),
                    head.api_version.as_deref(),
                    &name,
                    || serde_json::from_str(text),
                );
            }
        }
        Ok(continue_token.filter(|t| !t.is_empty()))
    }

    /// Appends another set of objects (a later page of the same listing).
    pub fn extend(&mut self, other: Objects) {
        self.slices.extend(other.slices);
        self.notes.extend(other.notes);
    }

    /// Adds the objects of one already-parsed document (the YAML path).
    pub fn add_value(&mut self, value: serde_json::Value) {
        let mut value = value;
        if let Some(items) = value
            .get_mut("items")
            .and_then(serde_json::Value::as_array_mut)
        {
            for item in std::mem::take(items) {
                self.add_value(item);
            }
            return;
        }
        let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
        let kind = text(value.get("kind"));
        let api_version = text(value.get("apiVersion"));
        let name = text(value.pointer("/metadata/name")).unwrap_or_default();
        self.add_item(kind.as_deref(), api_version.as_deref(), &name, || {
            serde_json::from_value(value)
        });
    }

    /// Keeps an object if it is a ResourceSlice we read; `parse` is only called then.
    fn add_item(
        &mut self,
        kind: Option<&str>,
        api_version: Option<&str>,
        name: &str,
        parse: impl FnOnce() -> Result<ResourceSlice, serde_json::Error>,
    ) {
        match (kind, api_version) {
            (Some("ResourceSlice"), Some(RESOURCE_API_VERSION)) => match parse() {
                Ok(slice) => self.slices.push(slice),
                Err(e) => self
                    .notes
                    .push(format!("skipped ResourceSlice {name:?}: {e}")),
            },
            (Some("ResourceSlice"), version) => self.notes.push(format!(
                "skipped ResourceSlice {name:?}: it is {}, and only {RESOURCE_API_VERSION} is read \
                 (hint: kubectl get resourceslices.v1.resource.k8s.io -o yaml)",
                version.unwrap_or("of no apiVersion")
            )),
            // Other kinds (pods, claims...) are for other commands; a file may hold them all.
            _ => {}
        }
    }
}

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
          "somethingElse": {"int": 3}
        }}]}}"#;

    #[test]
    fn reads_a_slice_keeping_only_catalogue_attributes() {
        let mut objects = Objects::default();
        assert_eq!(objects.add_json(SLICE).unwrap(), None);
        assert_eq!(objects.slices.len(), 1);
        let slice = &objects.slices[0];
        assert_eq!(slice.spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(slice.spec.pool.generation, 3);
        let a = &slice.spec.devices[0].attributes;
        assert_eq!(a.string(Identity::Address), Some("0000:00:02.0"));
        assert_eq!(a.string(Identity::PciBusId), Some("0000:00:02.0"));
        assert_eq!(
            a.capability(Capability::DecodeHEVCMain10),
            Stated::Bool(true)
        );
        // A qualified name in our own domain is the same attribute.
        assert_eq!(a.capability(Capability::Scale10bit), Stated::Bool(false));
        // Wrong type, two types, and null: never a crash, never a guess.
        assert_eq!(a.capability(Capability::DecodeVP9), Stated::NotBool);
        assert_eq!(a.capability(Capability::DecodeVP9).as_bool(), None);
        assert_eq!(a.capability(Capability::DecodeAV1Main), Stated::NotBool);
        assert_eq!(a.capability(Capability::EncodeH264), Stated::NotBool);
        assert_eq!(a.capability(Capability::DecodeH264), Stated::Absent);
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
    fn reads_lists_and_returns_the_continue_token() {
        let list = format!(
            r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSliceList","metadata":{{"continue":"abc"}},"items":[{SLICE},{SLICE}]}}"#
        )
        .replace(r#""kind": "ResourceSlice","#, r#""kind": "ResourceSlice","#);
        let mut objects = Objects::default();
        assert_eq!(objects.add_json(&list).unwrap().as_deref(), Some("abc"));
        assert_eq!(objects.slices.len(), 2);
    }

    #[test]
    fn list_items_without_kind_are_read_as_the_lists_kind() {
        // An API server's ResourceSliceList items carry no kind/apiVersion of their own.
        let item = SLICE.replace(
            r#""apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice","#,
            "",
        );
        let list = format!(
            r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSliceList","metadata":{{}},"items":[{item}]}}"#
        );
        let mut objects = Objects::default();
        objects.add_json(&list).unwrap();
        assert_eq!(objects.slices.len(), 1, "{:?}", objects.notes);
    }

    #[test]
    fn odd_objects_are_skipped_with_a_note() {
        let mut objects = Objects::default();
        let bad = SLICE.replace(r#""generation": 3"#, r#""generation": "three""#);
        objects.add_json(&bad).unwrap();
        let old = SLICE.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1");
        objects.add_json(&old).unwrap();
        objects
            .add_json(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#)
            .unwrap();
        assert!(objects.slices.is_empty());
        assert_eq!(objects.notes.len(), 2, "{:?}", objects.notes);
        assert!(
            objects.notes[0]
                .starts_with("skipped ResourceSlice \"node-a-media.liken.sh\": invalid type")
        );
        assert!(objects.notes[1].contains("resource.k8s.io/v1beta1"));
    }

    #[test]
    fn yaml_values_read_the_same() {
        let value: serde_json::Value = serde_json::from_str(SLICE).unwrap();
        let mut from_value = Objects::default();
        from_value.add_value(value);
        let mut from_json = Objects::default();
        from_json.add_json(SLICE).unwrap();
        assert_eq!(from_value.slices, from_json.slices);
    }
}
