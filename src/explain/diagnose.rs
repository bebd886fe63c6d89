//! Why one selector does not select one device: the first clause of its top-level `&&` chain
//! that is false, with the attribute values that clause read (`scale10bit is false`), or the
//! clause that fails at run time, in cel-go's words. The scheduler keeps this only in its V(7)
//! logs; `why` prints it.
//!
//! The clauses are evaluated one by one with the same evaluator as the whole selector, and the
//! whole selector's outcome decides what is reported: CEL's `&&` absorbs errors (`error &&
//! false` is `false`), so the false clause is reported even when an earlier one errs.

use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue, operators};

use super::DeviceView;
use super::cel::{DeviceValue, Outcome, Selector, evaluate_expr, visit};

/// What the diagnosis found for one selector on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Finding {
    /// The selector selects the device.
    Selected,
    /// The selector is false; `clause` is the first false clause of its top-level `&&` chain
    /// (the whole expression when it has no `&&`).
    False { clause: Clause },
    /// The selector fails at run time; `clause` is the first clause that fails.
    RuntimeError { clause: Clause, message: String },
    /// The evaluator cannot decide.
    CannotEvaluate { reason: String },
}

/// One clause of a selector and what it read from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Clause {
    /// Its position in the `&&` chain, from 0.
    pub index: usize,
    /// Its source text.
    pub text: String,
    /// The attributes it reads (`device.attributes[domain].name`) and `device.driver`, with the
    /// device's actual values, in reading order.
    pub reads: Vec<Read>,
}

/// One value a clause reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// `driver`, or the attribute's name as the expression spells it.
    pub name: String,
    /// The attribute's domain (`None` for `device.driver`).
    pub domain: Option<String>,
    /// The device's value as CEL literal text (`false`, `"i915"`), `None` when the device has
    /// no such attribute.
    pub value: Option<String>,
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{} is {value}", self.name),
            None => write!(f, "{} is not set", self.name),
        }
    }
}

/// Diagnoses `selector` on `device` (whose CEL value is `value`).
pub(crate) fn diagnose(
    selector: &Selector,
    value: &DeviceValue,
    device: &dyn DeviceView,
) -> Finding {
    let whole = selector.evaluate(value);
    let program = match (&whole, selector.program()) {
        (Outcome::Match(true), _) => return Finding::Selected,
        (Outcome::CannotEvaluate(reason), _) => {
            return Finding::CannotEvaluate {
                reason: reason.clone(),
            };
        }
        // cel-go's own compile error: the attempt fails on the whole selector.
        (Outcome::RuntimeError(message), None) => {
            return Finding::RuntimeError {
                clause: Clause {
                    index: 0,
                    text: selector
                        .expression()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" "),
                    reads: Vec::new(),
                },
                message: message.clone(),
            };
        }
        (_, None) => {
            return Finding::CannotEvaluate {
                reason: "the selector did not compile".to_owned(),
            };
        }
        (_, Some(program)) => program,
    };
    let source = selector.expression();
    let info = program.source_info();
    let mut clauses = Vec::new();
    flatten_and(program.expression(), &mut clauses);
    // The source split at its top-level `&&`s is each clause's text as written; node offsets
    // (which macros blur) are the fallback when the two do not line up.
    let pieces = split_top_level_and(source).filter(|p| p.len() == clauses.len());
    let clause = |index: usize, expr: &IdedExpr| Clause {
        index,
        text: match &pieces {
            Some(pieces) => pieces[index].clone(),
            None => clause_text(expr, source, info),
        },
        reads: reads(expr, device),
    };
    for (index, expr) in clauses.iter().enumerate() {
        let outcome = evaluate_expr(expr, value);
        match (&whole, outcome) {
            (Outcome::Match(false), Ok(cel::Value::Bool(false))) => {
                return Finding::False {
                    clause: clause(index, expr),
                };
            }
            (Outcome::RuntimeError(_), Err(Outcome::RuntimeError(message))) => {
                return Finding::RuntimeError {
                    clause: clause(index, expr),
                    message,
                };
            }
            _ => {}
        }
    }
    // The chain as a whole decides (a non-boolean result, or an error only the whole shows).
    let clause = Clause {
        index: 0,
        text: source.split_whitespace().collect::<Vec<_>>().join(" "),
        reads: reads(program.expression(), device),
    };
    match whole {
        Outcome::RuntimeError(message) => Finding::RuntimeError { clause, message },
        _ => Finding::False { clause },
    }
}

