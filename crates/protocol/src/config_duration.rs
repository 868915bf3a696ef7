//! Durations as sluice's configuration writes them: `"30s"`, `"1m 30s"`, `"500ms"`, ISO 8601
//! `"PT30S"`, or an integer number of seconds. Negative durations are rejected.
//!
//! A leaf shared by every part that owns configuration (the hub's, auth's, the JetStream
//! backend's) and by messages that quote a duration. Not the Go grammar of NATS headers
//! ([`crate::duration`]): configuration files take jiff's friendlier forms.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de};

/// What a duration may be, in the words of error messages.
pub(crate) const EXPECTED: &str =
    "a duration such as \"10s\", \"1m 30s\" or \"500ms\", or a whole number of seconds";

/// Parses a duration string (a whole number is seconds); the error names `text` and says what
/// is allowed.
pub fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("{text:?} is too many seconds"));
    }
    let signed: jiff::SignedDuration = trimmed
        .parse()
        .map_err(|_| format!("{text:?} is not {EXPECTED}"))?;
    if signed.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    Duration::try_from(signed).map_err(|_| format!("{text:?} is too long"))
}

/// Formats a duration the way [`parse`] reads it back.
pub fn format(duration: Duration) -> String {
    match jiff::SignedDuration::try_from(duration) {
        Ok(signed) => format!("{signed:#}"),
        Err(_) => format!("{}s", duration.as_secs()),
    }
}

/// A duration as configuration writes it: a string for [`parse`] or a number of seconds.
/// Anything else is refused saying what a duration is (no serde wording).
struct Written(Duration);

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WrittenVisitor).map(Written)
    }
}

struct WrittenVisitor;

impl de::Visitor<'_> for WrittenVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, secs: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(secs))
    }

    fn visit_i64<E: de::Error>(self, secs: i64) -> Result<Duration, E> {
        u64::try_from(secs)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("{secs} is negative")))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse(text).map_err(E::custom)
    }
}

/// Serde `deserialize_with` for a [`Duration`].
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    Written::deserialize(deserializer).map(|written| written.0)
}

/// Serde `serialize_with` for a [`Duration`].
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(*duration))
}

/// Serde helpers for an optional [`Duration`].
pub mod option {
    use super::*;

    /// Serde `deserialize_with` for an `Option<Duration>`.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<Written>::deserialize(deserializer)?.map(|written| written.0))
    }

    /// Serde `serialize_with` for an `Option<Duration>`.
    pub fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => super::serialize(duration, serializer),
            None => serializer.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_friendly_and_iso_forms() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("PT2S"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("10"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn rejects_negative_and_garbage_naming_the_value() {
        assert!(parse("-5s").unwrap_err().contains("\"-5s\" is negative"));
        assert!(
            parse("soon")
                .unwrap_err()
                .contains("\"soon\" is not a duration such as")
        );
    }

    #[test]
    fn format_round_trips() {
        for d in [
            Duration::from_secs(30),
            Duration::from_millis(1500),
            Duration::ZERO,
        ] {
            assert_eq!(parse(&format(d)), Ok(d));
        }
    }
}
