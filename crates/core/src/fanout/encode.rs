//! Turning a stream message into the frame every subscriber gets.

use std::sync::Arc;

use bytes::Bytes;
use sluice_protocol::headers::{
    Headers, MARKER_REASON_MAX_AGE, MARKER_REASON_PURGE, MARKER_REASON_REMOVE, NATS_MARKER_REASON,
    NATS_SCHEDULE,
};

use super::ring::{Audience, Entry, EntryKind, Routed};
use crate::event_id::EventId;
use crate::frames::{self, Gap, GapReason};
use sluice_backend::BackendMessage;

/// Encodes messages of one stream incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoder {
    /// The stream incarnation written into every id.
    pub incarnation: u64,
    /// The topic prefix stripped from subjects.
    pub topic_prefix: String,
    /// Largest frame sent; larger messages become `gap` frames.
    pub max_event_size: usize,
    /// The event type of message frames (`sse.event_type`).
    pub event_type: String,
    /// Subjects under this prefix (Mercure's) are not `/events` messages: their entries carry
    /// the message whole ([`Routed::message`]) and no frame, for the [`View`](super::View) of
    /// each feed to encode.
    pub view_prefix: Option<String>,
}

/// Schedule definitions are stream bookkeeping, never forwarded to clients and not counted as
/// loss.
fn is_schedule(headers: &Headers) -> bool {
    headers.get(NATS_SCHEDULE).is_some()
}

/// Why a subject delete marker was left, as its `deleted` frame says it (`max_age`, `purge`,
/// `remove`, or `other` for a reason this hub does not know); `None` when `headers` are not a
/// marker's.
fn deletion_reason(headers: &Headers) -> Option<&'static str> {
    headers.get(NATS_MARKER_REASON).map(|reason| match reason {
        MARKER_REASON_MAX_AGE => "max_age",
        MARKER_REASON_PURGE => "purge",
        MARKER_REASON_REMOVE => "remove",
        _ => "other",
    })
}

impl Encoder {
    /// What the readers of the stream get for `message`: its entry with its subject (and, under
    /// [`Encoder::view_prefix`], the message itself instead of a frame), or `None` for a
    /// control message.
    pub fn routed(&self, message: BackendMessage) -> Option<Routed> {
        if !self.is_viewed(&message.subject) {
            return self.entry(&message).map(|entry| Routed {
                entry,
                audience: Audience::Subject(message.subject.into_boxed_str()),
                message: None,
            });
        }
        // Mercure has no deleted update: a marker under the view is bookkeeping there.
        if is_schedule(&message.headers) || deletion_reason(&message.headers).is_some() {
            return None;
        }
        Some(Routed {
            entry: Entry {
                seq: message.seq,
                time: message.time,
                kind: EntryKind::Message,
                frame: Bytes::new(),
            },
            audience: Audience::Subject(message.subject.clone().into_boxed_str()),
            message: Some(Arc::new(message)),
        })
    }

    /// Whether `subject` lies under [`Encoder::view_prefix`].
    fn is_viewed(&self, subject: &str) -> bool {
        self.view_prefix.as_deref().is_some_and(|prefix| {
            subject
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
        })
    }

    /// The entry for `message`: a message frame, a `deleted` frame for a subject delete
    /// marker, or `None` for a schedule definition.
    pub fn entry(&self, message: &BackendMessage) -> Option<Entry> {
        if is_schedule(&message.headers) {
            return None;
        }
        let topic = self.topic(&message.subject);
        let id = EventId {
            seq: message.seq,
            incarnation: Some(self.incarnation),
        };
        if let Some(reason) = deletion_reason(&message.headers) {
            return Some(Entry {
                seq: message.seq,
                time: message.time,
                kind: EntryKind::Deleted,
                frame: frames::deleted(id, topic, reason, message.time),
            });
        }
        // A payload already larger than the limit is not worth encoding; `size` then reports
        // the payload's length (a lower bound of the frame's).
        let frame = (message.payload.len() <= self.max_event_size)
            .then(|| frames::message(id, &self.event_type, topic, &message.payload, message.time));
        let (kind, frame) = match frame {
            Some(frame) if frame.len() <= self.max_event_size => (EntryKind::Message, frame),
            oversized => {
                let mut gap = Gap::range(GapReason::TooLarge, message.seq, message.seq);
                gap.topic = Some(topic.to_owned());
                gap.size = Some(oversized.map_or(message.payload.len(), |f| f.len()));
                (EntryKind::TooLarge, frames::gap(id, &gap))
            }
        };
        Some(Entry {
            seq: message.seq,
            time: message.time,
            kind,
            frame,
        })
    }

