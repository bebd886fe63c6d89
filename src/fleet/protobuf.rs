//! Lists as kube-apiserver encodes them in protobuf, read straight into the fleet model: the
//! `k8s\0` envelope (a `runtime.Unknown`, with k8s-pb's types), then a `resource.k8s.io/v1`
//! ResourceSliceList read in place field by field (`wire`), or a ResourceClaimList one k8s-pb
//! claim at a time. A third of JSON's bytes (benches/caps.rs).
//! Go's JSON leaves out the empty values protobuf carries (`omitempty`); they become absent
//! here, so `caps` says the same whichever encoding the server chose.

mod wire;

use k8s_openapi::api::core::v1 as openapi;
use k8s_pb::api::resource::v1 as resource;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;

use self::wire::{Reader, WireError};
use crate::fleet::allocated::{AllocatedClaim, Consumer, DeviceResult};
use crate::fleet::objects::{
    Attributes, Device, DeviceFields, Metadata, Pool, QualifiedName, ResourceSlice, SliceSpec,
    SpecFields, Taint, Value, attribute_name, capacity_entry, string_at,
};
use ustr::Ustr;

/// kube-apiserver's protobuf media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What starts every protobuf answer (k8s.io/apimachinery `runtime/serializer/protobuf`).
const MAGIC: &[u8; 4] = b"k8s\0";

/// Why a protobuf answer could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("protobuf answer of {0} bytes is shorter than its 4-byte k8s envelope prefix")]
    Short(usize),
    #[error("protobuf answer does not start with the k8s envelope prefix (it starts {0:02x?})")]
    Magic(Vec<u8>),
    #[error("unreadable protobuf envelope")]
    Envelope(#[source] WireError),
    #[error("the server sent {found}, not the {expected} asked for")]
    Kind { found: String, expected: String },
    #[error("the server sent a {0:?}-encoded protobuf body, which is not read")]
    Encoding(String),
    #[error("unreadable {kind}")]
    Body {
        kind: &'static str,
        #[source]
        cause: WireError,
    },
}

/// The body of a protobuf answer, after checking that the envelope holds `kind` of
/// `api_version` (such as `ResourceSliceList`, `resource.k8s.io/v1`): the answer's own buffer,
/// the envelope cut off in place. A copy per page (prost's decode of `Unknown.raw` made two)
/// was memory the allocator kept past its use (benches/caps.rs).
pub(crate) fn unwrap(
    mut answer: Vec<u8>,
    api_version: &str,
    kind: &str,
) -> Result<Vec<u8>, ProtobufError> {
    let raw = envelope(&answer, api_version, kind)?;
    let (start, length) = (raw.as_ptr().addr() - answer.as_ptr().addr(), raw.len());
    answer.copy_within(start..start + length, 0);
    answer.truncate(length);
    Ok(answer)
}

/// The body an envelope holds (`runtime.Unknown`: 1 `typeMeta`, 2 `raw`, 3
/// `contentEncoding`), borrowed.
fn envelope<'a>(
    answer: &'a [u8],
    api_version: &str,
    kind: &str,
) -> Result<&'a [u8], ProtobufError> {
    let envelope = answer
        .strip_prefix(MAGIC)
        .ok_or_else(|| match answer.len() {
            short if short < MAGIC.len() => ProtobufError::Short(short),
            _ => ProtobufError::Magic(answer[..MAGIC.len()].to_vec()),
        })?;
    let (mut found, mut raw, mut encoding) = (("", ""), &[][..], "");
    let mut read = || -> Result<(), WireError> {
        let mut unknown = Reader::new(envelope, "runtime.Unknown");
        while let Some(field) = unknown.next()? {
            match field.tag {
                1 => {
                    let mut type_meta = field.message("runtime.TypeMeta")?;
                    while let Some(field) = type_meta.next()? {
                        match field.tag {
                            1 => found.0 = field.str()?,
                            2 => found.1 = field.str()?,
                            _ => field.skip()?,
                        }
                    }
                }
                2 => raw = field.bytes()?,
                3 => encoding = field.str()?,
                _ => field.skip()?,
            }
        }
        Ok(())
    };
    read().map_err(ProtobufError::Envelope)?;
    if found != (api_version, kind) {
        return Err(ProtobufError::Kind {
            found: format!("{} {}", found.0, found.1).trim().to_owned(),
            expected: format!("{api_version} {kind}"),
        });
    }
    match encoding {
        "" => Ok(raw),
        other => Err(ProtobufError::Encoding(other.to_owned())),
    }
}

