//! Subject delete markers: what a stream with `subject_delete_marker_ttl` stores on a subject
//! whose last message was removed, so that its readers are told the subject's value is gone
//! instead of finding it silently absent. As JetStream's: an empty message with
//! `Nats-Marker-Reason`, a `Nats-TTL` of the setting and `Nats-Rollup: sub`.

use std::sync::Arc;

use crate::error::Result;
use crate::proto::names;
use crate::record::flags;
use crate::rules::{self, Publish};
use crate::state::State;
use crate::table::MsgMeta;

/// Why a subject lost its last message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `max_age` removed it.
    MaxAge,
    /// A purge of subjects removed it.
    Purge,
    /// It was deleted by sequence.
    Remove,
}

impl Reason {
    fn header(self) -> &'static str {
        match self {
            Self::MaxAge => names::MARKER_REASON_MAX_AGE,
            Self::Purge => names::MARKER_REASON_PURGE,
            Self::Remove => names::MARKER_REASON_REMOVE,
        }
    }
}

/// The subjects `removed` left without a message, each once, in removal order: those that get
/// a marker. None when the stream keeps no markers. A message with a TTL leaves no marker (it
/// was meant to go, and markers carry a TTL themselves, so they never chain); an unreadable
/// message of a damaged block comes back with no subject and leaves none either.
pub fn orphaned(st: &State, removed: &[(u64, MsgMeta)]) -> Vec<Arc<str>> {
    let mut subjects: Vec<Arc<str>> = Vec::new();
    if st.config.subject_delete_marker_ttl.is_zero() {
        return subjects;
    }
    let mut seen = std::collections::HashSet::new();
    for (_, meta) in removed {
        let last_of_subject =
            !meta.subject.is_empty() && st.table.subject_count(&meta.subject) == 0;
        if last_of_subject && meta.flags & flags::TTL == 0 && seen.insert(meta.subject.clone()) {
            subjects.push(meta.subject.clone());
        }
    }
    subjects
}

/// Stores a marker saying `reason` on each of `subjects`.
pub fn leave(st: &mut State, subjects: &[Arc<str>], reason: Reason) -> Result<()> {
    for subject in subjects {
        let marker = Publish {
            subject: subject.to_string(),
            headers: headers(st, reason),
            payload: bytes::Bytes::new(),
            internal: true,
        };
        rules::publish(st, &marker)?;
    }
    Ok(())
}

fn headers(st: &State, reason: Reason) -> crate::proto::Headers {
    let mut h = crate::proto::Headers::new();
    h.insert(names::MARKER_REASON, reason.header());
    h.insert(
        names::TTL,
        format!("{}s", st.config.subject_delete_marker_ttl.as_secs().max(1)),
    );
    h.insert(names::ROLLUP, names::ROLLUP_SUBJECT);
    h
}
