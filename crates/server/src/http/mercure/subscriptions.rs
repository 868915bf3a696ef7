//! The subscriptions web API (with `mercure.subscriptions`), in both protocols' shapes,
//! answered from this node's table of every node's subscriptions:
//!
//! - 0.x: `GET /.well-known/mercure/subscriptions/{topic}` (those made with one `topic=`
//!   selector) and `…/{topic}/{subscriber}` (one), as JSON-LD (`application/ld+json`) with
//!   `lastEventID` in the body;
//! - the 1.0 draft: `…/subscriptions/{match_type}/{match}` and
//!   `…/{match_type}/{match}/{subscriber}`, as JSON (`application/json`) with the cursor as
//!   the `last-event-id` of the `rel="mercure"` `Link` header. A path whose first segment is a
//!   matcher type's name (`exact`, `urlpattern`) is a 1.0 draft path;
//! - `…/subscriptions` (every active subscription, each in its own shape) is a 1.0 draft
//!   collection when the request accepts `application/json` and not `application/ld+json`,
//!   else a 0.x one; `mercure.subscriptions_collection` may fix the shape instead.
//!
//! Order: the path (404 for a shape the API does not have, 400 for a segment that is not
//! UTF-8 once decoded), the subscriber's token (401: none or not valid, found where a
//! subscription's is), its `subscribe` selectors (403 unless one selects the requested path as
//! a topic, in the canonical form subscription events use), then the answer (404 for a
//! subscription not listed). The cursor is the hub-made id of the stream position the table
//! has read up to (`earliest` before any): resuming subscription events from it misses no event
//! the answer does not already reflect.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use serde_json::Value;
use sluice_mercure::Update;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::selector::MatchType;
use sluice_mercure::subscription::{
    Framing, SUBSCRIPTIONS_PATH, Selection, Shape, collection, subscription_topic,
};

use super::config::CollectionShape;
use crate::auth::AuthError;
use crate::hub::Hub;
use sluice_core::event_id::EventId;

/// The query parameter a subscriber's token may come in.
const TOKEN_PARAM: &str = "authorization";

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    /// Every subscription, in a collection of this shape.
    All(Shape),
    Selection(Selection),
    One {
        selection: Selection,
        subscriber: String,
    },
}

/// Whether `headers` ask for the 1.0 draft's collection: `Accept` names `application/json`
/// and not `application/ld+json`.
fn accepts_draft(headers: &HeaderMap) -> bool {
    let ranges: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|range| {
            let media = range.split(';').next().unwrap_or_default();
            media.trim().to_ascii_lowercase()
        })
        .collect();
    ranges.iter().any(|r| r == "application/json")
        && !ranges.iter().any(|r| r == "application/ld+json")
}

impl Asked {
    /// What `path` asks for (`draft`: whether the request asks for the 1.0 draft's
    /// collection); `Err` with a status and a reason when nothing.
    fn parse(path: &str, draft: bool) -> Result<Self, (StatusCode, &'static str)> {
        let not_found = (StatusCode::NOT_FOUND, "mercure_subscriptions_not_found");
        let rest = path.strip_prefix(SUBSCRIPTIONS_PATH).ok_or(not_found)?;
        if rest.is_empty() {
            let shape = if draft { Shape::Draft } else { Shape::Legacy };
            return Ok(Self::All(shape));
        }
        let segments: Vec<&str> = rest
            .strip_prefix('/')
            .ok_or(not_found)?
            .split('/')
            .collect();
        if segments.iter().any(|segment| segment.is_empty()) {
            return Err(not_found);
        }
        let decode = |segment: &str| {
            percent_decode_str(segment)
                .decode_utf8()
                .map(|text| text.into_owned())
                .map_err(|_| (StatusCode::BAD_REQUEST, "mercure_subscriptions_bad_path"))
        };
        let match_type = segments.first().and_then(|name| MatchType::from_name(name));
        let (selection, subscriber) = match (match_type, segments.as_slice()) {
            (Some(match_type), [_, pattern, rest @ ..]) => {
                let pattern = decode(pattern)?;
                let selection = Selection::Match {
                    match_type,
                    pattern,
                };
                (selection, rest)
            }
            (_, [topic, rest @ ..]) => (Selection::Topic(decode(topic)?), rest),
            (_, []) => return Err(not_found),
        };
        match subscriber {
            [] => Ok(Self::Selection(selection)),
            [subscriber] => Ok(Self::One {
                selection,
                subscriber: decode(subscriber)?,
            }),
            _ => Err(not_found),
        }
    }

    /// The path in the canonical form subscription events use: the topic a token must select.
    fn topic(&self) -> String {
        match self {
            Self::All(_) => SUBSCRIPTIONS_PATH.to_owned(),
            Self::Selection(selection) => selection.collection_id(),
            Self::One {
                selection,
                subscriber,
            } => subscription_topic(selection, subscriber),
        }
    }

