//! Go-style durations (`time.ParseDuration`): `60s`, `500ms`, `1h2m3.5s`.
//! Knative parses `config-leader-election` with Go, so the policy accepts
//! exactly the syntax Go accepts, without a sign (durations must be positive).

/// Parses a Go duration into nanoseconds. Returns a human-readable reason on
/// failure.
pub fn parse_go_duration(text: &str) -> Result<u128, String> {
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if text.starts_with('-') || text.starts_with('+') {
        return Err("durations must not carry a sign".into());
    }
    if text == "0" {
        return Ok(0);
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0;
    while i < bytes.len() {
        // number: digits, optional '.', digits (at least one digit overall)
        let int_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let int_part = &text[int_start..i];
        let mut frac_part = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            frac_part = &text[frac_start..i];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(format!("expected a number at byte {int_start}"));
        }
        let unit_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_digit() && bytes[i] != b'.' {
            i += 1;
        }
        let unit = &text[unit_start..i];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err("missing unit (use ns, us, ms, s, m or h)".into()),
            other => {
                return Err(format!(
                    "unknown unit {other:?} (use ns, us, ms, s, m or h)"
                ));
            }
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse::<u128>()
                .map_err(|_| "number too large".to_string())?
        };
        let mut value = int
            .checked_mul(scale)
            .ok_or_else(|| "duration too large".to_string())?;
        // fractional part, truncated to nanoseconds like Go
        let mut frac_scale = scale;
        for digit in frac_part.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value = value
                .checked_add(u128::from(digit - b'0') * frac_scale)
                .ok_or_else(|| "duration too large".to_string())?;
        }
        total = total
            .checked_add(value)
            .ok_or_else(|| "duration too large".to_string())?;
    }
    // Go's time.Duration is an int64 of nanoseconds.
    if total > i64::MAX as u128 {
        return Err("duration too large".into());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_go_duration;

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
}
