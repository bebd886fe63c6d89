//! Device selectors evaluated with Kubernetes semantics (k8s.io/dynamic-resource-allocation
//! `cel/compile.go`, k8s.io/apiserver `pkg/cel/library`): one variable, `device`, with
//! `driver`, `attributes[domain][name]`, `capacity[domain][name]` and
//! `allowMultipleAllocations`; an unknown domain is an empty map, an unknown name inside a domain
//! is the runtime error `no such key: <name>`.
//!
//! The crate: `cel` 0.15 (cel-rust), the maintained Rust CEL interpreter. It has the optional
//! syntax (`.?x`, `orValue`), the strings and lists extensions, error-absorbing `&&`/`||`, custom
//! value types and macros. `kube-cel` 0.8 would bring Kubernetes' libraries but pins `cel` 0.13
//! (an older value model) and refuses `cel.bind`, so we use `cel` 0.15 and add here what
//! Kubernetes has and it lacks: the `cel.bind` macro, the semver library (`semver()`,
//! `isGreaterThan`, `compareTo`, ...; version attributes are semver values), the Quantity library
//! (capacities are quantities), Kubernetes' list functions (`isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf`) and sets (`sets.contains`, `sets.intersects`, `sets.equivalent`),
//! and the default-empty domain maps. No timestamps or durations
//! (the crate's `chrono` feature is off: device attributes have neither type). `==` and `!=`
//! are rewritten to compare as cel-go v0.26 (Kubernetes 1.34 to 1.36) does, where a Semver or
//! Quantity compared with another type is an error; versions compare by precedence (build
//! metadata ignored), as blang/semver does.
//!
//! What the crate cannot evaluate (a function it lacks, such as the sets or IP libraries, or
//! syntax it cannot parse) is reported as [`Outcome::CannotEvaluate`] with the reason; it is never
//! guessed as true or false. Each selector is compiled once ([`Selector::compile`]) and evaluated
//! per device against a [`DeviceValue`] built once per device.

use std::cmp::Ordering;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::common::traits::{self, Container, Indexer, Iterable, Sizer};
use cel::common::types::{
    BOOL_TYPE, CelBool, CelDouble, CelInt, CelString, DYN_TYPE, INT_TYPE, Kind, MAP_TYPE,
    STRING_TYPE, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, Env, ExecutionError};

use super::{AttributeValue, DeviceView, split_qualified};
use crate::text::one_line;

mod bounds;

pub(crate) use bounds::COST_LIMIT_EXCEEDED;

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
        let expression = bounds::instrument(expression);
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
        // the API server of its day. The estimate here is simplified and the oracle shows
        // cel-go's far above it (unbounded string results cost up to 2^64), so refusing on it
        // would call undecided what the scheduler decides.
        Selector::compile_as(expression, Validation::Stored)
    }

    /// Compiles as the API server validates a new expression, or as the scheduler compiles
    /// a stored one (no cost estimate: validation skips stored expressions).
    fn compile_as(expression: &str, validation: Validation) -> Selector {
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
enum Validation {
    /// New or changed: the API server's length limit and cost estimate apply.
    #[cfg_attr(not(test), allow(dead_code))]
    New,
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
    let parser = environment()
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
    check_device_fields(&expr).map_err(Failure::Gap)?;
    check_kubernetes_calls(&expr).map_err(Failure::Gap)?;
    check_literal_regexes(&expr).map_err(Failure::Error)?;
    let mut expression = expr;
    rewrite_equality(&mut expression);
    if validation == Validation::New {
        let estimate = bounds::estimate(&expression);
        if estimate > bounds::MAX_COST {
            return Err(Failure::Gap(refused(bounds::Refusal::Cost { estimate })));
        }
    }
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

/// The `device` variable of one device, shared by every selector evaluated on it. It reads the
/// device in place: an attribute becomes a CEL value only when an expression reads it, so
/// building one costs nothing per attribute (a fleet has 40,000 GPUs of 25 attributes each,
/// and a selector reads two or three).
#[derive(Clone)]
pub(crate) struct DeviceValue<'a> {
    driver: CelString<'a>,
    attributes: Domains<'a>,
    capacity: Domains<'a>,
    allow_multiple_allocations: CelBool,
    /// The Kubernetes minor release: `lists.range` is charged and bounded per cel-go version.
    minor: u32,
}

impl fmt::Debug for DeviceValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceValue({})", self.attributes.device.id())
    }
}

