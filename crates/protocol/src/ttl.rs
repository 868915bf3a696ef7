//! The `Nats-TTL` header: how long one message lives.

use std::fmt;
use std::time::Duration;

use crate::duration::{MAX_DURATION, parse_duration};
use crate::quote::shown;

/// A per-message time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgTtl {
    /// `never`: the message never expires, not even by the stream's `max_age`.
    Never,
    /// The message expires this long after it was stored. Always whole seconds, at least one.
    After(Duration),
}

/// A `Nats-TTL` value that is not a duration of at least one second, a whole number of seconds
/// (at least one) or `never`. Answered with JetStream error 10165.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Nats-TTL {}: {reason}", shown(.value))]
pub struct TtlError {
    /// The rejected value.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl MsgTtl {
    /// Parses a `Nats-TTL` value as JetStream does: `never` (any case); a Go duration of at least
    /// one second (`90s`, `1h30m`), truncated to whole seconds (`1.5s` is one second); or a whole
    /// number of seconds, at least one (`60`). The TTL is at most [`MAX_DURATION`] so that an
    /// expiry time always fits a 64-bit nanosecond timestamp.
    pub fn parse(value: &str) -> Result<MsgTtl, TtlError> {
        let err = |reason| TtlError {
            value: value.to_owned(),
            reason,
        };
        if value.eq_ignore_ascii_case("never") {
            return Ok(MsgTtl::Never);
        }
        let duration = match parse_duration(value) {
            Ok(duration) => duration,
            Err(_) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                let seconds: u64 = value.parse().map_err(|_| err("too many seconds"))?;
                if seconds > MAX_DURATION.as_secs() {
                    return Err(err("longer than the maximum of about 292 years"));
                }
                Duration::from_secs(seconds)
            }
            Err(crate::duration::DurationError::Overflow { .. }) => {
                return Err(err("longer than the maximum of about 292 years"));
            }
            Err(_) => {
                return Err(err(
                    "expected a duration such as \"90s\" or \"1h\", a whole number of seconds, or \"never\"",
                ));
            }
        };
        if duration < Duration::from_secs(1) {
            return Err(err("a TTL must be at least one second"));
        }
        Ok(MsgTtl::After(Duration::from_secs(duration.as_secs())))
    }

    /// The TTL, or `None` for [`MsgTtl::Never`].
    pub fn duration(&self) -> Option<Duration> {
        match self {
            MsgTtl::Never => None,
            MsgTtl::After(duration) => Some(*duration),
        }
    }
}

/// The canonical header value: `never`, or whole seconds (`60`). It parses back to the same TTL.
impl fmt::Display for MsgTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgTtl::Never => f.write_str("never"),
            MsgTtl::After(duration) => write!(f, "{}", duration.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_jetstream_forms() {
        let cases = [
            ("never", MsgTtl::Never),
            ("NEVER", MsgTtl::Never),
            ("1s", MsgTtl::After(Duration::from_secs(1))),
            ("1.5s", MsgTtl::After(Duration::from_secs(1))),
            ("1h30m", MsgTtl::After(Duration::from_secs(5_400))),
            ("60", MsgTtl::After(Duration::from_secs(60))),
            ("1", MsgTtl::After(Duration::from_secs(1))),
            (
                "9223372036",
                MsgTtl::After(Duration::from_secs(9_223_372_036)),
            ),
        ];
        for (text, ttl) in cases {
            assert_eq!(MsgTtl::parse(text), Ok(ttl), "{text}");
            assert_eq!(MsgTtl::parse(&ttl.to_string()), Ok(ttl));
        }
        assert_eq!(MsgTtl::Never.duration(), None);
        assert_eq!(
            MsgTtl::After(Duration::from_secs(2)).duration(),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn errors_name_the_value() {
        let cases = [
            ("", "invalid Nats-TTL \"\": expected a duration"),
            (
                "0",
                "invalid Nats-TTL \"0\": a TTL must be at least one second",
            ),
            (
                "0s",
                "invalid Nats-TTL \"0s\": a TTL must be at least one second",
            ),
            (
                "999ms",
                "invalid Nats-TTL \"999ms\": a TTL must be at least one second",
            ),
            ("-5", "invalid Nats-TTL \"-5\": expected a duration"),
            ("-5s", "invalid Nats-TTL \"-5s\": expected a duration"),
            ("soon", "invalid Nats-TTL \"soon\": expected a duration"),
            ("1.5", "invalid Nats-TTL \"1.5\": expected a duration"),
            (
                "99999999999999999999",
                "invalid Nats-TTL \"99999999999999999999\": too many seconds",
            ),
            (
                "9223372037",
                "invalid Nats-TTL \"9223372037\": longer than the maximum",
            ),
            (
                "3000000h",
                "invalid Nats-TTL \"3000000h\": longer than the maximum",
            ),
        ];
        for (text, message) in cases {
            let err = MsgTtl::parse(text).unwrap_err().to_string();
            assert!(err.starts_with(message), "{text:?}: {err}");
        }
    }
}
