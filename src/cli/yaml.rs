//! YAML as kubectl writes it (sigs.k8s.io/yaml over go-yaml v2), for `caps -o yaml`: go-yaml v2
//! double-quotes every string a YAML 1.1 parser would read otherwise (`8086`, `yes`, and
//! `0000:00:02.0`, a base-60 float); serde_yaml quotes by YAML 1.2 and with single quotes. No Rust
//! library has go-yaml v2's rules, so they are ported here (resolve.go, encode.go, libyaml's scalar
//! analysis, sorter.go's key order). Deliberately, long strings are not folded at 80 columns.

use std::fmt::Write as _;

use serde_json::Value;

/// Renders a value as a YAML document.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, level: usize) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| go_key_order(a.0, b.0));
    for (key, value) in entries {
        indent(out, level);
        out.push_str(&scalar_string(key));
        out.push(':');
        write_value(out, value, level, false);
    }
}

fn write_seq(out: &mut String, items: &[Value], level: usize) {
    for item in items {
        indent(out, level);
        out.push('-');
        write_value(out, item, level, true);
    }
}

/// A value after `key:` or `-`. Under a key, a non-empty map is indented by two and a sequence
/// sits at the key's own level; in a sequence, the first entry of a map follows `- `.
fn write_value(out: &mut String, value: &Value, level: usize, in_seq: bool) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            if in_seq {
                out.push(' ');
                let mut first = String::new();
                write_map(&mut first, map, level + 2);
                // The first key goes on the `- ` line.
                out.push_str(first.trim_start_matches(' '));
            } else {
                out.push('\n');
                write_map(out, map, level + 2);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            if in_seq {
                out.push(' ');
                let mut first = String::new();
                write_seq(&mut first, items, level + 2);
                out.push_str(first.trim_start_matches(' '));
            } else {
                out.push('\n');
                write_seq(out, items, level);
            }
        }
        Value::String(s) if s.contains('\n') && literal_allowed(s) => {
            out.push_str(" |");
            if !s.ends_with('\n') {
                out.push('-');
            }
            out.push('\n');
            for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                if !line.is_empty() {
                    indent(out, level + 2);
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

/// go-yaml v2's `keyList.Less` for string keys.
fn go_key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            // The one that is not a letter comes first.
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            // Inside a number that has a non-zero digit before, zeros count as digits.
            if ar[..i]
                .iter()
                .rev()
                .take_while(|c| c.is_ascii_digit())
                .any(|&c| c != '0')
            {
                an = 1;
                bn = 1;
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .wrapping_mul(10)
                .wrapping_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .wrapping_mul(10)
                .wrapping_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar_string(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
    }
}

/// A string scalar: plain when go-yaml v2 writes it plain, else quoted as it would quote it.
pub(crate) fn scalar_string(s: &str) -> String {
    if resolves_to_non_string(s) || is_base60_float(s) {
        return double_quoted(s);
    }
    match analyze(s) {
        Style::Plain => s.to_string(),
        Style::Single => format!("'{}'", s.replace('\'', "''")),
        Style::Double => double_quoted(s),
    }
}

/// What libyaml allows for a one-line scalar in block context.
enum Style {
    Plain,
    Single,
    Double,
}

fn analyze(s: &str) -> Style {
    if s.is_empty() {
        // An empty value is plain after a key in go-yaml v2 (`key: ""` is written as `key: ""`
        // only because "" resolves to null, handled above).
        return Style::Plain;
    }
    let bytes = s.as_bytes();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let mut preceded_by_blank = true;
    for (i, c) in s.char_indices() {
        let followed_by_blank = s[i + c.len_utf8()..]
            .chars()
            .next()
            .is_none_or(|n| n == ' ' || n == '\t');
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_blank => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_blank => block_indicators = true,
                '#' if preceded_by_blank => block_indicators = true,
                _ => {}
            }
        }
        // libyaml's is_printable: tab, LF, CR, the printable ASCII range, and printable Unicode
        // outside the surrogates, BOM and U+FFFE/U+FFFF.
        let printable = matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7e}' | '\u{85}')
            || (c >= '\u{a0}' && c != '\u{feff}' && c != '\u{fffe}' && c != '\u{ffff}');
        if !printable {
            special = true;
        }
        preceded_by_blank = c == ' ' || c == '\t';
    }
    let edge_space = bytes[0] == b' ' || bytes[bytes.len() - 1] == b' ';
    if special {
        Style::Double
    } else if edge_space || block_indicators || s.contains('\n') || s.contains('\r') {
        Style::Single
    } else {
        Style::Plain
    }
}

