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
    accepts_event_stream, event_stream_response, session_body, transient, turned_away,
};
use super::view::MercureView;
use crate::admit::Admitted;
use crate::auth::AuthError;
use crate::hub::Hub;
use sluice_backend::{BackendError, Delivery, StreamState, Unavailable};
use sluice_core::conn::ConnInfo;
use sluice_core::event_id::EventId;
use sluice_core::fanout::{View, record};
use sluice_core::plan::Plan;
use sluice_core::session::Session;

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
    let set = match SelectorSet::from_query(pairs, config.base_url()) {
        Ok(set) => set,
        Err(err) => return bad_request(&hub, &err),
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
        Ok(None) => return unauthorized(&hub, AuthError::MissingToken),
        Err(err) => return unauthorized(&hub, err),
    };
    let resume = requested_resume(&headers, &params);
    let wants_stream = accepts_event_stream(&headers);
    let conn = extensions.get::<ConnectInfo<ConnInfo>>().map(|c| &c.0);
    let Admitted { mut guard, state } = match hub.admit_reader(conn).await {
        Ok(admitted) => admitted,
        Err(refusal) => return turned_away(&hub, wants_stream, &refusal),
    };
    let wide = mercure.scheme.wide_filter();
    if !state.subjects.iter().any(|s| filter_is_subset(&wide, s)) {
        let detail = format!(
            "the served stream does not capture {wide:?} (its subjects: {:?}); add it to store Mercure updates",
            state.subjects
        );
        return refused(
            &hub,
            "misconfigured",
            StatusCode::INTERNAL_SERVER_ERROR,
            &detail,
        );
    }
    let start = match resume.as_deref() {
        None => Start::live(&state, &hub),
        Some(value) => match Start::resumed(&hub, &mercure.scheme, &state, value, &|update| {
            set.matches_any(&update.topic_refs()) && grants.can_receive(update)
        })
        .await
        {
            Ok(start) => start,
            Err(err) => return unavailable(&hub, wants_stream, &err),
        },
    };
    let filters = match FilterSet::new(mercure.scheme.filters(&set)) {
        Ok(filters) => filters,
        Err(err) => return bad_request(&hub, &err),
    };
    if let Some(presence) = &mercure.presence {
        // Nothing refuses the subscription after this.
        presence.announcer().announce(&set, &grants, &mut guard);
    }
    let view = Arc::new(MercureView::new(
        mercure.scheme.clone(),
        set,
        grants,
        gaps,
        state.incarnation,
        hub.config.sse.max_event_size,
    ));
    let plan = start.plan;
    hub.count_start(&plan, resume.as_deref());
    let preamble = match &plan.gap {
        Some(gap) => view.gap(plan.start_id(), gap),
        None => Bytes::from_static(OPENING),
    };
    let last_event_id = start
        .last_event_id
        .unwrap_or_else(|| preceding_id(&plan, &state));
    tracing::debug!(filters = %filters, start = plan.start, "Mercure subscription starts");
    // The hub makes a Mercure fan-out whenever Mercure is on.
    let fanout = hub.mercure_fanout.as_ref().unwrap_or(&hub.fanout);
    let feed = fanout
        .feed_with_view(&filters, view, &state, plan.start)
        .await;
    let mut context = hub.session_context();
    context.heartbeat = config.heartbeat;
    context.expires_in = expires_in;
    let session = Session::new(context, guard, feed, &plan, preamble);
    stream_response(session_body(&extensions, session), &last_event_id)
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

/// Where a subscription starts, and the `Last-Event-ID` it answers when that is not simply
/// the position before its start.
struct Start {
    plan: Plan,
    last_event_id: Option<String>,
}

impl Start {
    /// New updates only.
    fn live(state: &StreamState, hub: &Hub) -> Self {
        Self {
            plan: Plan::new(None, state, hub.config.replay.on_loss),
            last_event_id: None,
        }
    }

    /// After the update `value` names (`earliest`: everything retained); a custom id names
    /// the oldest retained update with that id that `receives` says the subscriber gets.
    async fn resumed(
        hub: &Hub,
        scheme: &Scheme,
        state: &StreamState,
        value: &str,
        receives: &(dyn Fn(&Update) -> bool + Sync),
    ) -> Result<Self, BackendError> {
        let on_loss = hub.config.replay.on_loss;
        let position = match LastEventId::classify(value) {
            LastEventId::Earliest => {
                let live = state.last_seq.saturating_add(1);
                return Ok(Self {
                    plan: Plan {
                        start: state.first_seq.min(live),
                        incarnation: state.incarnation,
                        backlog_end: state.last_seq,
                        gap: None,
                    },
                    last_event_id: Some(value.to_owned()),
                });
            }
            LastEventId::Position(position) => EventId::parse(position).ok(),
            LastEventId::Custom(id) => custom_id_position(hub, scheme, state, id, receives).await?,
        };
        let Some(position) = position else {
            tracing::info!(
                resume = value,
                "Mercure resume id not found; starting with new updates"
            );
            return Ok(Self::live(state, hub));
        };
        let plan = Plan::new(Some(position), state, on_loss);
        // An id that resumes as asked is its own answer; after a gap, the position before
        // the start is.
        let last_event_id = plan.gap.is_none().then(|| value.to_owned());
        Ok(Self {
            plan,
            last_event_id,
        })
    }
}

/// The position of the oldest retained update stored with custom id `id` that the subscriber
/// receives (`receives`), if any: read from the subject that id's hash names, the stored id
/// compared (a hash collision reads one more). Ids are unique per topic, not across topics: of
/// several updates with the id that the subscriber gets, resuming after the oldest may repeat
/// the others but never skips one.
async fn custom_id_position(
    hub: &Hub,
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

/// A subscription refused by its token (401 with the challenge).
fn unauthorized(hub: &Hub, err: AuthError) -> Response {
    super::refuse_token(hub, "Mercure subscription", err)
}

/// The backend could not look a resume id up: a transient refusal.
fn unavailable(hub: &Hub, wants_stream: bool, err: &BackendError) -> Response {
    record(
        &hub.metrics,
        err,
        "Mercure subscription backend request failed",
    );
    let status = StatusCode::SERVICE_UNAVAILABLE;
    transient(
        hub,
        wants_stream,
        "backend_unavailable",
        status,
        &err.to_string(),
    )
}

/// A subscription refused as a bad request (400), naming what `err` found wrong.
fn bad_request(hub: &Hub, err: &dyn std::fmt::Display) -> Response {
    refused(
        hub,
        "bad_request",
        StatusCode::BAD_REQUEST,
        &err.to_string(),
    )
}

/// A subscription refused with `status`, counted under `reason`.
fn refused(hub: &Hub, reason: &'static str, status: StatusCode, detail: &str) -> Response {
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
        };
        assert_eq!(preceding_id(&plan(3), &state), "earliest");
        assert_eq!(preceding_id(&plan(10), &state), "#9-ab");
    }
}