impl<'a> DeviceValue<'a> {
    /// The CEL view of `device` (dra cel/compile.go `DeviceMatches`) for Kubernetes 1.`minor`'s
    /// scheduler. Like the scheduler, which converts every attribute before evaluating, a
    /// version or quantity that does not parse fails every selector on the device, whether it
    /// reads it or not.
    pub(crate) fn new(device: &'a dyn DeviceView, minor: u32) -> Result<DeviceValue<'a>, String> {
        if let Some(name) = device.unsupported_attribute() {
            return Err(format!("attribute {name}: unsupported attribute value"));
        }
        for (name, value) in device.attributes() {
            if let AttributeValue::Version(v) = value {
                Semver::parse(v)
                    .map_err(|e| format!("attribute {name}: parse semantic version: {e}"))?;
            }
        }
        for (name, quantity) in device.capacities() {
            Quantity::parse(quantity).map_err(|e| format!("capacity {name}: {e}"))?;
        }
        let domains = |capacity| Domains {
            device,
            capacity,
            keys: OnceLock::new(),
        };
        Ok(DeviceValue {
            driver: CelString::from(device.driver()),
            attributes: domains(false),
            capacity: domains(true),
            allow_multiple_allocations: CelBool::from(
                sees_multiple_allocations(minor)
                    && device.allow_multiple_allocations().unwrap_or(false),
            ),
            minor,
        })
    }

    fn context(&self) -> Context<'_, '_> {
        let mut context = Context::with_env(Arc::clone(environment_arc()));
        context.add_variable_as_val("device", Box::new(DeviceRef(self)));
        context
    }
}

/// Whether CEL's `device.allowMultipleAllocations` is the device's field in Kubernetes
/// 1.`minor`: 1.35's default gates pick the incubating allocator, whose `selectorsMatch`
/// (allocator_incubating.go v0.35.10) leaves it out, so it is false whatever the slice says;
/// 1.34's (experimental: DeviceStatus) and 1.36's on (incubating, ConsumableCapacity) pass it.
fn sees_multiple_allocations(minor: u32) -> bool {
    minor != 35
}

/// One selector on one device as Kubernetes 1.`minor`'s scheduler evaluates it, refused where
/// its API server refuses a new selector: what the differential test compares with the
/// scheduler's `cel` package (`why` itself compiles once per selector, in the allocator).
pub fn evaluate_one(expression: &str, device: &dyn DeviceView, minor: u32) -> Outcome {
    let selector = Selector::compile(expression);
    match DeviceValue::new(device, minor) {
        Ok(value) => selector.evaluate(&value),
        // The scheduler fails the same way: DeviceMatches returns the conversion error.
        Err(e) => Outcome::RuntimeError(e),
    }
}

// ---------------------------------------------------------------------------------------------
// The environment

fn environment_arc() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        Arc::new(build_environment().expect("the CEL environment's declarations are consistent"))
    })
}

fn environment() -> &'static Env {
    environment_arc()
}

fn build_environment() -> Result<Env, cel::DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_extension(cel::extensions::lists)?;
    env.add_macro(Macro::receiver("bind", 3, bind_macro))?;
    bounds::library(&mut env)?;
    equality(&mut env)?;
    semver_library(&mut env)?;
    quantity_library(&mut env)?;
    kubernetes_lists_library(&mut env)?;
    sets_library(&mut env)?;
    Ok(env)
}

/// `cel.bind(name, init, result)` (cel-go `ext.Bindings`): `result` with `name` bound to `init`,
/// expanded as cel-go does, into a comprehension over an empty list whose accumulator is `name`.
/// cel-go evaluates an accumulator's init lazily, at its first read (interpreter `folder`
/// `ResolveName`): an `init` never read is never run, so its error or cost never shows. The
/// `cel` crate runs it eagerly, so a `name` read nowhere drops `init` and one read once takes
/// `init` in its place (the same value, error and cost); read more often it stays eager, which
/// differs only when `init` fails and the path taken reads `name` nowhere.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    // Only `cel.bind`; any other `x.bind(a, b, c)` stays a call.
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(name)) if name == "cel") {
        return Ok(None);
    }
    let result = args.pop().expect("three arguments");
    let init = args.pop().expect("three arguments");
    let name = args.pop().expect("three arguments");
    let Expr::Ident(var) = &name.expr else {
        return Err(helper.new_error(
            name.id,
            "cel.bind() variable name must be a simple identifier",
        ));
    };
    let var = var.clone();
    let mut result = result;
    match free_reads(&result, &var) {
        0 => return Ok(Some(result)),
        1 => {
            substitute(&mut result, &var, init);
            return Ok(Some(result));
        }
        _ => {}
    }
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: var.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(var)),
        result,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

/// The sub-expressions of a comprehension that see its variables: the loop sees all of them,
/// the result only the accumulator (cel-go's `folder` hides the iteration variables from it).
fn shadows(c: &ComprehensionExpr, var: &str) -> (bool, bool) {
    let loop_shadowed =
        c.iter_var == var || c.iter_var2.as_deref() == Some(var) || c.accu_var == var;
    (loop_shadowed, c.accu_var == var)
}

/// How many times `expr` reads the variable `var` where it is not shadowed (without
/// recursion, like [`visit`]).
fn free_reads(expr: &IdedExpr, var: &str) -> usize {
    let mut reads = 0;
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        match &e.expr {
            Expr::Ident(name) if name == var => reads += 1,
            Expr::Comprehension(c) => {
                let (loop_shadowed, result_shadowed) = shadows(c, var);
                stack.extend([&c.iter_range, &c.accu_init]);
                if !loop_shadowed {
                    stack.extend([&c.loop_cond, &c.loop_step]);
                }
                if !result_shadowed {
                    stack.push(&c.result);
                }
            }
            _ => children(e, &mut |c| stack.push(c)),
        }
    }
    reads
}

/// Puts `value` in place of the one free read of `var` in `expr` (see [`free_reads`]).
fn substitute(expr: &mut IdedExpr, var: &str, value: IdedExpr) {
    let mut value = Some(value);
    let mut stack = vec![expr];
    while let Some(e) = stack.pop() {
        if matches!(&e.expr, Expr::Ident(name) if name == var) {
            if let Some(value) = value.take() {
                *e = value;
            }
            return;
        }
        match &mut e.expr {
            Expr::Comprehension(c) => {
                let (loop_shadowed, result_shadowed) = shadows(c, var);
                let c = &mut **c;
                stack.push(&mut c.iter_range);
                stack.push(&mut c.accu_init);
                if !loop_shadowed {
                    stack.push(&mut c.loop_cond);
                    stack.push(&mut c.loop_step);
                }
                if !result_shadowed {
                    stack.push(&mut c.result);
                }
            }
            Expr::Call(call) => {
                if let Some(t) = call.target.as_deref_mut() {
                    stack.push(t);
                }
                stack.extend(call.args.iter_mut());
            }
            Expr::List(list) => stack.extend(list.elements.iter_mut()),
            Expr::Map(map) => {
                for entry in &mut map.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(m) = &mut entry.expr {
                        stack.push(&mut m.key);
                        stack.push(&mut m.value);
                    }
                }
            }
            Expr::Struct(st) => {
                for entry in &mut st.entries {
                    if let cel::common::ast::EntryExpr::StructField(field) = &mut entry.expr {
                        stack.push(&mut field.value);
                    }
                }
            }
            Expr::Select(select) => stack.push(&mut select.operand),
            _ => {}
        }
    }
}

