//! Pure: the device tolerations `class --tolerate` writes into a template's requests
//! (resource.k8s.io/v1 `DeviceToleration`), from kubectl's taint syntax `KEY[=VALUE][:EFFECT]`,
//! checked as the API server checks them (k8s.io/kubernetes pkg/apis/resource/validation
//! `validateDeviceToleration`: a label key, a label value, `Exists` without a value, the
//! effects NoSchedule and NoExecute, at most 16 per request) so that `kubectl apply` never
//! answers 422 over one.

use k8s_openapi::api::resource::v1::DeviceToleration;

/// The most tolerations one request may carry (`resource.DeviceTolerationsMaxLength`).
pub const MAX_PER_REQUEST: usize = 16;

/// The longest name part of a key, and the longest value (a label's).
const MAX_NAME: usize = 63;

/// The longest prefix of a key (a DNS-1123 subdomain).
const MAX_PREFIX: usize = 253;

/// Why a `--tolerate` value is not a toleration the API takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TolerationError {
    #[error(
        "{given:?} has no key (hint: --tolerate KEY, KEY=VALUE, KEY:EFFECT or KEY=VALUE:EFFECT, e.g. --tolerate media.liken.sh/unhealthy)"
    )]
    NoKey { given: String },
    #[error(
        "{given:?}: key {key:?} {rule} (hint: a key is a label name with an optional DNS prefix, e.g. media.liken.sh/unhealthy or gpu.nvidia.com/xid)"
    )]
    Key {
        given: String,
        key: String,
        rule: &'static str,
    },
    #[error(
        "{given:?}: value {value:?} must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (hint: the taint's value as kubectl media caps -o wide shows it, e.g. not-answering)"
    )]
    Value { given: String, value: String },
    #[error("{given:?}: {effect:?} is not an effect a toleration can name (hint: NoSchedule or NoExecute, or none to tolerate every effect{nearest})",
        nearest = match .nearest { Some(n) => format!("; the nearest is {n}"), None => String::new() })]
    Effect {
        given: String,
        effect: String,
        nearest: Option<&'static str>,
    },
    #[error(
        "{count} tolerations, more than the {MAX_PER_REQUEST} a request may carry (hint: tolerate a key without a value, which admits every value)"
    )]
    TooMany { count: usize },
}

/// The effects a toleration names, as the API spells them.
const EFFECTS: [&str; 2] = ["NoSchedule", "NoExecute"];

/// Parses `KEY[=VALUE][:EFFECT]`: with a value the toleration is `Equal`, without one `Exists`
/// (any value); without an effect it tolerates every effect.
pub fn parse(given: &str) -> Result<DeviceToleration, TolerationError> {
    let shown = || crate::text::one_line(given, 120);
    // The effect follows the last colon: a key holds none.
    let (rest, effect) = match given.rsplit_once(':') {
        Some((rest, effect)) => (rest, Some(effect)),
        None => (given, None),
    };
    let (key, value) = match rest.split_once('=') {
        Some((key, value)) => (key, Some(value)),
        None => (rest, None),
    };
    if key.is_empty() {
        return Err(TolerationError::NoKey { given: shown() });
    }
    if let Err(rule) = check_key(key) {
        return Err(TolerationError::Key {
            given: shown(),
            key: crate::text::one_line(key, 120),
            rule,
        });
    }
    if let Some(value) = value
        && !is_label_value(value)
    {
        return Err(TolerationError::Value {
            given: shown(),
            value: crate::text::one_line(value, 120),
        });
    }
    let effect = match effect {
        None => None,
        Some(effect) => match EFFECTS.iter().find(|e| **e == effect) {
            Some(e) => Some((*e).to_owned()),
            None => {
                let typed = effect.to_ascii_lowercase();
                let nearest = EFFECTS.into_iter().find(|e| {
                    let known = e.to_ascii_lowercase();
                    (!typed.is_empty() && (typed.contains(&known) || known.contains(&typed)))
                        || strsim::levenshtein(&typed, &known) <= 3
                });
                return Err(TolerationError::Effect {
                    given: shown(),
                    effect: crate::text::one_line(effect, 40),
                    nearest,
                });
            }
        },
    };
    Ok(DeviceToleration {
        key: Some(key.to_owned()),
        operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_owned()),
        value: value.map(str::to_owned),
        effect,
        toleration_seconds: None,
    })
}

