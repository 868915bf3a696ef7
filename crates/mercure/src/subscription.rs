//! Active subscriptions: the documents the hub publishes when a subscription starts or ends,
//! and serves from its subscriptions API, in the shape of the protocol the subscription was
//! made with.
//!
//! - 0.x (`topic=` selectors): JSON-LD on `/.well-known/mercure/subscriptions/{topic}/{subscriber}`,
//!   `{"@context", "id", "type": "Subscription", "topic", "subscriber", "active", "payload"}`;
//!   collections `"type": "Subscriptions"` with `lastEventID`.
//! - The 1.0 draft (`match=`, `match_exact=`, `match_urlpattern=`): JSON on
//!   `/.well-known/mercure/subscriptions/{match_type}/{match}/{subscriber}`,
//!   `{"id", "type": "subscription", "match_type", "match", "subscriber", "active", "payload"}`,
//!   published with the event type `mercure`; collections `"type": "subscriptions"` (the cursor
//!   travels in the API's `Link` header, not in the body).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::selector::{MatchType, Selector};
use crate::update::Update;

/// The JSON-LD context of every 0.x document.
pub(crate) const CONTEXT: &str = "https://mercure.rocks/";

/// The path of the subscriptions collection, under which every subscription's topic lies.
pub const SUBSCRIPTIONS_PATH: &str = "/.well-known/mercure/subscriptions";

/// The `type` of one 0.x subscription.
pub(crate) const SUBSCRIPTION_TYPE: &str = "Subscription";

/// The `type` of a 0.x collection.
pub(crate) const SUBSCRIPTIONS_TYPE: &str = "Subscriptions";

/// The `type` of one 1.0 draft subscription.
pub(crate) const DRAFT_SUBSCRIPTION_TYPE: &str = "subscription";

/// The `type` of a 1.0 draft collection.
pub(crate) const DRAFT_SUBSCRIPTIONS_TYPE: &str = "subscriptions";

/// The event type (SSE `event:`) of 1.0 draft subscription events, which publishers may not use.
pub const DRAFT_EVENT_TYPE: &str = "mercure";

/// Which protocol's documents describe a subscription or a collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// 0.x: JSON-LD, `topic`, `lastEventID` in API answers.
    Legacy,
    /// The 1.0 draft: JSON, `match_type` and `match`.
    Draft,
}

/// What one subscription was made with: a 0.x selector or a 1.0 draft matcher.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Selection {
    /// A 0.x `topic=` selector.
    Topic(String),
    /// A 1.0 draft matcher of `match_type`.
    Match {
        /// The matcher type.
        match_type: MatchType,
        /// The matcher as given.
        pattern: String,
    },
}

