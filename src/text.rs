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

#[cfg(test)]
mod tests {
    use super::{http_reason, one_line, terminal_safe};

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
