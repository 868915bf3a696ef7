//! Administration of the account's JetStream streams through the JetStream API
//! (`STREAM.NAMES`, `STREAM.INFO`, `STREAM.PURGE`, `STREAM.MSG.DELETE`), answered in the shape
//! the embedded store answers in.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};
use sluice_protocol::error::codes;

use super::Shared;
use super::info::incarnation_of_nanos;
use super::{api, markers};
use crate::admin::{
    LostReport, MAX_REPORTED_SUBJECTS, PurgeOptions, SourceProgress, SourceReport, StreamReport,
    bounded_subjects,
};
use crate::{ApiError, BackendError};

/// Most pages of stream names read (JetStream pages 1024 names at a time).
const MAX_NAME_PAGES: usize = 64;

#[derive(Deserialize)]
struct NamesPage {
    #[serde(default)]
    total: usize,
    #[serde(default)]
    streams: Option<Vec<String>>,
}

/// Every stream name of the account, sorted.
pub(super) async fn stream_names(shared: &Shared) -> Result<Vec<String>, BackendError> {
    let mut names = Vec::new();
    for _ in 0..MAX_NAME_PAGES {
        let page: NamesPage = api::request(
            shared,
            "STREAM.NAMES".to_owned(),
            json!({ "offset": names.len() }),
        )
        .await?;
        let streams = page.streams.unwrap_or_default();
        let empty = streams.is_empty();
        names.extend(streams);
        if empty || names.len() >= page.total {
            break;
        }
    }
    names.sort();
    Ok(names)
}

#[derive(Deserialize)]
struct InfoAnswer {
    config: Value,
    created: String,
    state: StateAnswer,
    #[serde(default)]
    sources: Vec<SourceAnswer>,
}

#[derive(Deserialize)]
struct StateAnswer {
    messages: u64,
    bytes: u64,
    first_seq: u64,
    first_ts: String,
    last_seq: u64,
    last_ts: String,
    #[serde(default)]
    num_subjects: u64,
    #[serde(default)]
    num_deleted: u64,
    #[serde(default)]
    subjects: Option<BTreeMap<String, u64>>,
    #[serde(default)]
    lost: Option<LostAnswer>,
}

#[derive(Deserialize)]
struct LostAnswer {
    #[serde(default)]
    msgs: Option<Vec<u64>>,
    #[serde(default)]
    bytes: u64,
}

#[derive(Deserialize)]
struct SourceAnswer {
    name: String,
    #[serde(default)]
    lag: u64,
    /// Nanoseconds since last active; negative for never.
    #[serde(default)]
    active: i64,
    #[serde(default)]
    filter_subject: Option<String>,
}

/// Stream `name` described, with the counts of its subjects.
pub(super) async fn stream_report(
    shared: &Shared,
    name: &str,
) -> Result<StreamReport, BackendError> {
    let info: InfoAnswer = api::request_for(
        shared,
        name,
        format!("STREAM.INFO.{name}"),
        json!({ "subjects_filter": ">" }),
    )
    .await?;
    Ok(report(name, info))
}

