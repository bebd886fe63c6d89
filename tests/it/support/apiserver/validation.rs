//! Validation on create and update, worded as k8s.io/kubernetes pkg/apis/resource/validation does
//! it for ResourceSlices (the limits of dra-facts §2), and deliberately light for the others:
//! DeviceClass, ResourceClaim and ResourceClaimTemplate get name and required-field checks only,
//! core objects get `metadata.name` checks only. No CEL compilation, no Quantity parsing, no
//! node-selector validation, no 64-device limit for list attributes (a 1.36 feature).

use serde_json::{Map, Value};

use super::resources::ResourceType;
use super::status::FieldError;

const MAX_DEVICES: usize = 128;
/// The lower device limit when any device uses taints or consumes counters.
const MAX_DEVICES_WITH_TAINTS_OR_COUNTERS: usize = 64;
const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
const MAX_ATTRIBUTE_VALUE_LEN: usize = 64;
const MAX_ID_LEN: usize = 32;
const MAX_DOMAIN_LEN: usize = 63;
const MAX_DRIVER_LEN: usize = 63;
const MAX_POOL_NAME_LEN: usize = 253;
const MAX_REQUESTS: usize = 32;
const MAX_SELECTORS: usize = 32;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const C_IDENTIFIER_MSG: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')";
const NODE_SELECTION_MSG: &str =
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";

/// `IsDNS1123Label`: the messages for a value that is not a DNS label.
pub fn dns1123_label_errors(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !is_label(v) {
        out.push(DNS1123_LABEL_MSG.to_string());
    }
    out
}