/// A list's `metadata.continue`, read without decoding its items: Go writes fields in order,
/// `metadata` (1) before `items` (2), and each item is skipped by its length alone.
pub(crate) fn continue_token(list: &[u8]) -> Result<Option<String>, ProtobufError> {
    let read = || -> Result<Option<&str>, WireError> {
        let mut token = None;
        let mut list = Reader::new(list, "list");
        while let Some(field) = list.next()? {
            if field.tag != 1 {
                field.skip()?;
                continue;
            }
            let mut meta = field.message("ListMeta")?;
            while let Some(field) = meta.next()? {
                match field.tag {
                    3 => token = Some(field.str()?),
                    _ => field.skip()?,
                }
            }
        }
        Ok(token)
    };
    let token = read().map_err(|cause| ProtobufError::Body {
        kind: "list metadata",
        cause,
    })?;
    Ok(token.filter(|t| !t.is_empty()).map(str::to_owned))
}

/// The slices of a `ResourceSliceList`'s body, in the fleet model, read in place from the
/// page (see `wire`): names and values go from the page's bytes to their interned form.
pub(crate) fn slices(list: &[u8], max: usize) -> Result<Vec<ResourceSlice>, ProtobufError> {
    const KIND: &str = "ResourceSliceList";
    let mut out = Vec::new();
    let mut scratch = Scratch::default();
    items(list, KIND, max, |item| {
        out.push(slice(item, &mut scratch)?);
        Ok(())
    })
    .map_err(|cause| ProtobufError::Body { kind: KIND, cause })?;
    Ok(out)
}

/// The claims of a `ResourceClaimList`'s body, for their allocations only: each item decoded
/// with k8s-pb's types, as few as a cluster has claims cost little.
pub(crate) fn allocated(list: &[u8], max: usize) -> Result<Vec<AllocatedClaim>, ProtobufError> {
    const KIND: &str = "ResourceClaimList";
    let mut out = Vec::new();
    items(list, KIND, max, |item| {
        let claim = resource::ResourceClaim::decode(item).map_err(|cause| WireError::Wire {
            message: "ResourceClaim",
            cause,
        })?;
        out.push(allocated_claim(claim));
        Ok(())
    })
    .map_err(|cause| ProtobufError::Body { kind: KIND, cause })?;
    Ok(out)
}

/// Each item (field 2) of a list's body handed to `take` as its bytes, one at a time; the
/// list's other fields are skipped. More than `max` items (a page's `limit`) are refused.
fn items<'a>(
    list: &'a [u8],
    kind: &'static str,
    max: usize,
    mut take: impl FnMut(&'a [u8]) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let mut list = Reader::new(list, kind);
    let mut count = 0;
    while let Some(field) = list.next()? {
        match field.tag {
            2 => {
                count += 1;
                if count > max {
                    return Err(WireError::TooMany { message: kind, max });
                }
                take(field.bytes()?)?
            }
            _ => field.skip()?,
        }
    }
    Ok(())
}

fn allocated_claim(claim: resource::ResourceClaim) -> AllocatedClaim {
    let metadata = claim.metadata.unwrap_or_default();
    let status = claim.status.unwrap_or_default();
    AllocatedClaim {
        namespace: metadata.namespace.unwrap_or_default(),
        name: metadata.name.unwrap_or_default(),
        results: status
            .allocation
            .and_then(|a| a.devices)
            .map(|d| d.results)
            .unwrap_or_default()
            .into_iter()
            .map(|r| DeviceResult {
                request: r.request.unwrap_or_default(),
                driver: ustr(r.driver),
                pool: ustr(r.pool),
                device: ustr(r.device),
            })
            .collect(),
        reserved_for: status
            .reserved_for
            .into_iter()
            .map(|r| Consumer {
                // `apiGroup,omitempty` in JSON.
                api_group: r.api_group.filter(|g| !g.is_empty()),
                resource: r.resource.unwrap_or_default(),
                name: r.name.unwrap_or_default(),
            })
            .collect(),
    }
}

/// What one page's devices reuse: their maps as read, and their names and values in order.
#[derive(Default)]
struct Scratch<'a> {
    attributes: Vec<(&'a str, Attribute<'a>)>,
    capacity: Vec<(&'a str, Option<&'a str>)>,
    names: Vec<QualifiedName>,
    values: Vec<Value>,
}

