//! The Server-Sent Events frames the hub sends, encoded once with `sluice-sse`.
//!
//! | event       | id                                    | data                                       |
//! |-------------|---------------------------------------|--------------------------------------------|
//! | `connected` | position before the first delivery    | `{"topics":[…]}`                           |
//! | `message`   | the message's position                | `{"topic":…,"payload":…,"time":…}`         |
//! | `gap`       | the position after what was lost      | see [`Gap`]                                |
//!
//! plus `: heartbeat <RFC3339>` comments and `retry:` hints.

use bytes::Bytes;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sluice_sse::Frame;

use crate::event_id::EventId;

/// Why a client did not get some messages. Sent as an `event: gap` frame whose JSON data has
/// `reason`, and where it applies the inclusive sequence range `from`..=`to` of the current
/// stream incarnation that will not be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GapReason {
    /// The requested position is no longer retained: removed from the front of the stream by
    /// its age or a limit on the whole stream, or purged with everything before it. A range of
    /// positions: some of them may have held other topics.
    Expired,
    /// Messages of the client's topics were removed from the stream before it read them — a
    /// delete, a purge of those topics, the per-subject limit (`max_msgs_per_subject`) —
    /// anywhere in the stream. Only clients whose topics match a removed message are told;
    /// `from` and `to` bound the removed positions of their topics (positions in between may
    /// have held other topics, none held a message they would have got).
    Removed,
    /// The requested position is beyond the end of the stream.
    Ahead,
    /// The requested position belongs to an earlier incarnation of the stream (it was deleted
    /// and created again).
    Incarnation,
    /// One message is larger than `sse.max_event_size`.
    TooLarge,
    /// Backlog older than `replay.window` was skipped.
    ReplayWindow,
    /// The stored records of these positions are damaged or missing.
    Damaged,
    /// After a crash or a cut block, these positions (above the last intact record) may
    /// have been handed out: the client holds an id from inside them.
    Unconfirmed,
}

impl GapReason {
    /// As the `reason` label of `sluice_gaps_total` and the gap frame's JSON.
    pub fn label(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Removed => "removed",
            Self::Ahead => "ahead",
            Self::Incarnation => "incarnation",
            Self::TooLarge => "too_large",
            Self::ReplayWindow => "replay_window",
            Self::Damaged => "damaged",
            Self::Unconfirmed => "unconfirmed",
        }
    }
}

/// What a reader whose resume position is lost gets after its `gap` frame, beside where
/// [`OnLoss`](crate::plan::OnLoss) continues it (`sse.repair`, or the request's `repair=`;
/// a lost resume position's `gap` frame names it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// Nothing more: it continues where [`OnLoss`](crate::plan::OnLoss) says (the default).
    #[default]
    None,
    /// The latest retained message of each of its subjects, then live: a client whose history
    /// is gone converges to the current state. Takes the place of [`OnLoss`](crate::plan::OnLoss).
    Latest,
}

impl<'de> Deserialize<'de> for Repair {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        sluice_protocol::config_choice::choice(
            deserializer,
            &[("none", Self::None), ("latest", Self::Latest)],
        )
    }
}

/// The data of a `gap` frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// Why the messages were not delivered.
    pub reason: GapReason,
    /// First sequence not delivered, when a range of the current incarnation is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// Last sequence not delivered (inclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// The resume position the client asked for, for resume gaps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The topic of a skipped oversized message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// The encoded size of a skipped oversized message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// For a lost resume position under `repair=latest`: `"latest"`, the latest retained
    /// message of each of the client's subjects follows, then live messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

impl Gap {
    /// A gap skipping `from..=to` (no range when `from > to`).
    pub fn range(reason: GapReason, from: u64, to: u64) -> Self {
        let range = (from <= to).then_some((from, to));
        Self {
            reason,
            from: range.map(|r| r.0),
            to: range.map(|r| r.1),
            cursor: None,
            topic: None,
            size: None,
            repair: None,
        }
    }
}

fn encode(frame: &Frame) -> Bytes {
    // Ids and event names are generated here and never contain line breaks.
    frame.encode().unwrap_or_default()
}

/// The first event of every stream (only the `retry:` hint comes before it).
pub fn connected(id: EventId, topics: &[String]) -> Bytes {
    let data = serde_json::json!({ "topics": topics }).to_string();
    encode(
        &Frame::data(data)
            .with_id(id.to_string())
            .with_event("connected"),
    )
}

