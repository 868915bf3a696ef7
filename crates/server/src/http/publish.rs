//! `POST /publish`: `{"topic", "payload", "msg_id"?, "ttl"?, "headers"?}` →
//! `{"id", "seq", "duplicate"}`.
//!
//! A string payload is stored as its text; any other JSON value is stored as JSON (so it
//! reaches subscribers as the same JSON value). `msg_id` becomes `Nats-Msg-Id` (dedupe within
//! the stream's duplicate window), `ttl` becomes `Nats-TTL` (`"30s"`, `"never"` or seconds).
//! `headers` may carry application headers and `Nats-Expected-*` preconditions; other `Nats-`
//! headers are refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sluice_protocol::headers::{
    Headers, NATS_EXPECTED_PREFIX, NATS_MSG_ID, NATS_STREAM_SOURCE, NATS_TTL, validate_name,
    validate_value,
};
use sluice_protocol::subject::{filter_matches, validate_subject};
use sluice_protocol::ttl::MsgTtl;

use super::body::{self, BodyBudget, BodyError, BodyLimits};
use super::{bad_request, error_response, refusal};
use crate::auth::{AuthError, Direction, Grant};
use crate::backend::{ApiError, BackendError, PublishRequest};
use crate::conn::ConnInfo;
use crate::event_id::EventId;
use crate::hub::Hub;
use crate::metrics::Metrics;

/// Most application headers on one message.
const MAX_HEADERS: usize = 64;
/// Longest `msg_id`.
const MAX_MSG_ID_LEN: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    topic: String,
    payload: Box<RawValue>,
    #[serde(default)]
    msg_id: Option<String>,
    #[serde(default)]
    ttl: Option<Ttl>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// `ttl`: a number of seconds, or a duration or `never` as text.
enum Ttl {
    Seconds(u64),
    Text(String),
}

/// Reads a `ttl`; any other JSON value is refused saying what a TTL is (serde's untagged enums
/// would answer "data did not match any variant of untagged enum").
impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TtlVisitor;
        impl serde::de::Visitor<'_> for TtlVisitor {
            type Value = Ttl;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a TTL: a duration such as \"90s\" or \"1h\", a whole number of seconds, or \"never\"",
                )
            }
            fn visit_u64<E: serde::de::Error>(self, secs: u64) -> Result<Ttl, E> {
                Ok(Ttl::Seconds(secs))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Ttl, E> {
                Ok(Ttl::Text(text.to_owned()))
            }
        }
        deserializer.deserialize_any(TtlVisitor)
    }
}

/// The answer to a successful publish.
#[derive(Debug, Serialize)]
struct Answer {
    /// The event id in the served stream; absent when another stream stored the message.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    seq: u64,
    duplicate: bool,
    /// The stream that stored the message, when not the served one (`seq` is its sequence).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
}

