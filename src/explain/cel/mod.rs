//! Device selectors evaluated with Kubernetes semantics (dra `cel/compile.go`, apiserver
//! `pkg/cel/library`): one variable, `device`. The `cel` crate (cel-rust) plus what Kubernetes has
//! and it lacks, one module per library as upstream splits them; `kube-cel` pins an older `cel` and
//! refuses `cel.bind`. What this evaluator cannot decide is [`Outcome::CannotEvaluate`], never a
//! guess. A selector is compiled once ([`Selector::compile`]) and evaluated per [`DeviceValue`].

use std::fmt;

use cel::ExecutionError;
use cel::common::ast::{Expr, IdedExpr};

use super::DeviceView;
use crate::text::one_line;

mod bounds;
mod calls;
mod device;
mod env;
mod estimate;
mod lists;
mod quantity;
mod semver;
mod strings;

pub(crate) use bounds::COST_LIMIT_EXCEEDED;
pub(crate) use device::{ConversionError, DeviceValue};
pub(crate) use quantity::Quantity;

/// The result of evaluating one selector on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The selector evaluated to this boolean.
    Match(bool),
    /// A runtime error, in cel-go's words (`no such key: decodeAV2`): the scheduler aborts the
    /// whole scheduling attempt on it.
    RuntimeError(String),
    /// This evaluator cannot decide; the reason says why.
    CannotEvaluate(String),
}

/// A compiled device selector.
#[derive(Debug)]
pub(crate) struct Selector {
    expression: String,
    program: Result<Compiled, Failure>,
}

/// Why a selector did not compile here.
#[derive(Debug)]
enum Failure {
    /// This evaluator cannot decide (a gap of its own, or what the API server refuses).
    Gap(String),
    /// cel-go fails to compile it as well (a literal regex Go's `regexp` refuses, `has()` of
    /// an index): the scheduler's attempt fails, as on a runtime error.
    Error(String),
}

/// A parsed selector, its equality operators rewritten to cel-go's semantics (see
/// [`rewrite_equality`]): what the diagnosis walks, and the same with its cost charged (see
/// [`bounds::instrument`]), which is what is evaluated.
#[derive(Debug)]
pub(crate) struct Compiled {
    source_info: cel::common::ast::SourceInfo,
    expression: IdedExpr,
    metered: Metered,
}

impl Drop for Compiled {
    fn drop(&mut self) {
        let expression = std::mem::take(&mut self.expression);
        let stack = self.metered.stack;
        stacker::maybe_grow(stack, stack, move || drop(expression));
    }
}

/// An expression with its cost charged, and the stack its evaluation needs.
#[derive(Debug)]
struct Metered {
    expression: IdedExpr,
    stack: usize,
}

impl Metered {
    fn new(expression: &IdedExpr) -> Metered {
        // Marked here, not in what the diagnosis walks.
        let mut marked = expression.clone();
        lists::mark_set_membership(&mut marked);
        let expression = bounds::instrument(&marked);
        let stack = bounds::tree_depth(&expression).saturating_mul(STACK_PER_LEVEL);
        Metered { expression, stack }
    }

    /// Evaluates under the scheduler's cost limit, on a stack deep enough for the tree.
    fn evaluate(&self, device: &DeviceValue<'_>) -> Result<cel::Value, Outcome> {
        let context = device.context();
        let (result, exceeded) = stacker::maybe_grow(self.stack, self.stack, || {
            bounds::metered(device.minor, || {
                cel::Value::resolve(&self.expression, &context)
            })
        });
        if exceeded {
            return Err(Outcome::RuntimeError(COST_LIMIT_EXCEEDED.to_owned()));
        }
        result.map_err(runtime_outcome)
    }
}

/// The stack one level of expression takes through the `cel` crate's recursive evaluator and
/// its parser's visitor, with room to spare.
const STACK_PER_LEVEL: usize = 32 * 1024;

/// The stack the `cel` crate's parser takes for the deepest bracket nesting its recursion limit
/// lets through (measured: 140 KiB a level unoptimized, 250 levels).
const PARSER_STACK: usize = 64 << 20;

impl Drop for Metered {
    // A tree is dropped recursively: on a stack as deep as evaluating it needed.
    fn drop(&mut self) {
        let expression = std::mem::take(&mut self.expression);
        stacker::maybe_grow(self.stack, self.stack, move || drop(expression));
    }
}

impl Compiled {
    /// The expression as evaluated (before its cost is charged).
    pub(crate) fn expression(&self) -> &IdedExpr {
        &self.expression
    }