/// The fields cel-go's checker knows on `device` (the `kubernetes.DRADevice` object type): any
/// other is a compile error there, so it is not evaluated here either.
fn check_device_fields(expr: &IdedExpr) -> Result<(), String> {
    const FIELDS: [&str; 4] = [
        "driver",
        "attributes",
        "capacity",
        "allowMultipleAllocations",
    ];
    let mut problem = None;
    visit(expr, &mut |e| {
        if let Expr::Select(select) = &e.expr
            && matches!(&select.operand.expr, Expr::Ident(v) if v == "device")
            && !FIELDS.contains(&select.field.as_str())
            && problem.is_none()
        {
            problem = Some(format!(
                "undefined field '{}' on device (valid: {})",
                select.field,
                FIELDS.join(", ")
            ));
        }
    });
    problem.map_or(Ok(()), Err)
}

/// The calls of the Kubernetes semver and quantity libraries (k8s.io/apiserver
/// pkg/cel/library semverlib.go, quantity.go, with the semver library at version 1 as
/// environment/base.go declares it from 1.33): name, called on a target (member) or not, and
/// the numbers of arguments its overloads take. cel-go's checker rejects any other call of these
/// names at compile time, so a stored selector cannot hold one: one here is this evaluator's
/// gap, or a selector stored under another version, and is not evaluated.
const KUBERNETES_CALLS: [(&str, bool, &[usize]); 16] = [
    ("semver", false, &[1, 2]),
    ("isSemver", false, &[1, 2]),
    ("major", true, &[0]),
    ("minor", true, &[0]),
    ("patch", true, &[0]),
    ("quantity", false, &[1]),
    ("isQuantity", false, &[1]),
    ("sign", false, &[1]),
    ("asApproximateFloat", true, &[0]),
    ("asInteger", true, &[0]),
    ("isInteger", true, &[0]),
    ("add", true, &[1]),
    ("sub", true, &[1]),
    ("isGreaterThan", true, &[1]),
    ("isLessThan", true, &[1]),
    ("compareTo", true, &[1]),
];

/// Refuses a call of a Kubernetes library function that no overload of it accepts (see
/// [`KUBERNETES_CALLS`]).
fn check_kubernetes_calls(expr: &IdedExpr) -> Result<(), String> {
    let mut problem = None;
    visit(expr, &mut |e| {
        let Expr::Call(call) = &e.expr else {
            return;
        };
        let Some((name, member, arities)) = KUBERNETES_CALLS
            .iter()
            .find(|(name, _, _)| *name == call.func_name)
        else {
            return;
        };
        if problem.is_none()
            && (call.target.is_some() != *member || !arities.contains(&call.args.len()))
        {
            let arities: Vec<String> = arities.iter().map(ToString::to_string).collect();
            problem = Some(format!(
                "no Kubernetes overload of {name} is called this way: {name} is a {} taking {} argument(s) (cel-go rejects the call when it compiles the selector)",
                if *member { "method" } else { "global function" },
                arities.join(" or ")
            ));
        }
    });
    problem.map_or(Ok(()), Err)
}

/// Refuses a `matches` whose pattern is a literal that Go's `regexp` refuses: cel-go compiles
/// constant patterns when it plans the program (`interpreter.CompileRegexConstants`), so the
/// selector fails to compile even where `&&` would skip the call. The `regex` crate's syntax is
/// close to RE2's but not the same (docs/why-format.md lists the differences).
fn check_literal_regexes(expr: &IdedExpr) -> Result<(), String> {
    let mut problem = None;
    visit(expr, &mut |e| {
        let Expr::Call(call) = &e.expr else {
            return;
        };
        let pattern = match (call.func_name.as_str(), &call.target, call.args.as_slice()) {
            ("matches", Some(_), [p]) | ("matches", None, [_, p]) => p,
            _ => return,
        };
        if let Expr::Literal(LiteralValue::String(pattern)) = &pattern.expr
            && problem.is_none()
            && let Err(err) = go_regex(pattern.inner())
        {
            problem = Some(format!(
                "program instantiation failed: error parsing regexp: {}",
                one_line(&err, usize::MAX)
            ));
        }
    });
    problem.map_or(Ok(()), Err)
}

/// Parses `pattern` as Go's `regexp` (RE2 syntax) would, as far as the `regex` crate can tell.
pub(crate) fn go_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|e| e.to_string())
}

/// The functions `==` and `!=` become (names no source can spell).
const EQUALS: &str = "@kubernetes_equals";
const NOT_EQUALS: &str = "@kubernetes_not_equals";

/// Rewrites `==` and `!=` into [`EQUALS`] and [`NOT_EQUALS`], which compare as cel-go v0.26
/// does (Kubernetes 1.34 to 1.36): the `cel` crate's own `==` is a plain boolean, while in
/// cel-go a Semver or Quantity on the left of `==` with another type on the right is the runtime
/// error "no such overload" (semver.go, quantity.go `Equal` return
/// `types.MaybeNoSuchOverloadErr`). Node ids are kept, so source positions still apply.
fn rewrite_equality(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if call.target.is_none() && call.args.len() == 2 {
                if call.func_name == cel::common::ast::operators::EQUALS {
                    call.func_name = EQUALS.to_owned();
                } else if call.func_name == cel::common::ast::operators::NOT_EQUALS {
                    call.func_name = NOT_EQUALS.to_owned();
                }
            }
            if let Some(t) = &mut call.target {
                rewrite_equality(t);
            }
            call.args.iter_mut().for_each(rewrite_equality);
        }
        Expr::Comprehension(c) => {
            for e in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                rewrite_equality(e);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(rewrite_equality),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let cel::common::ast::EntryExpr::MapEntry(m) = &mut entry.expr {
                    rewrite_equality(&mut m.key);
                    rewrite_equality(&mut m.value);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &mut s.entries {
                if let cel::common::ast::EntryExpr::StructField(f) = &mut entry.expr {
                    rewrite_equality(&mut f.value);
                }
            }
        }
        Expr::Select(select) => rewrite_equality(&mut select.operand),
        _ => {}
    }
}

