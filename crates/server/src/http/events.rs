//! `GET /events`: validate, plan, and stream.
//!
//! Order matters: topics and the resume position are validated first (400), then a
//! connection slot is taken (429), then the backend is asked for the stream's state (503).
//! An `EventSource` (which sends `Accept: text/event-stream`) gives up for good on any
//! non-200 answer, so transient refusals (429, 503) are answered to it with a 200 stream that
//! only carries a `retry:` hint; it reconnects after that delay.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use bytes::BytesMut;

use super::{error_response, refusal};
use crate::auth::{self, Direction};
use crate::config::Config;
use crate::hub::Hub;
use crate::topics::{self, Topics};
use sluice_backend::StreamState;
use sluice_core::conn::ConnInfo;
use sluice_core::event_id::EventId;
use sluice_core::event_id::choose_cursor;
use sluice_core::frames;
use sluice_core::frames::Repair;
use sluice_core::hub::HubCore;
use sluice_core::metrics::Metrics;
use sluice_core::plan::StartPosition;
use sluice_core::reader::{Opening, Reader, Refusal, Start};
use sluice_core::recent::StartFrom;
use sluice_core::session::{Session, StreamSession};

type Params = Query<Vec<(String, String)>>;

/// `GET /events?topic=…&topic=…&last-id=…`
pub async fn by_query(
    State(hub): State<Arc<Hub>>,
    Query(params): Params,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    let topics = query_topics(&params);
    let request = RequestParts {
        params: &params,
        query: uri.query(),
        headers: &headers,
        extensions: &extensions,
    };
    subscribe(&hub, topics, request).await
}

/// `GET /events/<topic>` (slashes in the path separate tokens like dots).
pub async fn by_path(
    State(hub): State<Arc<Hub>>,
    path: Result<Path<String>, PathRejection>,
    Query(params): Params,
    uri: Uri,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    // A path that does not decode (invalid percent-encoding, not UTF-8) is a JSON 400 too.
    let path = match path {
        Ok(Path(path)) => path,
        Err(err) => {
            let refusal = Refusal::BadRequest(format!("topic path: {}", err.body_text()));
            return turned_away(&hub, false, &refusal);
        }
    };
    let topic = topics::from_path(&path);
    // `topic=` parameters add to the path's topic, as in the query form: none is dropped.
    let topics = std::iter::once(topic.as_str()).chain(query_topics(&params));
    let request = RequestParts {
        params: &params,
        query: uri.query(),
        headers: &headers,
        extensions: &extensions,
    };
    subscribe(&hub, topics, request).await
}