    /// The shape of the answer.
    fn shape(&self) -> Shape {
        match self {
            Self::All(shape) => *shape,
            Self::Selection(selection) | Self::One { selection, .. } => selection.shape(),
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
    let draft = match hub.config.mercure.subscriptions_collection {
        CollectionShape::ByAccept => accepts_draft(&headers),
        CollectionShape::Legacy => false,
        CollectionShape::Draft => true,
    };
    let asked = match Asked::parse(uri.path(), draft) {
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
    let shape = asked.shape();
    let document = match asked {
        Asked::All(_) => {
            let listed = table.all();
            drop(table);
            collection(shape, &topic, &last_event_id, &listed)
        }
        Asked::Selection(selection) => {
            let listed = table.with_selection(&selection);
            drop(table);
            collection(shape, &topic, &last_event_id, &listed)
        }
        Asked::One {
            selection,
            subscriber,
        } => {
            let Some(doc) = table.one(&selection, &subscriber) else {
                drop(table);
                let detail = "no such active subscription";
                let reason = "mercure_subscriptions_not_found";
                return refused(&hub, reason, StatusCode::NOT_FOUND, detail);
            };
            drop(table);
            doc.document(Framing::Answer(&last_event_id))
        }
    };
    answer(&document, shape, &last_event_id)
}

/// `document` in `shape`: 0.x as `application/ld+json`; the 1.0 draft as `application/json`
/// with `last_event_id` on the `rel="mercure"` link. The answer may change any time.
fn answer(document: &Value, shape: Shape, last_event_id: &str) -> Response {
    let mut response = document.to_string().into_response();
    let headers = response.headers_mut();
    let content_type = match shape {
        Shape::Legacy => "application/ld+json",
        Shape::Draft => "application/json",
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("must-revalidate"),
    );
    if shape == Shape::Draft {
        // Hub-made ids and `earliest` are plain visible ASCII without quotes or backslashes.
        let link = format!(
            "<{}>; rel=\"mercure\"; last-event-id=\"{last_event_id}\"; type=\"mercure\"; content-type=\"application/json\"",
            super::HUB_PATH
        );
        if let Ok(link) = HeaderValue::from_str(&link) {
            headers.insert(header::LINK, link);
        }
    }
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

    fn parse(path: &str) -> Result<Asked, (StatusCode, &'static str)> {
        Asked::parse(path, false)
    }

    #[test]
    fn paths_name_the_collection_a_selector_or_one_subscription() {
        assert_eq!(parse(SUBSCRIPTIONS_PATH), Ok(Asked::All(Shape::Legacy)));
        let draft = Asked::parse(SUBSCRIPTIONS_PATH, true);
        assert_eq!(draft, Ok(Asked::All(Shape::Draft)));
        let path = format!("{SUBSCRIPTIONS_PATH}/https%3A%2F%2Fexample.com%2F%7Bid%7D");
        let selector = parse(&path).unwrap();
        let topic = Selection::Topic("https://example.com/{id}".into());
        assert_eq!(selector, Asked::Selection(topic));
        assert_eq!(selector.topic(), path);
        let one = parse(&format!("{path}/urn%3auuid%3a1")).unwrap();
        assert_eq!(
            one.topic(),
            format!("{path}/urn%3Auuid%3A1"),
            "the canonical form, whatever the case of the request's escapes"
        );
        for bad in ["/", "/a/b/c", "//b", "/a/", "/exact/a/b/c", "/exact//b"] {
            let path = format!("{SUBSCRIPTIONS_PATH}{bad}");
            assert_eq!(parse(&path).unwrap_err().0, StatusCode::NOT_FOUND, "{bad}");
        }
        let not_utf8 = format!("{SUBSCRIPTIONS_PATH}/%FF");
        assert_eq!(parse(&not_utf8).unwrap_err().0, StatusCode::BAD_REQUEST);
        assert!(parse("/.well-known/mercure/subscriptionsx").is_err());
    }

    #[test]
    fn a_first_segment_naming_a_matcher_type_is_a_draft_path() {
        let path = format!("{SUBSCRIPTIONS_PATH}/urlpattern/%2Fbooks%2F%3Aid");
        let asked = parse(&path).unwrap();
        let selection = Selection::Match {
            match_type: MatchType::UrlPattern,
            pattern: "/books/:id".into(),
        };
        assert_eq!(asked, Asked::Selection(selection.clone()));
        assert_eq!((asked.topic(), asked.shape()), (path.clone(), Shape::Draft));
        let one = parse(&format!("{path}/urn%3Auuid%3A1")).unwrap();
        let subscriber = "urn:uuid:1".to_owned();
        assert_eq!(
            one,
            Asked::One {
                selection,
                subscriber
            }
        );
        let exact = parse(&format!("{SUBSCRIPTIONS_PATH}/exact")).unwrap();
        let topic = Selection::Topic("exact".into());
        assert_eq!(exact, Asked::Selection(topic), "alone, a 0.x selector");
        let cased = parse(&format!("{SUBSCRIPTIONS_PATH}/Exact/a")).unwrap();
        assert_eq!(
            cased.shape(),
            Shape::Legacy,
            "matcher type names are case-sensitive"
        );
    }

    #[test]
    fn the_draft_collection_is_asked_for_by_accepting_json_only() {
        let accepts = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
            }
            accepts_draft(&headers)
        };
        assert!(accepts(&["application/json"]));
        assert!(accepts(&["text/html, Application/JSON;q=0.9"]));
        assert!(!accepts(&[]));
        assert!(!accepts(&["*/*"]));
        assert!(!accepts(&["application/json", "application/ld+json"]));
    }
}