fn literal_allowed(s: &str) -> bool {
    // go-yaml v2 asks for a literal block for a string with a newline; libyaml falls back to
    // double quotes when the text has a space before a line break, a trailing space or
    // characters it cannot print.
    !s.contains(" \n")
        && !s.ends_with(' ')
        && !s.starts_with(' ')
        && s.chars().all(|c| c == '\n' || !c.is_control() || c == '\t')
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// go-yaml v2's `resolve` for an untagged plain scalar: does it read as a bool, null, int,
/// float or timestamp?
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: [&str; 34] = [
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "<<",
    ];
    const SIGNED_INF: [&str; 6] = ["+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"];
    if WORDS.contains(&s) || SIGNED_INF.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else {
        return true;
    };
    match first {
        '.' => go_parse_float(s),
        '+' | '-' | '0'..='9' => {
            if is_timestamp(s) {
                return true;
            }
            let plain = s.replace('_', "");
            go_parse_int(&plain) || (is_yaml_style_float(&plain) && go_parse_float(&plain)) || {
                // `0b1010`, `-0b1010`
                let bits = plain
                    .strip_prefix("0b")
                    .or_else(|| plain.strip_prefix("-0b"));
                bits.is_some_and(|b| !b.is_empty() && b.chars().all(|c| c == '0' || c == '1'))
            }
        }
        _ => false,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` or `ParseUint` succeeding: an optional sign, then `0x`/`0o`/
/// `0b` digits, a leading-zero octal, or decimal digits (underscores are already removed).
fn go_parse_int(s: &str) -> bool {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = digits.to_ascii_lowercase();
    let (body, radix) = if let Some(hex) = lower.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(oct) = lower.strip_prefix("0o") {
        (oct, 8)
    } else if let Some(bin) = lower.strip_prefix("0b") {
        (bin, 2)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (&lower[1..], 8)
    } else {
        (lower.as_str(), 10)
    };
    !body.is_empty()
        && body.chars().all(|c| c.is_digit(radix))
        && u128::from_str_radix(body, radix).is_ok_and(|v| v <= u128::from(u64::MAX))
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_style_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms `resolve` lets through (decimal, with `.`
/// first or after a sign); Rust's parser agrees on those.
fn go_parse_float(s: &str) -> bool {
    s.parse::<f64>().is_ok()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`: YAML 1.1's base-60 numbers, which
/// go-yaml v2 quotes for the parsers that still read them.
fn is_base60_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, _frac) = match body.split_once('.') {
        Some((main, frac)) if frac.bytes().all(|b| b.is_ascii_digit() || b == b'_') => {
            (main, Some(frac))
        }
        Some(_) => return false,
        None => (body, None),
    };
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && head.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let mut sixties = 0;
    for part in parts {
        let ok = match part.as_bytes() {
            [d] => d.is_ascii_digit(),
            [t, d] => (b'0'..=b'5').contains(t) && d.is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
        sixties += 1;
    }
    head_ok && sixties > 0
}

/// go-yaml v2's `parseTimestamp`: four digits and `-`, then one of Go's layouts
/// `2006-1-2T15:4:5.999999999Z07:00` (also with `t`), `2006-1-2 15:4:5.999999999`, `2006-1-2`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let year: u32 = s[..4].parse().unwrap_or(0);
    let rest = &s[5..];
    let (month, rest) = take_number(rest, 2);
    let Some(rest) = month.and_then(|_| rest.strip_prefix('-')) else {
        return false;
    };
    let (day, rest) = take_number(rest, 2);
    let (Some(month), Some(day)) = (month, day) else {
        return false;
    };
    if !(1..=12).contains(&month) || day < 1 || day > days_in(month, year) {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    let (zoned, time) = match rest.as_bytes()[0] {
        b'T' | b't' => (true, &rest[1..]),
        b' ' => (false, &rest[1..]),
        _ => return false,
    };
    let (hour, time) = take_number(time, 2);
    let Some(time) = time.strip_prefix(':') else {
        return false;
    };
    let (minute, time) = take_number(time, 2);
    let Some(time) = time.strip_prefix(':') else {
        return false;
    };
    let (second, mut time) = take_number(time, 2);
    match (hour, minute, second) {
        (Some(h), Some(m), Some(s)) if h < 24 && m < 60 && s < 60 => {}
        _ => return false,
    }
    if let Some(frac) = time.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        time = &frac[digits..];
    }
    if !zoned {
        return time.is_empty();
    }
    if time == "Z" {
        return true;
    }
    let Some(zone) = time.strip_prefix(['+', '-']) else {
        return false;
    };
    let z = zone.as_bytes();
    z.len() == 5 && z[2] == b':' && [0, 1, 3, 4].iter().all(|&i| z[i].is_ascii_digit())
}