fn slice<'a>(bytes: &'a [u8], scratch: &mut Scratch<'a>) -> Result<ResourceSlice, WireError> {
    let mut name = "";
    let mut fields = SpecFields::default();
    let mut slice = Reader::new(bytes, "ResourceSlice");
    // A message field given twice is merged, as protobuf has it: hence `&mut` readers.
    while let Some(field) = slice.next()? {
        match field.tag {
            1 => object_name(field.message("ObjectMeta")?, &mut name)?,
            2 => spec(field.message("ResourceSliceSpec")?, &mut fields, scratch)?,
            _ => field.skip()?,
        }
    }
    Ok(ResourceSlice {
        metadata: Metadata {
            name: name.to_owned(),
        },
        spec: SliceSpec::from(fields),
    })
}

fn object_name<'a>(mut meta: Reader<'a>, name: &mut &'a str) -> Result<(), WireError> {
    while let Some(field) = meta.next()? {
        match field.tag {
            1 => *name = field.str()?,
            _ => field.skip()?,
        }
    }
    Ok(())
}

fn spec<'a>(
    mut spec: Reader<'a>,
    fields: &mut SpecFields,
    scratch: &mut Scratch<'a>,
) -> Result<(), WireError> {
    while let Some(field) = spec.next()? {
        match field.tag {
            1 => fields.driver = Ustr::from(field.str()?),
            2 => pool(field.message("ResourcePool")?, &mut fields.pool)?,
            3 => fields.node_name = Some(Ustr::from(field.str()?)),
            4 => node_selector(
                field.message("NodeSelector")?,
                fields.node_selector.get_or_insert_default(),
            )?,
            5 => fields.all_nodes = Some(field.bool()?),
            6 => fields
                .devices
                .push(device(field.message("Device")?, scratch)?),
            7 => fields.per_device_node_selection = Some(field.bool()?),
            _ => field.skip()?,
        }
    }
    Ok(())
}

fn pool(mut reader: Reader, pool: &mut Pool) -> Result<(), WireError> {
    while let Some(field) = reader.next()? {
        match field.tag {
            1 => pool.name = Ustr::from(field.str()?),
            2 => pool.generation = field.int64()?,
            3 => pool.resource_slice_count = field.int64()?,
            _ => field.skip()?,
        }
    }
    Ok(())
}

fn device<'a>(mut device: Reader<'a>, scratch: &mut Scratch<'a>) -> Result<Device, WireError> {
    let mut fields = DeviceFields::default();
    scratch.attributes.clear();
    scratch.capacity.clear();
    while let Some(field) = device.next()? {
        match field.tag {
            1 => fields.name = Ustr::from(field.str()?),
            2 => {
                let mut entry = field.message("Device.AttributesEntry")?;
                let (mut key, mut attribute) = ("", Attribute::default());
                while let Some(field) = entry.next()? {
                    match field.tag {
                        1 => key = field.str()?,
                        2 => read_attribute(field.message("DeviceAttribute")?, &mut attribute)?,
                        _ => field.skip()?,
                    }
                }
                scratch.attributes.push((key, attribute));
            }
            3 => {
                let mut entry = field.message("Device.CapacityEntry")?;
                let (mut key, mut quantity) = ("", None);
                while let Some(field) = entry.next()? {
                    match field.tag {
                        1 => key = field.str()?,
                        2 => capacity(field.message("DeviceCapacity")?, &mut quantity)?,
                        _ => field.skip()?,
                    }
                }
                scratch.capacity.push((key, quantity));
            }
            5 => fields.node_name = Some(Ustr::from(field.str()?)),
            6 => node_selector(
                field.message("NodeSelector")?,
                fields.node_selector.get_or_insert_default(),
            )?,
            7 => fields.all_nodes = Some(field.bool()?),
            8 => fields.taints.push(taint(field.message("DeviceTaint")?)?),
            12 => fields.allow_multiple_allocations = Some(field.bool()?),
            _ => field.skip()?,
        }
    }
    as_map(&mut scratch.attributes);
    scratch.names.clear();
    scratch.values.clear();
    for (key, attribute) in &scratch.attributes {
        scratch.values.push(attribute.value(scratch.names.len()));
        scratch.names.push(attribute_name(key, scratch.names.len()));
    }
    fields.attributes = Attributes::shaped(&scratch.names, &scratch.values);
    as_map(&mut scratch.capacity);
    fields.capacity = scratch
        .capacity
        .iter()
        .enumerate()
        .filter_map(|(i, (name, quantity))| {
            Some(capacity_entry(name, i, Ustr::from(quantity.as_ref()?)))
        })
        .collect();
    Ok(Device::from(fields))
}