/// `IsDNS1123Subdomain`: the messages for a value that is not a DNS subdomain.
pub fn dns1123_subdomain_errors(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if v.is_empty() || !v.split('.').all(is_label) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

fn is_label(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_c_identifier(v: &str) -> bool {
    let mut chars = v.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Validates an object about to be stored; `old` is the stored object on update.
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        let msgs = if rt.plural == "namespaces" {
            dns1123_label_errors(name)
        } else {
            dns1123_subdomain_errors(name)
        };
        for m in msgs {
            errs.push(FieldError::invalid_str("metadata.name", name, &m));
        }
    }
    if let Some(owners) = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    {
        validate_owner_references(owners, &mut errs);
    }
    let empty = Value::Object(Map::new());
    let spec = obj.get("spec").unwrap_or(&empty);
    match rt.plural {
        "resourceslices" => {
            validate_slice_spec(spec, old.and_then(|o| o.get("spec")), &mut errs);
        }
        "deviceclasses" => validate_selectors(spec, "spec", &mut errs),
        "resourceclaims" => validate_claim_spec(spec, "spec", &mut errs),
        "resourceclaimtemplates" => {
            let inner = spec.get("spec").unwrap_or(&empty);
            validate_claim_spec(inner, "spec.spec", &mut errs);
        }
        _ => {}
    }
    errs
}

/// apimachinery's `ValidateOwnerReferences`: apiVersion (with a version), kind, name and uid
/// are required, no Event may own, and at most one reference is the controller. The paths have
/// no index (`metadata.ownerReferences.uid`), as there.
fn validate_owner_references(owners: &[Value], errs: &mut Vec<FieldError>) {
    const PATH: &str = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    for owner in owners {
        let text = |key: &str| str_at(owner, key).unwrap_or("");
        let api_version = text("apiVersion");
        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
        if version.is_empty() {
            errs.push(FieldError::invalid_str(
                &format!("{PATH}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        for (key, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
            if text(key).is_empty() {
                errs.push(FieldError::invalid_str(
                    &format!("{PATH}.{key}"),
                    "",
                    &format!("{what} must not be empty"),
                ));
            }
        }
        if api_version == "v1" && text("kind") == "Event" {
            errs.push(FieldError::invalid_raw(
                PATH,
                owner.to_string(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if owner.get("controller") == Some(&Value::Bool(true)) {
            let this = format!("{}/{}", text("kind"), text("name"));
            match &controller {
                Some(first) => errs.push(FieldError::invalid_raw(
                    PATH,
                    Value::Array(owners.to_vec()).to_string(),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                    ),
                )),
                None => controller = Some(this),
            }
        }
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn validate_driver_name(name: &str, path: &str, errs: &mut Vec<FieldError>) {
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    if name.len() > MAX_DRIVER_LEN {
        errs.push(FieldError::too_long(path, MAX_DRIVER_LEN));
    }
    for m in dns1123_subdomain_errors(&name.to_lowercase()) {
        errs.push(FieldError::invalid_str(path, name, &m));
    }
}

fn validate_slice_spec(spec: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let driver = str_at(spec, "driver").unwrap_or("");
    validate_driver_name(driver, "spec.driver", errs);

    let empty = Value::Object(Map::new());
    let pool = spec.get("pool").unwrap_or(&empty);
    let pool_name = str_at(pool, "name").unwrap_or("");
    if pool_name.is_empty() {
        errs.push(FieldError::required("spec.pool.name", ""));
    } else {
        if pool_name.len() > MAX_POOL_NAME_LEN {
            errs.push(FieldError::too_long("spec.pool.name", MAX_POOL_NAME_LEN));
        }
        for segment in pool_name.split('/') {
            for m in dns1123_subdomain_errors(segment) {
                errs.push(FieldError::invalid_str("spec.pool.name", pool_name, &m));
            }
        }
    }
    let count = pool
        .get("resourceSliceCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if count <= 0 {
        errs.push(FieldError::invalid_raw(
            "spec.pool.resourceSliceCount",
            count.to_string(),
            "must be greater than zero",
        ));
    }
    let generation = pool.get("generation").and_then(Value::as_i64).unwrap_or(0);
    if generation < 0 {
        errs.push(FieldError::invalid_raw(
            "spec.pool.generation",
            generation.to_string(),
            "must be greater than or equal to zero",
        ));
    }

    if let Some(old) = old {
        let immutable = [
            (
                "spec.pool.name",
                pool.get("name"),
                old.pointer("/pool/name"),
            ),
            ("spec.driver", spec.get("driver"), old.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old.get("nodeName")),
        ];
        for (path, new, old) in immutable {
            if new != old {
                let shown = match new {
                    Some(Value::String(s)) => format!("{s:?}"),
                    None | Some(Value::Null) => "null".to_string(),
                    Some(other) => other.to_string(),
                };
                errs.push(FieldError::invalid_raw(path, shown, "field is immutable"));
            }
        }
    }

    let mut set_fields = Vec::new();
    match spec.get("nodeName") {
        None | Some(Value::Null) => {}
        Some(Value::String(n)) if !n.is_empty() => {
            set_fields.push("`nodeName`");
            for m in dns1123_subdomain_errors(n) {
                errs.push(FieldError::invalid_str("spec.nodeName", n, &m));
            }
        }
        Some(_) => errs.push(FieldError::invalid_str(
            "spec.nodeName",
            "",
            "must be either unset or set to a non-empty string",
        )),
    }
    if spec.get("nodeSelector").is_some_and(|v| !v.is_null()) {
        set_fields.push("`nodeSelector`");
        let terms = spec
            .pointer("/nodeSelector/nodeSelectorTerms")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if terms != 1 {
            errs.push(FieldError::invalid_raw(
                "spec.nodeSelector.nodeSelectorTerms",
                format!("{terms} terms"),
                "must have exactly one node selector term",
            ));
        }
    }
    for (key, label) in [
        ("allNodes", "`allNodes`"),
        ("perDeviceNodeSelection", "`perDeviceNodeSelection`"),
    ] {
        match spec.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Bool(true)) => set_fields.push(label),
            Some(_) => errs.push(FieldError::invalid_raw(
                &format!("spec.{key}"),
                "false".to_string(),
                "must be either unset or set to true",
            )),
        }
    }
    match set_fields.len() {
        0 => errs.push(FieldError::required("spec", NODE_SELECTION_MSG)),
        1 => {}
        _ => errs.push(FieldError::invalid_str(
            "spec",
            &format!("{{{}}}", set_fields.join(", ")),
            &format!("{NODE_SELECTION_MSG}, but multiple fields are set"),
        )),
    }

    let devices = spec
        .get("devices")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let uses_taints_or_counters = devices.iter().any(|d| {
        ["taints", "consumesCounters"].iter().any(|k| {
            d.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        })
    });
    let max = if uses_taints_or_counters {
        MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    } else {
        MAX_DEVICES
    };
    if devices.len() > max {
        // Upstream stops here (protection against huge objects): no per-device errors.
        errs.push(FieldError::too_many("spec.devices", devices.len(), max));
        return;
    }
    for (i, device) in devices.iter().enumerate() {
        validate_device(device, &format!("spec.devices[{i}]"), errs);
    }
    let mut seen = std::collections::HashSet::new();
    for (i, device) in devices.iter().enumerate() {
        let name = str_at(device, "name").unwrap_or("");
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(&format!("spec.devices[{i}]"), name));
        }
    }
}

fn validate_device(device: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let name = str_at(device, "name").unwrap_or("");
    let name_path = format!("{path}.name");
    for m in dns1123_label_errors(name) {
        errs.push(FieldError::invalid_str(&name_path, name, &m));
    }
    let empty = Map::new();
    let attributes = device
        .get("attributes")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let capacity = device
        .get("capacity")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let combined = attributes.len() + capacity.len();
    if combined > MAX_ATTRIBUTES_AND_CAPACITIES {
        errs.push(FieldError::invalid_raw(
            path,
            combined.to_string(),
            &format!(
                "the total number of attributes and capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"
            ),
        ));
    }
    // serde_json keeps map keys sorted, so the errors come in a stable order (Go's map order
    // is random, so upstream's order among attribute errors is not something to rely on).
    for (key, attr) in attributes {
        let key_path = format!("{path}.attributes[{}]", truncate_key(key));
        validate_qualified_name(key, &key_path, errs);
        validate_attribute(attr, &key_path, errs);
    }
    for key in capacity.keys() {
        let key_path = format!("{path}.capacity[{}]", truncate_key(key));
        validate_qualified_name(key, &key_path, errs);
    }
}

/// `truncateIfTooLong` with the key limit of a qualified name (domain + '/' + identifier).
fn truncate_key(key: &str) -> String {
    let max = MAX_DOMAIN_LEN + 1 + MAX_ID_LEN;
    if key.len() <= max || !key.is_ascii() {
        return key.to_string();
    }
    let remaining = max - 3;
    format!(
        "{}...{}",
        &key[..remaining.div_ceil(2)],
        &key[key.len() - remaining / 2..]
    )
}

fn validate_c_identifier(id: &str, path: &str, errs: &mut Vec<FieldError>) {
    if id.len() > MAX_ID_LEN {
        errs.push(FieldError::too_long(path, MAX_ID_LEN));
    }
    if !is_c_identifier(id) {
        errs.push(FieldError::invalid_str(path, id, C_IDENTIFIER_MSG));
    }
}

fn validate_qualified_name(name: &str, path: &str, errs: &mut Vec<FieldError>) {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [id] => validate_c_identifier(id, path, errs),
        [domain, id] => {
            if domain.is_empty() {
                errs.push(FieldError::invalid_str(
                    path,
                    "",
                    "the domain must not be empty",
                ));
            } else {
                validate_driver_name(domain, path, errs);
            }
            if id.is_empty() {
                errs.push(FieldError::invalid_str(
                    path,
                    "",
                    "the name must not be empty",
                ));
            } else {
                validate_c_identifier(id, path, errs);
            }
        }
        // Upstream accepts names with more than one slash (a known gap it keeps for
        // compatibility), and so does this server.
        _ => {}
    }
}

fn validate_attribute(attr: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let mut set = 0;
    for key in ["bool", "int", "string", "version"] {
        let Some(v) = attr.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        set += 1;
        if let ("string" | "version", Some(s)) = (key, v.as_str()) {
            if key == "version" && !is_semver(s) {
                errs.push(FieldError::invalid_str(
                    &format!("{path}.version"),
                    s,
                    "must be a string compatible with semver.org spec 2.0.0",
                ));
            }
            if s.len() > MAX_ATTRIBUTE_VALUE_LEN {
                errs.push(FieldError::too_long(
                    &format!("{path}.{key}"),
                    MAX_ATTRIBUTE_VALUE_LEN,
                ));
            }
        }
    }
    match set {
        0 => errs.push(FieldError::invalid_str(
            path,
            "",
            "exactly one value must be specified",
        )),
        1 => {}
        _ => errs.push(FieldError::invalid_raw(
            path,
            attr.to_string(),
            "exactly one value must be specified",
        )),
    }
}

/// semver 2.0.0: `MAJOR.MINOR.PATCH[-pre][+build]` without leading zeros in numbers.
fn is_semver(s: &str) -> bool {
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |x: &str| {
        !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()) && (x == "0" || !x.starts_with('0'))
    };
    let ident =
        |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|p| {
            p.split('.')
                .all(|x| ident(x) && (numeric(x) || x.bytes().any(|b| !b.is_ascii_digit())))
        })
        && build.is_none_or(|b| b.split('.').all(ident))
}

fn validate_selectors(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let selectors = spec
        .get("selectors")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, sel) in selectors.iter().enumerate() {
        let expr = sel.pointer("/cel/expression").and_then(Value::as_str);
        if expr.is_none_or(str::is_empty) {
            errs.push(FieldError::required(
                &format!("{path}.selectors[{i}].cel.expression"),
                "",
            ));
        }
    }
    if selectors.len() > MAX_SELECTORS {
        errs.push(FieldError::too_many(
            &format!("{path}.selectors"),
            selectors.len(),
            MAX_SELECTORS,
        ));
    }
}

fn validate_claim_spec(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let requests = spec
        .pointer("/devices/requests")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, req) in requests.iter().enumerate() {
        let rpath = format!("{path}.devices.requests[{i}]");
        let name = str_at(req, "name").unwrap_or("");
        for m in dns1123_label_errors(name) {
            errs.push(FieldError::invalid_str(&format!("{rpath}.name"), name, &m));
        }
        let exactly = req.get("exactly").filter(|v| !v.is_null());
        let first = req.get("firstAvailable").filter(|v| !v.is_null());
        match (exactly, first) {
            (Some(ex), None) => {
                if str_at(ex, "deviceClassName").is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        &format!("{rpath}.exactly.deviceClassName"),
                        "",
                    ));
                }
                validate_selectors(ex, &format!("{rpath}.exactly"), errs);
            }
            (None, Some(_)) => {}
            (None, None) => errs.push(FieldError::required(
                &rpath,
                "exactly one of `exactly` or `firstAvailable` is required",
            )),
            (Some(_), Some(_)) => errs.push(FieldError::invalid_str(
                &rpath,
                "{`exactly`, `firstAvailable`}",
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )),
        }
    }
    if requests.len() > MAX_REQUESTS {
        errs.push(FieldError::too_many(
            &format!("{path}.devices.requests"),
            requests.len(),
            MAX_REQUESTS,
        ));
    }
}
