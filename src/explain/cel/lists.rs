//! Kubernetes' list functions (k8s.io/apiserver pkg/cel/library/lists.go: `isSorted`, `sum`,
//! `min`, `max`, `indexOf`, `lastIndexOf`) and cel-go's sets extension (`sets.contains`,
//! `sets.intersects`, `sets.equivalent`), each charged as cel-go charges it.

use std::cmp::Ordering;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::common::types::{CelBool, CelDouble, CelInt, CelString, DYN_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

use super::bounds;
use super::calls::{HASHED, owned};
use super::semver::Semver;

/// Marks the left side of each `x in [constants]`: cel-go's planner makes that a Go map
/// lookup when the list is constant, non-empty and of primitives (interpreter decorators.go
/// `maybeOptimizeSetMembership`), and hashing a Semver there panics, which cel-go reports as
/// the runtime error "hash of unhashable type" (its struct holds slices).
pub(super) fn mark_set_membership(expr: &mut IdedExpr) {
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        if let Expr::Call(call) = &mut e.expr
            && call.func_name == operators::IN
            && call.target.is_none()
            && call.args.len() == 2
            && constant_primitives(&call.args[1])
        {
            let x = std::mem::take(&mut call.args[0]);
            call.args[0] = IdedExpr {
                id: x.id,
                expr: Expr::Call(CallExpr {
                    func_name: HASHED.to_owned(),
                    target: None,
                    args: vec![x],
                }),
            };
        }
        match &mut e.expr {
            Expr::Call(call) => {
                if let Some(t) = call.target.as_deref_mut() {
                    stack.push(t);
                }
                stack.extend(call.args.iter_mut());
            }
            Expr::Comprehension(c) => {
                let c = &mut **c;
                stack.extend([
                    &mut c.iter_range,
                    &mut c.accu_init,
                    &mut c.loop_cond,
                    &mut c.loop_step,
                    &mut c.result,
                ]);
            }
            Expr::List(list) => stack.extend(list.elements.iter_mut()),
            Expr::Map(map) => {
                for entry in &mut map.entries {
                    if let EntryExpr::MapEntry(m) = &mut entry.expr {
                        stack.push(&mut m.key);
                        stack.push(&mut m.value);
                    }
                }
            }
            Expr::Struct(st) => {
                for entry in &mut st.entries {
                    if let EntryExpr::StructField(field) = &mut entry.expr {
                        stack.push(&mut field.value);
                    }
                }
            }
            Expr::Select(select) => stack.push(&mut select.operand),
            _ => {}
        }
    }
}

/// A list literal of primitive literals (not bytes, not null), non-empty.
fn constant_primitives(list: &IdedExpr) -> bool {
    let Expr::List(list) = &list.expr else {
        return false;
    };
    !list.elements.is_empty()
        && list.optional_indices.is_empty()
        && list.elements.iter().all(|e| {
            matches!(
                &e.expr,
                Expr::Literal(
                    LiteralValue::Boolean(_)
                        | LiteralValue::Int(_)
                        | LiteralValue::UInt(_)
                        | LiteralValue::Double(_)
                        | LiteralValue::String(_)
                )
            )
        })
}

/// The elements of a list argument.
pub(super) fn elements<'b>(
    list: &'b CowVal<'_, '_>,
    function: &str,
) -> Result<Vec<&'b dyn Val>, ExecutionError> {
    let iterable = list.as_iterable().ok_or_else(|| {
        ExecutionError::no_such_overload(function, vec![list.get_type().name().to_owned()])
    })?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

/// The elements of a list argument, charged first as Kubernetes' list functions are
/// (library/cost.go `traversalCost`: a tenth of each string's length, 1 per other element).
pub(super) fn traversed<'b>(
    list: &'b CowVal<'_, '_>,
    function: &str,
) -> Result<Vec<&'b dyn Val>, ExecutionError> {
    let items = elements(list, function)?;
    let cost = items.iter().fold(0u64, |sum, item| {
        let each = match item.downcast_ref::<CelString>() {
            Some(s) => s.inner().len() as u64 / 10,
            None => 1,
        };
        sum.saturating_add(each)
    });
    bounds::spend(cost)?;
    Ok(items)
}

pub(super) fn compare_vals(
    a: &dyn Val,
    b: &dyn Val,
    function: &str,
) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::no_such_overload(function, vec![a.get_type().name().to_owned()])
        })?
        .compare(b)
}