    /// A `gap` entry for positions `from..=to` that cannot be delivered, for `reason`.
    pub fn lost(&self, from: u64, to: u64, reason: GapReason) -> Entry {
        let id = EventId {
            seq: to,
            incarnation: Some(self.incarnation),
        };
        Entry {
            seq: to,
            time: jiff::Timestamp::now(),
            kind: EntryKind::Lost(reason),
            frame: frames::gap(id, &Gap::range(reason, from, to)),
        }
    }

    fn topic<'a>(&self, subject: &'a str) -> &'a str {
        if self.topic_prefix.is_empty() {
            return subject;
        }
        subject
            .strip_prefix(self.topic_prefix.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or(subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(payload: &[u8], headers: Headers) -> BackendMessage {
        BackendMessage {
            seq: 5,
            subject: "app.a.b".into(),
            time: jiff::Timestamp::UNIX_EPOCH,
            headers,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn encoder(max: usize) -> Encoder {
        Encoder {
            incarnation: 1,
            topic_prefix: "app".into(),
            max_event_size: max,
            event_type: "message".into(),
            view_prefix: Some("mercure".into()),
        }
    }

    #[test]
    fn the_topic_is_the_subject_without_the_prefix() {
        assert_eq!(encoder(4096).topic("app.a.b"), "a.b");
        assert_eq!(encoder(4096).topic("other.a"), "other.a");
        let unprefixed = Encoder {
            topic_prefix: String::new(),
            ..encoder(4096)
        };
        assert_eq!(unprefixed.topic("app.a.b"), "app.a.b");
    }

    #[test]
    fn schedule_definitions_are_skipped() {
        let mut headers = Headers::new();
        headers.insert(NATS_SCHEDULE, "@every 1m");
        assert_eq!(encoder(4096).entry(&message(b"x", headers)), None);
    }

    #[test]
    fn delete_markers_become_deleted_frames_naming_topic_and_reason() {
        for (header, reason) in [
            ("MaxAge", "max_age"),
            ("Purge", "purge"),
            ("Remove", "remove"),
            ("Later", "other"),
        ] {
            let mut headers = Headers::new();
            headers.insert(NATS_MARKER_REASON, header);
            let entry = encoder(4096)
                .entry(&message(b"", headers))
                .expect("an entry");
            assert_eq!((entry.kind, entry.seq), (EntryKind::Deleted, 5));
            let text = String::from_utf8(entry.frame.to_vec()).unwrap();
            assert!(text.starts_with("id: 5-1\nevent: deleted\n"), "{text}");
            let expected = format!(
                r#"data: {{"topic":"a.b","reason":"{reason}","time":"1970-01-01T00:00:00Z"}}"#
            );
            assert!(text.contains(&expected), "{text}");
        }
    }

    #[test]
    fn markers_under_the_view_prefix_reach_no_view() {
        let mut headers = Headers::new();
        headers.insert(NATS_MARKER_REASON, "MaxAge");
        let mut marker = message(b"", headers);
        marker.subject = "mercure.t.0123456789abcdef._".into();
        assert!(encoder(4096).routed(marker).is_none());
    }

    #[test]
    fn oversized_messages_become_gap_frames_with_topic_without_prefix() {
        let entry = encoder(256)
            .entry(&message(&[b'x'; 300], Headers::new()))
            .expect("entry");
        assert_eq!(entry.kind, EntryKind::TooLarge);
        let text = String::from_utf8(entry.frame.to_vec()).unwrap();
        assert!(
            text.contains("event: gap") && text.contains("\"reason\":\"too_large\""),
            "{text}"
        );
        assert!(text.contains("\"topic\":\"a.b\""), "{text}");
        let entry = encoder(4096)
            .entry(&message(b"1", Headers::new()))
            .expect("entry");
        assert_eq!(entry.kind, EntryKind::Message);
    }

    #[test]
    fn messages_under_the_view_prefix_are_passed_whole_without_a_frame() {
        let mut viewed = message(b"update", Headers::new());
        viewed.subject = "mercure.t.0123456789abcdef._".into();
        let routed = encoder(4096).routed(viewed).expect("routed");
        assert!(routed.entry.frame.is_empty());
        assert_eq!(routed.message.expect("the message").payload, &b"update"[..]);
        let routed = encoder(4096)
            .routed(message(b"1", Headers::new()))
            .expect("routed");
        assert!(routed.message.is_none() && !routed.entry.frame.is_empty());
        let mut lookalike = message(b"1", Headers::new());
        lookalike.subject = "mercurex.a".into();
        assert!(encoder(4096).routed(lookalike).unwrap().message.is_none());
    }
}