/// Why a message's data is not a subscription document.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// Not JSON of a subscription document's fields.
    #[error("not a subscription document: {0}")]
    Json(#[from] serde_json::Error),
    /// A `type` of neither shape, or a shape's field missing or invalid.
    #[error("not a subscription document: {0}")]
    Shape(&'static str),
}

/// `value` percent-encoded as an RFC 6570 simple expansion encodes it: every byte but the
/// unreserved characters, as upper-case `%XX`.
fn expand(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Selection {
    /// What `selector` is, in the protocol of the parameter it came from.
    pub fn of(selector: &Selector) -> Self {
        let pattern = selector.as_str().to_owned();
        match selector.match_type() {
            None => Selection::Topic(pattern),
            Some(match_type) => Selection::Match {
                match_type,
                pattern,
            },
        }
    }

    /// The selector or matcher as given.
    pub fn text(&self) -> &str {
        match self {
            Selection::Topic(text) | Selection::Match { pattern: text, .. } => text,
        }
    }

    /// The protocol whose documents describe subscriptions made with it.
    pub fn shape(&self) -> Shape {
        match self {
            Selection::Topic(_) => Shape::Legacy,
            Selection::Match { .. } => Shape::Draft,
        }
    }

    /// The path of the collection of its subscriptions: `…/subscriptions/{topic}` (0.x) or
    /// `…/subscriptions/{match_type}/{match}` (1.0 draft), the selector percent-encoded.
    pub fn collection_id(&self) -> String {
        match self {
            Selection::Topic(topic) => format!("{SUBSCRIPTIONS_PATH}/{}", expand(topic)),
            Selection::Match {
                match_type,
                pattern,
            } => format!(
                "{SUBSCRIPTIONS_PATH}/{}/{}",
                match_type.name(),
                expand(pattern)
            ),
        }
    }
}

/// The topic of the subscription of `subscriber` made with `selection`: its collection's path,
/// `/` and the subscriber percent-encoded.
pub fn subscription_topic(selection: &Selection, subscriber: &str) -> String {
    format!("{}/{}", selection.collection_id(), expand(subscriber))
}

/// One subscription: a selector of one subscriber.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// What it was made with (which also says its shape).
    pub selection: Selection,
    /// The subscriber's identifier.
    pub subscriber: String,
    /// True while the subscription lasts, false in the update that ends it.
    pub active: bool,
    /// The subscriber token's payload for this subscription.
    pub payload: Option<Value>,
}

/// Where a document is written, which decides the 0.x fields around it.
#[derive(Debug, Clone, Copy)]
pub enum Framing<'a> {
    /// A subscription event (0.x: with `@context`).
    Event,
    /// An API answer of one subscription, as of the event id given (0.x: with `@context` and
    /// `lastEventID`; the 1.0 draft carries the cursor in a header instead).
    Answer(&'a str),
    /// A member of a collection (0.x: no `@context`, the collection has it).
    Member,
}

/// A subscription document as written: one struct for both shapes, absent fields left out.
#[derive(Serialize)]
struct Written<'a> {
    #[serde(rename = "@context", skip_serializing_if = "Option::is_none")]
    context: Option<&'static str>,
    id: String,
    #[serde(rename = "type")]
    doc_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    match_type: Option<&'static str>,
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pattern: Option<&'a str>,
    subscriber: &'a str,
    active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a Value>,
    #[serde(rename = "lastEventID", skip_serializing_if = "Option::is_none")]
    last_event_id: Option<&'a str>,
}

/// A subscription document as read, of either shape.
#[derive(Deserialize)]
struct Read {
    #[serde(rename = "type")]
    doc_type: String,
    topic: Option<String>,
    match_type: Option<String>,
    #[serde(rename = "match")]
    pattern: Option<String>,
    subscriber: String,
    active: bool,
    #[serde(default)]
    payload: Option<Value>,
}

impl Subscription {
    /// `subscriber`'s subscription made with `selection`.
    pub fn new(
        selection: Selection,
        subscriber: &str,
        active: bool,
        payload: Option<Value>,
    ) -> Self {
        Subscription {
            selection,
            subscriber: subscriber.to_owned(),
            active,
            payload,
        }
    }

    /// Its topic, which is also its documents' `id` ([`subscription_topic`]).
    pub fn id(&self) -> String {
        subscription_topic(&self.selection, &self.subscriber)
    }

    /// The same subscription, ended.
    pub fn ended(&self) -> Self {
        Subscription {
            active: false,
            ..self.clone()
        }
    }

    /// Its document in its own shape, framed for where it is written.
    pub fn document(&self, framing: Framing<'_>) -> Value {
        let legacy = self.selection.shape() == Shape::Legacy;
        let (topic, match_type, pattern, doc_type) = match &self.selection {
            Selection::Topic(topic) => (Some(topic.as_str()), None, None, SUBSCRIPTION_TYPE),
            Selection::Match {
                match_type,
                pattern,
            } => (
                None,
                Some(match_type.name()),
                Some(pattern.as_str()),
                DRAFT_SUBSCRIPTION_TYPE,
            ),
        };
        let context = (legacy && !matches!(framing, Framing::Member)).then_some(CONTEXT);
        let last_event_id = match framing {
            Framing::Answer(last_event_id) if legacy => Some(last_event_id),
            _ => None,
        };
        let written = Written {
            context,
            id: self.id(),
            doc_type,
            topic,
            match_type,
            pattern,
            subscriber: &self.subscriber,
            active: self.active,
            payload: self.payload.as_ref(),
            last_event_id,
        };
        serde_json::to_value(written).unwrap_or_default()
    }

