//! The subscriptions web API (with `mercure.subscriptions`): `GET
//! /.well-known/mercure/subscriptions` (every active subscription), `…/{topic}` (those made
//! with one selector) and `…/{topic}/{subscriber}` (one), as JSON-LD (`application/ld+json`)
//! with `lastEventID`, answered from this node's table of every node's subscriptions.
//!
//! Order: the path (404 for a shape the API does not have, 400 for a segment that is not
//! UTF-8 once decoded), the subscriber's token (401: none or not valid, found where a
//! subscription's is), its `subscribe` selectors (403 unless one selects the requested path as
//! a topic, in the canonical form subscription events use), then the answer (404 for a
//! subscription not listed). `lastEventID` is the hub-made id of the stream position the table
//! has read up to (`earliest` before any): resuming subscription events from it misses no event
//! the answer does not already reflect.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use serde::Serialize;
use sluice_mercure::Update;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::subscription::{
    SUBSCRIPTIONS_PATH, Subscription, Subscriptions, collection_id, subscription_topic,
};

use crate::auth::AuthError;
use crate::event_id::EventId;
use crate::hub::Hub;

/// The query parameter a subscriber's token may come in.
const TOKEN_PARAM: &str = "authorization";

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    All,
    Selector(String),
    One {
        selector: String,
        subscriber: String,
    },
}

impl Asked {
    /// What `path` asks for; `Err` with a status and a reason when nothing.
    fn parse(path: &str) -> Result<Self, (StatusCode, &'static str)> {
        let not_found = (StatusCode::NOT_FOUND, "mercure_subscriptions_not_found");
        let rest = path.strip_prefix(SUBSCRIPTIONS_PATH).ok_or(not_found)?;
        if rest.is_empty() {
            return Ok(Self::All);
        }
        let segments: Vec<&str> = rest
            .strip_prefix('/')
            .ok_or(not_found)?
            .split('/')
            .collect();
        let decode = |segment: &str| {
            percent_decode_str(segment)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| (StatusCode::BAD_REQUEST, "mercure_subscriptions_bad_path"))
        };
        match segments.as_slice() {
            [selector] if !selector.is_empty() => Ok(Self::Selector(decode(selector)?)),
            [selector, subscriber] if !selector.is_empty() && !subscriber.is_empty() => {
                Ok(Self::One {
                    selector: decode(selector)?,
                    subscriber: decode(subscriber)?,
                })
            }
            _ => Err(not_found),
        }
    }

    /// The path in the canonical form subscription events use: the topic a token must select.
    fn topic(&self) -> String {
        match self {
            Self::All => SUBSCRIPTIONS_PATH.to_owned(),
            Self::Selector(selector) => collection_id(Some(selector)),
            Self::One {
                selector,
                subscriber,
            } => subscription_topic(selector, subscriber),
        }
    }
}

/// `GET /.well-known/mercure/subscriptions…`.
pub async fn subscriptions(
    State(hub): State<Arc<Hub>>,
    uri: Uri,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let Some((mercure, presence)) = hub
        .mercure
        .as_ref()
        .and_then(|m| Some((m, m.presence.as_ref()?)))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let asked = match Asked::parse(uri.path()) {
        Ok(asked) => asked,
        Err((status, reason)) => {
            let detail = "no such subscriptions resource";
            return refused(&hub, reason, status, detail);
        }
    };
    let config = &hub.config.mercure;
    let query_token = params
        .iter()
        .find(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.as_str());
    let grants = match mercure.subscriber.grants(
        &headers,
        query_token,
        &config.cookie_name,
        config.base_url(),
    ) {
        Ok(Some(verified)) => verified.grants,
        Ok(None) => return unauthorized(&hub, AuthError::MissingToken),
        Err(err) => return unauthorized(&hub, err),
    };
    let topic = asked.topic();
    // The path is authorized as a private update on it would be.
    let as_update = Update {
        topics: vec![topic.clone()],
        data: String::new(),
        private: true,
        id: None,
        event_type: None,
        retry: None,
    };
    if !grants.can_receive(&as_update) {
        let detail = "the token's subscribe selectors do not select this subscriptions resource";
        let reason = "mercure_subscriptions_forbidden";
        return refused(&hub, reason, StatusCode::FORBIDDEN, detail);
    }
    let table = presence.table();
    let (position, incarnation) = table.position();
    let last_event_id = if position == 0 {
        sluice_mercure::form::EARLIEST.to_owned()
    } else {
        hub_id(EventId {
            seq: position,
            incarnation: Some(incarnation),
        })
    };
    match asked {
        Asked::All => {
            let listed = table.all();
            drop(table);
            ld_json(&Subscriptions::new(topic, last_event_id, listed))
        }
        Asked::Selector(selector) => {
            let listed = table.with_selector(&selector);
            drop(table);
            ld_json(&Subscriptions::new(topic, last_event_id, listed))
        }
        Asked::One {
            selector,
            subscriber,
        } => {
            let Some(doc) = table.one(&selector, &subscriber) else {
                drop(table);
                let detail = "no such active subscription";
                let reason = "mercure_subscriptions_not_found";
                return refused(&hub, reason, StatusCode::NOT_FOUND, detail);
            };
            drop(table);
            ld_json(&Subscription {
                last_event_id: Some(last_event_id),
                ..doc
            })
        }
    }
}

/// `document` as `application/ld+json`; the answer may change any time.
fn ld_json(document: &impl Serialize) -> Response {
    let body = serde_json::to_string(document).unwrap_or_default();
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/ld+json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    response
}

/// A request refused by its token (401 with the challenge).
fn unauthorized(hub: &Hub, err: AuthError) -> Response {
    super::refuse_token(hub, "Mercure subscriptions request", err)
}

fn refused(hub: &Hub, reason: &'static str, status: StatusCode, detail: &str) -> Response {
    super::refuse(
        &hub.metrics.rejected,
        "Mercure subscriptions request",
        reason,
        status,
        detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_collection_a_selector_or_one_subscription() {
        assert_eq!(Asked::parse(SUBSCRIPTIONS_PATH), Ok(Asked::All));
        let path = format!("{SUBSCRIPTIONS_PATH}/https%3A%2F%2Fexample.com%2F%7Bid%7D");
        let selector = Asked::parse(&path).unwrap();
        assert_eq!(selector, Asked::Selector("https://example.com/{id}".into()));
        assert_eq!(selector.topic(), path);
        let one = Asked::parse(&format!("{path}/urn%3auuid%3a1")).unwrap();
        assert_eq!(
            one.topic(),
            format!("{path}/urn%3Auuid%3A1"),
            "the canonical form, whatever the case of the request's escapes"
        );
        for bad in ["/", "/a/b/c", "//b", "/a/"] {
            let path = format!("{SUBSCRIPTIONS_PATH}{bad}");
            assert_eq!(
                Asked::parse(&path).unwrap_err().0,
                StatusCode::NOT_FOUND,
                "{bad}"
            );
        }
        let not_utf8 = format!("{SUBSCRIPTIONS_PATH}/%FF");
        assert_eq!(
            Asked::parse(&not_utf8).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        assert!(Asked::parse("/.well-known/mercure/subscriptionsx").is_err());
    }
}