/// The first parameter of a raw query whose value does not decode to UTF-8 (the decoded
/// parameters would carry U+FFFD in its place, a topic nobody asked for).
fn undecodable_parameter(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = value.replace('+', " ");
        let decoded = percent_encoding::percent_decode_str(&value).decode_utf8();
        decoded.is_err().then(|| {
            percent_encoding::percent_decode_str(name)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// The values of the `topic` parameters.
fn query_topics(params: &[(String, String)]) -> impl Iterator<Item = &str> {
    params
        .iter()
        .filter(|(k, _)| k == "topic")
        .map(|(_, v)| v.as_str())
}

/// What a subscription needs from its request.
struct RequestParts<'r> {
    params: &'r [(String, String)],
    query: Option<&'r str>,
    headers: &'r HeaderMap,
    extensions: &'r Extensions,
}

async fn subscribe<'a>(
    hub: &Arc<Hub>,
    requested: impl IntoIterator<Item = &'a str>,
    request: RequestParts<'_>,
) -> Response {
    let RequestParts {
        params,
        query: raw_query,
        headers,
        extensions,
    } = request;
    let config = &hub.config;
    let wants_stream = accepts_event_stream(headers);
    if let Some(name) = raw_query.and_then(undecodable_parameter) {
        let err = format!("query parameter {name:?}: its value is not UTF-8 once percent-decoded");
        return turned_away(hub, wants_stream, &Refusal::BadRequest(err));
    }
    let topics = match topics::parse(requested, config) {
        Ok(topics) => topics,
        Err(err) => return turned_away(hub, wants_stream, &Refusal::BadRequest(err.to_string())),
    };
    let grant = hub
        .auth
        .authenticate(Direction::Subscribe, headers, raw_query)
        .and_then(|grant| {
            grant
                .check_subscribe(topics.topics.iter().map(String::as_str))
                .map(|()| grant)
        });
    let grant = match grant {
        Ok(grant) => grant,
        Err(err) => return turned_away(hub, wants_stream, &err.into()),
    };
    let header = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let query = params
        .iter()
        .find(|(k, _)| k == "last-id")
        .map(|(_, v)| v.as_str());
    let cursor = match choose_cursor(header, query) {
        Ok(cursor) => cursor,
        Err(err) => {
            let refusal = Refusal::BadRequest(format!("last-id: {err}"));
            return turned_away(hub, wants_stream, &refusal);
        }
    };
    if let Some(err) = &cursor.ignored_header {
        tracing::warn!(error = %err, "ignoring invalid Last-Event-ID header");
    }
    let (from, repair) = match start_parameters(params) {
        Ok(parameters) => parameters,
        Err(err) => return turned_away(hub, wants_stream, &Refusal::BadRequest(err)),
    };
    let conn = extensions.get::<ConnectInfo<ConnInfo>>().map(|c| &c.0);
    let reader = EventsReader {
        config,
        topics: &topics,
        cursor: cursor.id,
        asked: cursor.id.map(|id| id.to_string()),
        from,
        repair,
        retry: config.sse.retry,
        expires_in: grant.expires_in(),
    };
    match hub.open_session(conn, reader).await {
        Ok((session, ())) => carrying(stream_response(hub, Body::empty()), session),
        Err(refusal) => turned_away(hub, wants_stream, &refusal),
    }
}

/// An `/events` stream as a [`Reader`]: its topics, the cursor it resumes from, and when its
/// token expires.
struct EventsReader<'r> {
    config: &'r Config,
    topics: &'r Topics,
    cursor: Option<EventId>,
    /// The cursor as the client sent it.
    asked: Option<String>,
    /// Where it starts without a cursor (`from=`).
    from: StartFrom,
    /// What it gets after a `gap` when its cursor is lost (`repair=`), if it asked.
    repair: Option<Repair>,
    /// The `retry:` hint its stream opens with.
    retry: Duration,
    expires_in: Option<Duration>,
}

impl Reader for EventsReader<'_> {
    type Checked = ();
    type Answer = ();

    fn cursor(&self) -> Option<&str> {
        self.asked.as_deref()
    }

    fn repair(&self) -> Option<Repair> {
        self.repair
    }

    async fn check(
        &self,
        hub: &HubCore,
        state: &StreamState,
    ) -> Result<(StartPosition, ()), Refusal> {
        topics::check_within(self.topics, &state.subjects, self.config)
            .map_err(|err| Refusal::BadRequest(err.to_string()))?;
        // A resume wins over `from=`: the client continues where it stopped.
        let position = match self.cursor {
            Some(cursor) => StartPosition::After(cursor),
            None => hub.locate(self.from, &self.topics.filters, state).await?,
        };
        Ok((position, ()))
    }

    async fn open(self, hub: &HubCore, start: Start<'_, ()>) -> Opening<()> {
        let plan = start.plan;
        let mut preamble = BytesMut::new();
        preamble.extend_from_slice(&frames::retry(self.retry));
        preamble.extend_from_slice(&frames::connected(plan.start_id(), &self.topics.topics));
        if let Some(gap) = &plan.gap {
            preamble.extend_from_slice(&frames::gap(plan.start_id(), gap));
        }
        tracing::debug!(topics = %self.topics.filters, start = plan.start, backlog_end = plan.backlog_end, "event stream starts");
        Opening {
            preamble: preamble.freeze(),
            feed: hub
                .fanout
                .feed(&self.topics.filters, start.state, plan.start),
            heartbeat: None,
            expires_in: self.expires_in,
            answer: (),
        }
    }
}

/// The start parameters of a subscription: where it starts without a cursor (`from=`, live
/// by default) and what it gets when its cursor is lost (`repair=`, the hub's `sse.repair`
/// by default). Each may be given once; the error names the parameter and the forms.
fn start_parameters(params: &[(String, String)]) -> Result<(StartFrom, Option<Repair>), String> {
    let once = |name: &str| {
        let mut values = params.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        match (values.next(), values.next()) {
            (_, Some(_)) => Err(format!("{name}: given more than once")),
            (value, None) => Ok(value),
        }
    };
    let from = match once("from")? {
        Some(value) => {
            StartFrom::parse(value, jiff::Timestamp::now()).map_err(|err| format!("from: {err}"))?
        }
        None => StartFrom::Live,
    };
    let repair = match once("repair")?.map(String::as_str) {
        None => None,
        Some("none") => Some(Repair::None),
        Some("latest") => Some(Repair::Latest),
        Some(other) => {
            let shown: String = other.chars().take(64).collect();
            return Err(format!(
                "repair: invalid value {shown:?}; expected none or latest"
            ));
        }
    };
    Ok((from, repair))
}