    /// The subscription a document of either shape describes (its `id` is implied by the
    /// rest, and other fields are ignored).
    pub fn from_document(json: &str) -> Result<Self, DocumentError> {
        let read: Read = serde_json::from_str(json)?;
        let selection = match read.doc_type.as_str() {
            SUBSCRIPTION_TYPE => {
                Selection::Topic(read.topic.ok_or(DocumentError::Shape("no topic"))?)
            }
            DRAFT_SUBSCRIPTION_TYPE => Selection::Match {
                match_type: read
                    .match_type
                    .as_deref()
                    .and_then(MatchType::from_name)
                    .ok_or(DocumentError::Shape("no known match_type"))?,
                pattern: read.pattern.ok_or(DocumentError::Shape("no match"))?,
            },
            _ => return Err(DocumentError::Shape("an unknown type")),
        };
        Ok(Subscription {
            selection,
            subscriber: read.subscriber,
            active: read.active,
            payload: read.payload,
        })
    }

    /// The private update announcing this subscription's document on its own topic (1.0
    /// draft documents with the event type [`DRAFT_EVENT_TYPE`]).
    pub fn to_update(&self) -> Update {
        let event_type = (self.selection.shape() == Shape::Draft).then(|| DRAFT_EVENT_TYPE.into());
        Update {
            topics: vec![self.id()],
            data: self.document(Framing::Event).to_string(),
            private: true,
            id: None,
            event_type,
            retry: None,
        }
    }
}

