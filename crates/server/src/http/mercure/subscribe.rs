//! `GET /.well-known/mercure`: selectors (`topic=`, `match=`, `match_exact=`,
//! `match_urlpattern=`), the subscriber's token, the resume position, and the stream.
//!
//! Order: selectors first (400 naming the parameter), then the token (401), then a connection
//! slot and the stream's state (the transient refusals of `/events`), then the resume position
//! (`Last-Event-ID`, else `lastEventID`, else `last_event_id`; `earliest`, a hub-made
//! `#<seq>-<incarnation>` id, or a custom id looked up in the stream). An id the hub cannot
//! place starts the subscription at the live end, as Mercure does. The response carries
//! `Last-Event-ID`: the id of the update before the first one sent, or `earliest`.
//!
//! Connections asking for the same selectors with the same receive grants (and the same
//! `sluice_gaps`) share one feed: the match, the grant check and the frame are made once per
//! update for all of them ([`super::view`]).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::{Grants, LastEventId, Scheme, SelectorSet, Update};
use sluice_protocol::subject::{FilterSet, filter_is_subset};

use super::super::{
    accepts_event_stream, carrying, event_stream_response, refusal_response, refusal_status,
    turned_away,
};
use super::state::Mercure;
use super::view::MercureView;
use crate::auth::AuthError;
use crate::hub::Hub;
use sluice_backend::{BackendError, Delivery, StreamState, Unavailable};
use sluice_core::conn::ConnInfo;
use sluice_core::event_id::EventId;
use sluice_core::fanout::{View, record};
use sluice_core::hub::HubCore;
use sluice_core::metrics::Metrics;
use sluice_core::plan::{Plan, StartPosition};
use sluice_core::reader::{Opening, Reader, Refusal, Start};

/// Longest wait for the stream's state, or for a custom id's lookup, before answering 503.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The query parameter a subscriber's token may come in.
const TOKEN_PARAM: &str = "authorization";

/// The query parameter that asks for sluice's `gap` events.
const GAPS_PARAM: &str = "sluice_gaps";

/// What the first frame is when there is no gap to report: an empty comment, so that the
/// response's headers and first bytes leave at once.
const OPENING: &[u8] = b":\n\n";

/// `GET /.well-known/mercure`.
pub async fn subscribe(
    State(hub): State<Arc<Hub>>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Response {
    let Some(mercure) = hub.mercure.as_ref() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let config = &hub.config.mercure;
    let pairs = params.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let wants_stream = accepts_event_stream(&headers);
    let set = match SelectorSet::from_query(pairs, config.base_url()) {
        Ok(set) => set,
        Err(err) => return refused(&hub, wants_stream, &Refusal::BadRequest(err.to_string())),
    };
    let gaps = params.iter().any(|(k, v)| k == GAPS_PARAM && v == "1");
    let query_token = params
        .iter()
        .find(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.as_str());
    let grants = mercure.subscriber.grants(
        &headers,
        query_token,
        &config.cookie_name,
        config.base_url(),
    );
    let (grants, expires_in) = match grants {
        Ok(Some(verified)) => (verified.grants, verified.expires_in),
        Ok(None) if config.anonymous => (anonymous_grants(), None),
        Ok(None) => return refused(&hub, wants_stream, &AuthError::MissingToken.into()),
        Err(err) => return refused(&hub, wants_stream, &err.into()),
    };
    let resume = requested_resume(&headers, &params);
    let conn = extensions.get::<ConnectInfo<ConnInfo>>().map(|c| &c.0);
    let reader = MercureReader {
        mercure,
        set,
        grants,
        gaps,
        resume,
        expires_in,
        heartbeat: config.heartbeat,
        max_event_size: hub.config.sse.max_event_size,
    };
    match hub.open_session(conn, reader).await {
        Ok((session, last_event_id)) => {
            carrying(stream_response(Body::empty(), &last_event_id), session)
        }
        Err(refusal) => refused(&hub, wants_stream, &refusal),
    }
}

/// A Mercure subscription as a [`Reader`]: its selectors and grants (which become its feed's
/// view) and the resume id it sent. It answers the `Last-Event-ID` of its response.
struct MercureReader<'r> {
    mercure: &'r Mercure,
    set: SelectorSet,
    grants: Arc<Grants>,
    /// Whether it asked for sluice's `gap` events.
    gaps: bool,
    /// The resume id as sent.
    resume: Option<String>,
    expires_in: Option<Duration>,
    heartbeat: Duration,
    max_event_size: usize,
}

/// What a Mercure subscription learnt from the stream: the filters its selectors read, and
/// where it asked to start.
struct Checked {
    filters: FilterSet,
    position: StartPosition,
}

