//! Label and field selectors as `list` and `watch` take them (k8s.io/apimachinery pkg/labels and
//! pkg/fields): `=`, `==`, `!=`, `in`, `notin`, `key` and `!key` for labels; `=`, `==`, `!=` for
//! fields. Set-based label operators and equality ones may be mixed, comma-separated.

use serde_json::Value;

use super::resources::{ResourceType, field_string};

/// One parsed label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits at commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn check_key(key: &str) -> Result<String, String> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_string())
    } else {
        Err(format!(
            "unable to parse requirement: invalid label key {key:?}"
        ))
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(check_key(key.trim())?));
            } else if let Some(open) = part.find('(') {
                let Some(inner) = part[open + 1..].strip_suffix(')') else {
                    return Err(format!(
                        "unable to parse requirement: found '{part}', expected: ')'"
                    ));
                };
                let head: Vec<&str> = part[..open].split_whitespace().collect();
                let values: Vec<String> = inner
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                match head.as_slice() {
                    [key, "in"] => reqs.push(LabelReq::In(check_key(key)?, values)),
                    [key, "notin"] => reqs.push(LabelReq::NotIn(check_key(key)?, values)),
                    _ => {
                        return Err(format!(
                            "unable to parse requirement: found '{part}', expected: in, notin"
                        ));
                    }
                }
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelReq::NotEq(check_key(k.trim())?, v.trim().to_string()));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(LabelReq::Eq(check_key(k.trim())?, v.trim().to_string()));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(LabelReq::Eq(check_key(k.trim())?, v.trim().to_string()));
            } else {
                reqs.push(LabelReq::Exists(check_key(part)?));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses a `fieldSelector` query value and checks each field label is served for `rt`.
    pub fn parse(s: &str, rt: &ResourceType) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !rt.supports_field(field) {
                return Err(format!("field label not supported: {field}"));
            }
            reqs.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(field, equal, value)| (field_string(obj, field) == *value) == *equal)
    }

    /// The value an `=` requirement pins `field` to, if any (lets lists skip a scan).
    pub fn pinned(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| f == field && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}