/// A protobuf map's entries as a map: sorted by key, the last of a key kept. Go sends them
/// sorted and once each; anything else is put in that order, as prost's `BTreeMap` would.
fn as_map<T: Copy>(entries: &mut Vec<(&str, T)>) {
    if entries.windows(2).all(|pair| pair[0].0 < pair[1].0) {
        return;
    }
    // Stable: of equal keys, the last read stays last.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            *kept = *later;
        }
        same
    });
}

/// A `DeviceAttribute` as read: which of its types are set.
#[derive(Clone, Copy, Default)]
struct Attribute<'a> {
    int: Option<i64>,
    bool: Option<bool>,
    string: Option<&'a str>,
    version: Option<&'a str>,
}

fn read_attribute<'a>(
    mut reader: Reader<'a>,
    attribute: &mut Attribute<'a>,
) -> Result<(), WireError> {
    while let Some(field) = reader.next()? {
        match field.tag {
            2 => attribute.int = Some(field.int64()?),
            3 => attribute.bool = Some(field.bool()?),
            4 => attribute.string = Some(field.str()?),
            5 => attribute.version = Some(field.str()?),
            _ => field.skip()?,
        }
    }
    Ok(())
}

impl Attribute<'_> {
    /// Exactly one type set is a value, as the JSON reader has it; anything else is not
    /// trusted. `position` is the attribute's among its device's (see `string_at`).
    fn value(&self, position: usize) -> Value {
        let set = [
            self.bool.map(Value::Bool),
            self.int.map(Value::Int),
            self.string.map(|s| Value::String(string_at(s, position))),
            self.version.map(|s| Value::Version(string_at(s, position))),
        ];
        let mut set = set.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(value), None) => value,
            _ => Value::Invalid,
        }
    }
}

/// A `DeviceCapacity`'s quantity as written (`value.string`), if it has one.
fn capacity<'a>(mut reader: Reader<'a>, quantity: &mut Option<&'a str>) -> Result<(), WireError> {
    while let Some(field) = reader.next()? {
        if field.tag != 1 {
            field.skip()?;
            continue;
        }
        let mut value = field.message("Quantity")?;
        while let Some(field) = value.next()? {
            match field.tag {
                1 => *quantity = Some(field.str()?),
                _ => field.skip()?,
            }
        }
    }
    Ok(())
}

fn taint(mut reader: Reader) -> Result<Taint, WireError> {
    let mut taint = Taint::default();
    while let Some(field) = reader.next()? {
        match field.tag {
            1 => taint.key = Ustr::from(field.str()?),
            // `value,omitempty` in JSON.
            2 => taint.value = Some(field.str()?).filter(|v| !v.is_empty()).map(Ustr::from),
            3 => taint.effect = Ustr::from(field.str()?),
            4 => {
                let (mut time, mut seconds) = (field.message("Time")?, 0);
                while let Some(field) = time.next()? {
                    match field.tag {
                        1 => seconds = field.int64()?,
                        _ => field.skip()?,
                    }
                }
                taint.time_added = Some(rfc3339(seconds));
            }
            _ => field.skip()?,
        }
    }
    Ok(taint)
}

/// A node selector as the JSON reader has it: `omitempty` lists absent, not empty.
fn node_selector(
    mut reader: Reader,
    selector: &mut openapi::NodeSelector,
) -> Result<(), WireError> {
    while let Some(field) = reader.next()? {
        if field.tag != 1 {
            field.skip()?;
            continue;
        }
        let mut term = openapi::NodeSelectorTerm::default();
        let mut reader = field.message("NodeSelectorTerm")?;
        while let Some(field) = reader.next()? {
            let list = match field.tag {
                1 => &mut term.match_expressions,
                2 => &mut term.match_fields,
                _ => {
                    field.skip()?;
                    continue;
                }
            };
            let requirement = requirement(field.message("NodeSelectorRequirement")?)?;
            list.get_or_insert_default().push(requirement);
        }
        selector.node_selector_terms.push(term);
    }
    Ok(())
}

