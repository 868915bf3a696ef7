//! `POST /publish`: `{"topic", "payload", "msg_id"?, "ttl"?, "headers"?}` →
//! `{"id", "seq", "duplicate"}`; a batch of such bodies (a JSON array, or NDJSON) → a JSON
//! array of such answers, or `{"code", "description"}` for each item refused, in order.
//!
//! A string payload is stored as its text; any other JSON value is stored as JSON (so it
//! reaches subscribers as the same JSON value). `msg_id` becomes `Nats-Msg-Id` (dedupe within
//! the stream's duplicate window), `ttl` becomes `Nats-TTL` (`"30s"`, `"never"` or seconds).
//! `headers` may carry application headers, `Nats-Expected-*` preconditions, and a message
//! schedule (`Nats-Schedule`, `Nats-Schedule-Target` — a topic, granted like the message's own —
//! and `Nats-Schedule-TTL`), which the stream judges by JetStream's rules; other `Nats-` headers
//! are refused.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sluice_protocol::headers::{
    Headers, NATS_EXPECTED_PREFIX, NATS_MSG_ID, NATS_SCHEDULE, NATS_SCHEDULE_TARGET,
    NATS_SCHEDULE_TTL, NATS_STREAM_SOURCE, NATS_TTL, validate_name, validate_value,
};
use sluice_protocol::subject::{filter_matches, validate_subject};
use sluice_protocol::ttl::MsgTtl;

use super::batch::{self, Shape};
use super::body::{self, BodyBudget, BodyError, BodyLimits};
use super::{ErrorBody, bad_request, error_response, refusal};
use crate::auth::{AuthError, Direction, Grant};
use crate::config::Config;
use crate::hub::Hub;
use sluice_backend::{ApiError, BackendError, PublishAck, PublishRequest};
use sluice_core::conn::ConnInfo;
use sluice_core::event_id::EventId;
use sluice_core::metrics::Metrics;

/// Most application headers on one message.
const MAX_HEADERS: usize = 64;
/// Longest `msg_id`.
const MAX_MSG_ID_LEN: usize = 256;
/// The `Nats-` headers of a message schedule a publish may carry (ADR-51).
const SCHEDULE_HEADERS: [&str; 3] = [NATS_SCHEDULE, NATS_SCHEDULE_TARGET, NATS_SCHEDULE_TTL];

/// One message as the request gives it, borrowing from the request body (a topic with no
/// escapes, and the payload's JSON text, are never copied out of it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    #[serde(borrow)]
    payload: &'a RawValue,
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
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "event_id_text"
    )]
    id: Option<EventId>,
    seq: u64,
    duplicate: bool,
    /// The stream that stored the message, when not the served one (`seq` is its sequence).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
}

/// An event id written as its text straight into the answer (no string of its own).
fn event_id_text<S: serde::Serializer>(id: &Option<EventId>, out: S) -> Result<S::Ok, S::Error> {
    match id {
        Some(id) => out.collect_str(id),
        None => out.serialize_none(),
    }
}

/// One element of a batch's answer: the message's answer, or why it was refused.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ItemAnswer {
    Stored(Answer),
    Refused(ErrorBody<'static>),
}

/// `POST /publish`. A body declared too large is refused before authorization; the body is
/// read only for an authorized request (see [`super::body`] for its bounds). A JSON array
/// or an NDJSON body is a batch (see [`super::batch`]).
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
    // The request is in: from here on the time is the hub's and the stream's.
    let received = Instant::now();
    let max_items = hub.config.limits.max_publish_batch;
    match batch::shape(&parts.headers, &body.bytes, max_items) {
        Ok(Shape::Single) => match store(&hub, &grant, &body.bytes).await {
            Ok(answer) => {
                count_stored(&hub, &answer);
                hub.metrics
                    .publish_latency
                    .single
                    .observe(received.elapsed());
                Json(answer).into_response()
            }
            Err(failure) => refused_single(&hub, failure),
        },
        Ok(Shape::Batch(items)) => {
            let response = store_batch(&hub, &grant, &body.bytes, &items).await;
            if response.status().is_success() {
                hub.metrics
                    .publish_latency
                    .batch
                    .observe(received.elapsed());
            }
            response
        }
        Err(refused) => {
            Metrics::count(&hub.metrics.publishes, "result", "rejected");
            Metrics::count(&hub.metrics.publish_refusals, "reason", refused.reason);
            tracing::info!(result = "rejected", reason = refused.reason, status = refused.error.status, detail = %refused.error.description, "publish batch refused");
            error_response(&refused.error)
        }
    }
}