/// The collection `id` of `subscriptions` in `shape`, as of `last_event_id` (which a 0.x
/// collection carries as `lastEventID`). Each member is written in its own shape.
pub fn collection(
    shape: Shape,
    id: &str,
    last_event_id: &str,
    subscriptions: &[Subscription],
) -> Value {
    let members: Vec<Value> = subscriptions
        .iter()
        .map(|s| s.document(Framing::Member))
        .collect();
    match shape {
        Shape::Legacy => serde_json::json!({
            "@context": CONTEXT,
            "id": id,
            "type": SUBSCRIPTIONS_TYPE,
            "lastEventID": last_event_id,
            "subscriptions": members,
        }),
        Shape::Draft => serde_json::json!({
            "id": id,
            "type": DRAFT_SUBSCRIPTIONS_TYPE,
            "subscriptions": members,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The subscription event example of the Mercure specification (0.x, "Subscription Events").
    const SPEC_EVENT: &str = r#"{
       "id": "/.well-known/mercure/subscriptions/https%3A%2F%2Fexample.com%2F%7Bselector%7D/urn%3Auuid%3Abb3de268-05b0-4c65-b44e-8f9acefc29d6",
       "type": "Subscription",
       "topic": "https://example.com/{selector}",
       "subscriber": "urn:uuid:bb3de268-05b0-4c65-b44e-8f9acefc29d6",
       "active": true,
       "payload": {"foo": "bar"}
    }"#;

    /// The subscription event example of the 1.0 draft ("Subscription Events").
    const DRAFT_SPEC_EVENT: &str = r#"{
       "id": "/.well-known/mercure/subscriptions/urlpattern/https%3A%2F%2Fexample.com%2F%3Aselector/urn%3Auuid%3Abb3de268-05b0-4c65-b44e-8f9acefc29d6",
       "type": "subscription",
       "match_type": "urlpattern",
       "match": "https://example.com/:selector",
       "subscriber": "urn:uuid:bb3de268-05b0-4c65-b44e-8f9acefc29d6",
       "active": true,
       "payload": {"foo": "bar"}
    }"#;

    const SUBSCRIBER: &str = "urn:uuid:bb3de268-05b0-4c65-b44e-8f9acefc29d6";

    fn topic(text: &str) -> Selection {
        Selection::Topic(text.into())
    }

    #[test]
    fn the_documents_match_the_specification_examples() {
        let built = Subscription::new(
            topic("https://example.com/{selector}"),
            SUBSCRIBER,
            true,
            Some(json!({"foo": "bar"})),
        );
        let mut expected: Value = serde_json::from_str(SPEC_EVENT).unwrap();
        expected["@context"] = json!(CONTEXT);
        assert_eq!(built.document(Framing::Event), expected);
        assert_eq!(Subscription::from_document(SPEC_EVENT).unwrap(), built);

        let draft = Subscription::new(
            Selection::Match {
                match_type: MatchType::UrlPattern,
                pattern: "https://example.com/:selector".into(),
            },
            SUBSCRIBER,
            true,
            Some(json!({"foo": "bar"})),
        );
        let expected: Value = serde_json::from_str(DRAFT_SPEC_EVENT).unwrap();
        assert_eq!(draft.document(Framing::Event), expected);
        assert_eq!(
            draft.document(Framing::Answer("#1-2")),
            expected,
            "the draft's cursor is not in the body"
        );
        assert_eq!(
            Subscription::from_document(DRAFT_SPEC_EVENT).unwrap(),
            draft
        );
    }

    #[test]
    fn events_are_private_updates_on_their_own_topic_draft_ones_typed_mercure() {
        let s = Subscription::new(topic("/books/{id}"), "urn:uuid:1", false, None);
        let update = s.to_update();
        assert_eq!(update.topics, vec![s.id()]);
        assert!(update.private);
        assert_eq!(update.event_type, None);
        let body: Value = serde_json::from_str(&update.data).unwrap();
        assert_eq!(body["active"], json!(false));
        assert_eq!(body["type"], json!("Subscription"));
        assert!(body.get("payload").is_none());

        let exact = Selection::Match {
            match_type: MatchType::Exact,
            pattern: "/books/1".into(),
        };
        let draft = Subscription::new(exact, "urn:uuid:1", true, None).to_update();
        assert_eq!(draft.event_type.as_deref(), Some(DRAFT_EVENT_TYPE));
        assert_eq!(
            draft.topics,
            ["/.well-known/mercure/subscriptions/exact/%2Fbooks%2F1/urn%3Auuid%3A1"]
        );
        assert!(draft.private);
    }

    #[test]
    fn collections_of_either_shape_list_members_in_their_own() {
        let member = Subscription::new(
            topic("https://example.com/a-topic"),
            "urn:uuid:1",
            true,
            None,
        );
        let id = topic("https://example.com/a-topic").collection_id();
        let value = collection(
            Shape::Legacy,
            &id,
            "earliest",
            std::slice::from_ref(&member),
        );
        assert_eq!(
            value["id"],
            json!("/.well-known/mercure/subscriptions/https%3A%2F%2Fexample.com%2Fa-topic")
        );
        assert_eq!(value["@context"], json!(CONTEXT));
        assert_eq!(value["type"], json!("Subscriptions"));
        assert_eq!(value["lastEventID"], json!("earliest"));
        assert!(value["subscriptions"][0].get("@context").is_none());

        let value = collection(Shape::Draft, SUBSCRIPTIONS_PATH, "earliest", &[member]);
        assert_eq!(value["type"], json!("subscriptions"));
        assert!(value.get("@context").is_none() && value.get("lastEventID").is_none());
        assert_eq!(value["subscriptions"][0]["type"], json!("Subscription"));
    }

    #[test]
    fn documents_of_no_known_shape_are_refused() {
        for bad in [
            r#"{"type": "Subscription", "subscriber": "s", "active": true}"#,
            r#"{"type": "subscription", "match_type": "Exact", "match": "m", "subscriber": "s", "active": true}"#,
            r#"{"type": "subscription", "match_type": "exact", "subscriber": "s", "active": true}"#,
            r#"{"type": "other", "topic": "t", "subscriber": "s", "active": true}"#,
            "not json",
        ] {
            assert!(Subscription::from_document(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn expansion_encodes_everything_but_unreserved_characters() {
        assert_eq!(expand("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(expand("a b/%é"), "a%20b%2F%25%C3%A9");
    }
}