impl Reader for MercureReader<'_> {
    type Checked = Checked;
    type Answer = String;

    fn cursor(&self) -> Option<&str> {
        self.resume.as_deref()
    }

    async fn check(
        &self,
        hub: &HubCore,
        state: &StreamState,
    ) -> Result<(StartPosition, Checked), Refusal> {
        let scheme = &self.mercure.scheme;
        let wide = scheme.wide_filter();
        if !state.subjects.iter().any(|s| filter_is_subset(&wide, s)) {
            return Err(Refusal::Misconfigured(format!(
                "the served stream does not capture {wide:?} (its subjects: {:?}); add it to store Mercure updates",
                state.subjects
            )));
        }
        let filters = FilterSet::new(scheme.filters(&self.set))
            .map_err(|err| Refusal::BadRequest(err.to_string()))?;
        let position = match self.resume.as_deref() {
            None => StartPosition::Live,
            Some(value) => {
                let receives = |update: &Update| {
                    self.set.matches_any(&update.topic_refs()) && self.grants.can_receive(update)
                };
                resume_position(hub, scheme, state, value, &receives)
                    .await
                    .map_err(|err| {
                        record(
                            &hub.metrics,
                            &err,
                            "Mercure subscription backend request failed",
                        );
                        Refusal::BackendUnavailable(err.to_string())
                    })?
            }
        };
        Ok((position, Checked { filters, position }))
    }

    async fn open(self, hub: &HubCore, start: Start<'_, Checked>) -> Opening<String> {
        let Start {
            state,
            plan,
            checked: Checked { filters, position },
            guard,
        } = start;
        // `earliest`, or an id that resumes as asked, is its own answer; otherwise the
        // position before the start is.
        let answers_itself = match position {
            StartPosition::Earliest => true,
            StartPosition::After(_) => plan.gap.is_none(),
            StartPosition::Live | StartPosition::Recent(_) => false,
        };
        let last_event_id = match self.resume {
            Some(value) if answers_itself => value,
            _ => preceding_id(plan, state),
        };
        if let Some(presence) = &self.mercure.presence {
            presence
                .announcer()
                .announce(&self.set, &self.grants, guard);
        }
        let view = Arc::new(MercureView::new(
            self.mercure.scheme.clone(),
            self.set,
            self.grants,
            self.gaps,
            state.incarnation,
            self.max_event_size,
        ));
        let preamble = match &plan.gap {
            Some(gap) => view.gap(plan.start_id(), gap),
            None => Bytes::from_static(OPENING),
        };
        tracing::debug!(filters = %filters, start = plan.start, "Mercure subscription starts");
        // The hub makes a Mercure fan-out whenever Mercure is on.
        let fanout = hub.view_fanout.as_ref().unwrap_or(&hub.fanout);
        let feed = fanout
            .feed_with_view(&filters, view, state, plan.start)
            .await;
        Opening {
            preamble,
            feed,
            heartbeat: Some(self.heartbeat),
            expires_in: self.expires_in,
            answer: last_event_id,
        }
    }
}

/// The grants of a subscriber without a token: one value shared by all of them, so that a
/// feed of anonymous subscribers holds no grants of its own.
fn anonymous_grants() -> Arc<Grants> {
    static NONE: LazyLock<Arc<Grants>> = LazyLock::new(|| Arc::new(Grants::none()));
    NONE.clone()
}