fn report(name: &str, info: InfoAnswer) -> StreamReport {
    let state = info.state;
    let created = timestamp(&info.created);
    let mut subjects = state.subjects.unwrap_or_default();
    // The server pages subjects; fewer than it counts were sent when it cut them.
    let cut_by_server = usize::try_from(state.num_subjects)
        .is_ok_and(|count| count > subjects.len() && subjects.len() < MAX_REPORTED_SUBJECTS);
    let subjects_truncated = bounded_subjects(&mut subjects) || cut_by_server;
    let lost = state.lost.map_or_else(LostReport::default, |lost| {
        let mut msgs = lost.msgs.unwrap_or_default();
        msgs.sort_unstable();
        msgs.dedup();
        LostReport {
            msgs: msgs.len() as u64,
            bytes: lost.bytes,
            damaged: ranges(&msgs),
            unconfirmed: Vec::new(),
        }
    });
    let held = state.messages > 0;
    StreamReport {
        name: name.to_owned(),
        created: created.map_or(info.created, |t| t.to_string()),
        incarnation: format!(
            "{:x}",
            incarnation_of_nanos(created.map_or(0, |t| t.as_nanosecond()))
        ),
        messages: state.messages,
        bytes: state.bytes,
        // JetStream reports 0 for a stream that never held a message.
        first_seq: state.first_seq.max(1).min(state.last_seq.saturating_add(1)),
        first_time: held
            .then(|| timestamp(&state.first_ts).map(|t| t.to_string()))
            .flatten(),
        last_seq: state.last_seq,
        last_time: (state.last_seq > 0)
            .then(|| timestamp(&state.last_ts).map(|t| t.to_string()))
            .flatten(),
        num_deleted: state.num_deleted,
        num_subjects: state.num_subjects,
        subjects,
        subjects_truncated,
        lost,
        sources: info
            .sources
            .into_iter()
            .map(|source| SourceReport {
                name: source.name,
                filter_subject: source.filter_subject.filter(|f| !f.is_empty()),
                progress: SourceProgress::JetStream {
                    lag: source.lag,
                    active_ns: u64::try_from(source.active).ok(),
                },
            })
            .collect(),
        config: info.config,
    }
}

/// A JetStream time (RFC 3339); `None` for Go's zero time or anything unreadable.
fn timestamp(text: &str) -> Option<jiff::Timestamp> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .filter(|t| t.as_second() > 0)
}

/// Sorted, distinct sequences as inclusive ranges.
fn ranges(seqs: &[u64]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for &seq in seqs {
        match ranges.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(seq) => *last = seq,
            _ => ranges.push((seq, seq)),
        }
    }
    ranges
}

#[derive(Deserialize)]
struct PurgeAnswer {
    #[serde(default)]
    purged: u64,
}

/// Purges stream `name` as `purge` says; how many messages went. A purge of some subjects of
/// the served stream is noted first, for its feeds to tell the readers of those subjects
/// ([`super::removals`]).
pub(super) async fn purge(
    shared: &Shared,
    name: &str,
    purge: PurgeOptions,
) -> Result<u64, BackendError> {
    let note = match &purge.subject {
        Some(filter) if name == shared.config.stream => {
            let state = shared
                .read_stream(shared.config.request_timeout)
                .await?
                .state;
            let last = purge
                .up_to_seq
                .map_or(u64::MAX, |seq| seq.saturating_sub(1));
            let keep = purge.keep.is_some();
            Some(
                shared
                    .removals
                    .purging(state.incarnation, filter, last, keep),
            )
        }
        _ => None,
    };
    let markers = match (&purge.subject, purge.keep) {
        (Some(filter), None) => markers::before_purge(shared, name, filter).await?,
        _ => None,
    };
    let purged = purge_request(shared, name, purge).await;
    if let Some(id) = note {
        settle(shared, id, purged.is_ok()).await;
    }
    if let (Ok(_), Some(markers)) = (&purged, markers) {
        markers::leave(shared, markers).await;
    }
    purged
}

/// After the removal noted as `id` was made (`done`) or refused: bounds it by the stream's
/// last sequence now (nothing after it was removed), or forgets it.
async fn settle(shared: &Shared, id: u64, done: bool) {
    if !done {
        shared.removals.forget(id);
        return;
    }
    match shared.read_stream(shared.config.request_timeout).await {
        Ok(facts) => shared
            .removals
            .settle(id, facts.state.last_seq, facts.state.first_seq),
        // Left unbounded: readers skipping later positions of those subjects are told too.
        Err(err) => tracing::warn!(error = %err, "the stream's state after a removal is unknown"),
    }
}

