//! The semver library (k8s.io/apiserver pkg/cel/library/semverlib.go, at version 1 as
//! environment/base.go declares it from 1.33): `semver()`, `isSemver()`, comparisons and
//! parts. Versions compare by precedence, build metadata ignored, as blang/semver does.

use std::cmp::Ordering;

use cel::common::types::{BOOL_TYPE, CelBool, CelInt, STRING_TYPE, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError};

use super::calls::{arg, ordering_int, owned, string_arg};

pub(super) static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// A semantic version: a `version` attribute, or `semver("1.2.3")`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semver(semver::Version);

/// Why a version does not parse: the semver crate's error, or semverlib.go's own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SemverError {
    #[error(transparent)]
    Parse(#[from] semver::Error),
    #[error("short version cannot contain PreRelease/Build meta data")]
    ShortWithMeta,
}

impl Semver {
    pub(super) fn parse(text: &str) -> Result<Semver, SemverError> {
        Ok(Semver(semver::Version::parse(text)?))
    }

    /// semverlib.go `normalizeAndParse`: without a leading `v`, leading zeros trimmed from
    /// each of the first three dot-separated parts, a missing minor or patch filled with `0`
    /// (refused when the last part given carries a pre-release or build).
    fn parse_normalized(text: &str) -> Result<Semver, SemverError> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts: Vec<String> = text
            .splitn(3, '.')
            .map(|p| {
                if p.len() <= 1 {
                    return p.to_owned();
                }
                let trimmed = p.trim_start_matches('0');
                if trimmed.is_empty() || !trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("0{trimmed}")
                } else {
                    trimmed.to_owned()
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err(SemverError::ShortWithMeta);
            }
            parts.resize(3, "0".to_owned());
        }
        Semver::parse(&parts.join("."))
    }
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    // blang/semver `EQ`, as cel-go's `in` and the crate's own comparisons use it: precedence,
    // so build metadata does not count (`1.0.0+a` equals `1.0.0+b`).
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.0.cmp_precedence(&o.0) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for Semver {}

pub(super) fn semver_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    /// The version of `semver(s)` / `semver(s, normalize)`.
    fn parse_arg(
        args: &[CowVal<'_, '_>],
        f: &str,
    ) -> Result<Result<Semver, SemverError>, ExecutionError> {
        let text = string_arg(args, 0, f)?;
        let normalize = match args.get(1) {
            None => false,
            Some(b) => *b
                .downcast_ref::<CelBool>()
                .ok_or_else(|| {
                    ExecutionError::no_such_overload(
                        f,
                        args.iter()
                            .map(|a| a.get_type().name().to_owned())
                            .collect(),
                    )
                })?
                .inner(),
        };
        Ok(if normalize {
            Semver::parse_normalized(text)
        } else {
            Semver::parse(text)
        })
    }
    fn to_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        match parse_arg(&args, "semver")? {
            Ok(v) => owned(v),
            Err(e) => Err(ExecutionError::function_error("semver", e)),
        }
    }
    fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(parse_arg(&args, "isSemver")?.is_ok()))
    }
    // blang/semver `Compare`: precedence, build metadata ignored (semver's `Ord` would order
    // by it).
    fn compare(args: &[CowVal<'_, '_>], f: &str) -> Result<Ordering, ExecutionError> {
        Ok(arg::<Semver>(args, 0, f)?
            .0
            .cmp_precedence(&arg::<Semver>(args, 1, f)?.0))
    }
    fn greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            compare(&args, "isGreaterThan")? == Ordering::Greater,
        ))
    }
    fn less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            compare(&args, "isLessThan")? == Ordering::Less,
        ))
    }
    fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(ordering_int(compare(&args, "compareTo")?)))
    }
    fn major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(
            arg::<Semver>(&args, 0, "major")?.0.major as i64,
        ))
    }
    fn minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(
            arg::<Semver>(&args, 0, "minor")?.0.minor as i64,
        ))
    }
    fn patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(
            arg::<Semver>(&args, 0, "patch")?.0.patch as i64,
        ))
    }
    let s = || SEMVER_TYPE.to_owned();
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], to_semver)?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    // Semver library version 1 (Kubernetes 1.33+): `normalize` accepts a `v` prefix, leading
    // zeros and a missing minor or patch.
    env.add_overload(
        "semver",
        "string_bool_to_semver",
        vec![STRING_TYPE, BOOL_TYPE],
        to_semver,
    )?;
    env.add_overload(
        "isSemver",
        "is_semver_string_bool",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_is_greater_than",
        s(),
        vec![s()],
        greater,
    )?;
    env.add_member_overload("isLessThan", "semver_is_less_than", s(), vec![s()], less)?;
    env.add_member_overload("compareTo", "semver_compare_to", s(), vec![s()], compare_to)?;
    env.add_member_overload("major", "semver_major", s(), vec![], major)?;
    env.add_member_overload("minor", "semver_minor", s(), vec![], minor)?;
    env.add_member_overload("patch", "semver_patch", s(), vec![], patch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn semver_on_version_attributes() {
        is(
            r#"device.attributes["dra.example.com"].firmware.isGreaterThan(semver("1.2.0"))"#,
            true,
        );
        is(
            r#"device.attributes["dra.example.com"].firmware.isLessThan(semver("1.10.0"))"#,
            true,
        );
        is(
            r#"device.attributes["dra.example.com"].firmware.compareTo(semver("1.2.3")) == 0"#,
            true,
        );
        is(
            r#"device.attributes["dra.example.com"].firmware == semver("1.2.3")"#,
            true,
        );
        is(
            r#"device.attributes["dra.example.com"].firmware.major() == 1"#,
            true,
        );
        is(r#"isSemver("1.0.0") && !isSemver("v1")"#, true);
        assert!(matches!(
            eval(r#"semver("hello").major() == 1"#),
            Outcome::RuntimeError(_)
        ));
    }

    #[test]
    fn versions_compare_by_precedence() {
        // blang/semver Compare and EQ ignore build metadata.
        is(
            r#"semver("1.2.3+build.1") == semver("1.2.3+build.2")"#,
            true,
        );
        is(
            r#"semver("1.2.3+a").compareTo(semver("1.2.3+b")) == 0"#,
            true,
        );
        is(
            r#"semver("1.2.3+b").isGreaterThan(semver("1.2.3+a"))"#,
            false,
        );
        is(r#"semver("1.2.3+a").isLessThan(semver("1.2.3+b"))"#, false);
        is(r#"semver("1.2.3-rc.1").isLessThan(semver("1.2.3"))"#, true);
        is(r#"semver("1.2.3+z") in [semver("1.2.3")]"#, true);
    }

    #[test]
    fn semver_library_version_1_normalizes() {
        is(r#"semver("v1.02.3", true) == semver("1.2.3")"#, true);
        is(
            r#"semver("1", true) == semver("1.0.0") && semver("1.2", true).minor() == 2"#,
            true,
        );
        is(r#"semver("1.2.3", false).patch() == 3"#, true);
        is(
            r#"isSemver("v1.2", true) && !isSemver("v1.2") && !isSemver("v1.2", false)"#,
            true,
        );
        is(
            r#"isSemver("1.00.3-rc.1", true) && !isSemver("1.2-rc1", true)"#,
            true,
        );
        assert_eq!(
            eval(r#"semver("1.2-rc1", true).major() == 1"#),
            Outcome::RuntimeError("short version cannot contain PreRelease/Build meta data".into())
        );
    }
}