fn count_stored(hub: &Hub, answer: &Answer) {
    let result = if answer.duplicate {
        "duplicate"
    } else {
        "stored"
    };
    Metrics::count(&hub.metrics.publishes, "result", result);
}

/// A single publish refused: counted, logged, answered as the whole response.
fn refused_single(hub: &Hub, failure: Failure) -> Response {
    count_refusal(hub, &failure);
    match failure {
        Failure::Auth(err) => err.into_response(),
        Failure::Unavailable { error, .. } => {
            let mut response = error_response(&error);
            let seconds = hub.config.sse.retry.as_secs().max(1).to_string();
            if let Ok(value) = HeaderValue::from_str(&seconds) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Failure::Api(err) => error_response(&err),
    }
}

/// One message refused, alone or within a batch: counted under its result and reason, logged.
fn count_refusal(hub: &Hub, failure: &Failure) {
    let (result, reason) = match failure {
        Failure::Auth(err) => ("unauthorized", err.reason()),
        Failure::Unavailable { reason, .. } => ("unavailable", *reason),
        Failure::Api(err) if err.is_schedules_limit() => ("rejected", "schedules_limit"),
        // The hub's own refusals carry their status as their code; the stream's, its own.
        Failure::Api(err) if err.code == u32::from(err.status) && err.status == 400 => {
            ("rejected", "invalid_message")
        }
        Failure::Api(err) if (400..500).contains(&err.status) => ("rejected", "stream_refused"),
        Failure::Api(_) => ("failed", "failed"),
    };
    Metrics::count(&hub.metrics.publishes, "result", result);
    Metrics::count(&hub.metrics.publish_refusals, "reason", reason);
    match failure {
        Failure::Auth(err) => {
            tracing::info!(result, reason, status = err.status().as_u16(), detail = %err, "publish refused");
        }
        Failure::Unavailable { error, .. } | Failure::Api(error) => {
            tracing::info!(result, reason, status = error.status, detail = %error.description, "publish refused");
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

impl Failure {
    /// The element of a batch's answer that says why its message was refused.
    fn item_answer(self) -> ItemAnswer {
        let error = match self {
            Self::Auth(err) => refusal(err.status(), err.to_string()),
            Self::Unavailable { error, .. } | Self::Api(error) => error,
        };
        ItemAnswer::Refused(ErrorBody {
            code: error.code,
            description: error.description.into(),
        })
    }
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

/// A message ready for the backend, and the topic it was given as (for errors).
struct Prepared<'a> {
    topic: Cow<'a, str>,
    request: PublishRequest,
}

/// Reads one publish body (a single one, or an item of a batch) into a request: well formed,
/// its topic granted and a valid subject, its headers and payload allowed. `item` lies within
/// `body`, the whole request body, which the payload is taken from without a copy.
fn prepare<'a>(
    config: &Config,
    grant: &Grant,
    body: &Bytes,
    item: &'a [u8],
) -> Result<Prepared<'a>, Failure> {
    let message: Body<'a> = serde_json::from_slice(item)
        .map_err(|err| bad_request(format!("invalid publish body: {err}")))?;
    grant.check_publish(&message.topic).map_err(Failure::Auth)?;
    let subject = config.subject_for(&message.topic);
    validate_subject(&subject)
        .map_err(|err| bad_request(format!("invalid topic {:?}: {err}", message.topic)))?;
    let mut headers = headers(&message)?;
    schedule_target(config, grant, &mut headers)?;
    let request = PublishRequest {
        subject,
        headers,
        payload: payload(body, message.payload)?,
    };
    Ok(Prepared {
        topic: message.topic,
        request,
    })
}

/// A schedule's target is a topic as the message's own is: it must be granted, and it is
/// stored as its subject (with the topic prefix).
fn schedule_target(config: &Config, grant: &Grant, headers: &mut Headers) -> Result<(), Failure> {
    let Some(target) = headers.get(NATS_SCHEDULE_TARGET).map(str::to_owned) else {
        return Ok(());
    };
    grant.check_publish(&target).map_err(Failure::Auth)?;
    headers.insert(NATS_SCHEDULE_TARGET, config.subject_for(&target));
    Ok(())
}

/// Refuses a message whose subject none of the stream's `subjects` captures.
fn check_captured(subjects: &[String], prepared: &Prepared<'_>) -> Result<(), Failure> {
    if subjects
        .iter()
        .any(|f| filter_matches(f, &prepared.request.subject))
    {
        return Ok(());
    }
    Err(bad_request(format!(
        "topic {:?} is outside the stream's subjects {subjects:?}",
        prepared.topic
    ))
    .into())
}

fn answer(ack: PublishAck) -> Answer {
    Answer {
        id: ack.stream.is_none().then_some(EventId {
            seq: ack.seq,
            incarnation: Some(ack.incarnation),
        }),
        seq: ack.seq,
        duplicate: ack.duplicate,
        stream: ack.stream,
    }
}

async fn store(hub: &Hub, grant: &Grant, body: &Bytes) -> Result<Answer, Failure> {
    let prepared = prepare(&hub.config, grant, body, body)?;
    let subjects = hub.backend.subjects().await?;
    check_captured(&subjects, &prepared)?;
    Ok(answer(hub.backend.publish(prepared.request).await?))
}

/// Stores the items of a batch that pass a single publish's checks, in one backend call, and
/// answers `200` with one element per item, in order. Only the stream's subjects being
/// unknown (the backend unavailable) refuses the whole batch, as it would a single publish.
async fn store_batch(hub: &Hub, grant: &Grant, body: &Bytes, items: &[&RawValue]) -> Response {
    let mut prepared = prepare_batch(&hub.config, grant, body, items);
    if prepared.iter().any(Result::is_ok) {
        let subjects = match hub.backend.subjects().await {
            Ok(subjects) => subjects,
            Err(err) => return refused_single(hub, err.into()),
        };
        check_batch_captured(&subjects, &mut prepared);
    }
    let (requests, outcomes) = split_batch(prepared);
    let acks = if requests.is_empty() {
        Vec::new()
    } else {
        hub.backend.publish_batch(requests).await
    };
    let answers = batch_answer(outcomes, acks, |failure| count_refusal(hub, failure));
    Metrics::count_by(&hub.metrics.publishes, "result", "stored", answers.stored);
    Metrics::count_by(
        &hub.metrics.publishes,
        "result",
        "duplicate",
        answers.duplicates,
    );
    json_response(&answers.items)
}

/// Each item of a batch read as a single body is ([`prepare`]).
fn prepare_batch<'a>(
    config: &Config,
    grant: &Grant,
    body: &Bytes,
    items: &[&'a RawValue],
) -> Vec<Result<Prepared<'a>, Failure>> {
    let mut prepared = Vec::with_capacity(items.len());
    prepared.extend(
        items
            .iter()
            .map(|item| prepare(config, grant, body, item.get().as_bytes())),
    );
    prepared
}

/// Refuses the prepared items of a batch that the stream's `subjects` do not capture.
fn check_batch_captured(subjects: &[String], prepared: &mut [Result<Prepared<'_>, Failure>]) {
    for item in prepared {
        if let Ok(ready) = item
            && let Err(failure) = check_captured(subjects, ready)
        {
            *item = Err(failure);
        }
    }
}

/// The requests of a batch to send, in order, and for each item either its failure or
/// `None`: its answer is the backend's next one.
fn split_batch(
    prepared: Vec<Result<Prepared<'_>, Failure>>,
) -> (Vec<PublishRequest>, Vec<Option<Failure>>) {
    let mut requests = Vec::with_capacity(prepared.len());
    let mut outcomes = Vec::with_capacity(prepared.len());
    for item in prepared {
        outcomes.push(match item {
            Ok(ready) => {
                requests.push(ready.request);
                None
            }
            Err(failure) => Some(failure),
        });
    }
    (requests, outcomes)
}

/// A batch's answer, one element per item in order, and how many of its messages were stored
/// and how many were duplicates (the refused ones were counted as they were answered).
struct BatchAnswer {
    items: Vec<ItemAnswer>,
    stored: u64,
    duplicates: u64,
}

/// Answers each item of a batch: its failure (handed to `refused` first), or the backend's
/// next answer for the requests sent.
fn batch_answer(
    outcomes: Vec<Option<Failure>>,
    acks: Vec<Result<PublishAck, BackendError>>,
    mut refused: impl FnMut(&Failure),
) -> BatchAnswer {
    let sent = outcomes.iter().filter(|outcome| outcome.is_none()).count();
    let mut answers = BatchAnswer {
        items: Vec::with_capacity(outcomes.len()),
        stored: 0,
        duplicates: 0,
    };
    let mut acks = acks.into_iter();
    for outcome in outcomes {
        let result = match outcome {
            Some(failure) => Err(failure),
            None => match acks.next() {
                Some(Ok(ack)) => Ok(answer(ack)),
                Some(Err(err)) => Err(Failure::from(err)),
                // The backend broke its contract of one answer per request.
                None => Err(Failure::Api(refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the backend answered fewer than the {sent} messages sent"),
                ))),
            },
        };
        answers.items.push(match result {
            Ok(answer) => {
                if answer.duplicate {
                    answers.duplicates += 1;
                } else {
                    answers.stored += 1;
                }
                ItemAnswer::Stored(answer)
            }
            Err(failure) => {
                refused(&failure);
                failure.item_answer()
            }
        });
    }
    answers
}

/// About the length of one element of a batch's answer, to size its buffer once.
const ITEM_ANSWER_LEN: usize = 64;

/// `answers` as a JSON array, written into one buffer sized for them.
fn answer_json(answers: &[ItemAnswer]) -> serde_json::Result<Vec<u8>> {
    let mut json = Vec::with_capacity(2 + answers.len() * ITEM_ANSWER_LEN);
    serde_json::to_writer(&mut json, answers)?;
    Ok(json)
}

/// `200` with `answers` as a JSON array.
fn json_response(answers: &[ItemAnswer]) -> Response {
    match answer_json(answers) {
        Ok(json) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            json,
        )
            .into_response(),
        // As axum's `Json` answers a value it cannot write (none of these: numbers and text).
        Err(err) => error_response(&refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("writing the answer failed: {err}"),
        )),
    }
}