/// The `STREAM.PURGE` request.
async fn purge_request(
    shared: &Shared,
    name: &str,
    purge: PurgeOptions,
) -> Result<u64, BackendError> {
    let mut body = serde_json::Map::new();
    if let Some(subject) = purge.subject {
        body.insert("filter".to_owned(), json!(subject));
    }
    if let Some(keep) = purge.keep {
        body.insert("keep".to_owned(), json!(keep));
    }
    if let Some(seq) = purge.up_to_seq {
        body.insert("seq".to_owned(), json!(seq));
    }
    let subject = format!("STREAM.PURGE.{name}");
    let answer: PurgeAnswer = api::request_for(shared, name, subject, Value::Object(body)).await?;
    Ok(answer.purged)
}

#[derive(Deserialize)]
struct DeleteAnswer {
    #[serde(default)]
    success: bool,
}

/// JetStream's `400` / `10043` "sequence N not found": a message already deleted.
const SEQUENCE_NOT_FOUND: u32 = 10043;

/// Deletes message `seq` of stream `name` (marked deleted, not overwritten, as the embedded
/// store does). The server answers a missing message with `400` / `10043` (deleted before) or
/// `500` / `10057` ("no message found", "stream store EOF" past the end); it is answered as
/// the embedded store does, `404` / `10037`, with the server's words. On the served stream,
/// the message's subject is read first: the delete is noted for the feeds to tell the readers
/// of that subject ([`super::removals`]), and a subject it leaves empty gets a marker if the
/// stream keeps them ([`super::markers`]).
pub(super) async fn delete(shared: &Shared, name: &str, seq: u64) -> Result<(), BackendError> {
    // `None` when there is no such message: the delete then fails as it would.
    let subject = if name == shared.config.stream {
        api::message_subject(shared, name, seq).await?
    } else {
        None
    };
    let (note, markers) = match subject {
        Some(subject) => (
            Some(note_delete(shared, seq, &subject).await?),
            markers::before_delete(shared, name, subject).await?,
        ),
        None => (None, None),
    };
    let deleted = delete_request(shared, name, seq).await;
    if let Some(id) = note {
        settle(shared, id, deleted.is_ok()).await;
    }
    if let (Ok(()), Some(markers)) = (&deleted, markers) {
        markers::leave(shared, markers).await;
    }
    deleted
}

/// Notes the delete of message `seq` of the served stream, of `subject`.
async fn note_delete(shared: &Shared, seq: u64, subject: &str) -> Result<u64, BackendError> {
    let state = shared
        .read_stream(shared.config.request_timeout)
        .await?
        .state;
    Ok(shared.removals.deleting(state.incarnation, seq, subject))
}

/// The `STREAM.MSG.DELETE` request.
async fn delete_request(shared: &Shared, name: &str, seq: u64) -> Result<(), BackendError> {
    let missing = |detail: &str| {
        BackendError::Api(
            ApiError::no_message_found()
                .described(format!("stream {name:?} has no message {seq} ({detail})")),
        )
    };
    let answer: Result<DeleteAnswer, _> = api::request_for(
        shared,
        name,
        format!("STREAM.MSG.DELETE.{name}"),
        json!({ "seq": seq, "no_erase": true }),
    )
    .await;
    match answer {
        Ok(DeleteAnswer { success: true }) => Ok(()),
        Ok(DeleteAnswer { success: false }) => Err(missing("not deleted")),
        Err(BackendError::Api(api))
            if [codes::MSG_DELETE_FAILED, SEQUENCE_NOT_FOUND].contains(&api.code) =>
        {
            Err(missing(&api.description))
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_become_inclusive_ranges() {
        assert_eq!(ranges(&[]), vec![]);
        assert_eq!(
            ranges(&[3, 4, 5, 9, 11, 12]),
            vec![(3, 5), (9, 9), (11, 12)]
        );
        assert_eq!(
            ranges(&[u64::MAX - 1, u64::MAX]),
            vec![(u64::MAX - 1, u64::MAX)]
        );
    }

    #[test]
    fn go_zero_times_are_no_time() {
        assert_eq!(timestamp("0001-01-01T00:00:00Z"), None);
        assert_eq!(timestamp("yesterday"), None);
        assert!(timestamp("2026-01-02T03:04:05.123456789Z").is_some());
    }
}
