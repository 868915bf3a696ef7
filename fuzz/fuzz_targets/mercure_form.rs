//! The Mercure publish form, both ways: `form::decode` never panics on any body; what it accepts
//! keeps the protocol's rules and limits (1 to `MAX_TOPICS` topics, each a non-empty protocol
//! string within `MAX_TOPIC_LEN` other than `*`; an id never empty, `#`-prefixed or `earliest`;
//! a type never empty or `mercure`); and the accepted update, sent again as a form, decodes to
//! itself (valid ⇒ accepted).
//!
//! Input: the raw `application/x-www-form-urlencoded` body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_mercure::form::{self, EARLIEST, MAX_ID_LEN, MAX_TOPIC_LEN, MAX_TOPICS, RESERVED_TYPE};

fuzz_target!(|data: &[u8]| {
    let Ok(update) = form::decode(data) else {
        return;
    };
    assert!(!update.topics.is_empty() && update.topics.len() <= MAX_TOPICS);
    for topic in &update.topics {
        assert!(!topic.is_empty() && topic.len() <= MAX_TOPIC_LEN && topic != "*");
        assert!(!topic.chars().any(char::is_control), "{topic:?}");
    }
    if let Some(id) = &update.id {
        assert!(!id.is_empty() && id.len() <= MAX_ID_LEN);
        assert!(!id.starts_with('#') && id != EARLIEST);
        assert!(!id.chars().any(char::is_control), "{id:?}");
    }
    if let Some(event_type) = &update.event_type {
        assert!(!event_type.is_empty() && event_type != RESERVED_TYPE);
        assert!(!event_type.chars().any(char::is_control), "{event_type:?}");
    }
    let mut again = form_urlencoded::Serializer::new(String::new());
    for topic in &update.topics {
        again.append_pair("topic", topic);
    }
    again.append_pair("data", &update.data);
    if update.private {
        again.append_pair("private", "");
    }
    if let Some(id) = &update.id {
        again.append_pair("id", id);
    }
    if let Some(event_type) = &update.event_type {
        again.append_pair("type", event_type);
    }
    if let Some(retry) = update.retry {
        again.append_pair("retry", &retry.to_string());
    }
    assert_eq!(
        form::decode(again.finish().as_bytes()).as_ref(),
        Ok(&update)
    );
});
