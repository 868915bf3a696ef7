//! `GET /`: the console, one self-contained page (inline CSS and script, no external assets).
//!
//! It subscribes with `EventSource` (topics, a resume position, live or from the earliest
//! retained message), publishes through `POST /publish`, lists what arrives with gaps
//! highlighted, shows an honest connection state, and polls `GET /stream` for its stream
//! panel. Every kept event is in `window.sluiceEvents` as `{type, id, data}` (with
//! `window.sluiceStatus` counting opens and errors and naming the state), for people and
//! tests. Opened with topics in its query string (`/?topic=a&topic=b`, optionally with
//! `last-id` as the resume position) it subscribes to them at once; opened as `/` it waits for
//! the form. docs/OPERATIONS.md ("The console") describes it.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Html;
use serde::Serialize;

use crate::hub::Hub;

/// Where page.html takes the settings it needs from the hub.
const CONFIG_SLOT: &str = "__SLUICE_CONFIG__";

/// What the page must know of the hub's configuration.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageConfig<'a> {
    /// The event type of message frames (`sse.event_type`).
    event_type: &'a str,
    /// The configured reconnection delay (`sse.retry`), in milliseconds: the page waits this
    /// plus up to as much again of random jitter before it subscribes again.
    retry_ms: u64,
    /// Whether subscriptions need a token.
    subscribe_auth: bool,
    /// Whether publishes need a token.
    publish_auth: bool,
    /// The cookie an `EventSource` can carry the token in (`auth.subscribe.cookie_name`).
    cookie_name: Option<&'a str>,
    /// The query parameter it can carry it in instead (`auth.subscribe.query_param`).
    query_param: Option<&'a str>,
}

/// The console, with the hub's settings inlined as a JSON object literal.
pub async fn index(State(hub): State<Arc<Hub>>) -> Html<String> {
    let config = &hub.config;
    let subscribe = config.auth.subscribe.as_ref();
    let settings = PageConfig {
        event_type: &config.sse.event_type,
        retry_ms: u64::try_from(config.sse.retry.as_millis()).unwrap_or(u64::MAX),
        subscribe_auth: subscribe.is_some(),
        publish_auth: config.auth.publish.is_some(),
        cookie_name: subscribe.and_then(|s| s.cookie_name.as_deref()),
        query_param: subscribe.and_then(|s| s.query_param.as_deref()),
    };
    // JSON is a JavaScript expression; escaping `<` keeps `</script>` out of the page whatever
    // a name holds (the configuration validates them to token characters anyway).
    let settings = serde_json::to_string(&settings)
        .unwrap_or_else(|_| "{}".to_owned())
        .replace('<', "\\u003c");
    Html(include_str!("page.html").replace(CONFIG_SLOT, &settings))
}