/// The hub's own work on a batch `POST /publish` body, without a backend: split (as `headers`
/// declare it), each item read and checked with an unrestricted grant against `config` and the
/// stream's `subjects`, every item sent answered as stored at the next sequence, and the
/// answer written. The JSON; or the status of a body refused as a whole, 0 for a body that is
/// a single message. For the benches.
pub(crate) fn answer_batch_without_backend(
    config: &Config,
    subjects: &[String],
    headers: &axum::http::HeaderMap,
    body: &Bytes,
) -> Result<Vec<u8>, u32> {
    let items = match batch::shape(headers, body, config.limits.max_publish_batch) {
        Ok(Shape::Batch(items)) => items,
        Ok(Shape::Single) => return Err(0),
        Err(refused) => return Err(refused.error.code),
    };
    let grant = Grant::unrestricted(Direction::Publish);
    let mut prepared = prepare_batch(config, &grant, body, &items);
    check_batch_captured(subjects, &mut prepared);
    let (requests, outcomes) = split_batch(prepared);
    let acks = (1..)
        .zip(requests)
        .map(|(seq, _)| {
            Ok(PublishAck {
                seq,
                duplicate: false,
                stream: None,
                incarnation: 1,
            })
        })
        .collect();
    let answers = batch_answer(outcomes, acks, |_| {});
    answer_json(&answers.items).map_err(|_| 500)
}