fn requirement(mut reader: Reader) -> Result<openapi::NodeSelectorRequirement, WireError> {
    let mut requirement = openapi::NodeSelectorRequirement::default();
    while let Some(field) = reader.next()? {
        match field.tag {
            1 => requirement.key = field.str()?.to_owned(),
            2 => requirement.operator = field.str()?.to_owned(),
            3 => requirement
                .values
                .get_or_insert_default()
                .push(field.str()?.to_owned()),
            _ => field.skip()?,
        }
    }
    Ok(requirement)
}

fn ustr(text: Option<String>) -> Ustr {
    text.map_or_else(Ustr::default, |t| Ustr::from(&t))
}

/// A `metav1.Time` as its JSON writes it: RFC 3339 in UTC, whole seconds.
fn rfc3339(seconds: i64) -> String {
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a day count.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// A `Status` error answer sent as protobuf, as the JSON `Status` the error path reads.
pub(crate) fn status_json(bytes: &[u8]) -> Option<String> {
    let raw = envelope(bytes, "v1", "Status").ok()?;
    let status = meta::Status::decode(raw).ok()?;
    let details = status.details.map(|d| {
        serde_json::json!({
            "name": d.name.unwrap_or_default(),
            "group": d.group.unwrap_or_default(),
            "kind": d.kind.unwrap_or_default(),
            "uid": d.uid.unwrap_or_default(),
            "retryAfterSeconds": d.retry_after_seconds.unwrap_or_default(),
        })
    });
    let mut json = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": status.status.unwrap_or_default(),
        "message": status.message.unwrap_or_default(),
        "reason": status.reason.unwrap_or_default(),
        "code": status.code.unwrap_or_default(),
    });
    if let Some(details) = details {
        json["details"] = details;
    }
    Some(json.to_string())
}