/// Parses every `--tolerate`, in order, refusing more than a request may carry.
pub fn parse_all(given: &[String]) -> Result<Vec<DeviceToleration>, TolerationError> {
    if given.len() > MAX_PER_REQUEST {
        return Err(TolerationError::TooMany { count: given.len() });
    }
    given.iter().map(|g| parse(g)).collect()
}

/// k8s.io/apimachinery `IsQualifiedName`: `[prefix/]name`, the prefix a DNS-1123 subdomain.
fn check_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.len() > MAX_PREFIX {
            return Err("has a prefix longer than 253 characters");
        }
        if crate::names::check_subdomain(prefix).is_err() {
            return Err(
                "has a prefix that is not a DNS subdomain (lowercase letters, digits, '-' and '.')",
            );
        }
    }
    if name.is_empty() {
        return Err("has an empty name after its prefix");
    }
    if name.len() > MAX_NAME {
        return Err("has a name longer than 63 characters");
    }
    if !is_label_value(name) {
        return Err(
            "must hold only letters, digits, '-', '_' and '.' after its prefix, and start and end with a letter or digit",
        );
    }
    Ok(())
}

/// A label value: empty, or up to 63 of `[A-Za-z0-9_.-]` with a letter or digit at both ends.
fn is_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= MAX_NAME
        && value.chars().all(inner)
        && end(value.chars().next())
        && end(value.chars().last())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, operator: &str, value: Option<&str>, effect: Option<&str>) -> DeviceToleration {
        DeviceToleration {
            key: Some(key.into()),
            operator: Some(operator.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn kubectl_s_taint_syntax_reads_as_a_toleration() {
        let key = "media.liken.sh/unhealthy";
        assert_eq!(parse(key), Ok(t(key, "Exists", None, None)));
        assert_eq!(
            parse("media.liken.sh/unhealthy=not-answering"),
            Ok(t(key, "Equal", Some("not-answering"), None))
        );
        assert_eq!(
            parse("media.liken.sh/unhealthy:NoSchedule"),
            Ok(t(key, "Exists", None, Some("NoSchedule")))
        );
        assert_eq!(
            parse("gpu.nvidia.com/xid=79:NoExecute"),
            Ok(t(
                "gpu.nvidia.com/xid",
                "Equal",
                Some("79"),
                Some("NoExecute")
            ))
        );
        // An empty value is a value: Equal to "".
        assert_eq!(parse("a="), Ok(t("a", "Equal", Some(""), None)));
    }

    #[test]
    fn what_the_api_server_refuses_is_refused_naming_the_part() {
        let message = |given: &str| parse(given).unwrap_err().to_string();
        assert!(message("=x").contains("has no key"), "{}", message("=x"));
        assert!(message("Media.liken.sh/a").contains("prefix that is not a DNS subdomain"));
        assert!(message("media.liken.sh/").contains("empty name"));
        assert!(message(&"a".repeat(64)).contains("longer than 63"));
        assert!(message("a b").contains("only letters, digits"));
        assert!(message("a=-x").contains("value \"-x\""));
        let effect = parse("a:PreferNoSchedule").unwrap_err();
        assert_eq!(
            effect.to_string(),
            "\"a:PreferNoSchedule\": \"PreferNoSchedule\" is not an effect a toleration can name (hint: NoSchedule or NoExecute, or none to tolerate every effect; the nearest is NoSchedule)"
        );
        assert!(message("a:None").contains("is not an effect"));
        let many: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
        assert_eq!(
            parse_all(&many),
            Err(TolerationError::TooMany { count: 17 })
        );
        assert_eq!(parse_all(&many[..16]).unwrap().len(), 16);
    }

    #[test]
    fn outside_text_in_an_error_is_one_bounded_line() {
        let given = format!("a\n\u{1b}[2J{}:x", "b".repeat(10_000));
        let message = parse(&given).unwrap_err().to_string();
        assert!(!message.contains('\n') && !message.contains('\u{1b}'));
        assert!(message.len() < 600, "{}", message.len());
    }
}