/// The resume id a request asks for: the `Last-Event-ID` header wins over the `lastEventID`
/// (0.x) and `last_event_id` (1.0 draft) query parameters. A header that is not text is taken
/// as an id nobody handed out.
fn requested_resume(headers: &HeaderMap, params: &[(String, String)]) -> Option<String> {
    if let Some(value) = headers.get("last-event-id") {
        return Some(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    ["lastEventID", "last_event_id"].iter().find_map(|name| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
}

/// Where a subscription that sent resume id `value` starts: `earliest` at the earliest
/// retained update; a hub-made id after its position; a custom id after the oldest retained
/// update with that id that `receives` says the subscriber gets. An id the hub cannot place
/// starts it with new updates, as Mercure does.
async fn resume_position(
    hub: &HubCore,
    scheme: &Scheme,
    state: &StreamState,
    value: &str,
    receives: &(dyn Fn(&Update) -> bool + Sync),
) -> Result<StartPosition, BackendError> {
    let position = match LastEventId::classify(value) {
        LastEventId::Earliest => return Ok(StartPosition::Earliest),
        LastEventId::Position(position) => EventId::parse(position).ok(),
        LastEventId::Custom(id) => custom_id_position(hub, scheme, state, id, receives).await?,
    };
    Ok(match position {
        Some(position) => StartPosition::After(position),
        None => {
            tracing::info!(
                resume = value,
                "Mercure resume id not found; starting with new updates"
            );
            StartPosition::Live
        }
    })
}

/// The position of the oldest retained update stored with custom id `id` that the subscriber
/// receives (`receives`), if any: read from the subject that id's hash names, the stored id
/// compared (a hash collision reads one more). Ids are unique per topic, not across topics: of
/// several updates with the id that the subscriber gets, resuming after the oldest may repeat
/// the others but never skips one.
async fn custom_id_position(
    hub: &HubCore,
    scheme: &Scheme,
    state: &StreamState,
    id: &str,
    receives: &(dyn Fn(&Update) -> bool + Sync),
) -> Result<Option<EventId>, BackendError> {
    let until = state.last_seq.saturating_add(1);
    if state.first_seq >= until {
        return Ok(None);
    }
    let filters = [scheme.id_filter(id)];
    let lookup = async {
        let mut found = None;
        let mut messages = hub
            .backend
            .read_range(&filters, state.first_seq, until)
            .await?;
        while let Some(delivery) = messages.next().await {
            let Delivery::Message(message) = delivery? else {
                continue;
            };
            if message.seq >= until {
                break;
            }
            let update = scheme.decode(&message.subject, message.headers.iter(), &message.payload);
            if update.is_ok_and(|update| update.id.as_deref() == Some(id) && receives(&update)) {
                found = Some(message.seq);
                break;
            }
        }
        Ok::<_, BackendError>(found)
    };
    let found = tokio::time::timeout(BACKEND_TIMEOUT, lookup)
        .await
        .map_err(|_| {
            BackendError::Unavailable(Unavailable::Timeout {
                what: "looking up a Mercure custom id".into(),
                limit: BACKEND_TIMEOUT,
            })
        })??;
    Ok(found.map(|seq| EventId {
        seq,
        incarnation: Some(state.incarnation),
    }))
}

/// The id of the position before the plan's start, or `earliest` when nothing retained is
/// before it.
fn preceding_id(plan: &Plan, state: &StreamState) -> String {
    if plan.start <= state.first_seq {
        sluice_mercure::form::EARLIEST.to_owned()
    } else {
        hub_id(plan.start_id())
    }
}

fn stream_response(body: Body, last_event_id: &str) -> Response {
    let mut response = event_stream_response(body);
    let headers = response.headers_mut();
    // Ids are protocol strings (no control characters): always a valid header value.
    if let Ok(value) = HeaderValue::from_bytes(last_event_id.as_bytes()) {
        headers.insert("last-event-id", value);
    }
    response
}

/// A subscription the hub does not let in: a transient refusal as `/events` answers it,
/// refused credentials as JSON with the `WWW-Authenticate` challenge, any other as Mercure
/// answers it (the status and a plain-text reason); counted under its reason.
fn refused(hub: &Hub, wants_stream: bool, refusal: &Refusal) -> Response {
    if refusal.is_transient() {
        return turned_away(hub, wants_stream, refusal);
    }
    let status = refusal_status(refusal);
    let (reason, detail) = (refusal.reason(), refusal.detail());
    if matches!(refusal, Refusal::Denied { .. }) {
        Metrics::count(&hub.metrics.rejected, "reason", reason);
        tracing::info!(
            reason,
            status = status.as_u16(),
            detail,
            "Mercure subscription refused"
        );
        return refusal_response(refusal);
    }
    super::refuse(
        &hub.metrics.rejected,
        "Mercure subscription",
        reason,
        status,
        detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::frames::Gap;

    #[test]
    fn the_header_wins_over_both_query_parameters() {
        let params = vec![
            ("last_event_id".to_owned(), "b".to_owned()),
            ("lastEventID".to_owned(), "a".to_owned()),
        ];
        let mut headers = HeaderMap::new();
        assert_eq!(requested_resume(&headers, &params).as_deref(), Some("a"));
        headers.insert("last-event-id", HeaderValue::from_static("h"));
        assert_eq!(requested_resume(&headers, &params).as_deref(), Some("h"));
        assert_eq!(requested_resume(&HeaderMap::new(), &[]), None);
    }

    #[test]
    fn the_preceding_id_is_earliest_when_nothing_retained_comes_before() {
        let state = StreamState {
            first_seq: 3,
            expired_below: 3,
            last_seq: 9,
            messages: 7,
            bytes: 0,
            first_time: None,
            incarnation: 0xab,
            subjects: vec![">".into()],
        };
        let plan = |start| Plan {
            start,
            incarnation: 0xab,
            backlog_end: 9,
            gap: None::<Gap>,
            latest_from: None,
        };
        assert_eq!(preceding_id(&plan(3), &state), "earliest");
        assert_eq!(preceding_id(&plan(10), &state), "#9-ab");
    }
}
