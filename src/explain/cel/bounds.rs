//! How far a selector may go: the parser's limits (cel-go's defaults), the API server's length and
//! estimated-cost limits (`validateCELExpression`; the estimate is [`super::estimate`]'s), and the
//! scheduler's runtime cost limit, counted as cel-go's runtimecost.go and k8s's cost.go.
//!
//! The `cel` crate has no cost hooks, so [`instrument`] rewrites a selector to pass costed values
//! through a charging function drawing on a per-thread budget ([`metered`]); size-proportional
//! costs are charged before the work, so a selector past the limit stops before it runs long.

use std::cell::Cell;
use std::fmt;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::common::types::{CelBool, CelBytes, CelInt, CelString, DYN_TYPE, INT_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

/// `resourceapi.CELSelectorExpressionMaxCost`: the runtime limit and the static estimate's.
pub(crate) const MAX_COST: u64 = 1_000_000;
/// `resourceapi.CELSelectorExpressionMaxLength`, in bytes.
pub(crate) const MAX_LENGTH: usize = 10 * 1024;
/// cel-go's parser default `expressionSizeCodePointLimit`.
pub(crate) const MAX_CODE_POINTS: usize = 100_000;
/// cel-go's parser default `maxRecursionDepth`.
pub(crate) const MAX_RECURSION_DEPTH: usize = 250;
/// cel-go's `EvalCancelledError` message for `CostLimitExceeded`.
pub(crate) const COST_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

/// Why the API server refuses a selector before it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `field.TooLong`.
    Length { bytes: usize },
    /// The parser's code point limit (a compile error).
    CodePoints { code_points: usize },
    /// The parser's recursion limit (a compile error).
    Depth,
    /// `field.Forbidden`: the static worst-case estimate is over [`MAX_COST`].
    Cost { estimate: u64 },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Length { bytes } => write!(
                f,
                "Too long: may not be more than {MAX_LENGTH} bytes (it has {bytes})"
            ),
            Refusal::CodePoints { code_points } => write!(
                f,
                "compilation failed: expression code point size exceeds limit: size: {code_points}, limit {MAX_CODE_POINTS}"
            ),
            Refusal::Depth => write!(
                f,
                "compilation failed: expression recursion limit exceeded: {MAX_RECURSION_DEPTH}"
            ),
            Refusal::Cost { estimate } => write!(
                f,
                "too complex, exceeds cost limit (estimated {estimate}, limit {MAX_COST})"
            ),
        }
    }
}

