//! The publish request body: `application/x-www-form-urlencoded` fields decoded into an
//! [`Update`].
//!
//! | field | meaning |
//! | --- | --- |
//! | `topic` | repeatable, at least one; the first is canonical, the others alternates |
//! | `data` | the content (absent: empty) |
//! | `private` | present, with any value (even empty): a private update |
//! | `id` | a custom id; refused when it starts with `#` (hub-made ids do) or is `earliest` |
//! | `type` | the SSE event type; `mercure` is reserved for the hub's own events |
//! | `retry` | the reconnection delay, decimal milliseconds (`u64`) |
//!
//! As in Mercure, the first `data`, `id`, `type` and `retry` field counts and later repeats are
//! ignored, as are unknown fields; an empty `id`, `type` or `retry` is the same as none. Topics,
//! ids and types must be protocol strings (no control or Unicode format characters), and a topic
//! must not be `*` nor resolve into the hub's own namespace, [`HUB_PATH`] (where the hub
//! publishes subscription events, which publishers must not forge): resolved as a URL against
//! the hub's URL, its path with dot segments removed and unreserved `%XX` triplets decoded is
//! not [`HUB_PATH`] and does not start with it and `/`, whatever the scheme and host (so, as in
//! Mercure, relative topics such as `mercure/x` or `?x` are the hub's too). Percent-encoded bytes that are not UTF-8 decode to U+FFFD, as the WHATWG
//! form decoding specifies (Mercure refuses such a body instead).
//!
//! Limits: [`MAX_FIELDS`] fields, [`MAX_TOPICS`] topics, and [`MAX_TOPIC_LEN`] and
//! [`MAX_ID_LEN`] bytes for each topic, id and type; the body's own size is the HTTP layer's.

use urlpattern::quirks::{self, StringOrInit};

use crate::text::{NOT_PROTOCOL_STRING, is_protocol_string, shown};
use crate::update::Update;

/// The most fields a form may have, unknown ones included.
pub const MAX_FIELDS: usize = 128;

/// The most topics (canonical and alternates) one update may have.
pub const MAX_TOPICS: usize = 100;

/// The longest topic accepted, in bytes (the same as the longest selector).
pub const MAX_TOPIC_LEN: usize = crate::selector::MAX_SELECTOR_LEN;

/// The longest custom id or event type accepted, in bytes.
pub const MAX_ID_LEN: usize = 1024;

/// The id value that asks for everything retained; never a custom id.
pub const EARLIEST: &str = "earliest";

/// The event type reserved for the hub's own events (1.0 draft).
pub const RESERVED_TYPE: &str = "mercure";

/// The path of the hub, whose namespace is the hub's own.
pub const HUB_PATH: &str = "/.well-known/mercure";

/// The URL topics resolve against for the namespace check (the host does not matter).
const HUB_URL: &str = "https://mercure.invalid/.well-known/mercure";

