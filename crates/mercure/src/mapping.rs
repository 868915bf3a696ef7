//! How a Mercure update is stored as a message of the served stream, and read back.
//!
//! Mercure topics are arbitrary strings, not NATS subjects, so the subject only *narrows*: it
//! carries stable hashes, and the topics stored in the message decide (docs/MERCURE.md, "How
//! updates are stored", is the full design).
//!
//! - **Subject**: `<prefix>.<kind>.<topic>.<id>` — `kind` is `t` for an update with one topic,
//!   `m` for one with alternates and `s` for the hub's own subscription events (one topic under
//!   [`SUBSCRIPTIONS_PATH`], which publishers cannot use), so that they can be read alone; `topic` is the xxh3-64 hash of the canonical topic in 16
//!   lower-case hex digits; `id` is the hash of the custom id the same way, or `_` when the hub
//!   makes the id.
//! - **Headers**: [`HEADER_UPDATE`] (the envelope's format version, [`FORMAT_VERSION`]), and for
//!   a custom id `Nats-Msg-Id: mercure:<kind>.<topic>:<id, form-encoded>`, so that both backends
//!   deduplicate the same update sent again within their duplicate window — and only that: the
//!   same id on an update of another topic is another update, stored and delivered (a
//!   publisher cannot make the hub drop another publisher's update by using its id first).
//! - **Payload**: one line of `application/x-www-form-urlencoded` metadata (`topic` repeated in
//!   order, then `private=1`, `id`, `type`, `retry` when set), a line feed, then the data byte
//!   for byte. The metadata line never holds a raw line feed, so the first one ends it.
//!
//! Selector sets map to subject filters with [`Scheme::filters`]: exact selectors read their
//! topics' subjects plus every multi-topic update, anything else reads the whole prefix and
//! matches in process. A custom id is found again with [`Scheme::id_filter`]; hub-made ids are
//! stream positions ([`hub_id`], [`LastEventId`]).

use std::fmt;

use xxhash_rust::xxh3::xxh3_64;

use crate::form::EARLIEST;
use crate::selector::SelectorKind;
use crate::set::SelectorSet;
use crate::subscription::SUBSCRIPTIONS_PATH;
use crate::text::shown;
use crate::update::Update;

/// The header marking a message as a stored Mercure update; its value is the format version.
pub const HEADER_UPDATE: &str = "Mercure-Update";

/// The payload format this module writes and reads.
pub const FORMAT_VERSION: &str = "1";

/// The store's deduplication header (the same as `sluice_protocol::headers::NATS_MSG_ID`).
pub(crate) const HEADER_MSG_ID: &str = "Nats-Msg-Id";

/// What a custom id's `Nats-Msg-Id` starts with, keeping it apart from `/publish` msg ids.
pub(crate) const MSG_ID_PREFIX: &str = "mercure:";

/// What every hub-made id starts with; custom ids never do (the form refuses them).
pub const HUB_ID_PREFIX: char = '#';

/// The subject token standing for a hub-made id.
const HUB_ID_TOKEN: &str = "_";

/// An update as a message: what to publish to the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredForm {
    /// The full subject, prefix included.
    pub subject: String,
    /// The headers, names and values valid for a NATS header block.
    pub headers: Vec<(&'static str, String)>,
    /// The payload: metadata line, line feed, data.
    pub payload: Vec<u8>,
}

