//! Subject delete markers for the removals made through the hub. nats-server stores one only
//! when `max_age` removes a subject's last message; a purge of subjects or a delete made
//! through sluice leaves one too on a stream with `subject_delete_marker_ttl`, as the embedded
//! store does, so that the readers of a key are told it is gone on either backend. Each is
//! published only while its subject holds no message (`Nats-Expected-Last-Subject-Sequence: 0`):
//! a value stored since the removal is the key's state, not the marker.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use sluice_protocol::error::codes;
use sluice_protocol::headers::{
    Headers, MARKER_REASON_PURGE, MARKER_REASON_REMOVE, NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
    NATS_MARKER_REASON, NATS_TTL,
};

use super::Shared;
use super::api;
use crate::{BackendError, PublishRequest};

/// Most pages of subjects read for one purge (nats-server sends up to 100,000 a page).
const MAX_SUBJECT_PAGES: usize = 100;

/// The markers a removal leaves once made.
pub(super) struct Markers {
    ttl: Duration,
    reason: &'static str,
    subjects: Vec<String>,
}

#[derive(Deserialize)]
struct InfoPage {
    config: ConfigAnswer,
    state: SubjectsAnswer,
    #[serde(default)]
    total: usize,
}

#[derive(Deserialize)]
struct ConfigAnswer {
    /// Nanoseconds; absent or 0 for no markers.
    #[serde(default)]
    subject_delete_marker_ttl: u64,
}

#[derive(Deserialize)]
struct SubjectsAnswer {
    #[serde(default)]
    subjects: Option<BTreeMap<String, u64>>,
}

/// Read before a purge of `filter` on stream `name`: its subjects that match, if the stream is
/// the served one and keeps markers.
pub(super) async fn before_purge(
    shared: &Shared,
    name: &str,
    filter: &str,
) -> Result<Option<Markers>, BackendError> {
    let Some(ttl) = marker_ttl(shared, name).await? else {
        return Ok(None);
    };
    let mut subjects = Vec::new();
    for _ in 0..MAX_SUBJECT_PAGES {
        let page: InfoPage = api::request_for(
            shared,
            name,
            format!("STREAM.INFO.{name}"),
            json!({ "subjects_filter": filter, "offset": subjects.len() }),
        )
        .await?;
        let got = page.state.subjects.unwrap_or_default();
        let more = !got.is_empty() && subjects.len() + got.len() < page.total;
        subjects.extend(got.into_keys());
        if !more {
            break;
        }
    }
    Ok(Some(Markers {
        ttl,
        reason: MARKER_REASON_PURGE,
        subjects,
    }))
}

/// Read before a delete of a message of `subject` in the served stream `name`: the marker it
/// leaves if it empties the subject, when the stream keeps markers.
pub(super) async fn before_delete(
    shared: &Shared,
    name: &str,
    subject: String,
) -> Result<Option<Markers>, BackendError> {
    Ok(marker_ttl(shared, name).await?.map(|ttl| Markers {
        ttl,
        reason: MARKER_REASON_REMOVE,
        subjects: vec![subject],
    }))
}

/// The `subject_delete_marker_ttl` of stream `name`, if it is the served one and keeps
/// markers: one `STREAM.INFO` without subjects, so a stream without markers pays no listing.
async fn marker_ttl(shared: &Shared, name: &str) -> Result<Option<Duration>, BackendError> {
    if name != shared.config.stream {
        return Ok(None);
    }
    let info: InfoPage =
        api::request_for(shared, name, format!("STREAM.INFO.{name}"), json!({})).await?;
    let ttl = Duration::from_nanos(info.config.subject_delete_marker_ttl);
    Ok((!ttl.is_zero()).then_some(ttl))
}

/// Publishes the markers of a removal that was made, each on a subject left empty. A marker
/// that cannot be stored is logged: the removal itself stands.
pub(super) async fn leave(shared: &Shared, markers: Markers) {
    for subject in markers.subjects {
        let mut headers = Headers::new();
        headers.insert(NATS_MARKER_REASON, markers.reason);
        headers.insert(NATS_TTL, format!("{}s", markers.ttl.as_secs().max(1)));
        headers.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, "0");
        let marker = PublishRequest {
            subject: subject.clone(),
            headers,
            payload: bytes::Bytes::new(),
        };
        match super::publish::publish(shared, marker).await {
            Ok(_) => {}
            // The subject holds a message again (or still): no marker is due.
            Err(BackendError::Api(api)) if api.code == codes::WRONG_LAST_SEQUENCE => {}
            Err(err) => {
                tracing::warn!(%subject, reason = markers.reason, error = %err, "a subject delete marker could not be stored: readers holding the subject's value are not told it is gone");
            }
        }
    }
}