/// cel-go v0.26 `types.Equal`: null equals only null; a Semver or Quantity compares only with
/// its own type (else "no such overload"); lists and maps compare element by element, where an
/// element comparison that errs does not make them unequal (cel-go's `baseList.Equal` and
/// `baseMap.Equal` only stop at `False`); everything else as the `cel` crate compares.
fn cel_go_equal(l: &dyn Val, r: &dyn Val) -> Result<bool, ExecutionError> {
    let (lk, rk) = (l.get_type().kind(), r.get_type().kind());
    if lk == Kind::NullType || rk == Kind::NullType {
        return Ok(lk == rk);
    }
    let no_such_overload = || {
        ExecutionError::no_such_overload(
            "_==_",
            vec![
                l.get_type().name().to_owned(),
                r.get_type().name().to_owned(),
            ],
        )
    };
    if let Some(a) = l.downcast_ref::<Semver>() {
        return r
            .downcast_ref::<Semver>()
            .map(|b| a.0.cmp_precedence(&b.0) == Ordering::Equal)
            .ok_or_else(no_such_overload);
    }
    if let Some(a) = l.downcast_ref::<Quantity>() {
        return r
            .downcast_ref::<Quantity>()
            .map(|b| a == b)
            .ok_or_else(no_such_overload);
    }
    let size = |v: &dyn Val| v.as_sizer().map(|s| *s.size().inner());
    match lk {
        Kind::List => {
            if rk != Kind::List || size(l) != size(r) {
                return Ok(false);
            }
            let (Some(a), Some(b)) = (l.as_iterable(), r.as_iterable()) else {
                return Ok(l.equals(r));
            };
            let (mut a, mut b) = (a.iter(), b.iter());
            while let (Some(x), Some(y)) = (a.next(), b.next()) {
                if matches!(cel_go_equal(x, y), Ok(false)) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Kind::Map => {
            if rk != Kind::Map || size(l) != size(r) {
                return Ok(false);
            }
            let (Some(keys), Some(li), Some(ri)) =
                (l.as_iterable(), l.as_indexer(), r.as_indexer())
            else {
                return Ok(l.equals(r));
            };
            let mut keys = keys.iter();
            while let Some(key) = keys.next() {
                let (Ok(x), Ok(y)) = (li.get(key), ri.get(key)) else {
                    return Ok(false);
                };
                if matches!(cel_go_equal(x.as_ref(), y.as_ref()), Ok(false)) {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        _ => Ok(l.equals(r)),
    }
}

fn equality(env: &mut Env) -> Result<(), cel::DeclarationError> {
    // cel-go charges an equality by the smaller side's size (runtimecost.go, O(min(m, n))).
    fn charge(args: &[CowVal<'_, '_>]) -> Result<(), ExecutionError> {
        let smaller = bounds::size_of(args[0].as_ref()).min(bounds::size_of(args[1].as_ref()));
        bounds::spend(smaller.div_ceil(10))
    }
    fn equals<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        charge(&args)?;
        owned(CelBool::from(cel_go_equal(
            args[0].as_ref(),
            args[1].as_ref(),
        )?))
    }
    // cel-go v0.26 `evalNe`: `Equal(l, r) != True`, so an erring comparison is "not equal".
    fn not_equals<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        charge(&args)?;
        owned(CelBool::from(!matches!(
            cel_go_equal(args[0].as_ref(), args[1].as_ref()),
            Ok(true)
        )))
    }
    env.add_overload(
        EQUALS,
        "kubernetes_equals",
        vec![DYN_TYPE, DYN_TYPE],
        equals,
    )?;
    env.add_overload(
        NOT_EQUALS,
        "kubernetes_not_equals",
        vec![DYN_TYPE, DYN_TYPE],
        not_equals,
    )?;
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// The `device` variable

static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// `device`, borrowing the per-device value: binding it to a context copies nothing.
#[derive(Debug)]
struct DeviceRef<'a>(&'a DeviceValue<'a>);

impl Val for DeviceRef<'_> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(DeviceRef(self.0))
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl Indexer for DeviceRef<'_> {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let device = self.0;
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&device.driver)),
            Some("attributes") => Ok(CowVal::Borrowed(&device.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&device.capacity)),
            Some("allowMultipleAllocations") => {
                Ok(CowVal::Borrowed(&device.allow_multiple_allocations))
            }
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: field.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// `device.attributes` / `device.capacity`: domain → map, where an unknown domain is an empty
/// map (dra cel/compile.go `newStringInterfaceMapWithDefault`), so
/// `device.attributes["other.example.com"].x` is `no such key: x`, not `no such key:
/// other.example.com`, and `has()` on it is false.
#[derive(Clone)]
struct Domains<'a> {
    device: &'a dyn DeviceView,
    capacity: bool,
    /// The domains as CEL strings, made only if an expression iterates over them.
    keys: OnceLock<Vec<CelString<'static>>>,
}

/// The qualified names of a device's attributes (or capacities).
fn names<'a>(device: &'a dyn DeviceView, capacity: bool) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    if capacity {
        Box::new(device.capacities().map(|(name, _)| name))
    } else {
        Box::new(device.attributes().map(|(name, _)| name))
    }
}

