//! Text from outside (a server's message, a proxy's error page, a parser's report) made fit for
//! one line of a log or of an error, or for a terminal, and the words for an HTTP answer that
//! came without its own.

use std::borrow::Cow;

/// Cuts `text` to one line: control characters and runs of white space become one space, and
/// more than `max` bytes are cut on a character boundary with `...`.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max.saturating_add(3)));
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.len() > max {
        let mut cut = max;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Whether a terminal would act on `c` rather than show it: C0 controls (ESC starts cursor
/// moves, screen clears and title changes; a newline forges a row), DEL, C1 controls (U+009B is
/// a one-character CSI to xterm), and the bidi controls that reorder what follows them
/// (overrides, embeddings and isolates U+202A..202E, U+2066..2069, as in CVE-2021-42574's
/// "Trojan Source", and the invisible marks U+200E, U+200F, U+061C).
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}'
        )
}

/// `text` as a terminal should show text it did not write (names, messages and attribute
/// values from the cluster or a file): every character a terminal would act on is written
/// visibly instead, `\n`, `\r`, `\t`, `\x1b` (ASCII) or `\u{202e}` (other), so one name stays
/// one cell of one row and cannot colour, move or clear anything. Every human renderer puts
/// outside text through this (the table's [`Cell`](crate::cli::table::Cell), its notes, `why`'s
/// lines, warnings and errors); `-o json|yaml` keep the text exact, escaped by their own rules.
/// A backslash is kept as it is: a name that spells `\x1b` shows the same four characters.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    use std::fmt::Write as _;
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && acts_on_terminal(c) => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` whole when it is at most `max` bytes, else its start and its end (on character
/// boundaries) around a count of what was cut: a value of a megabyte in a parser's message is
/// never repeated whole, and the message's end (`expected i64`) stays.
pub(crate) fn elide(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut head = max * 2 / 3;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 3;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}... ({} bytes cut) ...{}",
        &text[..head],
        tail - head,
        &text[tail..]
    ))
}

/// A line and column, 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// Where YAML flow collections (`[`, `{`) first nest deeper than `max`, if they do: libyaml
/// takes minutes over a hundred thousand `[` before serde_yaml's own recursion limit stops it,
/// so YAML is checked with this first. Brackets in quoted and block scalars count too (this
/// does not parse YAML), which only matters for text with over `max` unclosed brackets.
pub(crate) fn flow_nesting_over(bytes: &[u8], max: usize) -> Option<Place> {
    let (mut depth, mut line, mut column) = (0usize, 1, 1);
    for &b in bytes {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(Place { line, column });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'\n' => {
                line += 1;
                column = 0;
            }
            _ => {}
        }
        column += 1;
    }
    None
}

/// The reason for an answer of `code` that came without a `Status`: Kubernetes' own
/// `StatusReason` where it has one for the code (`InternalError`, `Timeout`, `Invalid`, as
/// apimachinery's `NewGenericServerResponse` names them), else the HTTP reason phrase spelt the
/// same way (`BadGateway`), which says more than client-go's `Unknown`.
pub(crate) fn http_reason(code: u16) -> String {
    let kubernetes = match code {
        413 => Some("RequestEntityTooLarge"),
        422 => Some("Invalid"),
        500 => Some("InternalError"),
        504 => Some("Timeout"),
        _ => None,
    };
    if let Some(reason) = kubernetes {
        return reason.to_owned();
    }
    http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Unknown")
        .split(' ')
        .collect()
}

/// The nearest of `candidates` to `typed` (case-insensitive edit distance), when it is close.
pub(crate) fn nearest<'c>(
    typed: &str,
    candidates: impl Iterator<Item = &'c str>,
) -> Option<String> {
    let lower = typed.to_lowercase();
    candidates
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(typed.len()) / 3).max(2))
        .min()
        .map(|(_, c)| c.to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Place, elide, flow_nesting_over, http_reason, one_line, terminal_safe};

    #[test]
    fn what_a_terminal_acts_on_is_shown_escaped() {
        assert_eq!(terminal_safe("gpu-node-1"), "gpu-node-1");
        assert!(matches!(
            terminal_safe("Arc A770 é"),
            super::Cow::Borrowed(_)
        ));
        assert_eq!(
            terminal_safe("a\x1b[2J\x1b]0;pwned\x07b"),
            "a\\x1b[2J\\x1b]0;pwned\\x07b"
        );
        assert_eq!(
            terminal_safe("row\nforged  ok\r\t"),
            "row\\nforged  ok\\r\\t"
        );
        assert_eq!(terminal_safe("\x00\x7f"), "\\x00\\x7f");
        assert_eq!(terminal_safe("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(
            terminal_safe("abc\u{202e}fed\u{2066}\u{2069}\u{200f}"),
            "abc\\u{202e}fed\\u{2066}\\u{2069}\\u{200f}"
        );
        // Every escape is printable ASCII, and so is what it leaves.
        for c in (0..=0x10ffff_u32).filter_map(char::from_u32) {
            let shown = terminal_safe(c.encode_utf8(&mut [0; 4])).into_owned();
            assert!(
                !shown.chars().any(super::acts_on_terminal),
                "U+{:04X} → {shown:?}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn elide_keeps_both_ends_on_character_boundaries() {
        assert_eq!(elide("short", 10), "short");
        let long = format!(
            "invalid type: string \"{}\", expected i64",
            "é".repeat(1000)
        );
        let cut = elide(&long, 60);
        assert!(cut.starts_with("invalid type: string \"é"), "{cut}");
        assert!(cut.ends_with("\", expected i64"), "{cut}");
        assert!(cut.contains("bytes cut)"), "{cut}");
        assert!(cut.len() < 100, "{cut}");
    }

    #[test]
    fn flow_nesting_is_found_where_it_passes_the_bound() {
        assert_eq!(flow_nesting_over(b"a: [[]]", 2), None);
        assert_eq!(
            flow_nesting_over(b"a:\n  [{[", 2),
            Some(Place { line: 2, column: 5 })
        );
    }

    #[test]
    fn http_reasons_are_spelt_as_kubernetes_spells_reasons() {
        assert_eq!(http_reason(502), "BadGateway");
        assert_eq!(http_reason(503), "ServiceUnavailable");
        assert_eq!(http_reason(429), "TooManyRequests");
        assert_eq!(http_reason(404), "NotFound");
        assert_eq!(http_reason(409), "Conflict");
        assert_eq!(http_reason(422), "Invalid");
        assert_eq!(http_reason(500), "InternalError");
        assert_eq!(http_reason(504), "Timeout");
        assert_eq!(http_reason(599), "Unknown");
    }

    #[test]
    fn text_is_cut_to_one_line() {
        assert_eq!(one_line("a\n  b\tc\r\n", 100), "a b c");
        assert_eq!(
            one_line("<html>\r\n<body>\u{7}bad</body>", 100),
            "<html> <body> bad</body>"
        );
        assert_eq!(one_line("ééé", 3), "é...");
        assert_eq!(one_line("abc", 3), "abc");
        assert_eq!(one_line("no limit", usize::MAX), "no limit");
        assert_eq!(one_line(" \n ", 10), "");
    }
}
