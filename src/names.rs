//! Kubernetes' name rule for object names (DNS-1123 subdomains), checked before we write an object so
//! the user hears which rule a name breaks from us, not a 422 from the API server later.
//!
//! The rules and their wording follow k8s.io/apimachinery/pkg/util/validation.

use std::fmt;

/// The longest DNS-1123 subdomain (object names such as DeviceClass or ResourceSlice names).
pub(crate) const MAX_SUBDOMAIN_LENGTH: usize = 253;

/// The first rule a name breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRule {
    Empty,
    TooLong {
        max: usize,
        len: usize,
    },
    /// A character outside `[a-z0-9.-]`.
    Character {
        found: char,
    },
    /// A dot-separated part starts or ends with something other than a lowercase letter or
    /// digit.
    Edge {
        part: String,
    },
}

impl fmt::Display for NameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameRule::Empty => f.write_str("must not be empty"),
            NameRule::TooLong { max, len } => {
                write!(f, "must be no more than {max} characters (it has {len})")
            }
            NameRule::Character { found } => write!(
                f,
                "must consist of lower case alphanumeric characters, '-' or '.' (found {found:?})"
            ),
            NameRule::Edge { part } if part.is_empty() => {
                f.write_str("must not contain an empty part between dots")
            }
            NameRule::Edge { part } => write!(
                f,
                "must start and end with an alphanumeric character (\"{part}\" does not)"
            ),
        }
    }
}

/// Checks a DNS-1123 subdomain: at most 253 characters of `[a-z0-9.-]`, each dot-separated part
/// starting and ending with a lowercase letter or digit.
pub(crate) fn check_subdomain(name: &str) -> Result<(), NameRule> {
    let max = MAX_SUBDOMAIN_LENGTH;
    if name.is_empty() {
        return Err(NameRule::Empty);
    }
    let len = name.chars().count();
    if len > max {
        return Err(NameRule::TooLong { max, len });
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if let Some(found) = name.chars().find(|&c| !allowed(c)) {
        return Err(NameRule::Character { found });
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    for part in name.split('.') {
        if !part.starts_with(alnum) || !part.ends_with(alnum) {
            return Err(NameRule::Edge {
                part: part.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for ok in [
            "decode-10bit",
            "a",
            "gpu-render",
            "node-1.example.com-media.liken.sh",
            "0abc",
        ] {
            assert_eq!(check_subdomain(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_subdomain(""), Err(NameRule::Empty));
        assert_eq!(
            check_subdomain("Decode"),
            Err(NameRule::Character { found: 'D' })
        );
        assert_eq!(
            check_subdomain("decode_10"),
            Err(NameRule::Character { found: '_' })
        );
        assert_eq!(
            check_subdomain("-decode"),
            Err(NameRule::Edge {
                part: "-decode".into()
            })
        );
        assert_eq!(
            check_subdomain("decode-"),
            Err(NameRule::Edge {
                part: "decode-".into()
            })
        );
        assert_eq!(
            check_subdomain("a..b"),
            Err(NameRule::Edge { part: "".into() })
        );
        assert_eq!(
            check_subdomain("a.-b"),
            Err(NameRule::Edge { part: "-b".into() })
        );
        assert_eq!(check_subdomain(&"a".repeat(253)), Ok(()));
        assert_eq!(
            check_subdomain(&"a".repeat(254)),
            Err(NameRule::TooLong { max: 253, len: 254 })
        );
    }

    #[test]
    fn messages_name_the_rule() {
        assert_eq!(
            check_subdomain("Decode").unwrap_err().to_string(),
            "must consist of lower case alphanumeric characters, '-' or '.' (found 'D')"
        );
        assert_eq!(
            check_subdomain("decode-").unwrap_err().to_string(),
            "must start and end with an alphanumeric character (\"decode-\" does not)"
        );
        assert_eq!(
            check_subdomain(&"a".repeat(254)).unwrap_err().to_string(),
            "must be no more than 253 characters (it has 254)"
        );
    }
}