/// The clauses of a selector's top-level `&&` chain as written, whitespace collapsed; `None`
/// when it did not compile.
pub(crate) fn clause_texts(selector: &Selector) -> Option<Vec<String>> {
    let program = selector.program()?;
    let mut clauses = Vec::new();
    flatten_and(program.expression(), &mut clauses);
    let source = selector.expression();
    Some(
        match split_top_level_and(source).filter(|p| p.len() == clauses.len()) {
            Some(pieces) => pieces,
            None => clauses
                .iter()
                .map(|c| clause_text(c, source, program.source_info()))
                .collect(),
        },
    )
}

/// Each clause of the selector's top-level `&&` chain on one device: `Some(b)` for a boolean,
/// `None` for an error or a value of another type. `None` overall when it did not compile.
pub(crate) fn clause_values(selector: &Selector, value: &DeviceValue) -> Option<Vec<Option<bool>>> {
    let program = selector.program()?;
    let mut clauses = Vec::new();
    flatten_and(program.expression(), &mut clauses);
    Some(
        clauses
            .iter()
            .map(|c| match evaluate_expr(c, value) {
                Ok(cel::Value::Bool(b)) => Some(b),
                _ => None,
            })
            .collect(),
    )
}

/// The attributes a selector reads by a literal domain (`device.attributes["d"].name`), as
/// (domain, name), each once, in reading order: what `why` checks against the names the fleet
/// publishes.
pub(crate) fn attribute_names(selector: &Selector) -> Vec<(String, String)> {
    let Some(program) = selector.program() else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    visit(program.expression(), &mut |e| {
        let Some((operand, name)) = field_access(e) else {
            return;
        };
        if let Some(domain) = domain_of(operand) {
            let pair = (domain, name.to_owned());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    });
    out
}

/// The clauses of a top-level `a && b && c` chain, left to right.
fn flatten_and<'e>(expr: &'e IdedExpr, out: &mut Vec<&'e IdedExpr>) {
    match &expr.expr {
        Expr::Call(CallExpr {
            func_name,
            target: None,
            args,
        }) if func_name == operators::LOGICAL_AND && args.len() == 2 => {
            flatten_and(&args[0], out);
            flatten_and(&args[1], out);
        }
        _ => out.push(expr),
    }
}

/// `source` split at its `&&`s outside brackets and string literals, each piece with its
/// whitespace collapsed; `None` when a top-level `||` or `?:` makes the root something else.
fn split_top_level_and(source: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = source.chars().collect();
    let (mut depth, mut i, mut piece_start) = (0i32, 0usize, 0usize);
    let mut pieces = Vec::new();
    let piece = |from: usize, to: usize| {
        chars[from..to]
            .iter()
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'') => {
                // Triple-quoted strings end at the same triple; others at the next unescaped quote.
                let triple = chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote);
                i += if triple { 3 } else { 1 };
                while i < chars.len() {
                    if chars[i] == '\\' {
                        i += 2;
                        continue;
                    }
                    if chars[i] == quote
                        && (!triple
                            || (chars.get(i + 1) == Some(&quote)
                                && chars.get(i + 2) == Some(&quote)))
                    {
                        i += if triple { 3 } else { 1 };
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '&' if depth == 0 && chars.get(i + 1) == Some(&'&') => {
                pieces.push(piece(piece_start, i));
                i += 2;
                piece_start = i;
                continue;
            }
            '|' if depth == 0 => return None,
            // A ternary, not the optional syntax `.?field`.
            '?' if depth == 0 && i > 0 && chars[i - 1] != '.' => return None,
            _ => {}
        }
        i += 1;
    }
    pieces.push(piece(piece_start, chars.len()));
    Some(pieces)
}