pub(super) fn kubernetes_lists_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let items = traversed(&args[0], "isSorted")?;
        for pair in items.windows(2) {
            if compare_vals(pair[0], pair[1], "isSorted")? == Ordering::Greater {
                return owned(CelBool::from(false));
            }
        }
        owned(CelBool::from(true))
    }
    fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let items = traversed(&args[0], "sum")?;
        if items.iter().all(|i| i.downcast_ref::<CelInt>().is_some()) {
            let mut total: i64 = 0;
            for i in &items {
                total = total
                    .checked_add(*i.downcast_ref::<CelInt>().expect("checked").inner())
                    .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?;
            }
            return owned(CelInt::from(total));
        }
        if items
            .iter()
            .all(|i| i.downcast_ref::<CelDouble>().is_some())
        {
            let total: f64 = items
                .iter()
                .map(|i| *i.downcast_ref::<CelDouble>().expect("checked").inner())
                .sum();
            return owned(CelDouble::from(total));
        }
        Err(ExecutionError::no_such_overload(
            "sum",
            vec!["list".to_owned()],
        ))
    }
    fn extreme(
        args: &[CowVal<'_, '_>],
        function: &str,
        want: Ordering,
    ) -> Result<Box<dyn Val + 'static>, ExecutionError> {
        let items = traversed(&args[0], function)?;
        let mut best = *items.first().ok_or_else(|| {
            ExecutionError::function_error(function, format!("{function} called on empty list"))
        })?;
        for &item in &items[1..] {
            if compare_vals(item, best, function)? == want {
                best = item;
            }
        }
        // The scalars a list's extreme can be; anything else has no order anyway.
        if let Some(i) = best.downcast_ref::<CelInt>() {
            return Ok(Box::new(CelInt::from(*i.inner())));
        }
        if let Some(d) = best.downcast_ref::<CelDouble>() {
            return Ok(Box::new(CelDouble::from(*d.inner())));
        }
        if let Some(s) = best.downcast_ref::<CelString>() {
            return Ok(Box::new(CelString::from(s.inner().to_owned())));
        }
        if let Some(b) = best.downcast_ref::<CelBool>() {
            return Ok(Box::new(CelBool::from(*b.inner())));
        }
        Err(ExecutionError::no_such_overload(
            function,
            vec![best.get_type().name().to_owned()],
        ))
    }
    fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        extreme(&args, "min", Ordering::Less).map(CowVal::Owned)
    }
    fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        extreme(&args, "max", Ordering::Greater).map(CowVal::Owned)
    }
    fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let items = traversed(&args[0], "indexOf")?;
        let at = items
            .iter()
            .position(|i| i.equals(args[1].as_ref()))
            .map_or(-1, |p| p as i64);
        owned(CelInt::from(at))
    }
    fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let items = traversed(&args[0], "lastIndexOf")?;
        let at = items
            .iter()
            .rposition(|i| i.equals(args[1].as_ref()))
            .map_or(-1, |p| p as i64);
        owned(CelInt::from(at))
    }
    fn hashed<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        if args[0].downcast_ref::<Semver>().is_some() {
            return Err(ExecutionError::function_error(
                "@in",
                "internal error: runtime error: hash of unhashable type cel.Semver",
            ));
        }
        Ok(args.into_iter().next().expect("one argument"))
    }
    env.add_overload(HASHED, "hashed", vec![DYN_TYPE], hashed)?;
    let list = || cel::common::types::LIST_TYPE;
    let any = || cel::common::types::DYN_TYPE;
    env.add_member_overload("isSorted", "list_is_sorted", list(), vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", list(), vec![], sum)?;
    env.add_member_overload("min", "list_min", list(), vec![], min)?;
    env.add_member_overload("max", "list_max", list(), vec![], max)?;
    env.add_member_overload("indexOf", "list_index_of", list(), vec![any()], index_of)?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        list(),
        vec![any()],
        last_index_of,
    )?;
    Ok(())
}