/// The text limits, checked before parsing: the API server's length, then the parser's size.
/// The length applies to stored expressions too: every one was validated against it (it has
/// not changed since DRA's first API), and it bounds the stack parsing needs.
pub(crate) fn check_text(expression: &str) -> Result<(), Refusal> {
    if expression.len() > MAX_LENGTH {
        return Err(Refusal::Length {
            bytes: expression.len(),
        });
    }
    let code_points = expression.chars().count();
    if code_points > MAX_CODE_POINTS {
        return Err(Refusal::CodePoints { code_points });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Nesting

/// A lower bound on the depth cel-go's parser counts, read from the text before parsing (the
/// `cel` crate's parser takes seconds on a 5,000-deep chain): the longest run, at one bracket
/// level, of binary operators of one precedence not separated by a lower one, or of selects,
/// calls and indexes on one operand. Each adds a level in cel-go, so a run over the limit is
/// refused there too.
pub(crate) fn chain_depth(expression: &str) -> usize {
    // Counters per bracket level: member, multiplicative, additive, relational.
    let mut frames: Vec<[usize; 4]> = vec![[0; 4]];
    let mut deepest = 0;
    // Whether the previous token ends an operand (so `-` and `[` are binary / an index).
    let mut after_operand = false;
    let bytes = expression.as_bytes();
    let mut i = 0;
    let bump = |frames: &mut Vec<[usize; 4]>, class: usize, deepest: &mut usize| {
        let frame = frames.last_mut().expect("the outermost frame stays");
        frame[class] += 1;
        *deepest = (*deepest).max(frame[class]);
        frame[..class].iter_mut().for_each(|c| *c = 0);
    };
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match b {
            b'"' | b'\'' => {
                // A string literal (triple-quoted or not): skipped whole, escapes included.
                let triple = next == Some(b) && bytes.get(i + 2) == Some(&b);
                let quote: &[u8] = if triple {
                    &bytes[i..i + 3]
                } else {
                    &bytes[i..i + 1]
                };
                i += quote.len();
                while i < bytes.len() && !bytes[i..].starts_with(quote) {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += quote.len();
                after_operand = true;
                continue;
            }
            b'/' if next == Some(b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'{' => {
                frames.push([0; 4]);
                after_operand = false;
            }
            b'[' => {
                if after_operand {
                    bump(&mut frames, 0, &mut deepest);
                }
                frames.push([0; 4]);
                after_operand = false;
            }
            b')' | b']' | b'}' => {
                if frames.len() > 1 {
                    frames.pop();
                }
                after_operand = true;
            }
            b'.' if next.is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b'?') => {
                bump(&mut frames, 0, &mut deepest);
                after_operand = false;
            }
            b'*' | b'/' | b'%' => {
                bump(&mut frames, 1, &mut deepest);
                after_operand = false;
            }
            b'+' | b'-' => {
                if after_operand {
                    bump(&mut frames, 2, &mut deepest);
                }
                after_operand = false;
            }
            b'<' | b'>' | b'=' | b'!' if next == Some(b'=') => {
                bump(&mut frames, 3, &mut deepest);
                after_operand = false;
                i += 2;
                continue;
            }
            b'<' | b'>' => {
                bump(&mut frames, 3, &mut deepest);
                after_operand = false;
            }
            b'&' | b'|' | b'?' | b':' | b',' | b'!' => {
                *frames.last_mut().expect("the outermost frame stays") = [0; 4];
                after_operand = false;
            }
            c if c.is_ascii_whitespace() => {}
            _ => {
                // An identifier or number: `in` is a relation, the rest operands.
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if i == start {
                    i += 1;
                    after_operand = false;
                } else if &bytes[start..i] == b"in" {
                    bump(&mut frames, 3, &mut deepest);
                    after_operand = false;
                } else {
                    after_operand = true;
                }
                continue;
            }
        }
        i += 1;
    }
    deepest
}

/// The depth cel-go's parser counts (parser.go `Visit`: relations, arithmetic, `?:`, selects,
/// member calls and indexes, nested in one another; `&&`, `||`, `!`, global calls and literals
/// are free). Macro expansions count as the member call they were; their synthetic `&&`, `+`
/// and `?:` may add up to two, so a selector within two of the limit may be refused here and
/// not there.
pub(crate) fn nesting_depth(expr: &IdedExpr) -> usize {
    let own = match &expr.expr {
        Expr::Call(call) => usize::from(counts(call)),
        Expr::Comprehension(_) | Expr::Select(_) => 1,
        _ => 0,
    };
    let mut deepest = 0;
    super::children(expr, &mut |c| deepest = deepest.max(nesting_depth(c)));
    own + deepest
}

fn counts(call: &CallExpr) -> bool {
    use operators::*;
    call.target.is_some()
        || [
            ADD,
            SUBSTRACT,
            MULTIPLY,
            DIVIDE,
            MODULO,
            EQUALS,
            NOT_EQUALS,
            LESS,
            LESS_EQUALS,
            GREATER,
            GREATER_EQUALS,
            IN,
            CONDITIONAL,
            INDEX,
            OPT_INDEX,
            OPT_SELECT,
        ]
        .contains(&call.func_name.as_str())
        || call.func_name == super::calls::EQUALS
        || call.func_name == super::calls::NOT_EQUALS
}

/// The deepest path of `expr` in nodes (what the evaluator's recursion follows).
pub(crate) fn tree_depth(expr: &IdedExpr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(expr, 1usize)];
    while let Some((e, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        super::children(e, &mut |c| stack.push((c, depth + 1)));
    }
    deepest
}

/// cel-go's `ceil(size * factor)`, with the factor in thousandths.
pub(super) fn traversal(size: u64, permille: u64) -> u64 {
    size.saturating_mul(permille).div_ceil(1000)
}

/// `sets.contains(a, b)` parses as a call of `contains` on `sets`: the function's full name
/// when the target is one of the libraries' namespaces.
pub(super) fn namespaced(call: &CallExpr) -> Option<String> {
    const NAMESPACES: [&str; 5] = ["sets", "lists", "strings", "math", "optional"];
    match call.target.as_deref().map(|t| &t.expr) {
        Some(Expr::Ident(ns)) if NAMESPACES.contains(&ns.as_str()) => {
            Some(format!("{ns}.{}", call.func_name))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The runtime cost (cel-go interpreter/runtimecost.go)

const CHARGE: &str = "@charge";
const CHARGE_SIZE: &str = "@charge_size";
const CHARGE_ADD: &str = "@charge_add";
pub(super) const MATCHES: &str = "@matches";
pub(super) const CONTAINS: &str = "@contains";
const RANGE: &str = "@range";

/// Rewrites `expr` (its equality already rewritten) so that evaluating it charges what cel-go's
/// cost tracker counts: 1 per variable and non-constant select, 1 per call (size-proportional
/// for strings, `in`, regex, sets and Kubernetes' list functions), 10 per list and 30 per map
/// built; `&&`, `||`, `?:`, constants and constant qualifiers of a variable are free. Node
/// ids are kept (wrappers take id 0), so errors and positions still apply.
pub(crate) fn instrument(expr: &IdedExpr) -> IdedExpr {
    let id = expr.id;
    let rebuilt = |e: Expr| IdedExpr { id, expr: e };
    match &expr.expr {
        Expr::Literal(_) | Expr::Unspecified => expr.clone(),
        Expr::Ident(_) => charge(expr.clone(), 1),
        Expr::Select(select) => {
            let mut select = select.clone();
            // `device.attributes["d"].n` is one attribute to cel-go, charged once (at its
            // variable); a select on a computed value is charged itself.
            let attribute = select.test || is_attribute(&select.operand);
            select.operand = Box::new(instrument(&select.operand));
            let out = rebuilt(Expr::Select(select));
            if attribute { out } else { charge(out, 1) }
        }
        Expr::List(list) => {
            let mut list = list.clone();
            list.elements = list.elements.iter().map(instrument).collect();
            charge(rebuilt(Expr::List(list)), 10)
        }
        Expr::Map(map) => {
            let mut map = map.clone();
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(m) = &mut entry.expr {
                    m.key = instrument(&m.key);
                    m.value = instrument(&m.value);
                }
            }
            charge(rebuilt(Expr::Map(map)), 30)
        }
        Expr::Struct(s) => {
            let mut s = s.clone();
            for entry in &mut s.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    f.value = instrument(&f.value);
                }
            }
            charge(rebuilt(Expr::Struct(s)), 40)
        }
        Expr::Comprehension(c) => {
            let mut c = c.clone();
            c.iter_range = instrument(&c.iter_range);
            c.accu_init = instrument(&c.accu_init);
            c.result = instrument(&c.result);
            let (step, appends) = instrument_step(&c.loop_step, &c.accu_var);
            c.loop_step = step;
            // The loop stops once past the limit: the condition fails (`&&`, `||` and the
            // crate's deferred step errors would otherwise carry it through every iteration),
            // or, for an in-place append (whose condition must stay a literal), the item does.
            c.loop_cond = if appends {
                c.loop_cond.clone()
            } else {
                charge(instrument(&c.loop_cond), 0)
            };
            rebuilt(Expr::Comprehension(c))
        }
        Expr::Call(call) => instrument_call(expr, call),
    }
}

/// A `map`/`filter` step (`@result + [e]`, maybe under `cond ? ... : @result`) keeps its shape,
/// which the `cel` crate runs as an in-place append (anything else copies the accumulator on
/// every iteration); the variable, `+` and list it does not charge are charged on `e`.
fn instrument_step(step: &IdedExpr, accu: &str) -> (IdedExpr, bool) {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == accu);
    let append = |e: &IdedExpr| -> Option<IdedExpr> {
        let Expr::Call(add) = &e.expr else {
            return None;
        };
        let [lhs, rhs] = add.args.as_slice() else {
            return None;
        };
        let Expr::List(list) = &rhs.expr else {
            return None;
        };
        if add.func_name != operators::ADD || add.target.is_some() || !is_accu(lhs) {
            return None;
        }
        let mut list = list.clone();
        list.elements = list
            .elements
            .iter()
            .map(|item| charge(instrument(item), 12))
            .collect();
        let mut add = add.clone();
        add.args[1] = IdedExpr {
            id: rhs.id,
            expr: Expr::List(list),
        };
        Some(IdedExpr {
            id: e.id,
            expr: Expr::Call(add),
        })
    };
    if let Expr::Call(call) = &step.expr
        && call.func_name == operators::CONDITIONAL
        && let [guard, then, otherwise] = call.args.as_slice()
        && is_accu(otherwise)
        && let Some(then) = append(then)
    {
        let mut call = call.clone();
        call.args = vec![charge(instrument(guard), 1), then, otherwise.clone()];
        let step = IdedExpr {
            id: step.id,
            expr: Expr::Call(call),
        };
        return (step, true);
    }
    // `accu && p` / `accu || p` (`all`, `exists`) keeps its accumulator bare, so that the
    // crate still defers a step's error until a later element absorbs it, as cel-go does; the
    // read of `accu` is charged beside `p` (`true && p` is `p`, and so is `false || p`).
    if let Expr::Call(call) = &step.expr
        && (call.func_name == operators::LOGICAL_AND || call.func_name == operators::LOGICAL_OR)
        && call.target.is_none()
        && let [first, p] = call.args.as_slice()
        && is_accu(first)
    {
        let neutral = call.func_name == operators::LOGICAL_AND;
        let read = charge(
            IdedExpr {
                id: first.id,
                expr: Expr::Literal(LiteralValue::Boolean(neutral.into())),
            },
            1,
        );
        let mut charged = call.clone();
        charged.args = vec![read, instrument(p)];
        let mut call = call.clone();
        call.args[1] = IdedExpr {
            id: p.id,
            expr: Expr::Call(charged),
        };
        let step = IdedExpr {
            id: step.id,
            expr: Expr::Call(call),
        };
        return (step, false);
    }
    match append(step) {
        Some(step) => (step, true),
        None => (instrument(step), false),
    }
}

/// Whether `expr` is a variable with constant qualifiers (`device.attributes["d"]`): cel-go
/// resolves it as one attribute.
fn is_attribute(expr: &IdedExpr) -> bool {
    let mut e = expr;
    loop {
        match &e.expr {
            Expr::Ident(_) => return true,
            Expr::Select(s) => e = &s.operand,
            Expr::Call(c)
                if c.func_name == operators::INDEX
                    && c.target.is_none()
                    && matches!(c.args.get(1).map(|a| &a.expr), Some(Expr::Literal(_))) =>
            {
                e = &c.args[0]
            }
            _ => return false,
        }
    }
}

fn instrument_call(expr: &IdedExpr, call: &CallExpr) -> IdedExpr {
    let qualified = namespaced(call);
    let name = qualified.as_deref().unwrap_or(&call.func_name);
    let mut call = call.clone();
    // A constant index of an attribute is a free qualifier.
    if name == operators::INDEX && is_attribute(expr) {
        call.args[0] = instrument(&call.args[0]);
        return IdedExpr {
            id: expr.id,
            expr: Expr::Call(call),
        };
    }
    if qualified.is_none() {
        call.target = call.target.as_ref().map(|t| Box::new(instrument(t)));
    }
    call.args = call.args.iter().map(instrument).collect();
    let out = |call: CallExpr| IdedExpr {
        id: expr.id,
        expr: Expr::Call(call),
    };
    // The receiver or first argument, charged by its size before the call.
    let charge_first = |mut call: CallExpr, permille: i64| {
        match &mut call.target {
            Some(t) => **t = charge_size((**t).clone(), permille),
            None if !call.args.is_empty() => {
                call.args[0] = charge_size(call.args[0].clone(), permille)
            }
            None => {}
        }
        call
    };
    match name {
        operators::LOGICAL_AND | operators::LOGICAL_OR | operators::CONDITIONAL => out(call),
        // Charged by their own implementations, from their arguments.
        super::calls::EQUALS
        | super::calls::NOT_EQUALS
        | super::calls::HASHED
        | "sets.contains"
        | "sets.intersects"
        | "sets.equivalent"
        | "isSorted"
        | "sum"
        | "max"
        | "min"
        | "indexOf"
        | "lastIndexOf" => out(call),
        operators::ADD => wrap(CHARGE_ADD, out(call), None),
        operators::IN => {
            call.args[1] = charge_size(call.args[1].clone(), 1000);
            out(call)
        }
        "matches" if call.args.len() + usize::from(call.target.is_some()) == 2 => {
            out(receiver_first(call, MATCHES))
        }
        "contains" if call.target.is_some() && call.args.len() == 1 => {
            out(receiver_first(call, CONTAINS))
        }
        "startsWith" | "endsWith" | "lowerAscii" | "upperAscii" | "substring" | "trim"
        | "quantity" | "isQuantity" | "semver" | "isSemver" => out(charge_first(call, 100)),
        "replace" | "split" => out(charge_first(call, 200)),
        "join" => charge_size(out(call), 200),
        // Charged from its argument before the list is built (see `range`).
        "lists.range" if call.args.len() == 1 => {
            call.args[0] = wrap(RANGE, call.args[0].clone(), None);
            out(call)
        }
        _ => charge(out(call), 1),
    }
}

/// `x.f(a)` as `f'(x, a)`.
fn receiver_first(mut call: CallExpr, name: &str) -> CallExpr {
    if let Some(target) = call.target.take() {
        call.args.insert(0, *target);
    }
    call.func_name = name.to_owned();
    call
}

fn wrap(function: &str, expr: IdedExpr, amount: Option<i64>) -> IdedExpr {
    let mut args = vec![expr];
    if let Some(amount) = amount {
        args.push(IdedExpr {
            id: 0,
            expr: Expr::Literal(LiteralValue::Int(amount.into())),
        });
    }
    IdedExpr {
        id: 0,
        expr: Expr::Call(CallExpr {
            target: None,
            func_name: function.to_owned(),
            args,
        }),
    }
}

fn charge(expr: IdedExpr, amount: i64) -> IdedExpr {
    wrap(CHARGE, expr, Some(amount))
}

fn charge_size(expr: IdedExpr, permille: i64) -> IdedExpr {
    wrap(CHARGE_SIZE, expr, Some(permille))
}

/// One evaluation's cost, per thread: `spent` so far, whether it went past the limit, and
/// whether an evaluation is being metered at all.
#[derive(Clone, Copy, Default)]
struct Meter {
    spent: u64,
    exceeded: bool,
    active: bool,
    /// The Kubernetes minor release whose cel-go is counted.
    minor: u32,
}

thread_local! {
    static METER: Cell<Meter> = const { Cell::new(Meter { spent: 0, exceeded: false, active: false, minor: 0 }) };
}

/// The Kubernetes minor release of the evaluation under way (0 outside one).
pub(crate) fn minor() -> u32 {
    METER.get().minor
}

/// Runs `evaluate` under a fresh budget of [`MAX_COST`]; the flag says whether it went past
/// it. Past it, the result is meaningless: `&&` and `||` may have absorbed the error.
pub(crate) fn metered<T>(minor: u32, evaluate: impl FnOnce() -> T) -> (T, bool) {
    let outer = METER.replace(Meter {
        active: true,
        minor,
        ..Meter::default()
    });
    let result = evaluate();
    let meter = METER.replace(outer);
    (result, meter.exceeded)
}

/// Charges `amount`; an error once the evaluation is past the limit (and on every later
/// charge, so loops stop).
pub(crate) fn spend(amount: u64) -> Result<(), ExecutionError> {
    let mut meter = METER.get();
    if !meter.active {
        return Ok(());
    }
    meter.spent = meter.spent.saturating_add(amount);
    meter.exceeded |= meter.spent > MAX_COST;
    METER.set(meter);
    if meter.exceeded {
        return Err(ExecutionError::function_error("cost", COST_LIMIT_EXCEEDED));
    }
    Ok(())
}

/// cel-go's `actualSize`: characters of a string, bytes, entries of a list or map, else 1.
pub(crate) fn size_of(value: &dyn Val) -> u64 {
    if let Some(s) = value.downcast_ref::<CelString>() {
        return s.inner().chars().count() as u64;
    }
    if let Some(b) = value.downcast_ref::<CelBytes>() {
        return b.inner().len() as u64;
    }
    value
        .as_sizer()
        .map_or(1, |s| u64::try_from(*s.size().inner()).unwrap_or(0))
}

/// The charging functions [`instrument`] calls.
pub(crate) fn library(env: &mut Env) -> Result<(), cel::DeclarationError> {
    fn amount(args: &[CowVal<'_, '_>]) -> u64 {
        args.get(1)
            .and_then(|a| a.downcast_ref::<CelInt>())
            .map_or(0, |i| u64::try_from(*i.inner()).unwrap_or(0))
    }
    fn first<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> CowVal<'b, 'v> {
        args.swap_remove(0)
    }
    fn charge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        spend(amount(&args))?;
        Ok(first(args))
    }
    fn charge_size<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        spend(traversal(size_of(args[0].as_ref()), amount(&args)))?;
        Ok(first(args))
    }
    // cel-go charges `+` of strings or bytes by both sizes (= the result's), else 1.
    fn charge_add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let value = args[0].as_ref();
        let text = value.downcast_ref::<CelString>().is_some()
            || value.downcast_ref::<CelBytes>().is_some();
        spend(if text {
            traversal(size_of(value), 100)
        } else {
            1
        })?;
        Ok(first(args))
    }
    fn matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let text = super::calls::string_arg(&args, 0, "matches")?;
        let pattern = super::calls::string_arg(&args, 1, "matches")?;
        // Charged before the regex is built or run: a pattern past the limit costs nothing.
        let string_cost = traversal(text.chars().count() as u64 + 1, 100);
        spend(string_cost.saturating_mul(traversal(pattern.chars().count() as u64, 250)))?;
        match super::strings::go_regex(pattern) {
            Ok(re) => Ok(CowVal::owned(CelBool::from(re.is_match(text)))),
            Err(err) => Err(ExecutionError::function_error(
                "matches",
                format!("'{pattern}' not a valid regex:\n{err}"),
            )),
        }
    }
    // ext/lists.go `lists.range(n)`: tracked as n + 1 (the call) + 10 (the list), charged
    // here before the `cel` crate builds it. cel-go v0.26 (1.34-1.36) builds any size (an
    // empty list below 0), v0.29 (1.37) refuses below 0 and above 1,000,000 as the crate does.
    fn range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let Some(n) = args[0].downcast_ref::<CelInt>().map(|n| *n.inner()) else {
            return Ok(first(args));
        };
        if METER.get().minor >= 37 {
            if (0..=1_000_000).contains(&n) {
                spend(n.unsigned_abs() + 11)?;
            }
            return Ok(first(args));
        }
        spend(n.max(0).unsigned_abs().saturating_add(11))?;
        Ok(CowVal::owned(CelInt::from(n.max(0))))
    }
    fn contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
        let text = super::calls::string_arg(&args, 0, "contains")?;
        let needle = super::calls::string_arg(&args, 1, "contains")?;
        spend(
            traversal(text.chars().count() as u64, 100)
                .saturating_mul(traversal(needle.chars().count() as u64, 100)),
        )?;
        Ok(CowVal::owned(CelBool::from(text.contains(needle))))
    }
    env.add_overload(CHARGE, "charge", vec![DYN_TYPE, INT_TYPE], charge)?;
    env.add_overload(
        CHARGE_SIZE,
        "charge_size",
        vec![DYN_TYPE, INT_TYPE],
        charge_size,
    )?;
    env.add_overload(CHARGE_ADD, "charge_add", vec![DYN_TYPE], charge_add)?;
    env.add_overload(RANGE, "charged_range", vec![DYN_TYPE], range)?;
    env.add_overload(
        MATCHES,
        "costed_matches",
        vec![STRING_TYPE, STRING_TYPE],
        matches,
    )?;
    env.add_overload(
        CONTAINS,
        "costed_contains",
        vec![STRING_TYPE, STRING_TYPE],
        contains,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The issue's cases, each built here and each answered within a second; then a seeded
    //! fuzz of selectors over random devices.

    use std::time::Duration;

    use super::super::{DeviceValue, Outcome, Selector, Validation};
    use super::*;
    use crate::explain::{DeviceRecord, OwnedAttribute};

    fn gpu() -> DeviceRecord {
        DeviceRecord {
            driver: "media.liken.sh".into(),
            pool: "node-1".into(),
            name: "gpu-0".into(),
            attributes: vec![
                ("decodeHEVCMain10".into(), OwnedAttribute::Bool(true)),
                ("cores".into(), OwnedAttribute::Int(8)),
                ("driver".into(), OwnedAttribute::String("i915".into())),
            ],
            capacities: vec![("dra.example.com/memory".into(), "16Gi".into())],
            ..Default::default()
        }
    }

    /// What one case may take, in this thread's CPU time (wall time grows with the machine's
    /// load): a second, three unoptimized (a selector that runs to the cost limit spends 1.5 s
    /// there).
    const BOUND: Duration = Duration::from_secs(if cfg!(debug_assertions) { 3 } else { 1 });

    /// The CPU time (user and system) this thread has used, from /proc: utime and stime are
    /// fields 14 and 15, 11 and 12 after the state that follows the parenthesized name; in
    /// ticks of USER_HZ, 100 on every Linux this runs on.
    fn thread_cpu() -> Duration {
        let text = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self");
        let fields: Vec<&str> = text[text.rfind(')').expect("comm") + 2..]
            .split(' ')
            .collect();
        let tick = |i: usize| fields[i].parse::<u64>().expect("a tick count");
        Duration::from_millis((tick(11) + tick(12)) * 10)
    }

    /// The outcome from files (validated as new) and in the scheduler (stored), each timed.
    fn outcomes(expression: &str) -> (Outcome, Outcome) {
        let device = gpu();
        let value = DeviceValue::new(&device, 36).unwrap();
        let run = |validation| {
            let started = thread_cpu();
            let outcome = Selector::compile_as(expression, validation).evaluate(&value);
            let took = thread_cpu() - started;
            assert!(
                took < BOUND,
                "{validation:?} took {took:?}: {}",
                &expression[..expression.len().min(80)]
            );
            outcome
        };
        (run(Validation::New { minor: 36 }), run(Validation::Stored))
    }

    fn refused(outcome: &Outcome, reason: &str) {
        match outcome {
            Outcome::CannotEvaluate(text) => assert!(
                text.starts_with("the API server would refuse this expression: ")
                    && text.contains(reason),
                "{text}"
            ),
            other => panic!("expected a refusal ({reason}), got {other:?}"),
        }
    }

    fn cost_exceeded(outcome: &Outcome) {
        assert_eq!(
            outcome,
            &Outcome::RuntimeError(COST_LIMIT_EXCEEDED.to_owned())
        );
    }

    /// `cel.bind(v0, seed, cel.bind(v1, v0 + v0, ... body))`: a value doubled `times` times.
    fn doubled(seed: &str, times: usize, body: &str) -> String {
        let mut out = format!("cel.bind(v0, {seed}, ");
        for i in 1..=times {
            out.push_str(&format!("cel.bind(v{i}, v{} + v{}, ", i - 1, i - 1));
        }
        out.push_str(&body.replace("LAST", &format!("v{times}")));
        out.push_str(&")".repeat(times + 1));
        out
    }

    #[test]
    fn a_chain_of_5000_additions_is_too_deep_not_a_stack_overflow() {
        let chain = format!("1{}>0", "+1".repeat(4999));
        assert!(chain.len() <= MAX_LENGTH);
        let (new, stored) = outcomes(&chain);
        refused(&new, "recursion limit exceeded: 250");
        refused(&stored, "recursion limit exceeded: 250");
    }

    #[test]
    fn deep_index_chains_are_too_long_or_too_deep() {
        let chain = |n: usize| format!("[0]{} == 0", "[0]".repeat(n));
        let (new, stored) = outcomes(&chain(4500));
        refused(&new, "Too long: may not be more than 10240 bytes");
        refused(&stored, "Too long");
        let (new, stored) = outcomes(&chain(3400));
        refused(&new, "recursion limit exceeded");
        refused(&stored, "recursion limit exceeded");
    }

    #[test]
    fn nesting_at_the_limit_is_evaluated_on_a_small_stack() {
        // 248 lists in one another (cel-go's `expr` rule 249 deep) around a chain of 240 `+`:
        // accepted by cel-go, and hundreds of levels for the evaluator.
        let inner = format!("1{}", "+1".repeat(240));
        let nested = format!(
            "{}{inner}{} == {}241{}",
            "[".repeat(248),
            "]".repeat(248),
            "[".repeat(248),
            "]".repeat(248),
        );
        assert!(
            nesting_depth_of(&nested) <= MAX_RECURSION_DEPTH,
            "{}",
            nesting_depth_of(&nested)
        );
        let outcome = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || outcomes(&nested))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(outcome, (Outcome::Match(true), Outcome::Match(true)));
        // One more `expr` level is one too many.
        let over = format!("{}true{}", "[".repeat(251), "]".repeat(251));
        refused(&outcomes(&over).0, "recursion limit exceeded");
    }

    fn nesting_depth_of(expression: &str) -> usize {
        let expr = stacker::grow(64 << 20, || {
            super::super::env::environment()
                .parser()
                .max_recursion_depth(u16::MAX)
                .parse(expression)
                .unwrap()
        });
        let depth = nesting_depth(&expr);
        stacker::grow(64 << 20, move || drop(expr));
        depth
    }

    #[test]
    fn nine_nested_alls_are_too_complex_and_stop_at_the_cost_limit() {
        let list = format!(
            "[{}]",
            (0..10)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut expression = "true".to_owned();
        for depth in 0..9 {
            expression = format!("{list}.all(x{depth}, {expression})");
        }
        let (new, stored) = outcomes(&expression);
        refused(&new, "too complex, exceeds cost limit");
        cost_exceeded(&stored);
    }

    #[test]
    fn sets_over_two_20000_element_lists_stop_before_comparing() {
        let (new, stored) =
            outcomes("sets.contains(lists.range(20000), lists.range(20000).reverse())");
        refused(&new, "too complex");
        cost_exceeded(&stored);
    }

    #[test]
    fn a_100000_branch_regex_is_charged_before_it_is_built() {
        // "a|" doubled 17 times: 131,072 branches; matched against 256 characters.
        let pattern = doubled(r#""a|""#, 17, "LAST");
        let expression = doubled(
            r#""x""#,
            8,
            &format!("LAST.matches({})", pattern.replace("v", "p")),
        );
        let (new, stored) = outcomes(&expression);
        refused(&new, "too complex");
        cost_exceeded(&stored);
    }

    #[test]
    fn a_million_element_list_literal_is_too_long() {
        let list = format!("size([{}0]) > 0", "0,".repeat(999_999));
        let (new, stored) = outcomes(&list);
        refused(&new, "Too long");
        refused(&stored, "Too long");
    }

    #[test]
    fn a_string_doubled_40_times_stops_at_the_cost_limit() {
        let expression = doubled(r#""xx""#, 40, "size(LAST) > 0");
        let (new, stored) = outcomes(&expression);
        refused(&new, "too complex");
        cost_exceeded(&stored);
    }

    #[test]
    fn the_limit_is_cel_go_s_count() {
        // Each iteration of `all` costs 5 (the loop condition's call and variable, the step's
        // variable, `>` and `x`); the range n + 10 for the list + 1 for the call; the result 1:
        // 6n + 12 below and above 1,000,000.
        let run = |n: u64| {
            let device = gpu();
            let value = DeviceValue::new(&device, 36).unwrap();
            Selector::compile_as(
                &format!("lists.range({n}).all(x, x >= 0)"),
                Validation::Stored,
            )
            .evaluate(&value)
        };
        assert_eq!(run(166_664), Outcome::Match(true));
        cost_exceeded(&run(166_665));
    }

    #[test]
    fn typical_selectors_are_accepted() {
        for expression in [
            r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].decodeHEVCMain10"#,
            r#"device.attributes["media.liken.sh"].driver.matches("^i9[0-9]+$")"#,
            r#"device.attributes["media.liken.sh"].exists(n, n.startsWith("decode"))"#,
            r#"cel.bind(m, device.attributes["media.liken.sh"], m.cores >= 4 && m.driver in ["i915", "xe"])"#,
            r#"device.capacity["dra.example.com"].memory.compareTo(quantity("8Gi")) >= 0"#,
        ] {
            let (new, stored) = outcomes(expression);
            assert_eq!(new, Outcome::Match(true), "{expression}");
            assert_eq!(stored, new, "{expression}");
        }
    }

    /// Seeded fuzz: random selectors from a grammar of CEL's forms and mutations of real ones
    /// (cut, spliced, repeated, nested), on random devices. Each case within [`BOUND`], never a
    /// panic; the classes reached are counted and must all be reached.
    #[test]
    fn fuzzed_selectors_are_answered_within_bounds() {
        const CASES: usize = 600;
        const SEEDS: [&str; 6] = [
            r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].cores >= 4"#,
            r#"device.attributes["media.liken.sh"].driver.matches("^i9[0-9]+$")"#,
            r#"cel.bind(m, device.attributes["media.liken.sh"], m.decodeHEVCMain10 || m.cores > 2)"#,
            r#"[1, 2, 3].all(x, x > 0) && sets.contains([1, 2], [2])"#,
            r#"device.capacity["dra.example.com"].memory.compareTo(quantity("8Gi")) >= 0"#,
            r#"lists.range(10).map(x, x * 2).exists(y, y == 18)"#,
        ];
        let mut rng = fastrand::Rng::with_seed(21);
        let mut classes = std::collections::BTreeMap::<&str, usize>::new();
        for case in 0..CASES {
            let expression = if case % 2 == 0 {
                generated(&mut rng, 0)
            } else {
                let seed = SEEDS[rng.usize(..SEEDS.len())];
                mutated(&mut rng, seed)
            };
            let device = random_device(&mut rng);
            let Ok(value) = DeviceValue::new(&device, 36) else {
                continue;
            };
            let started = thread_cpu();
            let outcome = Selector::compile_as(&expression, Validation::Stored).evaluate(&value);
            let took = thread_cpu() - started;
            assert!(took < BOUND, "case {case} took {took:?}: {expression}");
            let class = match &outcome {
                Outcome::Match(true) => "true",
                Outcome::Match(false) => "false",
                Outcome::RuntimeError(m) if m == COST_LIMIT_EXCEEDED => "cost limit exceeded",
                Outcome::RuntimeError(_) => "other runtime error",
                Outcome::CannotEvaluate(r) if r.contains("recursion limit") => "too deep",
                Outcome::CannotEvaluate(r) if r.contains("Too long") => "too long",
                Outcome::CannotEvaluate(r) if r.contains("does not parse") => "does not parse",
                Outcome::CannotEvaluate(_) => "other cannot evaluate",
            };
            *classes.entry(class).or_default() += 1;
        }
        eprintln!("{CASES} fuzzed selectors: {classes:?}");
        for class in [
            "true",
            "false",
            "cost limit exceeded",
            "other runtime error",
            "too deep",
            "too long",
            "does not parse",
        ] {
            assert!(
                classes.contains_key(class),
                "no case reached {class}: {classes:?}"
            );
        }
    }

    fn random_device(rng: &mut fastrand::Rng) -> DeviceRecord {
        let mut device = gpu();
        device.attributes = (0..rng.usize(0..6))
            .map(|i| {
                let value = match rng.u8(..4) {
                    0 => OwnedAttribute::Bool(rng.bool()),
                    1 => OwnedAttribute::Int(rng.i64(-3..10)),
                    2 => OwnedAttribute::String("x".repeat(rng.usize(0..64))),
                    _ => OwnedAttribute::Version(format!("1.{}.0", rng.u8(..9))),
                };
                (
                    ["cores", "driver", "decodeHEVCMain10", "a", "b", "c"][i].to_owned(),
                    value,
                )
            })
            .collect();
        device
    }

    /// An expression of CEL's forms, nested at most a few levels, now and then a long chain,
    /// a deep nesting or a costly loop.
    fn generated(rng: &mut fastrand::Rng, depth: usize) -> String {
        const LEAVES: [&str; 9] = [
            "1",
            "true",
            r#""a""#,
            "device.driver",
            r#"device.attributes["media.liken.sh"].cores"#,
            r#"device.attributes["media.liken.sh"].driver"#,
            "[1, 2, 3]",
            "lists.range(1000)",
            r#"{"k": 1}"#,
        ];
        if depth > 4 || rng.u8(..3) == 0 {
            return LEAVES[rng.usize(..LEAVES.len())].to_owned();
        }
        let mut sub = || generated(rng, depth + 1);
        let (a, b) = (sub(), sub());
        match rng.u8(..16) {
            0 => format!("{a} + {b}"),
            1 => format!("{a} == {b}"),
            2 => format!("{a} && {b}"),
            3 => format!("{a} || !{b}"),
            4 => format!("{a} ? {b} : {a}"),
            5 => format!("{a}.all(x, {b})"),
            6 => format!("{a}.map(x, {b})"),
            7 => format!("size({a}) < 3"),
            8 => format!("{a}[0]"),
            9 => format!("cel.bind(v, {a}, v + v)"),
            10 => format!(r#"string({a}).matches("^a+$")"#),
            11 => format!("sets.intersects({a}, {b})"),
            12 => format!("{a} in {b}"),
            13 => format!("1{} > 0", "+1".repeat(rng.usize(200..5000))),
            14 => format!(
                "{}{a}{}",
                "(".repeat(rng.usize(100..400)),
                ")".repeat(rng.usize(100..400))
            ),
            _ => format!(
                "lists.range({}).all(x, lists.range(1000).exists(y, y < 0))",
                rng.usize(1..100)
            ),
        }
    }

    /// `seed` cut, spliced, repeated or nested.
    fn mutated(rng: &mut fastrand::Rng, seed: &str) -> String {
        let mut text = seed.to_owned();
        for _ in 0..rng.usize(1..4) {
            let at = rng.usize(..=text.len());
            let at = (0..=at)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            match rng.u8(..6) {
                0 => text.truncate(at),
                1 => text.insert_str(
                    at,
                    ["(", ")", "[", "]", ".", "+", "&&", "\"", ","][rng.usize(..9)],
                ),
                2 => text = format!("{text} && {}", &text[..at]),
                3 => text = text.repeat(rng.usize(2..200)),
                4 => {
                    text = format!(
                        "{}{text}{}",
                        "[".repeat(rng.usize(1..300)),
                        "]".repeat(rng.usize(1..300))
                    )
                }
                _ => {
                    text = format!(
                        "cel.bind(s, {text}, [s, s, s, s].all(a, [s, s].exists(b, a == b)))"
                    )
                }
            }
        }
        text
    }
}
