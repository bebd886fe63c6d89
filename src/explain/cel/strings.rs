//! Strings and regular expressions: the `cel` crate's strings extension serves the string
//! functions; what is here makes `matches()` refuse, as Go's `regexp` (RE2 syntax) does,
//! a pattern the `regex` crate would accept.

use cel::common::ast::{Expr, IdedExpr, LiteralValue};

use super::visit;
use crate::text::one_line;

/// Refuses a `matches` whose pattern is a literal that Go's `regexp` refuses: cel-go compiles
/// constant patterns when it plans the program (`interpreter.CompileRegexConstants`), so the
/// selector fails to compile even where `&&` would skip the call. The `regex` crate's syntax is
/// close to RE2's but not the same (docs/why-format.md lists the differences).
pub(super) fn check_literal_regexes(expr: &IdedExpr) -> Result<(), LiteralRegexError> {
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
            problem = Some(LiteralRegexError(err));
        }
    });
    problem.map_or(Ok(()), Err)
}

/// A literal pattern Go's `regexp` refuses, in cel-go's words (on one line).
#[derive(Debug, thiserror::Error)]
#[error(
    "program instantiation failed: error parsing regexp: {}",
    one_line(&.0.to_string(), usize::MAX)
)]
pub(super) struct LiteralRegexError(#[source] RegexError);

/// Why a pattern is refused: Go's repeat limit, or the `regex` crate's syntax error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegexError {
    #[error("invalid repeat count: `{0}`")]
    RepeatCount(String),
    #[error(transparent)]
    Syntax(#[from] regex::Error),
}

/// Parses `pattern` as Go's `regexp` (RE2 syntax) would, as far as the `regex` crate can tell.
pub(crate) fn go_regex(pattern: &str) -> Result<regex::Regex, RegexError> {
    if let Some(repeat) = repeat_over_limit(pattern) {
        return Err(RegexError::RepeatCount(repeat.to_owned()));
    }
    Ok(regex::Regex::new(pattern)?)
}

/// Go's regexp/syntax refuses a repeat count over 1,000 (`a{1001}`), which the `regex` crate
/// takes: the first such `{n}`, `{n,}` or `{n,m}` outside a class, escapes skipped.
fn repeat_over_limit(pattern: &str) -> Option<&str> {
    const MAX_REPEAT: u64 = 1000;
    let b = pattern.as_bytes();
    let (mut i, mut in_class) = (0, false);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'{' if !in_class => {
                let close = pattern[i..].find('}').map(|c| i + c)?;
                let counts = &pattern[i + 1..close];
                let valid = !counts.is_empty()
                    && counts.splitn(2, ',').enumerate().all(|(k, n)| {
                        n.bytes().all(|c| c.is_ascii_digit()) && (k == 1 || !n.is_empty())
                    });
                let over = counts
                    .split(',')
                    .any(|n| n.len() > 4 || n.parse::<u64>().is_ok_and(|n| n > MAX_REPEAT));
                if valid && over {
                    return Some(&pattern[i..=close]);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;

    // Go's regexp/syntax limit (maxRepeat 1000), which the `regex` crate does not have.
    #[test]
    fn repeat_counts_over_1000_are_refused_as_go_refuses_them() {
        for pattern in ["a{1001}", "a{2,1001}", "(ab){5000,}", "a{99999}"] {
            let error = super::go_regex(pattern).expect_err(pattern).to_string();
            assert!(
                error.starts_with("invalid repeat count: `{"),
                "{pattern}: {error}"
            );
        }
        for pattern in [
            "a{1000}",
            "a{2,1000}",
            r"\{1001}",
            "[{1001}]",
            "a{,1001}",
            "{x}",
        ] {
            assert_eq!(super::repeat_over_limit(pattern), None, "{pattern}");
        }
        error(
            r#""a".matches("a{1001}")"#,
            "program instantiation failed: error parsing regexp: invalid repeat count: `{1001}`",
        );
    }
    use super::super::*;

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
}
