//! Active subscriptions (0.x): the JSON-LD documents the hub publishes when a subscription
//! starts or ends, on `/.well-known/mercure/subscriptions/{topic}/{subscriber}`, and serves from
//! its subscriptions API.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::update::Update;

/// The JSON-LD context of every document.
pub const CONTEXT: &str = "https://mercure.rocks/";

/// The path of the subscriptions collection, under which every subscription's topic lies.
pub const SUBSCRIPTIONS_PATH: &str = "/.well-known/mercure/subscriptions";

/// The `type` of one subscription.
pub const SUBSCRIPTION_TYPE: &str = "Subscription";

/// The `type` of a collection.
pub const SUBSCRIPTIONS_TYPE: &str = "Subscriptions";

/// One subscription: a selector of one subscriber.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    /// [`CONTEXT`]; omitted inside a collection, which defines it.
    #[serde(rename = "@context", default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The subscription's topic ([`subscription_topic`]).
    pub id: String,
    /// [`SUBSCRIPTION_TYPE`].
    #[serde(rename = "type")]
    pub doc_type: String,
    /// The selector the subscription was made with.
    pub topic: String,
    /// The subscriber's identifier.
    pub subscriber: String,
    /// True while the subscription lasts, false in the update that ends it.
    pub active: bool,
    /// The subscriber token's payload for this subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// The id of the last event dispatched, when the document is an API answer.
    #[serde(
        rename = "lastEventID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_event_id: Option<String>,
}

/// A collection of subscriptions, as the API answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscriptions {
    /// [`CONTEXT`].
    #[serde(rename = "@context")]
    pub context: String,
    /// The collection's path ([`collection_id`]).
    pub id: String,
    /// [`SUBSCRIPTIONS_TYPE`].
    #[serde(rename = "type")]
    pub doc_type: String,
    /// The id of the last event dispatched (`earliest` when none was).
    #[serde(rename = "lastEventID")]
    pub last_event_id: String,
    /// The subscriptions, each without its own `@context`.
    pub subscriptions: Vec<Subscription>,
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

/// The topic of the subscription of `subscriber` made with `selector`:
/// `/.well-known/mercure/subscriptions/{selector}/{subscriber}`, both percent-encoded.
pub fn subscription_topic(selector: &str, subscriber: &str) -> String {
    format!(
        "{SUBSCRIPTIONS_PATH}/{}/{}",
        expand(selector),
        expand(subscriber)
    )
}

/// The path of a collection: all subscriptions, or those made with `selector`.
pub fn collection_id(selector: Option<&str>) -> String {
    match selector {
        None => SUBSCRIPTIONS_PATH.to_owned(),
        Some(selector) => format!("{SUBSCRIPTIONS_PATH}/{}", expand(selector)),
    }
}

impl Subscription {
    /// The document of `subscriber`'s subscription made with `selector`.
    pub fn new(selector: &str, subscriber: &str, active: bool, payload: Option<Value>) -> Self {
        Subscription {
            context: Some(CONTEXT.to_owned()),
            id: subscription_topic(selector, subscriber),
            doc_type: SUBSCRIPTION_TYPE.to_owned(),
            topic: selector.to_owned(),
            subscriber: subscriber.to_owned(),
            active,
            payload,
            last_event_id: None,
        }
    }

    /// The private update announcing this document on its own topic.
    pub fn to_update(&self) -> Update {
        Update {
            topics: vec![self.id.clone()],
            data: serde_json::to_string(self).unwrap_or_default(),
            private: true,
            id: None,
            event_type: None,
            retry: None,
        }
    }
}

impl Subscriptions {
    /// The collection `id` of `subscriptions` (their own `@context` dropped) as of
    /// `last_event_id`.
    pub fn new(id: String, last_event_id: String, subscriptions: Vec<Subscription>) -> Self {
        Subscriptions {
            context: CONTEXT.to_owned(),
            id,
            doc_type: SUBSCRIPTIONS_TYPE.to_owned(),
            last_event_id,
            subscriptions: subscriptions
                .into_iter()
                .map(|s| Subscription {
                    context: None,
                    last_event_id: None,
                    ..s
                })
                .collect(),
        }
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

    #[test]
    fn the_document_matches_the_specification_example() {
        let built = Subscription::new(
            "https://example.com/{selector}",
            "urn:uuid:bb3de268-05b0-4c65-b44e-8f9acefc29d6",
            true,
            Some(json!({"foo": "bar"})),
        );
        let mut expected: Value = serde_json::from_str(SPEC_EVENT).unwrap();
        expected["@context"] = json!(CONTEXT);
        assert_eq!(serde_json::to_value(&built).unwrap(), expected);

        let parsed: Subscription = serde_json::from_str(SPEC_EVENT).unwrap();
        assert_eq!(
            parsed,
            Subscription {
                context: None,
                ..built
            }
        );
    }

    #[test]
    fn the_event_is_a_private_update_on_its_own_topic() {
        let s = Subscription::new("/books/{id}", "urn:uuid:1", false, None);
        let update = s.to_update();
        assert_eq!(update.topics, std::slice::from_ref(&s.id));
        assert!(update.private);
        let body: Value = serde_json::from_str(&update.data).unwrap();
        assert_eq!(body["active"], json!(false));
        assert_eq!(body["type"], json!("Subscription"));
        assert!(body.get("payload").is_none());
    }

    #[test]
    fn a_collection_carries_the_context_and_last_event_id_once() {
        let member = Subscription::new("https://example.com/a-topic", "urn:uuid:1", true, None);
        let collection = Subscriptions::new(
            collection_id(Some("https://example.com/a-topic")),
            "earliest".into(),
            vec![member],
        );
        let value = serde_json::to_value(&collection).unwrap();
        assert_eq!(
            value["id"],
            json!("/.well-known/mercure/subscriptions/https%3A%2F%2Fexample.com%2Fa-topic")
        );
        assert_eq!(value["@context"], json!(CONTEXT));
        assert_eq!(value["type"], json!("Subscriptions"));
        assert_eq!(value["lastEventID"], json!("earliest"));
        assert!(value["subscriptions"][0].get("@context").is_none());
        assert_eq!(collection_id(None), SUBSCRIPTIONS_PATH);
    }

    #[test]
    fn expansion_encodes_everything_but_unreserved_characters() {
        assert_eq!(expand("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(expand("a b/%é"), "a%20b%2F%25%C3%A9");
    }
}
