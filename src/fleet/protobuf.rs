//! Lists as kube-apiserver encodes them in protobuf, read straight into the fleet model: the
//! `k8s\0` envelope (a `runtime.Unknown`), then a `resource.k8s.io/v1` ResourceSliceList or
//! ResourceClaimList, with k8s-pb's generated types. A third of JSON's bytes (benches/caps.rs).
//! Go's JSON leaves out the empty values protobuf carries (`omitempty`); they become absent
//! here, so `caps` says the same whichever encoding the server chose.

use k8s_openapi::api::core::v1 as openapi;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::resource::v1 as resource;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;

use crate::fleet::allocated::{AllocatedClaim, Consumer, DeviceResult};
use crate::fleet::objects::{
    Attributes, Device, DeviceFields, Metadata, Pool, QualifiedName, ResourceSlice, SliceSpec,
    SpecFields, Taint, Ustr, Value, attribute_name, written_name,
};

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
    Envelope(#[source] prost::DecodeError),
    #[error("the server sent {found}, not the {expected} asked for")]
    Kind { found: String, expected: String },
    #[error("the server sent a {0:?}-encoded protobuf body, which is not read")]
    Encoding(String),
    #[error("unreadable {kind}")]
    Body {
        kind: &'static str,
        #[source]
        cause: prost::DecodeError,
    },
}

/// The body of a protobuf answer, after checking that the envelope holds `kind` of
/// `api_version` (such as `ResourceSliceList`, `resource.k8s.io/v1`).
pub(crate) fn unwrap(
    bytes: &[u8],
    api_version: &str,
    kind: &str,
) -> Result<Vec<u8>, ProtobufError> {
    let envelope = bytes.strip_prefix(MAGIC).ok_or_else(|| match bytes.len() {
        short if short < MAGIC.len() => ProtobufError::Short(short),
        _ => ProtobufError::Magic(bytes[..MAGIC.len()].to_vec()),
    })?;
    let unknown = Unknown::decode(envelope).map_err(ProtobufError::Envelope)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let found = (
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
    );
    if found.0 != api_version || found.1 != kind {
        return Err(ProtobufError::Kind {
            found: format!("{} {}", found.0, found.1).trim().to_owned(),
            expected: format!("{api_version} {kind}"),
        });
    }
    match unknown.content_encoding.as_deref() {
        None | Some("") => Ok(unknown.raw.unwrap_or_default()),
        Some(other) => Err(ProtobufError::Encoding(other.to_owned())),
    }
}