impl<'a> Domains<'a> {
    fn domains(&self) -> Vec<&'a str> {
        let mut domains: Vec<&str> = Vec::new();
        for name in names(self.device, self.capacity) {
            let (domain, _) = split_qualified(name, self.device.driver());
            if !domains.contains(&domain) {
                domains.push(domain);
            }
        }
        domains
    }
}

/// One domain of `device.attributes` or `device.capacity`: looks the name up when read.
#[derive(Clone)]
struct Domain<'a> {
    device: &'a dyn DeviceView,
    capacity: bool,
    domain: String,
    keys: OnceLock<Vec<CelString<'static>>>,
}

impl<'a> Domain<'a> {
    fn ids(&self) -> impl Iterator<Item = &'a str> + '_ {
        let driver = self.device.driver();
        names(self.device, self.capacity).filter_map(move |name| {
            let (domain, id) = split_qualified(name, driver);
            (domain == self.domain).then_some(id)
        })
    }

    fn value(&self, id: &str) -> Option<Result<Box<dyn Val + 'a>, ExecutionError>> {
        let driver = self.device.driver();
        let matches = |name: &str| split_qualified(name, driver) == (self.domain.as_str(), id);
        if self.capacity {
            let (_, quantity) = self.device.capacities().find(|(name, _)| matches(name))?;
            return Some(
                Quantity::parse(quantity)
                    .map(|q| Box::new(q) as Box<dyn Val>)
                    .map_err(|e| ExecutionError::function_error("capacity", e)),
            );
        }
        let (_, value) = self.device.attributes().find(|(name, _)| matches(name))?;
        Some(Ok(match value {
            AttributeValue::Bool(b) => Box::new(CelBool::from(b)),
            AttributeValue::Int(i) => Box::new(CelInt::from(i)),
            AttributeValue::String(s) => Box::new(CelString::from(s)),
            AttributeValue::Version(v) => match Semver::parse(v) {
                Ok(v) => Box::new(v),
                Err(e) => return Some(Err(ExecutionError::function_error("semver", e))),
            },
        }))
    }
}

/// The `Val` plumbing shared by [`Domains`] and [`Domain`]: a map with an indexer, `in`,
/// iteration over its keys and `size()`.
macro_rules! map_val {
    ($t:ident) => {
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($t), self.device.name())
            }
        }

        impl Val for $t<'_> {
            fn get_type(&self) -> &Type {
                &MAP_TYPE
            }
            fn cel_type() -> &'static Type {
                &MAP_TYPE
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }
            fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }
            fn as_container(&self) -> Option<&dyn Container> {
                Some(self)
            }
            fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
            where
                Self: 'v,
            {
                Some(self)
            }
            fn as_sizer(&self) -> Option<&dyn Sizer> {
                Some(self)
            }
        }
    };
}

map_val!(Domains);
map_val!(Domain);

fn string_key(key: &dyn Val) -> Result<&str, ExecutionError> {
    key.downcast_ref::<CelString>()
        .map(CelString::inner)
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: key.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

impl Indexer for Domains<'_> {
    fn get<'b, 'v>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Ok(CowVal::owned(Domain {
            device: self.device,
            capacity: self.capacity,
            domain: string_key(key)?.to_owned(),
            keys: OnceLock::new(),
        }))
    }

    fn steal<'v>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for Domains<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(key
            .downcast_ref::<CelString>()
            .is_some_and(|k| self.domains().contains(&k.inner())))
    }
}

impl Iterable for Domains<'_> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn traits::Iterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        let keys = self.keys.get_or_init(|| {
            self.domains()
                .into_iter()
                .map(|d| CelString::from(d.to_owned()))
                .collect()
        });
        Box::new(KeyIter(keys.iter()))
    }
}

impl Sizer for Domains<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.domains().len() as i64)
    }
}

impl Indexer for Domain<'_> {
    fn get<'b, 'v>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let id = string_key(key)?;
        match self.value(id) {
            Some(value) => value.map(CowVal::Owned),
            None => Err(ExecutionError::no_such_key(id)),
        }
    }

    fn steal<'v>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

impl Container for Domain<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(key
            .downcast_ref::<CelString>()
            .is_some_and(|k| self.ids().any(|id| id == k.inner())))
    }
}

impl Iterable for Domain<'_> {
    fn iter<'b, 'v>(&'b self) -> Box<dyn traits::Iterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        let keys = self.keys.get_or_init(|| {
            self.ids()
                .map(|id| CelString::from(id.to_owned()))
                .collect()
        });
        Box::new(KeyIter(keys.iter()))
    }
}

impl Sizer for Domain<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.ids().count() as i64)
    }
}

struct KeyIter<'b>(std::slice::Iter<'b, CelString<'static>>);

impl<'b, 'v> traits::Iterator<'b, 'v> for KeyIter<'b> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        self.0.next().map(|k| k as &dyn Val)
    }
}

// ---------------------------------------------------------------------------------------------
// Semver (dra cel/semverlib.go; k8s.io/apiserver pkg/cel/library semver)

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// A semantic version: a `version` attribute, or `semver("1.2.3")`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semver(semver::Version);

impl Semver {
    fn parse(text: &str) -> Result<Semver, String> {
        semver::Version::parse(text)
            .map(Semver)
            .map_err(|e| e.to_string())
    }

