//! `GET /stream`: a read-only summary of the served stream for the console's stream panel —
//! its first and last sequence, how many messages and bytes it holds, and how many event
//! streams this hub serves now.
//!
//! It shows the whole stream, so with subscriber authorization on it is authorised as a
//! subscription to `>` would be: a token (or the anonymous grant) that may subscribe to every
//! topic.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{error_response, refusal};
use crate::auth::Direction;
use crate::hub::Hub;
use sluice_core::fanout::record;
use sluice_core::metrics::Metrics;

/// Longest wait for the stream's state before answering 503.
const STATE_TIMEOUT: Duration = Duration::from_secs(2);

/// The answer of `GET /stream`.
#[derive(Debug, Serialize)]
struct Summary {
    /// First retained sequence; `last_seq + 1` when the stream holds no messages.
    first_seq: u64,
    /// Last sequence ever assigned; 0 when nothing was ever stored.
    last_seq: u64,
    /// Messages held now.
    messages: u64,
    /// Bytes those messages take, as the backend counts them.
    bytes: u64,
    /// Time the first retained message was stored, if any (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    first_time: Option<String>,
    /// The stream's incarnation, as event ids spell it (lower-case hex).
    incarnation: String,
    /// The subjects the stream captures.
    subjects: Vec<String>,
    /// Event streams this hub serves now.
    subscribers: i64,
}

/// `GET /stream`.
pub async fn summary(State(hub): State<Arc<Hub>>, uri: Uri, headers: HeaderMap) -> Response {
    let grant = hub
        .auth
        .authenticate(Direction::Subscribe, &headers, uri.query())
        .and_then(|grant| grant.check_subscribe([">"]));
    if let Err(err) = grant {
        Metrics::count(&hub.metrics.rejected, "reason", err.reason());
        tracing::info!(reason = err.reason(), status = err.status().as_u16(), detail = %err, "stream summary refused");
        return err.into_response();
    }
    let detail = match tokio::time::timeout(STATE_TIMEOUT, hub.backend.stream_state()).await {
        Ok(Ok(state)) => {
            return Json(Summary {
                first_seq: state.first_seq,
                last_seq: state.last_seq,
                messages: state.messages,
                bytes: state.bytes,
                first_time: state.first_time.map(|time| time.to_string()),
                incarnation: format!("{:x}", state.incarnation),
                subjects: state.subjects,
                subscribers: hub.metrics.active_connections.get(),
            })
            .into_response();
        }
        Ok(Err(err)) => {
            record(&hub.metrics, &err, "stream state failed");
            err.to_string()
        }
        Err(_) => "stream state timed out".to_owned(),
    };
    let reason = "backend_unavailable";
    Metrics::count(&hub.metrics.rejected, "reason", reason);
    tracing::info!(reason, detail = %detail, "stream summary refused");
    error_response(&refusal(StatusCode::SERVICE_UNAVAILABLE, detail))
}
