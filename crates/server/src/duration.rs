//! Durations as sluice's configuration writes them: `"30s"`, `"1m 30s"`, `"500ms"`, ISO 8601
//! `"PT30S"`, or an integer number of seconds. Negative durations are rejected.
//!
//! A leaf shared by every part that owns configuration (the hub's, auth's, the JetStream
//! backend's) and by messages that quote a duration. Not the Go grammar of NATS headers
//! (`sluice_protocol::duration`): configuration files take jiff's friendlier forms.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de};

/// Parses a duration string; the error says what was wrong with `text`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = text
        .trim()
        .parse()
        .map_err(|err| format!("{text:?} is not a duration like \"30s\" or \"1m\": {err}"))?;
    if signed.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    Duration::try_from(signed).map_err(|err| format!("{text:?} is out of range: {err}"))
}

/// Formats a duration the way [`parse`] reads it back.
pub fn format(duration: Duration) -> String {
    match jiff::SignedDuration::try_from(duration) {
        Ok(signed) => format!("{signed:#}"),
        Err(_) => format!("{}s", duration.as_secs()),
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Seconds(i64),
    Text(String),
}

fn from_raw<E: de::Error>(raw: Raw) -> Result<Duration, E> {
    match raw {
        Raw::Seconds(secs) => u64::try_from(secs)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("{secs} is negative"))),
        Raw::Text(text) => parse(&text).map_err(E::custom),
    }
}

/// Serde `deserialize_with` for a [`Duration`].
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    from_raw(Raw::deserialize(deserializer)?)
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
        Option::<Raw>::deserialize(deserializer)?
            .map(from_raw)
            .transpose()
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
    }

    #[test]
    fn rejects_negative_and_garbage_naming_the_value() {
        assert!(parse("-5s").unwrap_err().contains("\"-5s\" is negative"));
        assert!(parse("soon").unwrap_err().contains("\"soon\""));
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
