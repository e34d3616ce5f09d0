//! Go-style durations (`time.ParseDuration`): `60s`, `500ms`, `1h2m3.5s`.
//! Knative parses `config-leader-election` with Go, so the policy accepts
//! exactly the syntax Go accepts, without a sign (durations must be positive).

/// Why a text is not a Go duration; the text itself is named by whoever
/// reads it (a policy field, a flag, a ConfigMap key), so the reason alone
/// is said here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("durations must not carry a sign")]
    Signed,
    /// No digits where a number starts (the byte offset in the text).
    #[error("expected a number at byte {0}")]
    NoNumber(usize),
    #[error("missing unit (use {UNITS})")]
    NoUnit,
    #[error("unknown unit {0:?} (use {UNITS})")]
    UnknownUnit(String),
    /// A number's digits do not fit the parser's integer.
    #[error("number too large")]
    NumberTooLarge,
    /// More than Go's `time.Duration` (an int64 of nanoseconds) holds.
    #[error("duration too large")]
    TooLarge,
}

/// The units Go accepts, as the errors list them.
const UNITS: &str = "ns, us, ms, s, m or h";

/// The leading ASCII digits of `s`, and the rest.
fn digits(s: &str) -> (&str, &str) {
    s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()))
}

/// Parses a Go duration into nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<u128, DurationError> {
    match text {
        "" => return Err(DurationError::Empty),
        "0" => return Ok(0),
        _ if text.starts_with(['-', '+']) => return Err(DurationError::Signed),
        _ => {}
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // number: digits, optional '.', digits (at least one digit overall)
        let start = text.len() - rest.len();
        let (int_part, after) = digits(rest);
        let (frac_part, after) = after.strip_prefix('.').map_or(("", after), digits);
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::NoNumber(start));
        }
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.');
        let (unit, after) = after.split_at(unit_end.unwrap_or(after.len()));
        rest = after;
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(DurationError::NoUnit),
            other => return Err(DurationError::UnknownUnit(other.to_string())),
        };
        let int: u128 = match int_part {
            "" => 0,
            n => n.parse().map_err(|_| DurationError::NumberTooLarge)?,
        };
        let mut value = int.checked_mul(scale).ok_or(DurationError::TooLarge)?;
        // fractional part, truncated to nanoseconds like Go
        let mut frac_scale = scale;
        for digit in frac_part.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value = value
                .checked_add(u128::from(digit - b'0') * frac_scale)
                .ok_or(DurationError::TooLarge)?;
        }
        total = total.checked_add(value).ok_or(DurationError::TooLarge)?;
    }
    // Go's time.Duration is an int64 of nanoseconds.
    if total > i64::MAX as u128 {
        return Err(DurationError::TooLarge);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::{DurationError, parse_go_duration};

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, u128)] = &[
            ("60s", 60_000_000_000),
            ("500ms", 500_000_000),
            ("1h2m3.5s", 3_723_500_000_000),
            ("1.5h", 5_400_000_000_000),
            (".5s", 500_000_000),
            ("10us", 10_000),
            ("10\u{b5}s", 10_000),
            ("7ns", 7),
            ("0", 0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn rejects_bad_durations() {
        for text in [
            "",
            "60",
            "-5s",
            "+5s",
            "5x",
            "s",
            "1.s.",
            "5 s",
            "9999999999h",
            "1h2",
            // The fraction's add overflows u128 here: an error, not a panic.
            "94522879700260684295381835.9h",
        ] {
            assert!(
                parse_go_duration(text).is_err(),
                "{text} should be rejected"
            );
        }
    }

    #[test]
    fn each_refusal_is_its_own_variant_with_the_reason_as_text() {
        let cases: &[(&str, DurationError, &str)] = &[
            ("", DurationError::Empty, "empty duration"),
            (
                "-5s",
                DurationError::Signed,
                "durations must not carry a sign",
            ),
            (
                "1.s.",
                DurationError::NoNumber(3),
                "expected a number at byte 3",
            ),
            (
                "60",
                DurationError::NoUnit,
                "missing unit (use ns, us, ms, s, m or h)",
            ),
            (
                "5x",
                DurationError::UnknownUnit("x".into()),
                "unknown unit \"x\" (use ns, us, ms, s, m or h)",
            ),
            ("9999999999h", DurationError::TooLarge, "duration too large"),
        ];
        for (text, want, shown) in cases {
            let got = parse_go_duration(text).unwrap_err();
            assert_eq!(&got, want, "{text}");
            assert_eq!(got.to_string(), *shown, "{text}");
        }
    }
}
