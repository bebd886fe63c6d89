//! What every library of the environment shares: the names of the functions the rewrites
//! introduce (no source can spell them), and the reading of a call's arguments and the making of
//! its result. A leaf: the libraries ([`super::bounds`], [`super::lists`], [`super::quantity`],
//! [`super::semver`]) and the environment that gathers them ([`super::env`]) import it, and it
//! imports none of them.

use std::cmp::Ordering;

use cel::ExecutionError;
use cel::common::types::CelString;
use cel::common::value::{CowVal, StaticVal, Val};

/// The functions `==` and `!=` become (names no source can spell).
pub(super) const EQUALS: &str = "@kubernetes_equals";
pub(super) const NOT_EQUALS: &str = "@kubernetes_not_equals";

/// The function the left of `in` a constant list passes through (no source can spell it).
pub(super) const HASHED: &str = "@hashed";
/// Argument `i` of `function`'s call as a `T`; otherwise cel-go's "no such overload".
pub(super) fn arg<'a, T: StaticVal>(
    args: &'a [CowVal<'_, '_>],
    i: usize,
    function: &str,
) -> Result<&'a T, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<T>())
        .ok_or_else(|| {
            ExecutionError::no_such_overload(
                function,
                args.iter()
                    .map(|a| a.get_type().name().to_owned())
                    .collect(),
            )
        })
}

/// Argument `i` of `function`'s call as a string; otherwise "no such overload".
pub(super) fn string_arg<'a>(
    args: &'a [CowVal<'_, '_>],
    i: usize,
    function: &str,
) -> Result<&'a str, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(CelString::inner)
        .ok_or_else(|| {
            ExecutionError::no_such_overload(
                function,
                args.iter()
                    .map(|a| a.get_type().name().to_owned())
                    .collect(),
            )
        })
}

/// A call's result, owned.
pub(super) fn owned<'b, 'v, T: Val + 'v>(value: T) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(value))
}

/// An ordering as the `compareTo` functions return it: -1, 0 or 1.
pub(super) fn ordering_int(o: Ordering) -> i64 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}