/// `POST /publish`. A body declared too large is refused before authorization; the body is
/// read only for an authorized request (see [`super::body`] for its bounds).
pub async fn publish(
    State(hub): State<Arc<Hub>>,
    Extension(budget): Extension<Arc<BodyBudget>>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<ConnInfo>>()
        .map(|info| info.0.peer);
    let limits = BodyLimits {
        max: hub.config.limits.max_publish_body,
        timeout: hub.config.limits.body_read_timeout,
    };
    if let Err(err) = body::check_declared(&parts.headers, limits.max) {
        return refused_body(&hub, peer, &err);
    }
    let grant = match hub
        .auth
        .authenticate(Direction::Publish, &parts.headers, parts.uri.query())
    {
        Ok(grant) => grant,
        Err(err) => return refused_by_auth(&hub, err),
    };
    let body = match body::read(&parts.headers, body, limits, &budget).await {
        Ok(body) => body,
        Err(err) => return refused_body(&hub, peer, &err),
    };
    match store(&hub, &grant, &body.bytes).await {
        Ok(answer) => {
            let result = if answer.duplicate {
                "duplicate"
            } else {
                "stored"
            };
            Metrics::count(&hub.metrics.publishes, "result", result);
            Json(answer).into_response()
        }
        Err(Failure::Auth(err)) => refused_by_auth(&hub, err),
        Err(Failure::Unavailable { reason, error }) => {
            Metrics::count(&hub.metrics.publishes, "result", "unavailable");
            tracing::info!(result = "unavailable", reason, status = error.status, detail = %error.description, "publish refused");
            let mut response = error_response(&error);
            let seconds = hub.config.sse.retry.as_secs().max(1).to_string();
            if let Ok(value) = HeaderValue::from_str(&seconds) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Err(Failure::Api(err)) => {
            let result = if (400..500).contains(&err.status) {
                "rejected"
            } else {
                "failed"
            };
            Metrics::count(&hub.metrics.publishes, "result", result);
            tracing::info!(result, status = err.status, detail = %err.description, "publish refused");
            error_response(&err)
        }
    }
}

/// A publish whose body was not read (too large, too slow, no room in the budget, cut off):
/// counted under its reason, logged with the peer, answered with `Connection: close` since
/// the rest of the body is never read.
fn refused_body(hub: &Hub, peer: Option<SocketAddr>, err: &BodyError) -> Response {
    let status = err.status();
    let result = if status.is_server_error() {
        "failed"
    } else {
        "rejected"
    };
    let reason = err.reason();
    Metrics::count(&hub.metrics.publishes, "result", result);
    Metrics::count(&hub.metrics.rejected, "reason", reason);
    tracing::info!(result, reason, status = status.as_u16(), peer = peer.map(tracing::field::display), detail = %err, "publish refused");
    let mut response = error_response(&refusal(status, err.to_string()));
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if matches!(err, BodyError::Budget) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// A publish the authorization refused: counted, logged with its reason, answered.
fn refused_by_auth(hub: &Hub, err: AuthError) -> Response {
    Metrics::count(&hub.metrics.publishes, "result", "unauthorized");
    tracing::info!(result = "unauthorized", reason = err.reason(), status = err.status().as_u16(), detail = %err, "publish refused");
    err.into_response()
}

/// Why a publish failed: an authorization refusal, the stream unavailable for now (`503`,
/// retry), or any other error.
enum Failure {
    Auth(AuthError),
    Unavailable {
        /// The log label: why it is unavailable.
        reason: &'static str,
        error: ApiError,
    },
    Api(ApiError),
}

impl From<ApiError> for Failure {
    fn from(err: ApiError) -> Self {
        Self::Api(err)
    }
}

impl From<BackendError> for Failure {
    fn from(err: BackendError) -> Self {
        let reason = match &err {
            BackendError::Unavailable(unavailable) => unavailable.reason(),
            // JetStream's own 503s (10008 "JetStream system temporarily unavailable", …).
            BackendError::Api(api) if api.status == 503 => "stream_unavailable",
            _ => return Self::Api(err.into()),
        };
        Self::Unavailable {
            reason,
            error: err.into(),
        }
    }
}

async fn store(hub: &Hub, grant: &Grant, body: &[u8]) -> Result<Answer, Failure> {
    let body: Body = serde_json::from_slice(body)
        .map_err(|err| bad_request(format!("invalid publish body: {err}")))?;
    grant.check_publish(&body.topic).map_err(Failure::Auth)?;
    let subject = hub.config.subject_for(&body.topic);
    validate_subject(&subject)
        .map_err(|err| bad_request(format!("invalid topic {:?}: {err}", body.topic)))?;
    let request = PublishRequest {
        subject,
        headers: headers(&body)?,
        payload: payload(&body.payload)?,
    };
    let subjects = hub.backend.subjects().await?;
    if !subjects.iter().any(|f| filter_matches(f, &request.subject)) {
        return Err(bad_request(format!(
            "topic {:?} is outside the stream's subjects {subjects:?}",
            body.topic
        ))
        .into());
    }
    let ack = hub.backend.publish(request).await?;
    Ok(Answer {
        id: ack.stream.is_none().then(|| {
            EventId {
                seq: ack.seq,
                incarnation: Some(ack.incarnation),
            }
            .to_string()
        }),
        seq: ack.seq,
        duplicate: ack.duplicate,
        stream: ack.stream,
    })
}

fn payload(raw: &RawValue) -> Result<Bytes, ApiError> {
    let text = raw.get();
    if text.starts_with('"') {
        let string: String = serde_json::from_str(text)
            .map_err(|err| bad_request(format!("invalid payload string: {err}")))?;
        return Ok(Bytes::from(string));
    }
    Ok(Bytes::copy_from_slice(text.as_bytes()))
}

fn headers(body: &Body) -> Result<Headers, ApiError> {
    if body.headers.len() > MAX_HEADERS {
        return Err(bad_request(format!(
            "{} headers given, at most {MAX_HEADERS} are allowed",
            body.headers.len()
        )));
    }
    let mut headers = Headers::new();
    for (name, value) in &body.headers {
        validate_name(name).map_err(|err| bad_request(err.to_string()))?;
        validate_value(name, value).map_err(|err| bad_request(err.to_string()))?;
        if name.eq_ignore_ascii_case(NATS_STREAM_SOURCE) {
            // Only the stream itself writes source positions; a forged one is JetStream's 10227.
            return Err(ApiError::stream_source_header_not_allowed());
        }
        let reserved = name
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case("nats-"));
        if reserved && !name.starts_with(NATS_EXPECTED_PREFIX) {
            return Err(bad_request(format!(
                "header {name:?} is reserved; use msg_id and ttl, or Nats-Expected-* preconditions"
            )));
        }
        headers.append(name.clone(), value.clone());
    }
    if let Some(id) = &body.msg_id {
        if id.is_empty() || id.len() > MAX_MSG_ID_LEN {
            return Err(bad_request(format!(
                "msg_id must be 1 to {MAX_MSG_ID_LEN} bytes, got {} bytes",
                id.len()
            )));
        }
        validate_value(NATS_MSG_ID, id).map_err(|err| bad_request(err.to_string()))?;
        headers.insert(NATS_MSG_ID, id.clone());
    }
    if let Some(ttl) = &body.ttl {
        let text = match ttl {
            Ttl::Seconds(secs) => secs.to_string(),
            Ttl::Text(text) => text.clone(),
        };
        MsgTtl::parse(&text).map_err(|err| bad_request(format!("ttl: {err}")))?;
        headers.insert(NATS_TTL, text);
    }
    Ok(headers)
}
