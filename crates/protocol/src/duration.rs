//! Go-style durations (`1h2m3.5s`, `500ms`, `1µs`), as NATS configuration and headers write them.
//!
//! [`parse_duration`] accepts Go's `time.ParseDuration` grammar: an optional sign, then one or
//! more `<number><unit>` parts where the number is decimal with an optional fraction (`1`, `1.5`,
//! `.5`, `1.`) and the unit is `ns`, `us`, `µs` (U+00B5), `μs` (U+03BC), `ms`, `s`, `m` or `h`; the
//! bare `0` is also accepted. Fractions finer than a nanosecond are truncated. Like Go, the total
//! must fit in a signed 64-bit count of nanoseconds (about 292 years, [`MAX_DURATION`]). Unlike Go,
//! a negative duration is an error: nothing in sluice takes one.
//!
//! [`format_duration`] writes Go's `Duration.String()` form (`1h2m3.5s`, `1.5ms`, `0s`), which
//! parses back to the same value.

use std::time::Duration;

use crate::quote::shown;

/// The longest duration accepted: `i64::MAX` nanoseconds, as in Go.
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Why a duration was rejected. Every variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The empty string (or only a sign).
    #[error("invalid duration {}: it is empty", shown(.value))]
    Empty {
        /// The rejected value.
        value: String,
    },
    /// A negative, non-zero duration.
    #[error("invalid duration {}: negative durations are not allowed", shown(.value))]
    Negative {
        /// The rejected value.
        value: String,
    },
    /// A part has no number before its unit, or a number is malformed.
    #[error("invalid duration {}: expected a number at byte {at}", shown(.value))]
    ExpectedNumber {
        /// The rejected value.
        value: String,
        /// Byte offset where a number was expected.
        at: usize,
    },
    /// A number has no unit after it.
    #[error("invalid duration {}: missing unit after the number ending at byte {at} (use ns, us, ms, s, m or h)", shown(.value))]
    MissingUnit {
        /// The rejected value.
        value: String,
        /// Byte offset where the unit was expected.
        at: usize,
    },
    /// An unknown unit.
    #[error("invalid duration {}: unknown unit {} (use ns, us, ms, s, m or h)", shown(.value), shown(.unit))]
    UnknownUnit {
        /// The rejected value.
        value: String,
        /// The unit found.
        unit: String,
    },
    /// The total exceeds [`MAX_DURATION`].
    #[error("invalid duration {}: longer than the maximum of about 292 years", shown(.value))]
    Overflow {
        /// The rejected value.
        value: String,
    },
}

/// Nanoseconds per unit, longest unit names first so `ms` is not read as `m`.
const UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go duration (see the [module docs](self)).
pub fn parse_duration(value: &str) -> Result<Duration, DurationError> {
    let err_value = || value.to_owned();
    let (negative, body, offset) = match value.as_bytes().first() {
        Some(b'-') => (true, &value[1..], 1),
        Some(b'+') => (false, &value[1..], 1),
        _ => (false, value, 0),
    };
    if body.is_empty() {
        return Err(DurationError::Empty { value: err_value() });
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    let overflow = || DurationError::Overflow { value: err_value() };
    let max = MAX_DURATION.as_nanos();
    let mut total: u128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let at = offset + body.len() - rest.len();
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let (frac_digits, after_number) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::ExpectedNumber {
                value: err_value(),
                at,
            });
        }
        let unit_len = after_number
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_number.len());
        let (unit, next) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit {
                value: err_value(),
                at: offset + body.len() - after_number.len(),
            });
        }
        let Some(&(_, unit_ns)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                value: err_value(),
                unit: unit.to_owned(),
            });
        };
        let mut whole: u64 = 0;
        for digit in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(digit - b'0')))
                .ok_or_else(overflow)?;
        }
        // Only the first 19 fraction digits can matter below a nanosecond of an hour.
        let mut frac: u128 = 0;
        let mut scale: u128 = 1;
        for digit in frac_digits.bytes().take(19) {
            frac = frac * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        total += u128::from(whole) * u128::from(unit_ns) + frac * u128::from(unit_ns) / scale;
        if total > max {
            return Err(overflow());
        }
        rest = next;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative { value: err_value() });
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Formats a duration as Go's `Duration.String()` does: `0s`, `1ns`, `1.5µs`, `2.25ms`, `3s`,
/// `1m0s`, `1h2m3.5s`. Hours are not folded into days.
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return with_fraction(nanos, 1_000, "\u{b5}s");
    }
    if nanos < 1_000_000_000 {
        return with_fraction(nanos, 1_000_000, "ms");
    }
    let seconds = with_fraction(nanos % 60_000_000_000, 1_000_000_000, "s");
    let total_minutes = nanos / 60_000_000_000;
    match (total_minutes / 60, total_minutes % 60) {
        (0, 0) => seconds,
        (0, minutes) => format!("{minutes}m{seconds}"),
        (hours, minutes) => format!("{hours}h{minutes}m{seconds}"),
    }
}