    /// semverlib.go `normalizeAndParse`: without a leading `v`, leading zeros trimmed from
    /// each of the first three dot-separated parts, a missing minor or patch filled with `0`
    /// (refused when the last part given carries a pre-release or build).
    fn parse_normalized(text: &str) -> Result<Semver, String> {
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
                return Err("short version cannot contain PreRelease/Build meta data".to_owned());
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

fn arg<'a, T: StaticVal>(
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

fn string_arg<'a>(
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

fn owned<'b, 'v, T: Val + 'v>(value: T) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(value))
}

fn ordering_int(o: Ordering) -> i64 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

fn semver_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    /// The version of `semver(s)` / `semver(s, normalize)`.
    fn parse_arg(
        args: &[CowVal<'_, '_>],
        f: &str,
    ) -> Result<Result<Semver, String>, ExecutionError> {
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

// ---------------------------------------------------------------------------------------------
// Quantity (k8s.io/apiserver pkg/cel/library/quantity.go)

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// A Kubernetes resource quantity, kept exactly in nano-units (the API's finest scale; finer
/// digits round up, as `resource.Quantity` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// Parses the API's quantity syntax: a signed decimal number and an optional suffix (binary
    /// `Ki`..`Ei`, decimal `n u m "" k M G T P E`, or an exponent `e3`/`E3`).
    pub(crate) fn parse(text: &str) -> Result<Quantity, String> {
        let bad = || {
            format!(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}"
            )
        };
        let (sign, rest) = match text.as_bytes().first() {
            Some(b'-') => (-1i128, &text[1..]),
            Some(b'+') => (1, &text[1..]),
            _ => (1, text),
        };
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(split);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        // (multiplier numerator, base-10 exponent)
        let (mult, exp10): (i128, i32) = match suffix {
            "" => (1, 0),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            s if s.starts_with(['e', 'E']) => (1, s[1..].parse::<i32>().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        let digits: String = format!("{whole}{frac}");
        let digits = digits.trim_start_matches('0');
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| bad())?
        };
        // value = mantissa * 10^(exp10 - frac.len()) * mult; in nanos: * 10^9.
        let scale = exp10 - frac.len() as i32 + 9;
        let too_big = || format!("quantity {text:?} is too large");
        let mut nanos = mantissa.checked_mul(mult).ok_or_else(too_big)?;
        if scale >= 0 {
            nanos = nanos
                .checked_mul(10i128.checked_pow(scale as u32).ok_or_else(too_big)?)
                .ok_or_else(too_big)?;
        } else {
            let divisor = 10i128.checked_pow((-scale) as u32).unwrap_or(i128::MAX);
            // Below a nano: round up, away from zero, as resource.Quantity does.
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        Ok(Quantity {
            nanos: sign * nanos,
        })
    }

    fn from_int(i: i64) -> Quantity {
        Quantity {
            nanos: i128::from(i) * 1_000_000_000,
        }
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| self == o)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
impl StaticVal for Quantity {}

fn quantity_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        Quantity::parse(string_arg(&args, 0, "quantity")?)
            .map_err(|e| ExecutionError::function_error("quantity", e))
            .map(CowVal::owned)
    }
    fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            Quantity::parse(string_arg(&args, 0, "isQuantity")?).is_ok(),
        ))
    }
    fn q(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<Quantity, ExecutionError> {
        if let Some(i) = args.get(i).and_then(|a| a.downcast_ref::<CelInt>()) {
            return Ok(Quantity::from_int(*i.inner()));
        }
        arg::<Quantity>(args, i, f).copied()
    }
    fn greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            q(&args, 0, "isGreaterThan")? > q(&args, 1, "isGreaterThan")?,
        ))
    }
    fn less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(
            q(&args, 0, "isLessThan")? < q(&args, 1, "isLessThan")?,
        ))
    }
    fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(ordering_int(
            q(&args, 0, "compareTo")?.cmp(&q(&args, 1, "compareTo")?),
        )))
    }
    fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let (a, b) = (q(&args, 0, "add")?, q(&args, 1, "add")?);
        a.nanos
            .checked_add(b.nanos)
            .map(|nanos| CowVal::owned(Quantity { nanos }))
            .ok_or_else(|| ExecutionError::function_error("add", "integer overflow"))
    }
    fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let (a, b) = (q(&args, 0, "sub")?, q(&args, 1, "sub")?);
        a.nanos
            .checked_sub(b.nanos)
            .map(|nanos| CowVal::owned(Quantity { nanos }))
            .ok_or_else(|| ExecutionError::function_error("sub", "integer overflow"))
    }
    fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelInt::from(q(&args, 0, "sign")?.nanos.signum() as i64))
    }
    fn integral(q: Quantity) -> Option<i64> {
        (q.nanos % 1_000_000_000 == 0)
            .then(|| i64::try_from(q.nanos / 1_000_000_000).ok())
            .flatten()
    }
    fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelBool::from(integral(q(&args, 0, "isInteger")?).is_some()))
    }
    fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        match integral(q(&args, 0, "asInteger")?) {
            Some(i) => owned(CelInt::from(i)),
            None => Err(ExecutionError::function_error(
                "asInteger",
                "cannot convert value to integer",
            )),
        }
    }
    fn as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        owned(CelDouble::from(
            q(&args, 0, "asApproximateFloat")?.nanos as f64 / 1e9,
        ))
    }
    let t = || QUANTITY_TYPE.to_owned();
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        to_quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        t(),
        vec![t()],
        greater,
    )?;
    env.add_member_overload("isLessThan", "quantity_is_less_than", t(), vec![t()], less)?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        t(),
        vec![t()],
        compare_to,
    )?;
    env.add_member_overload("add", "quantity_add", t(), vec![t()], add)?;
    env.add_member_overload("add", "quantity_add_int", t(), vec![INT_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub", t(), vec![t()], sub)?;
    env.add_member_overload("sub", "quantity_sub_int", t(), vec![INT_TYPE], sub)?;
    // A global function (`sign(q)`), not a method, in quantity.go.
    env.add_overload("sign", "quantity_sign", vec![t()], sign)?;
    env.add_member_overload("isInteger", "quantity_is_integer", t(), vec![], is_integer)?;
    env.add_member_overload("asInteger", "quantity_as_integer", t(), vec![], as_integer)?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_as_float",
        t(),
        vec![],
        as_float,
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Kubernetes lists and sets (k8s.io/apiserver pkg/cel/library/lists.go, cel-go ext.Sets)

/// The elements of a list argument.
fn elements<'b>(
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
fn traversed<'b>(
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

fn compare_vals(a: &dyn Val, b: &dyn Val, function: &str) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::no_such_overload(function, vec![a.get_type().name().to_owned()])
        })?
        .compare(b)
}

