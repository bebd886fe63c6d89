//! Text from outside (a server's message, a proxy's error page, a parser's report) made fit for
//! one line of a log or of an error.

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

#[cfg(test)]
mod tests {
    use super::one_line;

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