/// Why a prefix is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Mercure subject prefix {prefix:?}: {reason}")]
pub struct PrefixError {
    /// The prefix (cut when long).
    pub prefix: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Why a stored message is not a Mercure update (written by something else, or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No [`HEADER_UPDATE`] header.
    #[error("no {HEADER_UPDATE} header: not a Mercure update")]
    NotAnUpdate,
    /// A format this version does not read.
    #[error("{HEADER_UPDATE} format {0:?} is not supported (this hub reads {FORMAT_VERSION})")]
    Version(String),
    /// The payload has no metadata line.
    #[error("the payload has no metadata line")]
    NoMetadata,
    /// The data is not UTF-8.
    #[error("the data is not UTF-8")]
    DataNotUtf8,
    /// A metadata field that is unknown, repeated, or has a bad value.
    #[error("bad metadata field {field:?}: {reason}")]
    Field {
        /// The field's name (cut when long).
        field: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// No topic in the metadata.
    #[error("the metadata has no topic")]
    NoTopic,
    /// The subject is not the one this update is stored under.
    #[error("subject {found:?} does not belong to this update (expected {expected:?})")]
    Subject {
        /// The message's subject (cut when long).
        found: String,
        /// The subject the update maps to.
        expected: String,
    },
}

/// Where a `Last-Event-ID` (or `lastEventID` / `last_event_id`) asks to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastEventId<'a> {
    /// `earliest`: everything retained.
    Earliest,
    /// A hub-made id: the text after [`HUB_ID_PREFIX`], a stream position for the hub to parse
    /// as its event ids.
    Position(&'a str),
    /// A publisher's custom id, to look up with [`Scheme::id_filter`].
    Custom(&'a str),
}

impl<'a> LastEventId<'a> {
    /// Classifies a resume id.
    pub fn classify(value: &'a str) -> LastEventId<'a> {
        if value == EARLIEST {
            LastEventId::Earliest
        } else if let Some(position) = value.strip_prefix(HUB_ID_PREFIX) {
            LastEventId::Position(position)
        } else {
            LastEventId::Custom(value)
        }
    }
}

/// The id the hub hands out for an update stored at `position` (its event id text, such as
/// `42-18c3f0a1b2`): `#42-18c3f0a1b2`, a fragment as the Mercure specification suggests for
/// hub offsets.
pub fn hub_id(position: impl fmt::Display) -> String {
    format!("{HUB_ID_PREFIX}{position}")
}

/// The stable 64-bit hash a subject token is made of, in 16 lower-case hex digits.
fn token(text: &str) -> String {
    format!("{:016x}", xxh3_64(text.as_bytes()))
}

/// The subject layout under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    prefix: String,
}

impl Scheme {
    /// The scheme under `prefix`, one or more subject tokens such as `mercure` or
    /// `app.mercure` (no wildcard, whitespace or control character, no empty token).
    pub fn new(prefix: &str) -> Result<Scheme, PrefixError> {
        let fail = |reason| PrefixError {
            prefix: shown(prefix),
            reason,
        };
        if prefix.is_empty() {
            return Err(fail("must not be empty"));
        }
        if prefix.len() > 256 {
            return Err(fail("longer than 256 bytes"));
        }
        if prefix.split('.').any(str::is_empty) {
            return Err(fail(
                "has an empty token (a leading, trailing or double dot)",
            ));
        }
        if prefix.split('.').any(|t| t == "*" || t == ">") {
            return Err(fail("has a wildcard token"));
        }
        if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(fail("has whitespace or a control character"));
        }
        Ok(Scheme {
            prefix: prefix.to_owned(),
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The subject `update` is stored under.
    pub fn subject(&self, update: &Update) -> String {
        let id = update
            .id
            .as_deref()
            .map_or_else(|| HUB_ID_TOKEN.to_owned(), token);
        format!("{}.{}.{id}", self.prefix, kind_and_topic(update))
    }

    /// The message that stores `update`.
    pub fn encode(&self, update: &Update) -> StoredForm {
        let mut metadata = form_urlencoded::Serializer::new(String::new());
        for topic in &update.topics {
            metadata.append_pair("topic", topic);
        }
        if update.private {
            metadata.append_pair("private", "1");
        }
        if let Some(id) = &update.id {
            metadata.append_pair("id", id);
        }
        if let Some(event_type) = &update.event_type {
            metadata.append_pair("type", event_type);
        }
        if let Some(retry) = update.retry {
            metadata.append_pair("retry", &retry.to_string());
        }
        let mut payload = metadata.finish().into_bytes();
        payload.push(b'\n');
        payload.extend_from_slice(update.data.as_bytes());

        let mut headers = vec![(HEADER_UPDATE, FORMAT_VERSION.to_owned())];
        if let Some(id) = &update.id {
            let encoded: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
            let scope = kind_and_topic(update);
            headers.push((HEADER_MSG_ID, format!("{MSG_ID_PREFIX}{scope}:{encoded}")));
        }
        StoredForm {
            subject: self.subject(update),
            headers,
            payload,
        }
    }

    /// The update a stored message holds. `headers` are the message's `(name, value)` pairs
    /// (other headers are ignored); the subject must be the one the update maps to.
    pub fn decode<'h>(
        &self,
        subject: &str,
        headers: impl IntoIterator<Item = (&'h str, &'h str)>,
        payload: &[u8],
    ) -> Result<Update, DecodeError> {
        let version = headers
            .into_iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(HEADER_UPDATE))
            .map(|(_, value)| value)
            .ok_or(DecodeError::NotAnUpdate)?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::Version(shown(version)));
        }
        let split = payload
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(DecodeError::NoMetadata)?;
        let (metadata, data) = (&payload[..split], &payload[split + 1..]);
        let data = std::str::from_utf8(data).map_err(|_| DecodeError::DataNotUtf8)?;
        let mut update = decode_metadata(metadata)?;
        update.data = data.to_owned();
        let expected = self.subject(&update);
        if subject != expected {
            return Err(DecodeError::Subject {
                found: shown(subject),
                expected,
            });
        }
        Ok(update)
    }

    /// Subject filters that read at least every update `set` selects: each exact topic's
    /// subjects and all multi-topic updates when the set is only exact topics, else the whole
    /// prefix. What they read must still be matched with [`SelectorSet::matches_any`].
    pub fn filters(&self, set: &SelectorSet) -> Vec<String> {
        let only_exact = set
            .selectors()
            .iter()
            .all(|s| s.kind() == SelectorKind::Exact);
        if !only_exact {
            return vec![self.wide_filter()];
        }
        let mut filters: Vec<String> = set
            .selectors()
            .iter()
            .map(|s| {
                let topic = s.as_str();
                format!("{}.{}.{}.*", self.prefix, topic_kind(topic), token(topic))
            })
            .collect();
        filters.push(format!("{}.m.>", self.prefix));
        filters.sort();
        filters.dedup();
        filters
    }

    /// The filter every stored update matches.
    pub fn wide_filter(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// The filter every subscription event matches (and no other update).
    pub fn subscription_events_filter(&self) -> String {
        format!("{}.s.>", self.prefix)
    }

    /// The filter every update stored with custom id `id` matches (and, on a hash collision,
    /// others: compare the decoded ids; the last match is the one to resume after).
    pub fn id_filter(&self, id: &str) -> String {
        format!("{}.*.*.{}", self.prefix, token(id))
    }
}

/// The `<kind>.<topic>` tokens of `update`'s subject.
fn kind_and_topic(update: &Update) -> String {
    let canonical = update.topics.first().map_or("", String::as_str);
    let kind = if update.topics.len() > 1 {
        "m"
    } else {
        topic_kind(canonical)
    };
    format!("{kind}.{}", token(canonical))
}

/// The kind token of a single-topic update on `topic`: `s` for a subscription event's topic,
/// `t` for any other.
fn topic_kind(topic: &str) -> &'static str {
    match topic.strip_prefix(SUBSCRIPTIONS_PATH) {
        Some(rest) if rest.starts_with('/') => "s",
        _ => "t",
    }
}

/// Reads the metadata line: known fields only, each once, `topic` at least once.
fn decode_metadata(metadata: &[u8]) -> Result<Update, DecodeError> {
    let mut update = Update {
        topics: Vec::new(),
        data: String::new(),
        private: false,
        id: None,
        event_type: None,
        retry: None,
    };
    let field = |name: &str, reason| DecodeError::Field {
        field: shown(name),
        reason,
    };
    let mut private_seen = false;
    for (name, value) in form_urlencoded::parse(metadata) {
        let once = |slot: &mut Option<String>| match slot {
            Some(_) => Err(field(&name, "repeated")),
            None => {
                *slot = Some(value.clone().into_owned());
                Ok(())
            }
        };
        match &*name {
            "topic" => update.topics.push(value.into_owned()),
            "private" if !private_seen && value == "1" => {
                private_seen = true;
                update.private = true;
            }
            "private" => return Err(field(&name, "repeated, or not 1")),
            "id" => once(&mut update.id)?,
            "type" => once(&mut update.event_type)?,
            "retry" if update.retry.is_none() => {
                let canonical = value.bytes().all(|b| b.is_ascii_digit())
                    && (value == "0" || !value.starts_with('0'));
                update.retry = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|_| canonical)
                        .ok_or_else(|| field(&name, "not a canonical u64"))?,
                );
            }
            "retry" => return Err(field(&name, "repeated")),
            _ => return Err(field(&name, "unknown")),
        }
    }
    if update.topics.is_empty() {
        return Err(DecodeError::NoTopic);
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::selector::DEFAULT_BASE_URL;

    fn scheme() -> Scheme {
        Scheme::new("mercure").unwrap()
    }

    fn update(topics: &[&str]) -> Update {
        Update {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            data: String::new(),
            private: false,
            id: None,
            event_type: None,
            retry: None,
        }
    }

    fn round_trip(u: &Update) -> Result<Update, DecodeError> {
        let s = scheme();
        let stored = s.encode(u);
        s.decode(
            &stored.subject,
            stored.headers.iter().map(|(n, v)| (*n, v.as_str())),
            &stored.payload,
        )
    }

    #[test]
    fn the_subject_carries_kind_topic_hash_and_id_token() {
        let s = scheme();
        let single = s.subject(&update(&["https://example.com/books/1"]));
        let tokens: Vec<&str> = single.split('.').collect();
        assert_eq!(tokens.len(), 4, "{single}");
        assert_eq!((tokens[0], tokens[1], tokens[3]), ("mercure", "t", "_"));
        assert_eq!(tokens[2].len(), 16);
        assert!(
            tokens[2]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );

        let mut multi = update(&["https://example.com/books/1", "/alt"]);
        multi.id = Some("urn:uuid:1".into());
        let subject = s.subject(&multi);
        assert!(subject.starts_with("mercure.m."), "{subject}");
        assert!(subject.ends_with(&token("urn:uuid:1")), "{subject}");
        assert_eq!(
            subject.split('.').nth(2),
            Some(tokens[2]),
            "canonical topic hash"
        );
    }

    #[test]
    fn subscription_events_have_a_kind_of_their_own_that_exact_sets_read() {
        let s = scheme();
        let topic = "/.well-known/mercure/subscriptions/%2Fa/urn%3Auuid%3A1";
        let subject = s.subject(&update(&[topic]));
        assert!(subject.starts_with("mercure.s."), "{subject}");
        assert_eq!(s.subscription_events_filter(), "mercure.s.>");
        assert!(
            s.subject(&update(&["/.well-known/mercure/subscriptionsx"]))
                .starts_with("mercure.t.")
        );
        let set = SelectorSet::from_query([("topic", topic)], DEFAULT_BASE_URL).unwrap();
        assert!(
            s.filters(&set)
                .contains(&format!("mercure.s.{}.*", token(topic)))
        );
        let mut stored = update(&[topic]);
        stored.private = true;
        assert_eq!(round_trip(&stored), Ok(stored));
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // xxh3-64 (seed 0) of the empty string, from the reference implementation: stored
        // subjects depend on the hash never changing.
        assert_eq!(token(""), "2d06800538d394c2");
        assert_eq!(
            scheme().subject(&update(&["https://example.com/books/1"])),
            "mercure.t.73c67dd18105242a._",
            "the example in docs/MERCURE.md"
        );
        assert_eq!(
            scheme().subject(&update(&[""])),
            "mercure.t.2d06800538d394c2._"
        );
    }

    #[test]
    fn custom_ids_are_deduplicated_by_msg_id() {
        let mut u = update(&["a"]);
        u.id = Some("id with spaces & é".into());
        let stored = scheme().encode(&u);
        let msg_id = stored
            .headers
            .iter()
            .find(|(n, _)| *n == HEADER_MSG_ID)
            .map(|(_, v)| v.as_str())
            .unwrap();
        assert!(msg_id.starts_with(MSG_ID_PREFIX));
        assert!(msg_id.bytes().all(|b| b.is_ascii_graphic()), "{msg_id}");
        assert!(
            !scheme()
                .encode(&update(&["a"]))
                .headers
                .iter()
                .any(|(n, _)| *n == HEADER_MSG_ID)
        );
    }

    #[test]
    fn multi_line_and_empty_data_survive() {
        for data in ["", "\n", "a\nb\r\nc\r", "first line\n\nthird"] {
            let mut u = update(&["t"]);
            u.data = data.into();
            assert_eq!(round_trip(&u).unwrap(), u);
        }
    }

    #[test]
    fn foreign_or_damaged_messages_are_refused() {
        let s = scheme();
        let u = update(&["t"]);
        let stored = s.encode(&u);
        let headers = || stored.headers.iter().map(|(n, v)| (*n, v.as_str()));
        assert_eq!(
            s.decode(&stored.subject, [], &stored.payload).unwrap_err(),
            DecodeError::NotAnUpdate
        );
        assert_eq!(
            s.decode(&stored.subject, [(HEADER_UPDATE, "2")], &stored.payload)
                .unwrap_err(),
            DecodeError::Version("2".into())
        );
        assert!(matches!(
            s.decode("mercure.t.0000000000000000._", headers(), &stored.payload),
            Err(DecodeError::Subject { .. })
        ));
        for (payload, expected) in [
            (&b"topic=t"[..], DecodeError::NoMetadata),
            (b"\n", DecodeError::NoTopic),
            (b"topic=t\n\xFF", DecodeError::DataNotUtf8),
        ] {
            assert_eq!(
                s.decode(&stored.subject, headers(), payload).unwrap_err(),
                expected
            );
        }
        for payload in [
            &b"topic=t&x=1\n"[..],
            b"topic=t&id=a&id=b\n",
            b"topic=t&private=yes\n",
            b"topic=t&retry=01\n",
            b"topic=t&retry=1&retry=1\n",
        ] {
            assert!(
                matches!(
                    s.decode(&stored.subject, headers(), payload),
                    Err(DecodeError::Field { .. } | DecodeError::Subject { .. })
                ),
                "{:?}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn exact_sets_filter_by_topic_and_read_multi_topic_updates() {
        let s = scheme();
        let set =
            SelectorSet::from_query([("topic", "/a"), ("match", "/b")], DEFAULT_BASE_URL).unwrap();
        let mut expected = vec![
            "mercure.m.>".to_owned(),
            format!("mercure.t.{}.*", token("/a")),
            format!("mercure.t.{}.*", token("/b")),
        ];
        expected.sort();
        assert_eq!(s.filters(&set), expected);
        let wide = SelectorSet::from_query([("topic", "/a/{x}")], DEFAULT_BASE_URL).unwrap();
        assert_eq!(s.filters(&wide), ["mercure.>"]);
    }

    #[test]
    fn last_event_ids_tell_positions_custom_ids_and_earliest_apart() {
        assert_eq!(LastEventId::classify("earliest"), LastEventId::Earliest);
        let hub = hub_id("42-18c3f0a1b2");
        assert_eq!(hub, "#42-18c3f0a1b2");
        assert_eq!(
            LastEventId::classify(&hub),
            LastEventId::Position("42-18c3f0a1b2")
        );
        assert_eq!(
            LastEventId::classify("urn:uuid:1"),
            LastEventId::Custom("urn:uuid:1")
        );
        let s = scheme();
        let mut u = update(&["t"]);
        u.id = Some("urn:uuid:1".into());
        let filter = s.id_filter("urn:uuid:1");
        let subject = s.subject(&u);
        assert_eq!(
            filter.rsplit('.').next(),
            subject.rsplit('.').next(),
            "{filter} finds {subject}"
        );
    }

    #[test]
    fn prefixes_must_be_plain_subject_tokens() {
        assert!(Scheme::new("app.mercure").is_ok());
        for bad in ["", ".m", "m.", "a..b", "a.*", "a.>", "a b", "a\tb"] {
            let error = Scheme::new(bad).unwrap_err();
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
    }

    /// Any text, line breaks and control characters included.
    fn text() -> impl Strategy<Value = String> {
        "(?s:.{0,24})"
    }

    /// Multi-line data with every kind of line break, possibly empty.
    fn data() -> impl Strategy<Value = String> {
        prop::collection::vec(
            (text(), prop::sample::select(vec!["\n", "\r\n", "\r", ""])),
            0..5,
        )
        .prop_map(|lines| lines.into_iter().map(|(l, end)| l + end).collect())
    }

    fn arbitrary_update() -> impl Strategy<Value = Update> {
        (
            prop::collection::vec(text(), 1..4),
            data(),
            any::<bool>(),
            prop::option::of(text()),
            prop::option::of(text()),
            prop::option::of(any::<u64>()),
        )
            .prop_map(|(topics, data, private, id, event_type, retry)| Update {
                topics,
                data,
                private,
                id,
                event_type,
                retry,
            })
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(u in arbitrary_update()) {
            prop_assert_eq!(round_trip(&u).unwrap(), u);
        }

        #[test]
        fn stored_headers_are_valid_nats_header_values(u in arbitrary_update()) {
            for (_, value) in scheme().encode(&u).headers {
                prop_assert!(value.bytes().all(|b| b.is_ascii_graphic()), "{:?}", value);
            }
        }
    }
}
