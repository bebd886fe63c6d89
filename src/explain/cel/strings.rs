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
pub(super) fn check_literal_regexes(expr: &IdedExpr) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::super::tests::*;
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