    /// Where each node was written (node ids are kept by the rewrites).
    pub(crate) fn source_info(&self) -> &cel::common::ast::SourceInfo {
        &self.source_info
    }
}

impl Selector {
    /// Compiles `expression` once; a failure is kept and reported per evaluation as
    /// [`Outcome::CannotEvaluate`]: an expression the API server refuses (too long, too deep,
    /// too costly: [`bounds::Refusal`]) never reaches the scheduler, and beyond those limits the
    /// API server validated stored expressions with cel-go, so a failure here is more likely
    /// this evaluator's gap than the user's error.
    pub(crate) fn compile(expression: &str) -> Selector {
        // As stored: the scheduler never estimates cost, and a selector in the cluster passed
        // the API server of its day.
        Selector::compile_as(expression, Validation::Stored)
    }

    /// Compiles as the API server validates a new expression, or as the scheduler compiles
    /// a stored one (no cost estimate: validation skips stored expressions).
    pub(crate) fn compile_as(expression: &str, validation: Validation) -> Selector {
        let program = bounds::check_text(expression)
            .and_then(|()| match bounds::chain_depth(expression) {
                depth if depth > bounds::MAX_RECURSION_DEPTH => Err(bounds::Refusal::Depth),
                _ => Ok(()),
            })
            .map_err(|r| Failure::Gap(refused(r)))
            // Within the text limits a chain of 5,000 `+` still parses into as many levels,
            // through the `cel` crate's recursive parser: on a stack for the longest one.
            .and_then(|()| {
                // One level per byte at most, and the parser's bracket nesting.
                let stack = PARSER_STACK + expression.len().saturating_mul(STACK_PER_LEVEL);
                stacker::maybe_grow(stack, stack, || compile_within(expression, validation))
            });
        Selector {
            expression: expression.to_owned(),
            program,
        }
    }

    /// The expression as written.
    pub(crate) fn expression(&self) -> &str {
        &self.expression
    }

    /// The program, when it compiled (the diagnosis walks its expression tree).
    pub(crate) fn program(&self) -> Option<&Compiled> {
        self.program.as_ref().ok()
    }

    /// Evaluates the selector on one device.
    pub(crate) fn evaluate(&self, device: &DeviceValue<'_>) -> Outcome {
        let program = match &self.program {
            Ok(program) => program,
            Err(Failure::Gap(reason)) => return Outcome::CannotEvaluate(reason.clone()),
            Err(Failure::Error(message)) => return Outcome::RuntimeError(message.clone()),
        };
        match program.metered.evaluate(device) {
            Ok(cel::Value::Bool(b)) => Outcome::Match(b),
            Ok(other) => Outcome::RuntimeError(format!(
                "CEL result of type {} could not be converted to bool: type conversion error from '{}' to 'bool'",
                other.type_of(),
                other.type_of()
            )),
            Err(outcome) => outcome,
        }
    }
}

/// Which checks an expression gets (k8s validation `validateCELExpression`'s `opts.stored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Validation {
    /// New or changed (read from files, never admitted): the API server of Kubernetes
    /// 1.`minor` estimates its cost, against the limit.
    New { minor: u32 },
    /// Already stored: the scheduler compiles it without estimating its cost.
    Stored,
}

/// A refusal in the words `why` gives it.
fn refused(refusal: bounds::Refusal) -> String {
    format!("the API server would refuse this expression: {refusal}")
}