/// The payload as stored: a JSON string's text, any other JSON value as its JSON text. Both
/// are taken from `body` without a copy where they stand in it as they are (a string with no
/// escapes, any other value).
fn payload(body: &Bytes, raw: &RawValue) -> Result<Bytes, ApiError> {
    let text = raw.get();
    if text.starts_with('"') {
        if let Ok(plain) = serde_json::from_str::<&str>(text) {
            return Ok(body.slice_ref(plain.as_bytes()));
        }
        let string: String = serde_json::from_str(text)
            .map_err(|err| bad_request(format!("invalid payload string: {err}")))?;
        return Ok(Bytes::from(string));
    }
    Ok(body.slice_ref(text.as_bytes()))
}

fn headers(body: &Body<'_>) -> Result<Headers, ApiError> {
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
        if reserved
            && !name.starts_with(NATS_EXPECTED_PREFIX)
            && !SCHEDULE_HEADERS.contains(&name.as_str())
        {
            return Err(bad_request(format!(
                "header {name:?} is reserved; use msg_id and ttl, Nats-Expected-* preconditions, \
                 or Nats-Schedule with Nats-Schedule-Target and Nats-Schedule-TTL"
            )));
        }
        headers.append(name.clone(), value.clone());
    }
    if headers.get(NATS_SCHEDULE).is_none()
        && let Some(stray) = [NATS_SCHEDULE_TARGET, NATS_SCHEDULE_TTL]
            .into_iter()
            .find(|name| headers.get(name).is_some())
    {
        return Err(bad_request(format!(
            "header {stray:?} belongs to a schedule: it needs a Nats-Schedule header"
        )));
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
