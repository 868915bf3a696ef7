//! Stream configuration (persisted as `meta.inf`) and stream-name validation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::proto;

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// Block files under the data directory.
    #[default]
    File,
    /// Process memory only; the configuration survives a restart, the messages do not.
    Memory,
}

/// What to do when a limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscardPolicy {
    /// Remove the oldest messages to make room.
    #[default]
    Old,
    /// Reject the new message (10077).
    New,
}

/// A transform applied to a sourced message's subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectTransform {
    /// Source filter.
    pub src: String,
    /// Destination pattern.
    pub dest: String,
}

/// One origin stream a stream sources from (behaviour lives in the sourcing task).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The origin stream's name.
    pub name: String,
    /// Start at this origin sequence when no position is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opt_start_seq: Option<u64>,
    /// Start at this time when no position is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opt_start_time: Option<jiff::Timestamp>,
    /// Only origin messages matching this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter_subject: Option<String>,
    /// Subject transforms applied to sourced messages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<SubjectTransform>,
}

impl SourceConfig {
    /// The source's index name, `<origin> <filter or '>'> <transform dest or '>'>` (several
    /// transforms: their srcs and dests each joined with `,`). Changing the filter or a
    /// transform makes a new source with its own position.
    pub fn index_name(&self) -> String {
        let or_all = |s: &str| {
            if s.is_empty() {
                ">".to_string()
            } else {
                s.to_string()
            }
        };
        let (filter, dest) = if self.subject_transforms.is_empty() {
            (
                or_all(self.filter_subject.as_deref().unwrap_or("")),
                ">".into(),
            )
        } else {
            let join = |f: fn(&SubjectTransform) -> &str| {
                let parts: Vec<String> = self
                    .subject_transforms
                    .iter()
                    .map(|t| or_all(f(t)))
                    .collect();
                parts.join(",")
            };
            (join(|t| &t.src), join(|t| &t.dest))
        };
        format!("{} {filter} {dest}", self.name)
    }

    /// Checks the origin name, the filter and every transform (the error names the bad value).
    pub fn validate(&self, stream: &str) -> Result<()> {
        validate_stream_name(&self.name)?;
        let bad = |msg: String| {
            Err(StoreError::InvalidConfig(format!(
                "source {:?}: {msg}",
                self.name
            )))
        };
        if self.name == stream {
            return bad("a stream cannot source itself".into());
        }
        if let Some(f) = &self.filter_subject {
            if let Err(e) = proto::validate_filter(f) {
                return bad(e.to_string());
            }
            if !self.subject_transforms.is_empty() {
                return bad(format!(
                    "filter_subject {f:?} and subject_transforms are exclusive; put the filter in a transform's src"
                ));
            }
        }
        for t in &self.subject_transforms {
            if let Err(e) = sluice_protocol::transform::SubjectTransform::new(&t.src, &t.dest) {
                return bad(e.to_string());
            }
        }
        Ok(())
    }
}

/// When appended data is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every ack waits for an fsync; concurrent publishes share one (group commit).
    Always,
    /// fsync at most this far apart; an ack means written to the OS.
    Interval(Duration),
    /// Never fsync except on close and block rollover.
    #[default]
    Never,
}

/// A stream's configuration. Durations are nanoseconds in JSON, as JetStream writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// The stream's name; see [`validate_stream_name`].
    pub name: String,
    /// Subject filters captured by the stream (empty = only its name as subject).
    pub subjects: Vec<String>,
    /// File or memory storage.
    pub storage: StorageType,
    /// Maximum messages kept (-1 or 0 = unlimited).
    pub max_msgs: i64,
    /// Maximum bytes kept (-1 or 0 = unlimited).
    pub max_bytes: i64,
    /// Maximum age (zero = unlimited).
    #[serde(with = "nanos")]
    pub max_age: Duration,
    /// Maximum messages per subject (-1 or 0 = unlimited).
    pub max_msgs_per_subject: i64,
    /// Maximum size of one message (subject + headers + payload; -1 or 0 = unlimited).
    pub max_msg_size: i32,
    /// What happens when a limit is reached.
    pub discard: DiscardPolicy,
    /// With discard new: apply it per subject for `max_msgs_per_subject`.
    pub discard_new_per_subject: bool,
    /// `Nats-Msg-Id` dedupe window (zero = 2 minutes).
    #[serde(with = "nanos")]
    pub duplicate_window: Duration,
    /// Allow `Nats-TTL`.
    pub allow_msg_ttl: bool,
    /// When set, removing a subject's last message (by max age, a purge of subjects or a
    /// delete) leaves a marker with this TTL.
    #[serde(with = "nanos")]
    pub subject_delete_marker_ttl: Duration,
    /// Allow `Nats-Schedule`.
    pub allow_msg_schedules: bool,
    /// Most message schedules in force at once (-1 or 0 = unlimited); a new schedule beyond it
    /// is refused. Not part of JetStream's configuration.
    pub max_msg_schedules: i64,
    /// No more writes, deletes or purges.
    pub sealed: bool,
    /// Refuse single-message deletes.
    pub deny_delete: bool,
    /// Refuse purges.
    pub deny_purge: bool,
    /// Streams this one sources from.
    pub sources: Vec<SourceConfig>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            subjects: Vec::new(),
            storage: StorageType::File,
            max_msgs: -1,
            max_bytes: -1,
            max_age: Duration::ZERO,
            max_msgs_per_subject: -1,
            max_msg_size: -1,
            discard: DiscardPolicy::Old,
            discard_new_per_subject: false,
            duplicate_window: Duration::ZERO,
            allow_msg_ttl: false,
            subject_delete_marker_ttl: Duration::ZERO,
            allow_msg_schedules: false,
            max_msg_schedules: -1,
            sealed: false,
            deny_delete: false,
            deny_purge: false,
            sources: Vec::new(),
        }
    }
}