/// Parses `expression` (within the text limits) as cel-go would and prepares it: refused when
/// it nests deeper than cel-go's parser allows or costs more than the API server's estimate
/// allows. Runs on a stack for the deepest parse; what it returns is within the limits.
fn compile_within(expression: &str, validation: Validation) -> Result<Compiled, Failure> {
    // cel-go counts nested `expr` rules to 250; this parser's knob counts the same rule, one
    // more than it is given.
    let parser = env::environment()
        .parser()
        .max_recursion_depth(bounds::MAX_RECURSION_DEPTH as u16 - 1);
    let (expr, source_info) = parser.parse_with_source_info(expression).map_err(|e| {
        if e.errors
            .iter()
            .any(|e| e.msg.contains("Recursion limit of"))
        {
            return Failure::Gap(refused(bounds::Refusal::Depth));
        }
        let message = one_line(&e.to_string(), usize::MAX);
        // cel-go's parser has the same macro and refuses the same argument.
        if e.errors
            .iter()
            .any(|e| e.msg.contains("invalid argument to has() macro"))
        {
            return Failure::Error(format!("compilation failed: {message}"));
        }
        Failure::Gap(format!("the expression does not parse here: {message}"))
    })?;
    if bounds::nesting_depth(&expr) > bounds::MAX_RECURSION_DEPTH {
        return Err(Failure::Gap(refused(bounds::Refusal::Depth)));
    }
    device::check_device_fields(&expr).map_err(|e| Failure::Gap(e.to_string()))?;
    env::check_kubernetes_calls(&expr).map_err(|e| Failure::Gap(e.to_string()))?;
    strings::check_literal_regexes(&expr).map_err(|e| Failure::Error(e.to_string()))?;
    if let Validation::New { minor } = validation {
        // Parsed again for the estimate, with `cel.bind` as cel-go expands it.
        let estimate = estimate::estimate(expression, minor).ok_or_else(|| {
            Failure::Gap("the cost estimate cannot parse this expression here".to_owned())
        })?;
        if estimate > bounds::MAX_COST {
            return Err(Failure::Gap(refused(bounds::Refusal::Cost { estimate })));
        }
    }
    let mut expression = expr;
    env::rewrite_equality(&mut expression);
    Ok(Compiled {
        source_info,
        metered: Metered::new(&expression),
        expression,
    })
}

/// Evaluates `expr` (a sub-expression of a compiled selector) on `device`, under the same
/// cost limit: the diagnosis uses it for the clauses of a `&&` chain.
pub(crate) fn evaluate_expr(
    expr: &IdedExpr,
    device: &DeviceValue<'_>,
) -> Result<cel::Value, Outcome> {
    Metered::new(expr).evaluate(device)
}

/// One selector on one device as Kubernetes 1.`minor`'s scheduler evaluates it, refused where
/// its API server refuses a new selector: what the differential test compares with the
/// scheduler's `cel` package (`why` itself compiles once per selector, in the allocator).
pub fn evaluate_one(expression: &str, device: &dyn DeviceView, minor: u32) -> Outcome {
    let selector = Selector::compile(expression);
    match DeviceValue::new(device, minor) {
        Ok(value) => selector.evaluate(&value),
        // The scheduler fails the same way: DeviceMatches returns the conversion error.
        Err(e) => Outcome::RuntimeError(e.to_string()),
    }
}

/// The static cost the API server of Kubernetes 1.`minor` estimates for `expression` as a new
/// selector (`None` when it does not parse): what the differential test compares with cel-go's.
pub fn estimated_cost(expression: &str, minor: u32) -> Option<u64> {
    bounds::check_text(expression).ok()?;
    let stack = PARSER_STACK + expression.len().saturating_mul(STACK_PER_LEVEL);
    stacker::maybe_grow(stack, stack, || estimate::estimate(expression, minor))
}

/// Calls `f` on `expr` and every sub-expression, parents first (without recursion: a refused
/// expression can be thousands of levels deep).
pub(crate) fn visit<'e>(expr: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        f(e);
        let at = stack.len();
        children(e, &mut |c| stack.push(c));
        // Left to right, as written.
        stack[at..].reverse();
    }
}

/// Calls `f` on each direct sub-expression of `expr`, in order.
fn children<'e>(expr: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(t) = &call.target {
                f(t);
            }
            call.args.iter().for_each(f);
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(e);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(f),
        Expr::Map(map) => {
            for entry in &map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(m) = &entry.expr {
                    f(&m.key);
                    f(&m.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                if let cel::common::ast::EntryExpr::StructField(field) = &entry.expr {
                    f(&field.value);
                }
            }
        }
        Expr::Select(select) => f(&select.operand),
        _ => {}
    }
}

/// The function name that marks an evaluation error as this evaluator's gap (no source can
/// spell it): [`runtime_outcome`] makes it [`Outcome::CannotEvaluate`].
const GAP: &str = "@gap";

/// An error for what this evaluator cannot decide at run time, with the reason.
pub(super) fn gap(reason: impl Into<String>) -> ExecutionError {
    ExecutionError::FunctionError {
        function: GAP.to_owned(),
        message: reason.into(),
    }
}