/// One or two digits, as Go's layout elements `1`, `2`, `15`, `4`, `5` read them.
fn take_number(s: &str, max: usize) -> (Option<u32>, &str) {
    let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
    if n == 0 {
        return (None, s);
    }
    (s[..n].parse().ok(), &s[n..])
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each case is what go-yaml v2 (and so `kubectl get -o yaml`) writes for the string.
    #[test]
    fn strings_are_quoted_as_go_yaml_v2_quotes_them() {
        let cases = [
            // PCI addresses: base-60 floats in YAML 1.1 unless a part is not 0-59 decimal.
            ("0000:00:02.0", "\"0000:00:02.0\""),
            ("0000:03:00.0", "\"0000:03:00.0\""),
            ("0000:c1:00.0", "0000:c1:00.0"),
            ("0000:0a:00.0", "0000:0a:00.0"),
            ("0000:00:1f.3", "0000:00:1f.3"),
            ("0000:61:00.0", "0000:61:00.0"),
            ("1:20", "\"1:20\""),
            // PCI IDs: ints, floats, or strings.
            ("8086", "\"8086\""),
            ("1002", "\"1002\""),
            ("10de", "10de"),
            ("7d55", "7d55"),
            ("56a0", "56a0"),
            ("1e30", "\"1e30\""),
            ("0089", "\"0089\""),
            ("0x1f", "\"0x1f\""),
            // YAML 1.1 words, null, timestamps.
            ("yes", "\"yes\""),
            ("on", "\"on\""),
            ("n", "\"n\""),
            ("null", "\"null\""),
            ("~", "\"~\""),
            ("", "\"\""),
            ("2026-11-02", "\"2026-11-02\""),
            ("2026-11-02T08:00:00Z", "\"2026-11-02T08:00:00Z\""),
            ("2026-13-02", "2026-13-02"),
            (".5", "\".5\""),
            ("1.5.2", "1.5.2"),
            // Plain text, and what libyaml cannot leave plain.
            ("iHD 24.2.4", "iHD 24.2.4"),
            (
                "Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()",
                "Intel iHD driver for Intel(R) Gen Graphics - 24.2.4 ()",
            ),
            (
                "VA-API NVDEC driver [direct backend]",
                "VA-API NVDEC driver [direct backend]",
            ),
            ("[Arc A770]", "'[Arc A770]'"),
            ("a: b", "'a: b'"),
            ("- x", "'- x'"),
            (" padded", "' padded'"),
            ("it's", "it's"),
            ("#1", "'#1'"),
            ("a #b", "'a #b'"),
            ("probe failed", "probe failed"),
            ("bell\u{7}", "\"bell\\x07\""),
        ];
        for (value, expected) in cases {
            assert_eq!(scalar_string(value), expected, "{value:?}");
        }
    }

    #[test]
    fn documents_are_laid_out_as_go_yaml_lays_them_out() {
        let value = json!([
            {"node": "n1", "address": "0000:00:02.0", "list": ["a", "8086"], "empty": [], "none": null,
             "nested": {"x": true, "y": 1}},
            {"node": "n2", "empty": {}}
        ]);
        // Keys sorted as go-yaml sorts them; `y` is a YAML 1.1 bool, so quoted as a key too.
        assert_eq!(
            to_string(&value),
            "- address: \"0000:00:02.0\"\n  empty: []\n  list:\n  - a\n  - \"8086\"\n  nested:\n    \
             x: true\n    \"y\": 1\n  node: n1\n  none: null\n- empty: {}\n  node: n2\n"
        );
        let keys = json!({"scale10bit": 1, "scale8bit": 2, "decodeVP9Profile2": 3, "decodeVP9": 4,
            "encodeHEVCMain10LowPower": 5, "encodeHEVCMainLowPower": 6, "a.b/c": 7, "ab": 8});
        assert_eq!(
            to_string(&keys),
            "a.b/c: 7\nab: 8\ndecodeVP9: 4\ndecodeVP9Profile2: 3\nencodeHEVCMain10LowPower: 5\n\
             encodeHEVCMainLowPower: 6\nscale8bit: 2\nscale10bit: 1\n"
        );
        assert_eq!(to_string(&json!([])), "[]\n");
        assert_eq!(to_string(&json!({"a": "x\ny\n"})), "a: |\n  x\n  y\n");
    }

    /// A YAML 1.1 reader (PyYAML, where installed) reads back exactly the strings that were
    /// written: the reason for quoting as go-yaml does.
    #[test]
    fn serde_yaml_reads_it_back() {
        let value = json!([{"address": "0000:00:02.0", "vendor": "8086", "ok": true, "n": 3}]);
        let back: Value = serde_yaml::from_str(&to_string(&value)).unwrap();
        assert_eq!(back, value);
    }
}