/// The source text of `expr`: from the first to the last character any of its nodes was
/// parsed from, widened to balance parentheses.
fn clause_text(expr: &IdedExpr, source: &str, info: &cel::common::ast::SourceInfo) -> String {
    let (mut start, mut stop) = (u32::MAX, 0u32);
    visit(expr, &mut |e| {
        if let Some((s, t)) = info.offset_for(e.id) {
            start = start.min(s);
            stop = stop.max(t);
        }
    });
    if start == u32::MAX {
        return String::new();
    }
    let chars: Vec<char> = source.chars().collect();
    let (mut start, mut stop) = (
        start as usize,
        (stop as usize).min(chars.len().saturating_sub(1)),
    );
    // A selected field's name and the brackets and quotes that close the clause are not nodes
    // of their own: take them in while the text is unbalanced or mid-identifier.
    while let Some(&next) = chars.get(stop + 1) {
        let text = &chars[start..=stop];
        let takes = (next.is_alphanumeric() || next == '_' || next == '?')
            && (chars[stop] == '.'
                || chars[stop] == '?'
                || chars[stop].is_alphanumeric()
                || chars[stop] == '_')
            || (matches!(next, ')' | ']') && balance(text) > 0)
            || (matches!(next, '"' | '\'') && unbalanced_quote(text));
        if !takes {
            break;
        }
        stop += 1;
    }
    // Parentheses around the whole clause belong to it.
    loop {
        let before = chars[..start].iter().rposition(|c| !c.is_whitespace());
        let after = chars
            .iter()
            .skip(stop + 1)
            .position(|c| !c.is_whitespace())
            .map(|p| p + stop + 1);
        match (before, after) {
            (Some(b), Some(a)) if chars[b] == '(' && chars[a] == ')' => {
                start = b;
                stop = a;
            }
            _ => break,
        }
    }
    chars[start..=stop]
        .iter()
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn balance(chars: &[char]) -> i32 {
    chars
        .iter()
        .map(|c| match c {
            '(' | '[' => 1,
            ')' | ']' => -1,
            _ => 0,
        })
        .sum()
}

fn unbalanced_quote(chars: &[char]) -> bool {
    chars.iter().filter(|c| **c == '"').count() % 2 == 1
        || chars.iter().filter(|c| **c == '\'').count() % 2 == 1
}

/// The attribute reads of `expr`: `device.attributes["d"].name`, `device.attributes["d"]["name"]`
/// and their optional forms, and `device.driver`.
fn reads(expr: &IdedExpr, device: &dyn DeviceView) -> Vec<Read> {
    let mut out: Vec<Read> = Vec::new();
    let mut push = |read: Read| {
        if !out.contains(&read) {
            out.push(read);
        }
    };
    visit(expr, &mut |e| {
        let Some((operand, name)) = field_access(e) else {
            return;
        };
        if is_device_field(operand, "attributes").is_some()
            || is_device_field(operand, "capacity").is_some()
        {
            return; // `device.attributes[domain]` itself; its fields are the reads.
        }
        if matches!(&operand.expr, Expr::Ident(v) if v == "device") && name == "driver" {
            push(Read {
                name: "driver".into(),
                domain: None,
                value: Some(format!("{:?}", device.driver())),
            });
            return;
        }
        if let Some(domain) = domain_of(operand) {
            let value = device.attribute(&domain, name).map(|v| v.to_string());
            push(Read {
                name: name.to_owned(),
                domain: Some(domain),
                value,
            });
        }
    });
    out
}

/// A field read by name: `x.name`, `x["name"]` and their optional forms, as (x, name).
fn field_access(e: &IdedExpr) -> Option<(&IdedExpr, &str)> {
    match &e.expr {
        Expr::Select(select) => Some((&*select.operand, select.field.as_str())),
        Expr::Call(CallExpr {
            func_name,
            target: None,
            args,
        }) if (func_name == operators::INDEX
            || func_name == operators::OPT_INDEX
            || func_name == operators::OPT_SELECT)
            && args.len() == 2 =>
        {
            Some((&args[0], string_literal(&args[1])?))
        }
        _ => None,
    }
}

/// `device.attributes[<literal>]` → the domain.
fn domain_of(expr: &IdedExpr) -> Option<String> {
    match &expr.expr {
        Expr::Call(CallExpr {
            func_name,
            target: None,
            args,
        }) if (func_name == operators::INDEX || func_name == operators::OPT_INDEX)
            && args.len() == 2 =>
        {
            is_device_field(&args[0], "attributes")?;
            string_literal(&args[1]).map(str::to_owned)
        }
        _ => None,
    }
}

fn is_device_field(expr: &IdedExpr, field: &str) -> Option<()> {
    match &expr.expr {
        Expr::Select(select)
            if select.field == field
                && matches!(&select.operand.expr, Expr::Ident(v) if v == "device") =>
        {
            Some(())
        }
        _ => None,
    }
}

fn string_literal(expr: &IdedExpr) -> Option<&str> {
    match &expr.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::{DeviceRecord, OwnedAttribute};

    fn gpu() -> DeviceRecord {
        DeviceRecord {
            driver: "media.liken.sh".into(),
            pool: "n1".into(),
            name: "gpu-a".into(),
            attributes: vec![
                ("decodeHEVCMain10".into(), OwnedAttribute::Bool(true)),
                ("scale10bit".into(), OwnedAttribute::Bool(false)),
                ("driver".into(), OwnedAttribute::String("i915".into())),
            ],
            ..Default::default()
        }
    }

    fn find(expression: &str) -> Finding {
        let device = gpu();
        let value = DeviceValue::new(&device, 36).unwrap();
        diagnose(&Selector::compile(expression), &value, &device)
    }

    const CLASS: &str = "device.driver == \"media.liken.sh\" &&\ndevice.attributes[\"media.liken.sh\"].decodeHEVCMain10 &&\ndevice.attributes[\"media.liken.sh\"].scale10bit\n";

    #[test]
    fn the_first_false_clause_with_the_value_it_read() {
        let Finding::False { clause } = find(CLASS) else {
            panic!("{:?}", find(CLASS))
        };
        assert_eq!(clause.index, 2);
        assert_eq!(
            clause.text,
            r#"device.attributes["media.liken.sh"].scale10bit"#
        );
        assert_eq!(
            clause
                .reads
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["scale10bit is false"]
        );
    }

    #[test]
    fn the_driver_clause() {
        let Finding::False { clause } =
            find(r#"device.driver == "liken.sh" && has(device.attributes["liken.sh"].renderNode)"#)
        else {
            panic!()
        };
        assert_eq!(clause.index, 0);
        assert_eq!(clause.text, r#"device.driver == "liken.sh""#);
        assert_eq!(clause.reads[0].to_string(), r#"driver is "media.liken.sh""#);
    }

    #[test]
    fn parenthesised_clauses_and_comparisons() {
        let Finding::False { clause } = find(
            r#"device.attributes["media.liken.sh"].decodeHEVCMain10 && (device.attributes["media.liken.sh"].driver == "iHD" || device.attributes["media.liken.sh"]["scale10bit"])"#,
        ) else {
            panic!()
        };
        assert_eq!(clause.index, 1);
        assert_eq!(
            clause.text,
            r#"(device.attributes["media.liken.sh"].driver == "iHD" || device.attributes["media.liken.sh"]["scale10bit"])"#
        );
        assert_eq!(
            clause
                .reads
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [r#"driver is "i915""#, "scale10bit is false"]
        );
    }

    #[test]
    fn an_errorless_false_clause_wins_over_an_earlier_error() {
        // `error && false` is false: the scheduler sees no error, so neither do we.
        let Finding::False { clause } = find(
            r#"device.attributes["media.liken.sh"].decodeAV2 && device.attributes["media.liken.sh"].scale10bit"#,
        ) else {
            panic!()
        };
        assert_eq!(clause.index, 1);
    }

    #[test]
    fn runtime_errors_name_the_clause_and_the_missing_attribute() {
        let finding = find(
            r#"device.driver == "media.liken.sh" && device.attributes["media.liken.sh"].decodeAV2"#,
        );
        let Finding::RuntimeError { clause, message } = finding else {
            panic!("{finding:?}")
        };
        assert_eq!(message, "no such key: decodeAV2");
        assert_eq!(clause.index, 1);
        assert_eq!(clause.reads[0].to_string(), "decodeAV2 is not set");
    }

    #[test]
    fn macros_keep_their_name() {
        let finding = find(
            r#"device.driver == "media.liken.sh" && has(device.attributes["liken.sh"].renderNode)"#,
        );
        let Finding::False { clause } = finding else {
            panic!("{finding:?}")
        };
        assert_eq!(
            clause.text,
            r#"has(device.attributes["liken.sh"].renderNode)"#
        );
        assert_eq!(clause.reads[0].to_string(), "renderNode is not set");
        let finding = find(
            r#"device.attributes["media.liken.sh"].?decodeHEVCMain10.orValue(false) && cel.bind(m, device.attributes["media.liken.sh"], m.scale10bit)"#,
        );
        let Finding::False { clause } = finding else {
            panic!("{finding:?}")
        };
        assert_eq!(
            clause.text,
            r#"cel.bind(m, device.attributes["media.liken.sh"], m.scale10bit)"#
        );
    }

    #[test]
    fn selected_and_cannot_evaluate() {
        assert_eq!(
            find(r#"device.attributes["media.liken.sh"].decodeHEVCMain10"#),
            Finding::Selected
        );
        assert!(matches!(
            find(r#"ip("10.0.0.1").family() == 4"#),
            Finding::CannotEvaluate { .. }
        ));
    }
}