#[cfg(test)]
mod tests {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;

    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [&MAGIC[..], &unknown.encode_to_vec()].concat()
    }

    fn attribute(set: impl FnOnce(&mut resource::DeviceAttribute)) -> resource::DeviceAttribute {
        let mut attribute = resource::DeviceAttribute::default();
        set(&mut attribute);
        attribute
    }

    fn list(continue_token: &str) -> Vec<u8> {
        let device = resource::Device {
            name: Some("gpu-0".into()),
            attributes: [
                ("decodeHEVCMain10", attribute(|a| a.bool = Some(true))),
                ("cores", attribute(|a| a.int = Some(96))),
                ("model", attribute(|a| a.string = Some("Arc A380".into()))),
                (
                    "driverVersion",
                    attribute(|a| a.version = Some("24.1.0".into())),
                ),
                (
                    "two",
                    attribute(|a| {
                        a.bool = Some(true);
                        a.int = Some(1)
                    }),
                ),
                ("none", attribute(|_| ())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            ..Default::default()
        };
        let slices = resource::ResourceSliceList {
            metadata: Some(meta::ListMeta {
                r#continue: Some(continue_token.into()),
                ..Default::default()
            }),
            items: vec![resource::ResourceSlice {
                metadata: Some(meta::ObjectMeta {
                    name: Some("node-a-media.liken.sh".into()),
                    ..Default::default()
                }),
                spec: Some(resource::ResourceSliceSpec {
                    driver: Some("media.liken.sh".into()),
                    node_name: Some("node-a".into()),
                    devices: vec![device],
                    ..Default::default()
                }),
            }],
        };
        envelope(
            "resource.k8s.io/v1",
            "ResourceSliceList",
            slices.encode_to_vec(),
        )
    }

    #[test]
    fn reads_a_slice_list_with_every_attribute_type_and_its_token() {
        let raw = unwrap(list("next"), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert_eq!(continue_token(&raw).unwrap().as_deref(), Some("next"));
        let slices = slices(&raw, 500).unwrap();
        let device = &slices[0].spec.devices[0];
        let get = |name| {
            device
                .attributes
                .get_named(&format!("media.liken.sh/{name}"))
        };
        assert_eq!(get("decodeHEVCMain10"), Some(&Value::Bool(true)));
        assert_eq!(get("cores"), Some(&Value::Int(96)));
        assert_eq!(get("model"), Some(&Value::String(Ustr::from("Arc A380"))));
        assert_eq!(
            get("driverVersion"),
            Some(&Value::Version(Ustr::from("24.1.0")))
        );
        assert_eq!(get("two"), Some(&Value::Invalid));
        assert_eq!(get("none"), Some(&Value::Invalid));
        assert_eq!(slices[0].spec.node_name.unwrap().as_str(), "node-a");
        let last = unwrap(list(""), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert_eq!(continue_token(&last).unwrap(), None);
    }

    #[test]
    fn each_bad_envelope_is_one_error() {
        let good = list("");
        let read = |bytes: &[u8]| {
            unwrap(bytes.to_vec(), "resource.k8s.io/v1", "ResourceSliceList")
                .and_then(|raw| slices(&raw, 500))
                .map(drop)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            read(b"k8s"),
            "protobuf answer of 3 bytes is shorter than its 4-byte k8s envelope prefix"
        );
        assert_eq!(
            read(b"{\"kind\":\"ResourceSliceList\"}"),
            "protobuf answer does not start with the k8s envelope prefix (it starts [7b, 22, 6b, 69])"
        );
        assert_eq!(
            read(&envelope(
                "resource.k8s.io/v1",
                "DeviceClassList",
                Vec::new()
            )),
            "the server sent resource.k8s.io/v1 DeviceClassList, not the resource.k8s.io/v1 \
             ResourceSliceList asked for"
        );
        assert_eq!(
            read(&envelope(
                "resource.k8s.io/v1beta1",
                "ResourceSliceList",
                Vec::new()
            )),
            "the server sent resource.k8s.io/v1beta1 ResourceSliceList, not the \
             resource.k8s.io/v1 ResourceSliceList asked for"
        );
        // Cut inside the envelope, and inside the list the envelope holds.
        assert_eq!(
            read(&good[..good.len() - 7]),
            "unreadable protobuf envelope"
        );
        let raw = unwrap(good.clone(), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        let cut = envelope(
            "resource.k8s.io/v1",
            "ResourceSliceList",
            raw[..raw.len() - 5].to_vec(),
        );
        assert_eq!(read(&cut), "unreadable ResourceSliceList");
        let mut gzipped = Unknown::decode(&good[4..]).unwrap();
        gzipped.content_encoding = Some("gzip".into());
        let gzipped = [&MAGIC[..], &gzipped.encode_to_vec()].concat();
        assert_eq!(
            read(&gzipped),
            "the server sent a \"gzip\"-encoded protobuf body, which is not read"
        );
    }

    #[test]
    fn a_list_cut_in_its_metadata_has_no_token_but_an_error() {
        let raw = unwrap(list("next"), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert!(continue_token(&raw[..3]).is_err());
    }

    #[test]
    fn nesting_past_prosts_recursion_limit_is_an_error_not_a_stack_overflow() {
        // An unknown field (9) of groups nested 100,000 deep: prost skips unknown fields
        // recursively, and stops at its limit of 100 levels.
        const DEPTH: usize = 100_000;
        let nested = [vec![0x4b; DEPTH], vec![0x4c; DEPTH]].concat();
        let bytes = envelope("resource.k8s.io/v1", "ResourceSliceList", nested);
        let raw = unwrap(bytes.clone(), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert!(slices(&raw, 500).is_err());
        assert!(continue_token(&raw).is_err());
    }

    #[test]
    fn reads_a_claims_allocation_and_consumers_as_the_json_has_them() {
        let claims = resource::ResourceClaimList {
            metadata: None,
            items: vec![resource::ResourceClaim {
                metadata: Some(meta::ObjectMeta {
                    name: Some("film".into()),
                    namespace: Some("media".into()),
                    ..Default::default()
                }),
                spec: None,
                status: Some(resource::ResourceClaimStatus {
                    allocation: Some(resource::AllocationResult {
                        devices: Some(resource::DeviceAllocationResult {
                            results: vec![resource::DeviceRequestAllocationResult {
                                request: Some("gpu".into()),
                                driver: Some("liken.sh".into()),
                                pool: Some("n1".into()),
                                device: Some("card0".into()),
                                ..Default::default()
                            }],
                            config: Vec::new(),
                        }),
                        ..Default::default()
                    }),
                    reserved_for: vec![resource::ResourceClaimConsumerReference {
                        api_group: Some(String::new()),
                        resource: Some("pods".into()),
                        name: Some("film-0".into()),
                        uid: Some("u".into()),
                    }],
                    devices: Vec::new(),
                }),
            }],
        };
        let bytes = envelope(
            "resource.k8s.io/v1",
            "ResourceClaimList",
            claims.encode_to_vec(),
        );
        let raw = unwrap(bytes.clone(), "resource.k8s.io/v1", "ResourceClaimList").unwrap();
        let claims = allocated(&raw, 500).unwrap();
        assert_eq!(
            claims,
            [AllocatedClaim {
                namespace: "media".into(),
                name: "film".into(),
                results: vec![DeviceResult {
                    request: "gpu".into(),
                    driver: Ustr::from("liken.sh"),
                    pool: Ustr::from("n1"),
                    device: Ustr::from("card0"),
                }],
                reserved_for: vec![Consumer {
                    api_group: None,
                    resource: "pods".into(),
                    name: "film-0".into(),
                }],
            }]
        );
        assert_eq!(
            allocated(&raw[..raw.len() - 2], 500)
                .unwrap_err()
                .to_string(),
            "unreadable ResourceClaimList"
        );
    }

    /// A field of length-delimited `bytes` as Go writes it.
    fn field(tag: u32, bytes: &[u8]) -> Vec<u8> {
        use prost::encoding::{WireType, encode_key, encode_varint};
        let mut out = Vec::new();
        encode_key(tag, WireType::LengthDelimited, &mut out);
        encode_varint(bytes.len() as u64, &mut out);
        out.extend_from_slice(bytes);
        out
    }

    /// A list of one slice whose spec has one device of these bytes.
    fn one_device(device: &[u8]) -> Vec<u8> {
        let spec = [field(1, b"media.liken.sh"), field(6, device)].concat();
        field(2, &field(2, &spec))
    }

    /// How reading `list`'s slices fails, as `caps` words it.
    fn slices_error(list: &[u8]) -> String {
        crate::kubeconfig::chain(&slices(list, 500).map(drop).unwrap_err())
    }

    #[test]
    fn reads_every_field_the_json_reader_reads_as_it_reads_them() {
        let requirement = |key: &str, values: &[&str]| core::NodeSelectorRequirement {
            key: Some(key.into()),
            operator: Some("In".into()),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let selector = core::NodeSelector {
            node_selector_terms: vec![core::NodeSelectorTerm {
                match_expressions: vec![requirement("zone", &["a", "b"])],
                match_fields: vec![requirement("metadata.name", &[])],
            }],
        };
        let quantity = |q: &str| resource::DeviceCapacity {
            value: Some(k8s_pb::apimachinery::pkg::api::resource::Quantity {
                string: Some(q.into()),
            }),
            request_policy: None,
        };
        let device = resource::Device {
            name: Some("gpu-1".into()),
            attributes: [("liken.sh/renderNode", attribute(|a| a.int = Some(129)))]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            capacity: [
                ("memory".to_owned(), quantity("16Gi")),
                ("liken.sh/slots".to_owned(), quantity("4")),
                ("none".to_owned(), resource::DeviceCapacity::default()),
            ]
            .into(),
            taints: vec![
                resource::DeviceTaint {
                    key: Some("liken.sh/broken".into()),
                    value: Some(String::new()),
                    effect: Some("NoSchedule".into()),
                    time_added: Some(meta::Time {
                        seconds: Some(1_709_251_199),
                        nanos: None,
                    }),
                },
                resource::DeviceTaint {
                    key: Some("k".into()),
                    value: Some("v".into()),
                    effect: Some("NoExecute".into()),
                    time_added: None,
                },
            ],
            node_selector: Some(selector),
            allow_multiple_allocations: Some(true),
            ..Default::default()
        };
        let slice = resource::ResourceSlice {
            metadata: Some(meta::ObjectMeta {
                name: Some("s".into()),
                ..Default::default()
            }),
            spec: Some(resource::ResourceSliceSpec {
                driver: Some("media.liken.sh".into()),
                pool: Some(resource::ResourcePool {
                    name: Some("p".into()),
                    generation: Some(3),
                    resource_slice_count: Some(2),
                }),
                per_device_node_selection: Some(true),
                devices: vec![device],
                ..Default::default()
            }),
        };
        let list = resource::ResourceSliceList {
            metadata: None,
            items: vec![slice],
        };
        let read = slices(&list.encode_to_vec(), 500).unwrap();
        let json: SliceSpec = serde_json::from_value(serde_json::json!({
            "driver": "media.liken.sh",
            "pool": {"name": "p", "generation": 3, "resourceSliceCount": 2},
            "perDeviceNodeSelection": true,
            "devices": [{
                "name": "gpu-1",
                "attributes": {"liken.sh/renderNode": {"int": 129}},
                "capacity": {"liken.sh/slots": {"value": "4"}, "memory": {"value": "16Gi"}},
                "taints": [
                    {"key": "liken.sh/broken", "effect": "NoSchedule",
                     "timeAdded": "2024-02-29T23:59:59Z"},
                    {"key": "k", "value": "v", "effect": "NoExecute"},
                ],
                "nodeSelector": {"nodeSelectorTerms": [{
                    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In"}],
                }]},
                "allowMultipleAllocations": true,
            }],
        }))
        .unwrap();
        assert_eq!(read[0].metadata.name, "s");
        assert_eq!(read[0].spec, json);
        let device = &read[0].spec.devices[0];
        assert_eq!(
            device.capacity(QualifiedName::new("media.liken.sh", "memory")),
            Some(Ustr::from("16Gi"))
        );
    }

    #[test]
    fn map_entries_out_of_order_or_twice_read_as_a_map() {
        // Go sends a map sorted, each key once; prost's `BTreeMap` sorts and keeps the last.
        let entry =
            |key: &[u8], int: u8| field(2, &[field(1, key), field(2, &[0x10, int])].concat());
        let device = [entry(b"b", 1), entry(b"a", 2), entry(b"b", 3)].concat();
        let read = slices(&one_device(&device), 500).unwrap();
        let attributes: Vec<_> = read[0].spec.devices[0]
            .attributes
            .iter()
            .map(|(name, value)| (name.to_string(), *value))
            .collect();
        assert_eq!(
            attributes,
            [
                ("media.liken.sh/a".to_owned(), Value::Int(2)),
                ("media.liken.sh/b".to_owned(), Value::Int(3))
            ]
        );
    }

    #[test]
    fn each_bad_field_of_a_slice_is_one_error() {
        let attribute = |value: &[u8]| field(2, &[field(1, b"model"), field(2, value)].concat());
        assert_eq!(
            slices_error(&one_device(&[0x38, 0x80])),
            "unreadable ResourceSliceList: unreadable Device: failed to decode Protobuf message: \
             invalid varint"
        );
        assert_eq!(
            slices_error(&one_device(&[0x0a, 9, b'g', b'p', b'u'])),
            "unreadable ResourceSliceList: Device field 1 says 9 bytes, but only 3 are left"
        );
        assert_eq!(
            slices_error(&one_device(&[0x08, 1])),
            "unreadable ResourceSliceList: Device field 1 has wire type Varint, not \
             LengthDelimited"
        );
        assert_eq!(
            slices_error(&one_device(&attribute(&field(4, b"Arc \xff")))),
            "unreadable ResourceSliceList: DeviceAttribute field 4 is not UTF-8: invalid utf-8 \
             sequence of 1 bytes from index 4"
        );
        assert_eq!(
            slices_error(&one_device(&attribute(&[0x18, 0x80]))),
            "unreadable ResourceSliceList: unreadable DeviceAttribute: failed to decode Protobuf \
             message: invalid varint"
        );
        // A list cut inside an item: the item says more bytes than the page has.
        let list = one_device(&field(1, b"gpu-0"));
        assert_eq!(
            slices_error(&list[..list.len() - 1]),
            format!(
                "unreadable ResourceSliceList: ResourceSliceList field 2 says {} bytes, but only \
                 {} are left",
                list.len() - 2,
                list.len() - 3
            )
        );
    }

    #[test]
    fn groups_nested_deep_in_a_device_are_an_error_not_a_stack_overflow() {
        // An unknown field (20) of groups nested 100,000 deep inside a device.
        const DEPTH: usize = 100_000;
        let start = [0xa3, 0x01];
        let end = [0xa4, 0x01];
        let nested = [start.repeat(DEPTH), end.repeat(DEPTH)].concat();
        assert_eq!(
            slices_error(&one_device(&nested)),
            "unreadable ResourceSliceList: unreadable Device: failed to decode Protobuf \
             message: recursion limit reached"
        );
    }

    #[test]
    fn times_are_written_as_the_json_writes_them() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn a_protobuf_status_reads_as_its_json() {
        let status = meta::Status {
            status: Some("Failure".into()),
            message: Some("resourceslices is forbidden".into()),
            reason: Some("Forbidden".into()),
            code: Some(403),
            ..Default::default()
        };
        let json = status_json(&envelope("v1", "Status", status.encode_to_vec())).unwrap();
        let read: kube::core::Status = serde_json::from_str(&json).unwrap();
        assert_eq!(read.code, 403);
        assert_eq!(read.reason, "Forbidden");
        assert_eq!(read.message, "resourceslices is forbidden");
        assert_eq!(status_json(b"not protobuf"), None);
    }
}
