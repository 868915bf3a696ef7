//! One Mercure feed's view of the stream: for every stored update its subject filters let
//! through, decode it, match it against the feed's selector set and receive grants, and encode
//! its frame — once per feed, shared by every connection of the feed.
//!
//! Frames: `id:` the update's id (its custom id, or the hub-made `#<seq>-<incarnation>`),
//! `event:` its type, `retry:` when given, `data:` its data line by line. Positions the stream
//! cannot deliver, and updates larger than `sse.max_event_size`, become `event: gap` frames
//! (with a hub-made id) for connections that asked for them (`sluice_gaps=1`), and `: gap …`
//! comments, which an `EventSource` ignores, for the others.

use std::sync::Arc;

use bytes::Bytes;
use sluice_mercure::mapping::hub_id;
use sluice_mercure::{Grants, Scheme, SelectorSet, Update};
use sluice_sse::{Frame, Parser};

use sluice_core::event_id::EventId;
use sluice_core::fanout::{Entry, EntryKind, Routed, View};
use sluice_core::frames::{Gap, GapReason};

/// A Mercure feed's selection and encoding.
#[derive(Debug)]
pub struct MercureView {
    scheme: Arc<Scheme>,
    set: SelectorSet,
    grants: Arc<Grants>,
    gaps: bool,
    incarnation: u64,
    max_event_size: usize,
}

impl MercureView {
    /// The view of subscribers asking for `set`, holding `grants` (none: anonymous), for the
    /// stream incarnation `incarnation`; `gaps` when they asked for `gap` events.
    pub fn new(
        scheme: Arc<Scheme>,
        set: SelectorSet,
        grants: Arc<Grants>,
        gaps: bool,
        incarnation: u64,
        max_event_size: usize,
    ) -> Self {
        Self {
            scheme,
            set,
            grants,
            gaps,
            incarnation,
            max_event_size,
        }
    }

    /// The update a routed message holds, if it is one this feed's subscribers get.
    fn selected(&self, routed: &Routed) -> Option<Update> {
        let message = routed.message.as_ref()?;
        let headers = message.headers.iter();
        let update = match self
            .scheme
            .decode(&message.subject, headers, &message.payload)
        {
            Ok(update) => update,
            Err(err) => {
                // Written by something else (a raw publish before the prefix was reserved), or
                // damaged: never a Mercure update.
                tracing::debug!(seq = message.seq, error = %err, "not a Mercure update; skipped");
                return None;
            }
        };
        let topics = update.topic_refs();
        (self.set.matches_any(&topics) && self.grants.can_receive(&update)).then_some(update)
    }

    /// The frame of `update` stored at `seq`, or `None` when it cannot be encoded.
    fn frame(&self, update: &Update, seq: u64) -> Option<Bytes> {
        let id = update
            .id
            .clone()
            .unwrap_or_else(|| hub_id(self.position(seq)));
        let mut frame = Frame::data(update.data.as_str()).with_id(id);
        if let Some(event_type) = &update.event_type {
            frame = frame.with_event(event_type.as_str());
        }
        if let Some(retry) = update.retry {
            frame = frame.with_retry(retry);
        }
        // The form refuses line breaks in ids and types, so this does not fail.
        frame.encode().ok()
    }

    fn position(&self, seq: u64) -> EventId {
        EventId {
            seq,
            incarnation: Some(self.incarnation),
        }
    }

    /// A gap as this feed's subscribers see it: an `event: gap` frame whose id resumes after
    /// it, or a comment.
    fn gap_frame(&self, id: EventId, data: &str) -> Bytes {
        let frame = if self.gaps {
            Frame::data(data).with_id(hub_id(id)).with_event("gap")
        } else {
            Frame::comment(format!("gap {data}"))
        };
        frame.encode().unwrap_or_default()
    }
}

impl View for MercureView {
    fn key(&self) -> Box<str> {
        // Each selector as `[kind, text]`, the kind as its number: the fan-out keeps the key
        // as long as the feed lives, so it is kept short (and this view keeps no copy).
        let pairs = |pairs: Vec<(sluice_mercure::SelectorKind, &str)>| -> Vec<(u8, String)> {
            pairs
                .into_iter()
                .map(|(kind, text)| (kind as u8, text.to_owned()))
                .collect()
        };
        // The selectors are distinct and in key order: their pairs are the set's key.
        let selectors = pairs(
            self.set
                .selectors()
                .iter()
                .map(|s| (s.kind(), s.as_str()))
                .collect(),
        );
        // JSON keeps the parts apart whatever the selectors hold.
        serde_json::json!([
            u8::from(self.gaps),
            selectors,
            pairs(self.grants.receive_key())
        ])
        .to_string()
        .into_boxed_str()
    }

    fn entry(&self, routed: &Routed) -> Option<Entry> {
        let entry = &routed.entry;
        if let EntryKind::Lost(_) = entry.kind {
            // The `/events` gap frame of these positions: the same data, under this view's id.
            let data = Parser::new()
                .feed(&entry.frame)
                .ok()
                .and_then(|frames| frames.into_iter().next())
                .and_then(|frame| frame.data)
                .unwrap_or_default();
            return Some(Entry {
                frame: self.gap_frame(self.position(entry.seq), &data),
                ..entry.clone()
            });
        }
        let update = self.selected(routed)?;
        let frame = self
            .frame(&update, entry.seq)
            .filter(|frame| frame.len() <= self.max_event_size);
        let (kind, frame) = match frame {
            Some(frame) => (EntryKind::Message, frame),
            None => {
                let mut gap = Gap::range(GapReason::TooLarge, entry.seq, entry.seq);
                gap.topic = update.topics.first().cloned();
                gap.size = Some(update.data.len());
                let data = serde_json::to_string(&gap).unwrap_or_default();
                (
                    EntryKind::TooLarge,
                    self.gap_frame(self.position(entry.seq), &data),
                )
            }
        };
        Some(Entry {
            seq: entry.seq,
            time: entry.time,
            kind,
            frame,
        })
    }

    fn gap(&self, id: EventId, gap: &Gap) -> Bytes {
        self.gap_frame(id, &serde_json::to_string(gap).unwrap_or_default())
    }
}