/// `value / per` with its fraction, trailing zeros trimmed, followed by `unit`.
fn with_fraction(value: u128, per: u128, unit: &str) -> String {
    let (whole, frac) = (value / per, value % per);
    if frac == 0 {
        return format!("{whole}{unit}");
    }
    let width = per.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}{unit}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("-0", Duration::ZERO),
            ("-0s", Duration::ZERO),
            ("-0.0h0ns", Duration::ZERO),
            ("+0s", Duration::ZERO),
            ("5s", Duration::from_secs(5)),
            ("1h2m3.5s", Duration::from_millis(3_723_500)),
            ("500ms", Duration::from_millis(500)),
            ("1us", Duration::from_micros(1)),
            ("1µs", Duration::from_micros(1)),
            ("1μs", Duration::from_micros(1)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("1.0000000001s", Duration::from_secs(1)),
            ("1.5h", Duration::from_secs(5_400)),
            ("2m1ms", Duration::from_millis(120_001)),
            ("9223372036854775807ns", MAX_DURATION),
            ("2562047h47m16.854775807s", MAX_DURATION),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn errors_name_the_value() {
        let cases = [
            ("", "invalid duration \"\": it is empty"),
            ("-", "invalid duration \"-\": it is empty"),
            (
                "-1s",
                "invalid duration \"-1s\": negative durations are not allowed",
            ),
            (
                "5",
                "invalid duration \"5\": missing unit after the number ending at byte 1",
            ),
            (
                "1h5",
                "invalid duration \"1h5\": missing unit after the number ending at byte 3",
            ),
            ("s", "invalid duration \"s\": expected a number at byte 0"),
            (".s", "invalid duration \".s\": expected a number at byte 0"),
            (
                "1.2.3s",
                "invalid duration \"1.2.3s\": missing unit after the number ending at byte 3",
            ),
            ("3d", "invalid duration \"3d\": unknown unit \"d\""),
            ("1 s", "invalid duration \"1 s\": unknown unit \" s\""),
            (
                "9223372036854775808ns",
                "invalid duration \"9223372036854775808ns\": longer than the maximum",
            ),
            (
                "99999999999999999999999999999999999999999h",
                "invalid duration \"99999999999999999999999999999999999999999h\": longer",
            ),
        ];
        for (text, message) in cases {
            let err = parse_duration(text).unwrap_err().to_string();
            assert!(err.starts_with(message), "{text:?}: {err}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_micros(1), "1µs"),
            (Duration::from_millis(1), "1ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_micros(2_250), "2.25ms"),
            (Duration::from_secs(3), "3s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(7_200), "2h0m0s"),
            (Duration::from_millis(3_723_500), "1h2m3.5s"),
            (Duration::from_nanos(60_000_000_001), "1m0.000000001s"),
            (MAX_DURATION, "2562047h47m16.854775807s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration), "{text}");
        }
    }
}