/// cel-go's words for a runtime error, or "cannot evaluate" when the error is this
/// evaluator's gap (an undeclared function) rather than the expression's.
fn runtime_outcome(error: ExecutionError) -> Outcome {
    use ExecutionError as E;
    let message = match &error {
        E::NoSuchKey(key) => format!("no such key: {key}"),
        E::NoSuchOverload(_)
        | E::ValuesNotComparable(..)
        | E::UnexpectedType { .. }
        | E::UnsupportedBinaryOperator(..)
        | E::UnsupportedTargetType { .. }
        | E::UnsupportedIndex(..)
        | E::UnsupportedKeyType(_) => "no such overload".to_owned(),
        E::DivisionByZero(_) => "division by zero".to_owned(),
        E::RemainderByZero(_) => "modulus by zero".to_owned(),
        E::Overflow(..) => "integer overflow".to_owned(),
        E::IndexOutOfBounds(index) => format!("index out of bounds: {}", value_text(index)),
        E::FunctionError { function, message } if function == GAP => {
            return Outcome::CannotEvaluate(message.clone());
        }
        E::FunctionError { message, .. } => message.clone(),
        E::UndeclaredReference(name) => {
            return Outcome::CannotEvaluate(format!(
                "'{name}' is not declared in this evaluator (a Kubernetes CEL library it lacks, or a name cel-go rejects)"
            ));
        }
        other => {
            return Outcome::CannotEvaluate(format!(
                "the evaluator failed: {}",
                one_line(&other.to_string(), usize::MAX)
            ));
        }
    };
    Outcome::RuntimeError(message)
}

fn value_text(value: &cel::Value) -> String {
    match value {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        other => format!("{other:?}"),
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Match(b) => write!(f, "{b}"),
            Outcome::RuntimeError(e) => write!(f, "CEL runtime error: {e}"),
            Outcome::CannotEvaluate(reason) => write!(f, "cannot evaluate: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::{DeviceRecord, OwnedAttribute};

    pub(super) fn gpu() -> DeviceRecord {
        DeviceRecord {
            driver: "media.liken.sh".into(),
            pool: "node-1".into(),
            name: "pci-0000-00-02-0".into(),
            attributes: vec![
                ("decodeHEVCMain10".into(), OwnedAttribute::Bool(true)),
                ("scale10bit".into(), OwnedAttribute::Bool(false)),
                ("driver".into(), OwnedAttribute::String("i915".into())),
                (
                    "vaDriver".into(),
                    OwnedAttribute::String("Intel iHD driver - 26.1.2".into()),
                ),
                ("cores".into(), OwnedAttribute::Int(8)),
                (
                    "resource.kubernetes.io/pciBusID".into(),
                    OwnedAttribute::String("0000:00:02.0".into()),
                ),
                (
                    "dra.example.com/firmware".into(),
                    OwnedAttribute::Version("1.2.3".into()),
                ),
            ],
            capacities: vec![("dra.example.com/memory".into(), "16Gi".into())],
            allow_multiple_allocations: Some(true),
            ..Default::default()
        }
    }

    pub(super) fn eval(expression: &str) -> Outcome {
        let device = gpu();
        Selector::compile(expression).evaluate(&DeviceValue::new(&device, 36).unwrap())
    }

    pub(super) fn is(expression: &str, expected: bool) {
        assert_eq!(eval(expression), Outcome::Match(expected), "{expression}");
    }

    pub(super) fn error(expression: &str, message: &str) {
        assert_eq!(
            eval(expression),
            Outcome::RuntimeError(message.to_owned()),
            "{expression}"
        );
    }

    // Regression cases of the differential test (tests/it/oracle/cel.rs).

    pub(super) fn cannot(expression: &str, reason_contains: &str) {
        match eval(expression) {
            Outcome::CannotEvaluate(reason) => {
                assert!(reason.contains(reason_contains), "{expression}: {reason}")
            }
            other => panic!("{expression}: expected cannot evaluate, got {other:?}"),
        }
    }

    #[test]
    fn type_errors_and_non_boolean_results() {
        error(
            r#"device.attributes["media.liken.sh"].driver > 1"#,
            "no such overload",
        );
        error(
            r#"!device.attributes["media.liken.sh"].driver"#,
            "no such overload",
        );
        assert!(
            matches!(eval(r#"device.attributes["media.liken.sh"].cores"#), Outcome::RuntimeError(m) if m.starts_with("CEL result of type int could not be converted to bool"))
        );
    }

    #[test]
    fn what_cannot_be_evaluated_says_so() {
        cannot("strings.nope([1, 2], [1])", "'strings' is not declared");
        cannot(r#"ip("10.0.0.1").family() == 4"#, "ip");
        cannot("device.nodeName == 'x'", "undefined field 'nodeName'");
        cannot("device.driver ==", "does not parse");
    }
}