/// `response`, the head of a reader's event stream, carrying its `session` for the layer that
/// writes the connection (see [`take_session`]).
pub(crate) fn carrying(mut response: Response, session: Session) -> Response {
    response
        .extensions_mut()
        .insert(StreamSession::new(session));
    response
}

/// The session `response` carries, taken out of it: every layer that writes a connection
/// (the raw HTTP/1.1 writer, an HTTP/2 stream, hyper's HTTP/1 body) gets a reader's session
/// this way alone. `None` for any other answer.
///
/// The head is then a stream's: the `content-length: 0` the router gave the empty body is
/// removed, since the session's frames follow.
pub(crate) fn take_session(response: &mut Response) -> Option<Session> {
    let session = response
        .extensions_mut()
        .remove::<StreamSession>()
        .and_then(|carried| carried.take())?;
    response.headers_mut().remove(header::CONTENT_LENGTH);
    Some(session)
}

/// True when the request accepts `text/event-stream` (an `EventSource` does).
pub(crate) fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// An event-stream response: the content type, no caching, no proxy buffering.
pub(crate) fn event_stream_response(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn stream_response(hub: &Hub, body: Body) -> Response {
    let mut response = event_stream_response(body);
    let headers = response.headers_mut();
    if let Some(url) = &hub.config.hub_url
        && let Ok(link) = HeaderValue::from_str(&format!("<{url}>; rel=\"sluice\""))
    {
        headers.insert(header::LINK, link);
    }
    response
}

/// A reader the hub does not let in (see [`Refusal`]), counted in `connections_rejected` by
/// its reason and logged: a transient refusal as [`transient`] answers it, any other as
/// [`refusal_response`].
pub(crate) fn turned_away(hub: &Hub, wants_stream: bool, refusal: &Refusal) -> Response {
    let status = refusal_status(refusal);
    let (reason, detail) = (refusal.reason(), refusal.detail());
    if refusal.is_transient() {
        return transient(hub, wants_stream, reason, status, detail);
    }
    Metrics::count(&hub.metrics.rejected, "reason", reason);
    tracing::info!(
        reason,
        status = status.as_u16(),
        detail,
        "event stream refused"
    );
    refusal_response(refusal)
}

/// A refusal that retrying will not change, as JSON with its status; one of credentials
/// carries the `WWW-Authenticate` challenge.
pub(crate) fn refusal_response(refusal: &Refusal) -> Response {
    let mut response = error_response(&super::refusal(refusal_status(refusal), refusal.detail()));
    if let Refusal::Denied { denial, detail, .. } = refusal {
        let challenge = auth::challenge(*denial, detail);
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// The HTTP status of a reader's refusal, whichever protocol answers it.
pub(crate) fn refusal_status(refusal: &Refusal) -> StatusCode {
    match refusal {
        Refusal::MaxConnections => StatusCode::TOO_MANY_REQUESTS,
        Refusal::ShuttingDown | Refusal::BackendUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
        Refusal::Misconfigured(_) => StatusCode::INTERNAL_SERVER_ERROR,
        Refusal::Denied { denial, .. } => auth::denial_status(*denial),
    }
}

/// A refusal that may succeed later: 200 with a jittered `retry:` for an `EventSource`,
/// otherwise `status` with `Retry-After`. Counted in `connections_rejected` by `reason`.
pub(crate) fn transient(
    hub: &Hub,
    wants_stream: bool,
    reason: &'static str,
    status: StatusCode,
    detail: &str,
) -> Response {
    Metrics::count(&hub.metrics.rejected, "reason", reason);
    tracing::info!(reason, detail, "event stream refused");
    let retry = jittered(hub.config.sse.retry);
    if wants_stream {
        return stream_response(hub, Body::from(frames::retry(retry)));
    }
    let mut response = error_response(&refusal(status, detail));
    let seconds = retry.as_secs().max(1).to_string();
    if let Ok(value) = HeaderValue::from_str(&seconds) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// `delay` plus up to 100% random jitter, so refused clients do not return in lockstep.
fn jittered(delay: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(millis.saturating_add(random % millis.max(1)))
}
