//! The API server's static cost estimate of a new selector (`validateCELExpression` against
//! [`super::bounds::MAX_COST`]), ported from cel-go checker/cost.go with the estimators the
//! environment adds (k8s's library cost.go, cel-go ext's lists and sets, DRA's `sizeEstimator`).
//! cel-go estimates a type-checked AST and the `cel` crate has no checker, so [`Checker`] infers
//! types and overloads as cel-go's would, and [`Coster`] is cost.go. It parses the selector again
//! with `cel.bind` expanded as cel-go expands it (the evaluator's inlining counts differently).

use std::collections::HashMap;
use std::sync::OnceLock;

use cel::common::ast::operators;
use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::parser::{Macro, MacroExprHelper, ParseError};

use super::bounds::namespaced;
use super::env;

mod checker;
mod coster;
mod types;

use checker::*;
use coster::*;
use types::*;

// cel-go common/cost.go.
const SELECT_AND_IDENT: u64 = 1;
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;
const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_LENGTH: f64 = 0.25;

/// cel-go's accumulator names (parser.AccumulatorName, HiddenAccumulatorName).
const ACCUMULATOR: &str = "__result__";
const HIDDEN_ACCUMULATOR: &str = "@result";

/// The worst-case cost the API server estimates for `expression` (which parsed already, within
/// the nesting limits) as Kubernetes 1.`minor` estimates it. `None` when it does not parse here
/// with cel-go's `cel.bind` (it parsed with ours, so only on a gap of this port).
pub(crate) fn estimate(expression: &str, minor: u32) -> Option<u64> {
    let parser = estimating_env()
        .parser()
        .max_recursion_depth(super::bounds::MAX_RECURSION_DEPTH as u16 - 1);
    let expr = parser.parse(expression).ok()?;
    Some(estimate_expr(&expr, minor).max)
}

/// The estimate of a parsed expression (with cel-go's `cel.bind` expansion).
fn estimate_expr(expr: &IdedExpr, minor: u32) -> Range {
    let mut checker = Checker::default();
    checker.check(expr, &mut Vec::new());
    let mut coster = Coster {
        checked: checker,
        minor,
        paths: HashMap::new(),
        sizes: HashMap::new(),
        entry_sizes: HashMap::new(),
        locals: HashMap::new(),
    };
    coster.cost(expr)
}

/// The parser's environment for the estimate: the evaluator's macros, `cel.bind` as cel-go.
fn estimating_env() -> &'static cel::Env {
    static ENV: OnceLock<cel::Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        env.add_extension(cel::extensions::strings)
            .and_then(|()| env.add_extension(cel::extensions::lists))
            .and_then(|()| env.add_macro(Macro::receiver("bind", 3, bind_macro)))
            .expect("the estimate's macros are consistent");
        env
    })
}

/// cel-go ext.Bindings, always expanded: the estimate counts what cel-go's checker sees.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let Some((var, init, result)) = env::bind_parts(helper, target, args)? else {
        return Ok(None);
    };
    Ok(Some(env::bind_comprehension(helper, var, init, result)))
}

// Sizes and costs (cel-go SizeEstimate and CostEstimate: the same arithmetic)

/// A `[min, max]` size or cost, saturating at `u64::MAX` as cel-go's does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    min: u64,
    max: u64,
}

const UNKNOWN: Range = Range {
    min: 0,
    max: u64::MAX,
};

impl Range {
    const fn fixed(n: u64) -> Range {
        Range { min: n, max: n }
    }
    fn add(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }
    fn multiply(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }
    fn factor(self, f: f64) -> Range {
        Range {
            min: by_factor(self.min, f),
            max: by_factor(self.max, f),
        }
    }
    fn union(self, o: Range) -> Range {
        Range {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// cel-go `multiplyByCostFactor`: `ceil(x * f)` in float64, saturating.
fn by_factor(x: u64, f: f64) -> u64 {
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > u64::MAX as f64 / f {
        return u64::MAX;
    }
    let ceil = (xf * f).ceil();
    if ceil >= 18_446_744_073_709_551_616.0 {
        return u64::MAX;
    }
    ceil as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression cases of the differential test (tests/it/oracle/estimate.rs): cel-go's
    /// `result.MaxCost` for each, from the oracle.
    #[test]
    fn estimates_are_cel_go_s() {
        for (expression, cost) in [
            (r#"device.driver == "media.liken.sh""#, 4),
            (
                r#"device.attributes["other.example.com"].decode + [].sum() > 3 || [9, 9, 19, 16].min() < 2"#,
                31,
            ),
            (
                r#"!device.attributes["resource.kubernetes.io"].?driverVersion.orValue(semver("0.0.0")) == device.attributes["other.example.com"].driverVersion"#,
                12,
            ),
            (
                r#"device.attributes["media.liken.sh"].?firmware.orValue(semver("0.0.0")) == semver("1.2.3")"#,
                1_844_674_407_370_955_271,
            ),
            (
                r#"lists.range(10).reverse().sort() == lists.range(10)"#,
                275,
            ),
            (r#"[3, 1, 2].sort().slice(0, 2) == [1, 2]"#, 63),
            (r#"["b", "a"].sort()[0] == "a""#, 32),
        ] {
            assert_eq!(estimate(expression, 36), Some(cost), "{expression}");
        }
    }

    #[test]
    #[ignore = "a probe: ESTIMATE='expr' cargo test --lib estimate::tests::probe -- --ignored --nocapture"]
    fn probe() {
        let expression = std::env::var("ESTIMATE").unwrap_or_default();
        let expr = estimating_env().parser().parse(&expression).unwrap();
        eprintln!("{expr:#?}");
        // Twice: the first builds the parser's environment.
        for _ in 0..2 {
            let started = std::time::Instant::now();
            let cost = estimate(&expression, 36);
            eprintln!("estimate {cost:?} in {:?}", started.elapsed());
        }
    }
}
