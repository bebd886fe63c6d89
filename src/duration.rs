//! Durations as Kubernetes tools write them (Go's `time.ParseDuration`: `30s`, `1m30s`, `500ms`,
//! `2h`), plus a bare number of seconds as kubectl's `--request-timeout` takes it. One parser for
//! every duration flag of both programs.

use std::time::Duration;

/// The units Go accepts, longest first so `ms` is not read as `m`.
const UNITS: [(&str, f64); 7] = [
    ("ms", 1e-3),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ns", 1e-9),
    ("h", 3600.0),
    ("m", 60.0),
    ("s", 1.0),
];

/// Why a duration is refused; each variant holds the text as given, trimmed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    #[error("invalid duration {0:?} (valid: e.g. 30, 30s, 1m30s, 500ms, 2h)")]
    Invalid(String),
    #[error(
        "invalid duration {0:?}: a duration cannot be negative (valid: e.g. 30, 30s, 1m30s, \
         500ms, 2h)"
    )]
    Negative(String),
    #[error("duration {0:?} must be more than zero")]
    Zero(String),
}

/// Parses `30s`, `1m30s`, `500ms`, `2h` or a bare number of seconds (`30`). Zero is a duration
/// like any other; callers that need a positive one say so.
pub(crate) fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let invalid = || DurationError::Invalid(text.to_owned());
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    if text.is_empty() {
        return Err(invalid());
    }
    // Go accepts `-1s`; no duration of ours may be negative, and saying so beats "invalid".
    if let Some(magnitude) = text.strip_prefix('-').and_then(|t| parse(t).ok()) {
        return match magnitude.is_zero() {
            true => Ok(Duration::ZERO),
            false => Err(DurationError::Negative(text.to_owned())),
        };
    }
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let (unit, scale) = UNITS
            .iter()
            .find(|(unit, _)| rest.starts_with(unit))
            .ok_or_else(invalid)?;
        total += number * scale;
        rest = &rest[unit.len()..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

/// [`parse`], refusing zero: for intervals and timeouts that must pass before something happens.
pub(crate) fn parse_positive(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        d if d.is_zero() => Err(DurationError::Zero(text.trim().to_owned())),
        d => Ok(d),
    }
}

/// A duration as an operator reads it: `250ms`, `12.5s`, `5m30s`.
pub(crate) fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        let tenths = d.as_millis() / 100;
        if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    } else {
        let secs = d.as_secs();
        if secs >= 3600 * 24 * 365 {
            return "ever".to_string();
        }
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_bare_seconds() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse(" 15s "), Ok(Duration::from_secs(15)));
    }

    #[test]
    fn anything_else_is_refused_with_examples() {
        for bad in ["", "s", "10x", "1m30", "-1s", "abc", "1..5s", "--1s"] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("(valid: e.g. 30, 30s, 1m30s, 500ms, 2h)"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_negative_duration_is_said_to_be_negative() {
        assert_eq!(
            parse("-1s").unwrap_err().to_string(),
            "invalid duration \"-1s\": a duration cannot be negative (valid: e.g. 30, 30s, \
             1m30s, 500ms, 2h)"
        );
        assert!(
            parse("-5")
                .unwrap_err()
                .to_string()
                .contains("cannot be negative")
        );
        assert_eq!(parse("-0"), Ok(Duration::ZERO));
    }

    #[test]
    fn positive_refuses_zero() {
        assert_eq!(parse_positive("15s"), Ok(Duration::from_secs(15)));
        assert!(
            parse_positive("0s")
                .unwrap_err()
                .to_string()
                .contains("must be more than zero")
        );
        assert!(parse_positive("0").is_err());
    }

    #[test]
    fn durations_read_like_an_operator_writes_them() {
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_secs(12)), "12s");
        assert_eq!(human(Duration::from_millis(12_500)), "12.5s");
        assert_eq!(human(Duration::from_secs(330)), "5m30s");
    }
}