/// A `gap` frame; `id` is the position after the gap.
pub fn gap(id: EventId, gap: &Gap) -> Bytes {
    let data = serde_json::to_string(gap).unwrap_or_default();
    encode(&Frame::data(data).with_id(id.to_string()).with_event("gap"))
}

/// The last frame of a stream whose token expired: `event: token_expired`; the client
/// reconnects (by `Last-Event-ID`) with a fresh token.
pub fn token_expired() -> Bytes {
    encode(&Frame::data(r#"{"reason":"token_expired"}"#).with_event("token_expired"))
}

/// The `: heartbeat <time>` comment that keeps an idle stream (and its proxies) open.
pub fn heartbeat(now: Timestamp) -> Bytes {
    encode(&Frame::comment(format!("heartbeat {now}")))
}

/// A frame carrying only a reconnection delay.
pub fn retry(delay: std::time::Duration) -> Bytes {
    encode(&Frame::retry(
        u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
    ))
}

#[derive(Serialize)]
struct DeletedData<'a> {
    topic: &'a str,
    reason: &'a str,
    #[serde(serialize_with = "rfc3339")]
    time: Timestamp,
}

/// A `deleted` frame: the stream removed the last message of `topic` and left a subject
/// delete marker (stored at `time`) saying why: `max_age`, `purge` or `remove`.
pub fn deleted(id: EventId, topic: &str, reason: &str, time: Timestamp) -> Bytes {
    let data = serde_json::to_string(&DeletedData {
        topic,
        reason,
        time,
    })
    .unwrap_or_default();
    encode(
        &Frame::data(data)
            .with_id(id.to_string())
            .with_event("deleted"),
    )
}

#[derive(Serialize)]
struct MessageData<'a> {
    topic: &'a str,
    payload: Payload<'a>,
    /// RFC 3339, e.g. `2026-11-29T19:07:50.123456789Z`.
    #[serde(serialize_with = "rfc3339")]
    time: Timestamp,
}

fn rfc3339<S: serde::Serializer>(time: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(time)
}

#[derive(Serialize)]
#[serde(untagged)]
enum Payload<'a> {
    Json(&'a RawValue),
    Text(std::borrow::Cow<'a, str>),
}

/// A message frame of event type `event` (`sse.event_type`, `message` by default). The payload
/// is embedded as JSON when it is a JSON document, otherwise as a string (invalid UTF-8
/// replaced by U+FFFD).
pub fn message(id: EventId, event: &str, topic: &str, payload: &[u8], time: Timestamp) -> Bytes {
    let payload = match serde_json::from_slice::<&RawValue>(payload) {
        Ok(raw) => Payload::Json(raw),
        Err(_) => Payload::Text(String::from_utf8_lossy(payload)),
    };
    let data = serde_json::to_string(&MessageData {
        topic,
        payload,
        time,
    })
    .unwrap_or_default();
    encode(&Frame::data(data).with_id(id.to_string()).with_event(event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sse::Parser;

    fn parse(bytes: &Bytes) -> Frame {
        let mut frames = Parser::new().feed(bytes).expect("strict parse");
        assert_eq!(frames.len(), 1);
        frames.remove(0)
    }

    #[test]
    fn json_payloads_are_embedded_and_text_is_a_string() {
        let time = Timestamp::UNIX_EPOCH;
        let id = EventId {
            seq: 3,
            incarnation: Some(1),
        };
        let frame = parse(&message(id, "message", "a.b", b"{\"x\":\n[1,2]}", time));
        assert_eq!(frame.id.as_deref(), Some("3-1"));
        assert_eq!(frame.event.as_deref(), Some("message"));
        let data: serde_json::Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        assert_eq!(data["payload"], serde_json::json!({"x": [1, 2]}));
        assert_eq!(data["time"], "1970-01-01T00:00:00Z");

        let hostile = b"line1\n\nevent: evil\r\ndata: x";
        let frame = parse(&message(id, "message", "a", hostile, time));
        let data: serde_json::Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        assert_eq!(data["payload"], String::from_utf8_lossy(hostile).as_ref());
        assert_eq!(frame.event.as_deref(), Some("message"));
    }

    #[test]
    fn gap_frames_name_reason_and_range() {
        let frame = parse(&gap(
            EventId {
                seq: 9,
                incarnation: Some(2),
            },
            &Gap::range(GapReason::Expired, 4, 9),
        ));
        assert_eq!(frame.event.as_deref(), Some("gap"));
        assert_eq!(
            frame.data.as_deref(),
            Some(r#"{"reason":"expired","from":4,"to":9}"#)
        );
    }
}
