//! `GET /`: the console, one page (inline CSS and script) built on the hub's own client library,
//! `/sluice.js`.
//!
//! It subscribes with the library (topics, and where to start: live, the earliest retained
//! message, a start option of `from=` — the latest message of each subject, the last N, or
//! since a time or duration — or a resume position; the library resumes after the last event
//! on every reconnect), publishes through `POST /publish`, lists what arrives with gaps
//! highlighted, shows an honest connection state, and polls `GET /stream` for its stream
//! panel. Every kept event is in `window.sluiceEvents` as `{type, id, data}`, for people and
//! tests. Opened with topics in its query string (`/?topic=a&topic=b`, optionally with
//! `from=` as the start option or `last-id` as the resume position) it subscribes to them at
//! once; opened as `/` it waits for the form. docs/OPERATIONS.md ("The console") describes it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use base64::Engine;
use serde::Serialize;

use crate::hub::Hub;

/// Where page.html takes the settings it needs from the hub.
const CONFIG_SLOT: &str = "__SLUICE_CONFIG__";

/// The opening tag of the page's one script.
const SCRIPT_TAG: &str = "<script type=\"module\">";

/// What the page must know of the hub's configuration.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageConfig<'a> {
    /// The event type of message frames (`sse.event_type`).
    event_type: &'a str,
    /// The configured reconnection delay (`sse.retry`), in milliseconds: the first delay of the
    /// library's own retries, and what the page's countdown to the browser's retry counts from.
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

/// The console, with the hub's settings inlined as a JSON object literal, under a content
/// security policy that lets run only its own inline script and style (by their hashes) and
/// the hub's own scripts (the client library it imports), talk only to the hub, and be
/// framed by no page.
pub async fn index(State(hub): State<Arc<Hub>>) -> Response {
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
    let page = include_str!("page.html").replace(CONFIG_SLOT, &settings);
    let policy = content_security_policy(&page);
    let mut response = Html(page).into_response();
    let headers = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// The policy for `page`: its one inline module script and `<style>`, allowed by their SHA-256,
/// and scripts of the hub's origin (`/sluice.js`, which the module imports).
fn content_security_policy(page: &str) -> String {
    let hash = |open: &str, close: &str| {
        let start = page.find(open).map_or(0, |at| at + open.len());
        let end = page[start..].find(close).map_or(start, |at| start + at);
        let digest = ring::digest::digest(&ring::digest::SHA256, &page.as_bytes()[start..end]);
        let encoded = base64::engine::general_purpose::STANDARD.encode(digest.as_ref());
        format!("'sha256-{encoded}'")
    };
    format!(
        "default-src 'none'; script-src {} 'self'; style-src {}; connect-src 'self'; img-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash(SCRIPT_TAG, "</script>"),
        hash("<style>", "</style>")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy's hashes are those of the page's own script and style: a changed page gets
    /// a changed policy, and nothing else inline would run.
    #[test]
    fn the_policy_allows_exactly_the_pages_script_and_style() {
        let page = "<style>a{}</style><script type=\"module\">go()</script>";
        let policy = content_security_policy(page);
        let sha = |text: &str| {
            let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
            base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
        };
        assert!(
            policy.contains(&format!("script-src 'sha256-{}' 'self';", sha("go()"))),
            "{policy}"
        );
        assert!(
            policy.contains(&format!("style-src 'sha256-{}';", sha("a{}"))),
            "{policy}"
        );
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
    }

    /// The console subscribes through the client library, not code of its own: one copy of
    /// the client logic in the project.
    #[test]
    fn the_console_subscribes_through_the_client_library() {
        let page = include_str!("page.html");
        let script = &page[page.find(SCRIPT_TAG).expect("the script")..];
        assert!(
            script.contains("import { subscribe } from \"/sluice.js\";"),
            "the console imports the library"
        );
        assert!(!page.contains("EventSource"), "no EventSource of its own");
    }
}