/// Whether `topic`, resolved as a URL against the hub's URL, lies in [`HUB_PATH`]'s namespace.
fn addresses_hub(topic: &str) -> bool {
    let input = quirks::process_match_input(StringOrInit::String(topic.into()), Some(HUB_URL));
    let Some(parsed) = input
        .ok()
        .flatten()
        .and_then(|(i, _)| quirks::parse_match_input(i))
    else {
        return false;
    };
    let path = decode_unreserved(&parsed.pathname);
    path == HUB_PATH
        || path
            .strip_prefix(HUB_PATH)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `path` with the `%XX` triplets of unreserved characters decoded (only those: they are the
/// ones a URL may spell either way), so that `/.well-known/%6Dercure` is seen as the hub's.
fn decode_unreserved(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let decoded = rest
            .get(at + 1..at + 3)
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
        match decoded {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Why a publish form was refused; names the field and shows the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    /// No `topic` field.
    #[error("missing \"topic\" field")]
    MissingTopic,
    /// More than [`MAX_TOPICS`] `topic` fields.
    #[error("more than {max} \"topic\" fields")]
    TooManyTopics {
        /// The limit.
        max: usize,
    },
    /// More than [`MAX_FIELDS`] fields.
    #[error("more than {max} fields")]
    TooManyFields {
        /// The limit.
        max: usize,
    },
    /// A field whose value is refused.
    #[error("invalid \"{field}\" field {value:?}: {reason}")]
    Invalid {
        /// The field's name.
        field: &'static str,
        /// The value (cut when long).
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn invalid(field: &'static str, value: &str, reason: impl Into<String>) -> FormError {
    FormError::Invalid {
        field,
        value: shown(value),
        reason: reason.into(),
    }
}

/// Checks a topic, id or type against the protocol and its length limit.
fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), FormError> {
    if value.len() > max {
        return Err(invalid(
            field,
            value,
            format!("{} bytes, more than the {max} allowed", value.len()),
        ));
    }
    if !is_protocol_string(value) {
        return Err(invalid(field, value, NOT_PROTOCOL_STRING));
    }
    Ok(())
}

/// Decodes a publish request body.
pub fn decode(body: &[u8]) -> Result<Update, FormError> {
    let mut topics = Vec::new();
    let mut data = None;
    let mut private = false;
    let mut id = None;
    let mut event_type = None;
    let mut retry = None;
    for (fields, (name, value)) in form_urlencoded::parse(body).enumerate() {
        if fields == MAX_FIELDS {
            return Err(FormError::TooManyFields { max: MAX_FIELDS });
        }
        match &*name {
            "topic" => {
                if topics.len() == MAX_TOPICS {
                    return Err(FormError::TooManyTopics { max: MAX_TOPICS });
                }
                check_text("topic", &value, MAX_TOPIC_LEN)?;
                if value.is_empty() {
                    return Err(invalid("topic", &value, "must not be empty"));
                }
                if value == "*" {
                    return Err(invalid("topic", &value, "\"*\" is the wildcard selector"));
                }
                if addresses_hub(&value) {
                    return Err(invalid(
                        "topic",
                        &value,
                        "resolves into the hub's own namespace, /.well-known/mercure",
                    ));
                }
                topics.push(value.into_owned());
            }
            "data" => {
                data.get_or_insert(value);
            }
            "private" => private = true,
            "id" => {
                id.get_or_insert(value);
            }
            "type" => {
                event_type.get_or_insert(value);
            }
            "retry" => {
                retry.get_or_insert(value);
            }
            _ => {}
        }
    }
    if topics.is_empty() {
        return Err(FormError::MissingTopic);
    }
    let id = id.filter(|id| !id.is_empty());
    if let Some(id) = &id {
        check_text("id", id, MAX_ID_LEN)?;
        if id.starts_with('#') {
            return Err(invalid(
                "id",
                id,
                "must not start with '#' (hub-made ids do)",
            ));
        }
        if id == EARLIEST {
            return Err(invalid("id", id, "\"earliest\" is reserved for resuming"));
        }
    }
    let event_type = event_type.filter(|t| !t.is_empty());
    if let Some(event_type) = &event_type {
        check_text("type", event_type, MAX_ID_LEN)?;
        if event_type == RESERVED_TYPE {
            return Err(invalid(
                "type",
                event_type,
                "\"mercure\" is reserved for the hub's own events",
            ));
        }
    }
    let retry = match retry.filter(|r| !r.is_empty()) {
        None => None,
        Some(text) => Some(parse_retry(&text)?),
    };
    Ok(Update {
        topics,
        data: data.map(|d| d.into_owned()).unwrap_or_default(),
        private,
        id: id.map(|id| id.into_owned()),
        event_type: event_type.map(|t| t.into_owned()),
        retry,
    })
}

/// Decimal digits only (no sign, no spaces), within `u64`.
fn parse_retry(text: &str) -> Result<u64, FormError> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("retry", text, "must be decimal milliseconds"));
    }
    text.parse()
        .map_err(|_| invalid("retry", text, "more than 18446744073709551615"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_form_decodes_to_its_update() {
        let body =
            b"topic=https%3A%2F%2Fexample.com%2Fbooks%2F1&topic=%2Fbooks&data=line+1%0Aline+2\
&private=on&id=urn%3Auuid%3A1&type=book&retry=3000&unknown=x";
        assert_eq!(
            decode(body).unwrap(),
            Update {
                topics: vec!["https://example.com/books/1".into(), "/books".into()],
                data: "line 1\nline 2".into(),
                private: true,
                id: Some("urn:uuid:1".into()),
                event_type: Some("book".into()),
                retry: Some(3000),
            }
        );
    }

    #[test]
    fn a_bare_topic_is_a_public_update_with_empty_data() {
        let update = decode(b"topic=a").unwrap();
        assert_eq!(update.topics, ["a"]);
        assert_eq!(update.data, "");
        assert!(!update.private);
        assert_eq!(
            (update.id, update.event_type, update.retry),
            (None, None, None)
        );
    }

    #[test]
    fn private_counts_whatever_its_value_and_the_first_repeat_wins() {
        assert!(decode(b"topic=a&private=").unwrap().private);
        assert!(decode(b"topic=a&private").unwrap().private);
        let update = decode(b"topic=a&data=1&data=2&id=x&id=y&retry=&type=&retry=5").unwrap();
        assert_eq!(update.data, "1");
        assert_eq!(update.id.as_deref(), Some("x"));
        assert_eq!(update.retry, None, "the first retry is empty");
        assert_eq!(update.event_type, None);
    }

    #[test]
    fn refusals_name_the_field_and_value() {
        for (body, field, value) in [
            (&b"topic=a&id=%23x"[..], "id", "#x"),
            (b"topic=a&id=earliest", "id", "earliest"),
            (b"topic=a&id=a%0Ab", "id", "a\nb"),
            (b"topic=a%0Db", "topic", "a\rb"),
            (b"topic=%E2%80%8Bx", "topic", "\u{200B}x"),
            (b"topic=*", "topic", "*"),
            (
                b"topic=%2F.well-known%2Fmercure%2Fsubscriptions%2Fx%2Fy",
                "topic",
                "/.well-known/mercure/subscriptions/x/y",
            ),
            (b"topic=", "topic", ""),
            (b"topic=a&type=mercure", "type", "mercure"),
            (b"topic=a&type=a%00", "type", "a\0"),
            (b"topic=a&retry=-1", "retry", "-1"),
            (b"topic=a&retry=%2B1", "retry", "+1"),
            (
                b"topic=a&retry=99999999999999999999",
                "retry",
                "99999999999999999999",
            ),
        ] {
            let error = decode(body).unwrap_err();
            match &error {
                FormError::Invalid {
                    field: f, value: v, ..
                } => {
                    assert_eq!((*f, v.as_str()), (field, value), "{error}");
                }
                other => panic!("{other:?}"),
            }
            assert!(error.to_string().contains(field), "{error}");
        }
        assert_eq!(decode(b"data=x").unwrap_err(), FormError::MissingTopic);
        assert_eq!(decode(b"").unwrap_err(), FormError::MissingTopic);
    }

    #[test]
    fn topics_in_the_hubs_namespace_are_refused_however_spelt() {
        for topic in [
            "/.well-known/mercure",
            "/.well-known/mercure/subscriptions/a/b",
            "https://hub.example/.well-known/mercure/subscriptions/a/b",
            "/.well-known/%6Dercure/subscriptions",
            "/.well-known/mercure/../mercure/x",
            "/a/../.well-known/mercure",
            "mercure/subscriptions",
            "?q=1",
            "",
        ] {
            assert!(addresses_hub(topic), "{topic:?}");
        }
        for topic in [
            "/.well-known/mercurex",
            "/.well-known/mercure%2Fx",
            "https://example.com/books/1",
            "urn:uuid:1",
            "/books/.well-known/mercure",
            "subscriptions/x",
        ] {
            assert!(!addresses_hub(topic), "{topic:?}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        let topics: String = (0..=MAX_TOPICS).map(|i| format!("topic=t{i}&")).collect();
        assert_eq!(
            decode(topics.as_bytes()).unwrap_err(),
            FormError::TooManyTopics { max: MAX_TOPICS }
        );
        let fields: String = (0..=MAX_FIELDS).map(|i| format!("f{i}=x&")).collect();
        assert_eq!(
            decode(format!("topic=a&{fields}").as_bytes()).unwrap_err(),
            FormError::TooManyFields { max: MAX_FIELDS }
        );
        let long = format!("topic={}", "a".repeat(MAX_TOPIC_LEN + 1));
        assert!(matches!(
            decode(long.as_bytes()).unwrap_err(),
            FormError::Invalid { field: "topic", .. }
        ));
        let long_id = format!("topic=a&id={}", "a".repeat(MAX_ID_LEN + 1));
        assert!(matches!(
            decode(long_id.as_bytes()).unwrap_err(),
            FormError::Invalid { field: "id", .. }
        ));
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        assert_eq!(decode(b"topic=a&data=%FF").unwrap().data, "\u{FFFD}");
    }

    use proptest::prelude::*;

    /// A protocol string without the values the form refuses.
    fn text() -> impl Strategy<Value = String> {
        "[^\\p{Cc}\\p{Cf}#*]{1,12}".prop_filter("reserved", |t| {
            t != EARLIEST && t != RESERVED_TYPE && !addresses_hub(t)
        })
    }

    fn encode(update: &Update) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        for topic in &update.topics {
            form.append_pair("topic", topic);
        }
        form.append_pair("data", &update.data);
        if update.private {
            form.append_pair("private", "on");
        }
        for (name, value) in [("id", &update.id), ("type", &update.event_type)] {
            if let Some(value) = value {
                form.append_pair(name, value);
            }
        }
        if let Some(retry) = update.retry {
            form.append_pair("retry", &retry.to_string());
        }
        form.finish()
    }

    proptest! {
        #[test]
        fn a_valid_update_sent_as_a_form_decodes_to_itself(
            topics in prop::collection::vec(text(), 1..4),
            data in any::<String>(),
            private in any::<bool>(),
            id in prop::option::of(text()),
            event_type in prop::option::of(text()),
            retry in prop::option::of(any::<u64>()),
        ) {
            let update = Update { topics, data, private, id, event_type, retry };
            prop_assert_eq!(decode(encode(&update).as_bytes()).unwrap(), update);
        }

        #[test]
        fn any_body_decodes_or_is_refused_within_the_limits(body in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(update) = decode(&body) {
                prop_assert!(!update.topics.is_empty() && update.topics.len() <= MAX_TOPICS);
                prop_assert!(update.topics.iter().all(|t| is_protocol_string(t) && t != "*"));
                prop_assert!(update.id.as_deref().is_none_or(|id| !id.starts_with('#') && id != EARLIEST));
            }
        }
    }
}