/// A list's `metadata.continue`, read without decoding its items: Go writes fields in order,
/// `metadata` (1) before `items` (2), and each item is skipped by its length alone.
pub(crate) fn continue_token(list: &[u8]) -> Result<Option<String>, ProtobufError> {
    let mut metadata = None;
    each_field(list, 1, "list metadata", |meta: meta::ListMeta| {
        metadata = Some(meta);
    })?;
    Ok(metadata
        .and_then(|m| m.r#continue)
        .filter(|t| !t.is_empty()))
}

/// The slices of a `ResourceSliceList`'s body, in the fleet model, each item decoded and
/// converted on its own: a whole page of k8s-pb slices (every attribute an owned `String`) made
/// peak memory from the server 128 MiB for 40,000 GPUs instead of 105 (benches/caps.rs).
pub(crate) fn slices(list: &[u8]) -> Result<Vec<ResourceSlice>, ProtobufError> {
    let mut out = Vec::new();
    each_field(list, 2, "ResourceSliceList", |item| out.push(slice(item)))?;
    Ok(out)
}

/// The claims of a `ResourceClaimList`'s body, for their allocations only.
pub(crate) fn allocated(list: &[u8]) -> Result<Vec<AllocatedClaim>, ProtobufError> {
    let mut out = Vec::new();
    each_field(list, 2, "ResourceClaimList", |item| {
        out.push(allocated_claim(item));
    })?;
    Ok(out)
}

/// Each field `tag` of a list's body (1 `metadata`, 2 `items`) decoded as an `M` and handed
/// to `take` one at a time; other fields are skipped. `merge` refuses the field with another
/// wire type, as prost's decode of the whole list does.
fn each_field<M: Message + Default>(
    list: &[u8],
    tag: u32,
    kind: &'static str,
    mut take: impl FnMut(M),
) -> Result<(), ProtobufError> {
    use prost::encoding::{DecodeContext, decode_key, message, skip_field};
    let unreadable = |cause| ProtobufError::Body { kind, cause };
    let mut buf = list;
    // Each turn consumes at least a key's byte: bounded by the list's length.
    while !buf.is_empty() {
        let (field, wire_type) = decode_key(&mut buf).map_err(unreadable)?;
        if field != tag {
            skip_field(wire_type, field, &mut buf, DecodeContext::default()).map_err(unreadable)?;
            continue;
        }
        let mut item = M::default();
        message::merge(wire_type, &mut item, &mut buf, DecodeContext::default())
            .map_err(unreadable)?;
        take(item);
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

fn slice(slice: resource::ResourceSlice) -> ResourceSlice {
    let spec = slice.spec.unwrap_or_default();
    let pool = spec.pool.unwrap_or_default();
    let fields = SpecFields {
        driver: ustr(spec.driver),
        pool: Pool {
            name: ustr(pool.name),
            generation: pool.generation.unwrap_or_default(),
            resource_slice_count: pool.resource_slice_count.unwrap_or_default(),
        },
        node_name: spec.node_name.map(|n| Ustr::from(&n)),
        node_selector: spec.node_selector.map(node_selector),
        all_nodes: spec.all_nodes,
        per_device_node_selection: spec.per_device_node_selection,
        devices: spec.devices.into_iter().map(device).collect(),
    };
    ResourceSlice {
        metadata: Metadata {
            name: slice.metadata.and_then(|m| m.name).unwrap_or_default(),
        },
        spec: SliceSpec::from(fields),
    }
}

fn device(device: resource::Device) -> Device {
    let mut names: Vec<QualifiedName> = Vec::with_capacity(device.attributes.len());
    let mut values: Vec<Value> = Vec::with_capacity(device.attributes.len());
    for (key, attribute) in &device.attributes {
        names.push(attribute_name(key, names.len()));
        values.push(value(attribute));
    }
    Device::from(DeviceFields {
        name: ustr(device.name),
        attributes: Attributes::shaped(&names, &values),
        capacity: device
            .capacity
            .into_iter()
            .filter_map(|(name, capacity)| {
                let quantity = capacity.value?.string?;
                Some((written_name(&name), Ustr::from(&quantity)))
            })
            .collect(),
        allow_multiple_allocations: device.allow_multiple_allocations,
        taints: device.taints.into_iter().map(taint).collect(),
        node_name: device.node_name.map(|n| Ustr::from(&n)),
        node_selector: device.node_selector.map(node_selector),
        all_nodes: device.all_nodes,
    })
}

/// Exactly one type set is a value, as the JSON reader has it; anything else is not trusted.
fn value(attribute: &resource::DeviceAttribute) -> Value {
    let set = [
        attribute.bool.map(Value::Bool),
        attribute.int.map(Value::Int),
        attribute
            .string
            .as_deref()
            .map(|s| Value::String(Ustr::from(s))),
        attribute
            .version
            .as_deref()
            .map(|s| Value::Version(Ustr::from(s))),
    ];
    let mut set = set.into_iter().flatten();
    match (set.next(), set.next()) {
        (Some(value), None) => value,
        _ => Value::Invalid,
    }
}

fn taint(taint: resource::DeviceTaint) -> Taint {
    Taint {
        key: ustr(taint.key),
        // `value,omitempty` in JSON.
        value: taint
            .value
            .filter(|v| !v.is_empty())
            .map(|v| Ustr::from(&v)),
        effect: ustr(taint.effect),
        time_added: taint
            .time_added
            .map(|t| rfc3339(t.seconds.unwrap_or_default())),
    }
}

fn node_selector(selector: core::NodeSelector) -> openapi::NodeSelector {
    let requirements = |list: Vec<core::NodeSelectorRequirement>| {
        // `omitempty` in JSON: an empty list is no list.
        (!list.is_empty()).then(|| {
            list.into_iter()
                .map(|r| openapi::NodeSelectorRequirement {
                    key: r.key.unwrap_or_default(),
                    operator: r.operator.unwrap_or_default(),
                    values: (!r.values.is_empty()).then_some(r.values),
                })
                .collect()
        })
    };
    openapi::NodeSelector {
        node_selector_terms: selector
            .node_selector_terms
            .into_iter()
            .map(|term| openapi::NodeSelectorTerm {
                match_expressions: requirements(term.match_expressions),
                match_fields: requirements(term.match_fields),
            })
            .collect(),
    }
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
    let raw = unwrap(bytes, "v1", "Status").ok()?;
    let status = meta::Status::decode(raw.as_slice()).ok()?;
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
        let raw = unwrap(&list("next"), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert_eq!(continue_token(&raw).unwrap().as_deref(), Some("next"));
        let slices = slices(&raw).unwrap();
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
        let last = unwrap(&list(""), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert_eq!(continue_token(&last).unwrap(), None);
    }

    #[test]
    fn each_bad_envelope_is_one_error() {
        let good = list("");
        let read = |bytes: &[u8]| {
            unwrap(bytes, "resource.k8s.io/v1", "ResourceSliceList")
                .and_then(|raw| slices(&raw))
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
        let raw = unwrap(&good, "resource.k8s.io/v1", "ResourceSliceList").unwrap();
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
        let raw = unwrap(&list("next"), "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert!(continue_token(&raw[..3]).is_err());
    }

    #[test]
    fn nesting_past_prosts_recursion_limit_is_an_error_not_a_stack_overflow() {
        // An unknown field (9) of groups nested 100,000 deep: prost skips unknown fields
        // recursively, and stops at its limit of 100 levels.
        const DEPTH: usize = 100_000;
        let nested = [vec![0x4b; DEPTH], vec![0x4c; DEPTH]].concat();
        let bytes = envelope("resource.k8s.io/v1", "ResourceSliceList", nested);
        let raw = unwrap(&bytes, "resource.k8s.io/v1", "ResourceSliceList").unwrap();
        assert!(slices(&raw).is_err());
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
        let raw = unwrap(&bytes, "resource.k8s.io/v1", "ResourceClaimList").unwrap();
        let claims = allocated(&raw).unwrap();
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
            allocated(&raw[..raw.len() - 2]).unwrap_err().to_string(),
            "unreadable ResourceClaimList"
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