fn kubernetes_lists_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
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

fn sets_library(env: &mut Env) -> Result<(), cel::DeclarationError> {
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

    fn gpu() -> DeviceRecord {
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

    fn eval(expression: &str) -> Outcome {
        let device = gpu();
        Selector::compile(expression).evaluate(&DeviceValue::new(&device, 36).unwrap())
    }

    fn is(expression: &str, expected: bool) {
        assert_eq!(eval(expression), Outcome::Match(expected), "{expression}");
    }

    fn error(expression: &str, message: &str) {
        assert_eq!(
            eval(expression),
            Outcome::RuntimeError(message.to_owned()),
            "{expression}"
        );
    }

    // Regression cases of the differential test (tests/it/oracle/cel.rs).

    #[test]
    fn bind_reads_its_value_lazily_as_cel_go_does() {
        // Never read: cel-go never runs the missing key.
        is(
            r#"cel.bind(x, device.attributes["dra.example.com"].missing, true)"#,
            true,
        );
        // Read once, on a path not taken.
        is(
            r#"cel.bind(x, device.attributes["dra.example.com"].missing, false && x)"#,
            false,
        );
        error(
            r#"cel.bind(x, device.attributes["dra.example.com"].missing, x)"#,
            "no such key: missing",
        );
        // Shadowed by an inner comprehension: the outer value is never read.
        is(
            r#"cel.bind(x, device.attributes["dra.example.com"].missing, [1].all(x, x > 0))"#,
            true,
        );
        is("cel.bind(x, 2, x * x == 4)", true);
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

    #[test]
    fn cel_go_compile_errors_fail_even_where_skipped() {
        // A literal pattern Go's regexp refuses, behind a false `&&`.
        assert!(
            matches!(eval(r#"false && "a".matches("(")"#), Outcome::RuntimeError(m) if m.contains("error parsing regexp"))
        );
        is(r#"false && "a".matches("(a)")"#, false);
        // has() of an index is refused by cel-go's parser.
        assert!(
            matches!(eval(r#"has(device.attributes["dra.example.com"]["model"])"#), Outcome::RuntimeError(m) if m.contains("invalid argument to has() macro"))
        );
    }

    #[test]
    fn allow_multiple_allocations_is_false_in_1_35() {
        let device = gpu();
        let by = |minor| evaluate_one("device.allowMultipleAllocations", &device, minor);
        assert_eq!(by(34), Outcome::Match(true));
        assert_eq!(by(35), Outcome::Match(false));
        assert_eq!(by(36), Outcome::Match(true));
        assert_eq!(by(37), Outcome::Match(true));
    }

    fn cannot(expression: &str, reason_contains: &str) {
        match eval(expression) {
            Outcome::CannotEvaluate(reason) => {
                assert!(reason.contains(reason_contains), "{expression}: {reason}")
            }
            other => panic!("{expression}: expected cannot evaluate, got {other:?}"),
        }
    }

    #[test]
    fn device_fields() {
        is(r#"device.driver == "media.liken.sh""#, true);
        is(
            r#"device.attributes["media.liken.sh"].decodeHEVCMain10"#,
            true,
        );
        is(r#"device.attributes["media.liken.sh"].scale10bit"#, false);
        is(r#"device.attributes["media.liken.sh"].cores >= 8"#, true);
        is(
            r#"device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:02.0""#,
            true,
        );
        is("device.allowMultipleAllocations", true);
    }

    #[test]
    fn unknown_domain_is_an_empty_map() {
        is(r#"size(device.attributes["liken.sh"]) == 0"#, true);
        is(r#"has(device.attributes["liken.sh"].renderNode)"#, false);
        is(r#""liken.sh" in device.attributes"#, false);
        is(r#""media.liken.sh" in device.attributes"#, true);
        error(
            r#"device.attributes["liken.sh"].renderNode"#,
            "no such key: renderNode",
        );
        is(r#"size(device.capacity["other.example.com"]) == 0"#, true);
        // The maps behave as maps: size, iteration and `in` over domains and names.
        is(
            r#"size(device.attributes) == 3 && size(device.attributes["media.liken.sh"]) == 5"#,
            true,
        );
        is(
            r#"device.attributes.exists(d, d == "resource.kubernetes.io")"#,
            true,
        );
        is(
            r#"device.attributes["resource.kubernetes.io"].all(n, n == "pciBusID")"#,
            true,
        );
        is(
            r#"device.capacity.all(d, d == "dra.example.com") && "memory" in device.capacity["dra.example.com"]"#,
            true,
        );
    }

    #[test]
    fn unknown_attribute_is_a_runtime_error() {
        error(
            r#"device.attributes["media.liken.sh"].decodeAV2"#,
            "no such key: decodeAV2",
        );
        is(
            r#"has(device.attributes["media.liken.sh"].decodeAV2)"#,
            false,
        );
        is(
            r#"has(device.attributes["media.liken.sh"].scale10bit)"#,
            true,
        );
    }

    #[test]
    fn in_and_optionals() {
        is(
            r#""scale10bit" in device.attributes["media.liken.sh"]"#,
            true,
        );
        is(
            r#"device.attributes["media.liken.sh"].driver in ["i915", "iHD"]"#,
            true,
        );
        is(
            r#"device.attributes["media.liken.sh"].?decodeAV2.orValue(false)"#,
            false,
        );
        is(
            r#"device.attributes["media.liken.sh"].?decodeHEVCMain10.orValue(false)"#,
            true,
        );
        is(r#"device.attributes[?"liken.sh"].hasValue()"#, true);
    }

    #[test]
    fn cel_bind() {
        is(
            r#"cel.bind(m, device.attributes["media.liken.sh"], m.decodeHEVCMain10 && !m.scale10bit)"#,
            true,
        );
        is(r#"cel.bind(x, 2, x * x == 4)"#, true);
        // Only cel.bind is the macro; another receiver's bind stays an (unknown) call.
        cannot(r#"device.driver.bind(a, 1, true)"#, "'a' is not declared");
    }

    #[test]
    fn string_and_list_extensions() {
        is(
            r#"device.attributes["media.liken.sh"].vaDriver.lowerAscii().contains("intel")"#,
            true,
        );
        is(
            r#"device.attributes["media.liken.sh"].vaDriver.startsWith("Intel")"#,
            true,
        );
        is(
            r#"device.attributes["media.liken.sh"].vaDriver.split(" - ")[1] == "26.1.2""#,
            true,
        );
        is(
            r#"device.attributes["media.liken.sh"].driver.matches("^i9[0-9]+$")"#,
            true,
        );
        is("[3, 1, 2].sort() == [1, 2, 3]", true);
        is(
            r#"["a", "b"].exists(x, x == device.attributes["media.liken.sh"].driver)"#,
            false,
        );
        is(
            r#"device.attributes["media.liken.sh"].all(k, k != "")"#,
            true,
        );
    }

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
    fn quantity_on_capacities() {
        is(
            r#"device.capacity["dra.example.com"].memory.compareTo(quantity("8Gi")) > 0"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.isGreaterThan(quantity("16G"))"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.isLessThan(quantity("17179869185"))"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory == quantity("16384Mi")"#,
            true,
        );
        is(
            r#"device.capacity["dra.example.com"].memory.asInteger() == 17179869184"#,
            true,
        );
        is(
            r#"quantity("1.5").isInteger() == false && quantity("1500m").asApproximateFloat() == 1.5"#,
            true,
        );
        is(
            r#"quantity("1k").add(24).compareTo(quantity("1024")) == 0"#,
            true,
        );
        is(
            r#"sign(quantity("-1")) == -1 && sign(quantity("0")) == 0 && isQuantity("2Gi") && !isQuantity("2 Gi")"#,
            true,
        );
        error(
            r#"quantity("1.5").asInteger() == 1"#,
            "cannot convert value to integer",
        );
    }

    #[test]
    fn equality_with_a_semver_or_quantity_on_the_left_is_cel_go_s() {
        // cel-go v0.26 (Kubernetes 1.34 to 1.36): Semver.Equal and Quantity.Equal with another
        // type are "no such overload"; `!=` is `Equal != True`, so true; null equals only null;
        // with the other type on the left, its own Equal says false.
        let firmware = r#"device.attributes["dra.example.com"].firmware"#;
        let memory = r#"device.capacity["dra.example.com"].memory"#;
        error(&format!(r#"{firmware} == "1.2.3""#), "no such overload");
        error(&format!("{memory} == 16"), "no such overload");
        is(&format!(r#"{firmware} != "1.2.3""#), true);
        is(&format!("{memory} != 16"), true);
        is(&format!("{firmware} == null || {memory} == null"), false);
        is(&format!(r#""1.2.3" == {firmware}"#), false);
        is(&format!(r#"{firmware} in ["1.2.3"]"#), false);
        // Lists compare element by element; an element comparison that errs is not "unequal".
        is(&format!(r#"[{firmware}, 1] == ["1.2.3", 1]"#), true);
        is(&format!(r#"[{firmware}, 1] == ["1.2.3", 2]"#), false);
        is(&format!(r#"{{"v": {firmware}}} == {{"v": "x"}}"#), true);
        // Inside a comprehension and a cel.bind too.
        error(
            &format!(r#"cel.bind(v, {firmware}, [1].all(x, v == "1.2.3"))"#),
            "no such overload",
        );
        // Ordinary equality is untouched.
        is(
            r#"1 == 1.0 && "a" != "b" && [1, 2] == [1, 2] && {"a": 1} != {"a": 2}"#,
            true,
        );
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

    #[test]
    fn kubernetes_functions_called_no_declared_way_are_not_evaluated() {
        // cel-go's checker refuses these when the selector is compiled.
        cannot(r#"quantity("1").sign() == 1"#, "sign is a global function");
        cannot(
            r#"semver("1.0.0", true, 1).major() == 1"#,
            "taking 1 or 2 argument(s)",
        );
        cannot(
            r#"semver("1.0.0").isGreaterThan() "#,
            "isGreaterThan is a method",
        );
        cannot(r#"major(semver("1.0.0")) == 1"#, "major is a method");
    }

    #[test]
    fn error_absorbing_logic() {
        let missing = r#"device.attributes["media.liken.sh"].decodeAV2"#;
        is(&format!("false && {missing}"), false);
        is(&format!("{missing} && false"), false);
        is(&format!("true || {missing}"), true);
        is(&format!("{missing} || true"), true);
        error(&format!("true && {missing}"), "no such key: decodeAV2");
        error(&format!("{missing} || false"), "no such key: decodeAV2");
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
    fn what_cannot_be_evaluated_says_so() {
        cannot("strings.nope([1, 2], [1])", "'strings' is not declared");
        cannot(r#"ip("10.0.0.1").family() == 4"#, "ip");
        cannot("device.nodeName == 'x'", "undefined field 'nodeName'");
        cannot("device.driver ==", "does not parse");
    }
}
