//! Pure: the taint the agent puts on a GPU whose probe failed (resource.k8s.io `DeviceTaint`):
//! a key in our domain chosen by the operator, the value saying why ([`FailureKind`]), and the
//! operator's effect. The key's rule is the API server's (a qualified label name,
//! `validateDeviceTaint` in k8s.io/kubernetes pkg/apis/resource/validation) narrowed to our
//! domain, checked when the agent starts so that no slice is ever refused over it.

use crate::catalogue::DRIVER;
use crate::node::failure::FailureKind;

/// The key the agent taints with unless told otherwise.
pub const DEFAULT_KEY: &str = "media.liken.sh/unhealthy";

/// The longest name after `media.liken.sh/`: a label name's part (k8s.io/apimachinery
/// `IsQualifiedName`).
const MAX_NAME: usize = 63;

/// What a taint does to the devices it is on (resource.k8s.io/v1 `DeviceTaintEffect`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// New allocations do not take the device unless they tolerate the taint.
    #[default]
    NoSchedule,
    /// As NoSchedule, and pods already using the device are evicted (the device-taint
    /// eviction controller of kube-controller-manager).
    NoExecute,
    /// Informational: the scheduler ignores it (Kubernetes 1.35 and later; 1.34 refuses it).
    None,
}

/// A taint effect the API server would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given:?} is not a device taint effect (hint: valid effects are NoSchedule, NoExecute and None{nearest})",
    nearest = match .nearest {
        Some(n) => format!("; the nearest is {n}"),
        None => String::new(),
    }
)]
pub struct EffectError {
    pub given: String,
    pub nearest: Option<&'static str>,
}

impl std::str::FromStr for TaintEffect {
    type Err = EffectError;

    /// Exactly as the API spells them: the API server compares them so.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let effect = TaintEffect::ALL.into_iter().find(|e| e.as_str() == text);
        effect.ok_or_else(|| EffectError {
            given: crate::text::one_line(text, 80),
            nearest: nearest(text).map(TaintEffect::as_str),
        })
    }
}

/// The effect `text` was probably meant to be: one it contains or that contains it, ignoring
/// case (`PreferNoSchedule`, a node taint's, holds `NoSchedule`), else one a few edits away.
fn nearest(text: &str) -> Option<TaintEffect> {
    let typed = text.to_ascii_lowercase();
    let known = |e: &TaintEffect| e.as_str().to_ascii_lowercase();
    TaintEffect::ALL
        .into_iter()
        .find(|e| typed.contains(&known(e)) || (!typed.is_empty() && known(e).contains(&typed)))
        .or_else(|| {
            TaintEffect::ALL
                .into_iter()
                .map(|e| (strsim::levenshtein(&typed, &known(&e)), e))
                .filter(|(edits, _)| *edits <= 3)
                .min_by_key(|(edits, _)| *edits)
                .map(|(_, e)| e)
        })
}

impl TaintEffect {
    /// Every effect, in the order the help lists them.
    pub const ALL: [TaintEffect; 3] = [
        TaintEffect::NoSchedule,
        TaintEffect::NoExecute,
        TaintEffect::None,
    ];

    /// The name the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::NoExecute => "NoExecute",
            TaintEffect::None => "None",
        }
    }
}

impl std::fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One taint on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: FailureKind,
    pub effect: TaintEffect,
}

/// How the agent taints: its key and effect, checked ([`check_key`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintPolicy {
    pub key: String,
    pub effect: TaintEffect,
}

impl Default for TaintPolicy {
    fn default() -> Self {
        TaintPolicy {
            key: DEFAULT_KEY.to_string(),
            effect: TaintEffect::default(),
        }
    }
}

impl TaintPolicy {
    /// The taint of a GPU whose probe failed so.
    pub fn taint(&self, why: FailureKind) -> Taint {
        Taint {
            key: self.key.clone(),
            value: why,
            effect: self.effect,
        }
    }
}

/// Why a taint key cannot be ours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("it is not in the {DRIVER} domain")]
    OtherDomain,
    #[error("the name after {DRIVER}/ is empty")]
    Empty,
    #[error("the name after {DRIVER}/ is {0} characters long, more than {MAX_NAME}")]
    TooLong(usize),
    #[error(
        "the name after {DRIVER}/ must start and end with a letter or digit and hold only letters, digits, '-', '_' and '.'"
    )]
    Characters,
}

/// Checks that `key` is `media.liken.sh/NAME` with NAME a label name (letters, digits, `-`,
/// `_`, `.`; at most 63; a letter or digit at both ends), as the API server checks a taint's key.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    let name = key
        .strip_prefix(DRIVER)
        .and_then(|rest| rest.strip_prefix('/'))
        .ok_or(KeyError::OtherDomain)?;
    if name.is_empty() {
        return Err(KeyError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(KeyError::TooLong(name.len()));
    }
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !name.chars().all(inner) || !ends(name.chars().next()) || !ends(name.chars().last()) {
        return Err(KeyError::Characters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_label_names_in_our_domain() {
        assert_eq!(check_key(DEFAULT_KEY), Ok(()));
        assert_eq!(check_key("media.liken.sh/gpu.lost_2"), Ok(()));
        assert_eq!(check_key("unhealthy"), Err(KeyError::OtherDomain));
        assert_eq!(check_key("gpu.nvidia.com/xid"), Err(KeyError::OtherDomain));
        assert_eq!(check_key("media.liken.shx/a"), Err(KeyError::OtherDomain));
        assert_eq!(check_key("media.liken.sh/"), Err(KeyError::Empty));
        assert_eq!(check_key("media.liken.sh/-a"), Err(KeyError::Characters));
        assert_eq!(check_key("media.liken.sh/a b"), Err(KeyError::Characters));
        assert_eq!(check_key("media.liken.sh/a/b"), Err(KeyError::Characters));
        let long = format!("media.liken.sh/{}", "a".repeat(64));
        assert_eq!(check_key(&long), Err(KeyError::TooLong(64)));
        assert_eq!(check_key(&long[..long.len() - 1]), Ok(()));
    }

    #[test]
    fn effects_are_spelled_as_the_api_spells_them() {
        for effect in TaintEffect::ALL {
            assert_eq!(effect.as_str().parse::<TaintEffect>(), Ok(effect));
        }
        let err = "PreferNoSchedule".parse::<TaintEffect>().unwrap_err();
        assert_eq!(err.nearest, Some("NoSchedule"));
        assert_eq!(
            err.to_string(),
            "\"PreferNoSchedule\" is not a device taint effect (hint: valid effects are NoSchedule, NoExecute and None; the nearest is NoSchedule)"
        );
        assert_eq!(
            "noexecute".parse::<TaintEffect>().unwrap_err().nearest,
            Some("NoExecute")
        );
        assert_eq!("zzz".parse::<TaintEffect>().unwrap_err().nearest, None);
    }

    #[test]
    fn the_value_says_why_and_the_values_are_label_values() {
        let policy = TaintPolicy::default();
        let taint = policy.taint(FailureKind::NotAnswering);
        assert_eq!(
            (
                taint.key.as_str(),
                taint.value.as_str(),
                taint.effect.as_str()
            ),
            (DEFAULT_KEY, "not-answering", "NoSchedule")
        );
        for kind in FailureKind::ALL {
            let value = kind.as_str();
            assert!(value.len() <= 63, "{value}");
            assert!(
                value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{value}"
            );
        }
    }
}