/// The default dedupe window.
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

impl StreamConfig {
    /// A file-storage config with this name and these subjects, everything else default.
    pub fn new(
        name: impl Into<String>,
        subjects: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            subjects: subjects.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Checks the name, subjects and limits.
    pub fn validate(&self) -> Result<()> {
        validate_stream_name(&self.name)?;
        for s in &self.subjects {
            proto::validate_filter(s).map_err(|e| StoreError::InvalidConfig(e.to_string()))?;
        }
        if self.subjects.is_empty() && self.sources.is_empty() {
            proto::validate_subject(&self.name)
                .map_err(|e| StoreError::InvalidConfig(e.to_string()))?;
        }
        let mut index_names = std::collections::BTreeSet::new();
        for src in &self.sources {
            src.validate(&self.name)?;
            if !index_names.insert(src.index_name()) {
                return Err(StoreError::InvalidConfig(format!(
                    "source {:?} appears twice with the same filter and transforms",
                    src.name
                )));
            }
        }
        if self.subject_delete_marker_ttl > Duration::ZERO
            && self.subject_delete_marker_ttl < Duration::from_secs(1)
        {
            return Err(StoreError::InvalidConfig(format!(
                "subject_delete_marker_ttl {:?} is below 1s",
                self.subject_delete_marker_ttl
            )));
        }
        Ok(())
    }

    /// Whether a subject belongs to this stream.
    pub fn captures(&self, subject: &str) -> bool {
        self.captured()
            .iter()
            .any(|f| proto::filter_matches(f, subject))
    }

    /// The subjects the stream captures: its own, or — with neither subjects nor sources — its
    /// name (as JetStream); a stream that only sources captures none.
    pub fn effective_subjects(&self) -> Vec<String> {
        self.captured().to_vec()
    }

    /// [`StreamConfig::effective_subjects`] borrowed: `captures` runs for every message stored.
    fn captured(&self) -> &[String] {
        if self.subjects.is_empty() && self.sources.is_empty() {
            std::slice::from_ref(&self.name)
        } else {
            &self.subjects
        }
    }

    pub(crate) fn dedupe_window(&self) -> Duration {
        if self.duplicate_window.is_zero() {
            DEFAULT_DUPLICATE_WINDOW
        } else {
            self.duplicate_window
        }
    }
}

/// Limits a value of -1/0 means "unlimited"; returns the positive limit.
pub(crate) fn limit(v: i64) -> Option<u64> {
    (v > 0).then_some(v as u64)
}

/// Checks a stream name: 1..=255 bytes, no path separators, `.`, `*`, `>`, whitespace or
/// control characters — so `streams/<name>` can never leave the data directory.
pub fn validate_stream_name(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 255 {
        return bad("longer than 255 bytes");
    }
    if let Some(_c) = name
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '.' | '*' | '>' | '\0'))
    {
        return bad("contains one of / \\ . * > or NUL");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("contains whitespace or a control character");
    }
    Ok(())
}

mod nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_nanos(u64::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_traversal_names_are_rejected() {
        for name in [
            "..", ".", "../x", "a/b", "a\\b", "/etc", "a.b", "a*", "a>", "a b", "a\tb", "a\nb", "",
            "\u{7f}x",
        ] {
            assert!(validate_stream_name(name).is_err(), "{name:?} accepted");
        }
        assert!(validate_stream_name(&"x".repeat(256)).is_err());
        assert!(validate_stream_name(&"x".repeat(255)).is_ok());
        assert!(validate_stream_name("ORDERS_v2-eu").is_ok());
    }

    #[test]
    fn config_round_trips_through_json() {
        let mut c = StreamConfig::new("ORDERS", ["orders.>"]);
        c.max_age = Duration::from_secs(3600);
        c.sources.push(SourceConfig {
            name: "A".into(),
            opt_start_seq: Some(5),
            opt_start_time: None,
            filter_subject: Some("a.*".into()),
            subject_transforms: vec![SubjectTransform {
                src: "a.*".into(),
                dest: "b.{{wildcard(1)}}".into(),
            }],
        });
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<StreamConfig>(&json).unwrap(), c);
    }
}
