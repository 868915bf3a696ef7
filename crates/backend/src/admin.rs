//! Stream administration through a backend: the answers of `/admin/…` and of `sluice stream`,
//! the same shape from the embedded store and from JetStream.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most subjects a [`StreamReport`] lists; a stream with more says so in `subjects_truncated`.
pub(crate) const MAX_REPORTED_SUBJECTS: usize = 10_000;

/// What a purge removes, as JetStream's `STREAM.PURGE` takes it: every message unless
/// narrowed. The three narrowings combine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeOptions {
    /// Only messages whose subject matches this filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Keep this many of the newest (matching) messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<u64>,
    /// Only (matching) messages below this sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_seq: Option<u64>,
}

/// One stream described: configuration, state, subjects with their counts, sources, and what
/// it lost. Field names follow `sluice stream info`; times are RFC 3339, the incarnation hex.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamReport {
    /// The stream's name.
    pub name: String,
    /// When this incarnation was created.
    pub created: String,
    /// The incarnation (the epoch of event ids), in hex.
    pub incarnation: String,
    /// Messages held.
    pub messages: u64,
    /// Bytes held.
    pub bytes: u64,
    /// First retained sequence (`last_seq + 1` when empty).
    pub first_seq: u64,
    /// Time of the first retained message.
    pub first_time: Option<String>,
    /// Last sequence assigned.
    pub last_seq: u64,
    /// Time of the last message.
    pub last_time: Option<String>,
    /// Deleted sequences between the first and the last.
    pub num_deleted: u64,
    /// Distinct subjects with messages.
    pub num_subjects: u64,
    /// Messages per subject, at most 10,000 of them (in subject order).
    pub subjects: BTreeMap<String, u64>,
    /// Whether `subjects` was cut at 10,000 subjects.
    pub subjects_truncated: bool,
    /// What the stream knows it lost.
    pub lost: LostReport,
    /// Each source and how it is doing.
    pub sources: Vec<SourceReport>,
    /// The configuration, as the backend writes it (durations in nanoseconds, as JetStream).
    pub config: serde_json::Value,
}

/// The positions a stream cannot deliver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LostReport {
    /// Lost messages.
    pub msgs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Damaged positions, inclusive ranges ascending (JetStream's `lost.msgs`).
    pub damaged: Vec<(u64, u64)>,
    /// Positions unconfirmed after a crash (the embedded store only).
    pub unconfirmed: Vec<(u64, u64)>,
}

/// One source of a stream: its origin and, per backend, how it resumed and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceReport {
    /// The origin stream.
    pub name: String,
    /// The source's filter, when it has one.
    pub filter_subject: Option<String>,
    /// The backend's view of its progress.
    #[serde(flatten)]
    pub progress: SourceProgress,
}

/// How a source is doing, as each backend knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum SourceProgress {
    /// The embedded store's sourcing thread.
    Embedded {
        /// How its starting position was found: `index`, `backward_scan`, `opt_start_seq`,
        /// `opt_start_time`, `after_last_time` or `start`.
        resume: &'static str,
        /// The origin sequence it resumed after (0: none).
        resumed_after: u64,
        /// The last origin sequence handled.
        last_origin_seq: u64,
        /// Whether the origin is missing and waited for.
        waiting_for_origin: bool,
        /// Messages stored since it started.
        sourced: u64,
        /// Duplicates the stream's dedupe window dropped.
        duplicates: u64,
        /// Messages the stream refused (limits, sizes, sealed).
        dropped: u64,
        /// Times the origin was found recreated and the position reset.
        resets: u64,
    },
    /// JetStream's source info.
    JetStream {
        /// Messages the source is behind its origin.
        lag: u64,
        /// Nanoseconds since the source was last active; absent when never.
        active_ns: Option<u64>,
    },
}

/// Keeps the first [`MAX_REPORTED_SUBJECTS`] of `subjects`; true when some were left out.
pub(crate) fn bounded_subjects(subjects: &mut BTreeMap<String, u64>) -> bool {
    if subjects.len() <= MAX_REPORTED_SUBJECTS {
        return false;
    }
    if let Some(first_left_out) = subjects.keys().nth(MAX_REPORTED_SUBJECTS).cloned() {
        let _left_out = subjects.split_off(&first_left_out);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_beyond_the_limit_are_cut_and_said_so() {
        let mut subjects: BTreeMap<String, u64> = (0..MAX_REPORTED_SUBJECTS)
            .map(|i| (format!("s.{i:06}"), 1))
            .collect();
        assert!(!bounded_subjects(&mut subjects));
        subjects.insert("t".to_owned(), 2);
        assert!(bounded_subjects(&mut subjects));
        assert_eq!(subjects.len(), MAX_REPORTED_SUBJECTS);
        assert!(!subjects.contains_key("t"), "the last in order goes");
    }

    #[test]
    fn purge_options_name_an_unknown_field() {
        let err = serde_json::from_str::<PurgeOptions>(r#"{"keeep": 1}"#).unwrap_err();
        assert!(err.to_string().contains("keeep"), "{err}");
        let all: PurgeOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(all, PurgeOptions::default());
    }
}