pub(super) fn sets_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    fn contains_all(a: &[&dyn Val], b: &[&dyn Val]) -> bool {
        b.iter().all(|x| a.iter().any(|y| y.equals(*x)))
    }
    // cel-go ext/sets.go `trackSetsCost`: 1 + |a|·|b|·factor, charged here before the work.
    fn charged<'b>(
        args: &'b [CowVal<'_, '_>],
        function: &str,
        factor: u64,
    ) -> Result<[Vec<&'b dyn Val>; 2], ExecutionError> {
        let (a, b) = (elements(&args[0], function)?, elements(&args[1], function)?);
        let pairs = (a.len() as u64).saturating_mul(b.len() as u64);
        bounds::spend(pairs.saturating_mul(factor).saturating_add(1))?;
        Ok([a, b])
    }
    fn contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let [a, b] = charged(&args, "sets.contains", 1)?;
        owned(CelBool::from(contains_all(&a, &b)))
    }
    fn intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let [a, b] = charged(&args, "sets.intersects", 1)?;
        owned(CelBool::from(
            b.iter().any(|x| a.iter().any(|y| y.equals(*x))),
        ))
    }
    fn equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let [a, b] = charged(&args, "sets.equivalent", 2)?;
        owned(CelBool::from(contains_all(&a, &b) && contains_all(&b, &a)))
    }
    let list = || cel::common::types::LIST_TYPE;
    env.add_overload(
        "sets.contains",
        "list_sets_contains_list",
        vec![list(), list()],
        contains,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        vec![list(), list()],
        intersects,
    )?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        vec![list(), list()],
        equivalent,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    // The differential test's finding (1.35 and 1.36 seeds): a Semver in a constant list.
    #[test]
    fn a_semver_in_a_constant_list_fails_as_cel_go_s_map_lookup() {
        let unhashable = "internal error: runtime error: hash of unhashable type cel.Semver";
        let optional = r#"device.attributes["media.liken.sh"].?none.orValue(semver("1.0.0"))"#;
        error(&format!(r#"{optional} in ["arc", "tgl"]"#), unhashable);
        error(&format!(r#"{optional} in [1, 2]"#), unhashable);
        is(&format!(r#"{optional} in []"#), false);
        is(&format!(r#"{optional} in ["arc", device.driver]"#), false);
        is(r#"semver("1.0.0") in [semver("1.0.0")]"#, true);
        is(
            r#"device.attributes["media.liken.sh"].cores in [8, 9]"#,
            true,
        );
    }

    #[test]
    fn kubernetes_lists_and_sets() {
        is("[1, 2, 2, 5].isSorted() && ![2, 1].isSorted()", true);
        is(
            "[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0",
            true,
        );
        is(
            r#"[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ["b", "a"].min() == "a""#,
            true,
        );
        is(
            r#"["a", "b", "a"].indexOf("a") == 0 && ["a", "b", "a"].lastIndexOf("a") == 2 && [1].indexOf(2) == -1"#,
            true,
        );
        is(r#""b".indexOf("b") == 0"#, true);
        error("[].min() == 1", "min called on empty list");
        is(
            "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2])",
            true,
        );
        is(
            "sets.intersects([1, 2], [2, 9]) && !sets.intersects([1], [])",
            true,
        );
        is(
            "sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 3])",
            true,
        );
        is(
            r#"sets.contains(["i915", "xe"], [device.attributes["media.liken.sh"].driver])"#,
            true,
        );
    }

    #[test]
    fn lists_range_is_charged_its_size_before_it_is_built() {
        let device = gpu();
        let by = |expression: &str, minor| evaluate_one(expression, &device, minor);
        let cost = Outcome::RuntimeError(COST_LIMIT_EXCEEDED.to_owned());
        // The oracle's edge (1.34): 6 per iteration, n + 11 for the range, 1 for the result.
        for minor in [34, 37] {
            assert_eq!(
                by("lists.range(142855).exists(i, i < 0)", minor),
                Outcome::Match(false)
            );
            assert_eq!(by("lists.range(142856).exists(i, i < 0)", minor), cost);
        }
        // Charged before the list is built; only cel-go v0.29 (1.37) caps the size.
        assert_eq!(by("lists.range(1000000000).size() > 0", 36), cost);
        assert!(
            matches!(by("lists.range(1000000001).size() > 0", 37), Outcome::RuntimeError(m) if m != COST_LIMIT_EXCEEDED)
        );
        // Below 0: an empty list in cel-go v0.26, an error in v0.29.
        assert_eq!(by("lists.range(-1).size() == 0", 36), Outcome::Match(true));
        assert!(matches!(
            by("lists.range(-1).size() == 0", 37),
            Outcome::RuntimeError(_)
        ));
    }
}
