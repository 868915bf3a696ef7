//! How the readers of a feed see the stream: which of the entries its filters match they get,
//! and as what frames. `/events` feeds have no view of their own (they get the entries as the
//! [`Encoder`](super::Encoder) made them); a protocol whose frames are not `/events` frames
//! (Mercure) gives each of its feeds a view that encodes its messages once for every reader.

use bytes::Bytes;

use super::ring::Entry;
use super::ring::Routed;
use crate::event_id::EventId;
use crate::frames::Gap;

/// A feed's own way of selecting and encoding entries. It runs once per entry per feed (in
/// the dispatch, or for a reader catching up), never once per connection.
pub trait View: Send + Sync + std::fmt::Debug {
    /// What tells this view apart from others over the same filters: feeds are shared by
    /// connections with equal filters and equal view keys. Made on demand: the fan-out keeps
    /// the one copy.
    fn key(&self) -> Box<str>;

    /// The entry this feed's readers get for `routed` (a message its filters match, or
    /// positions the stream cannot deliver), or `None` when it is not for them.
    fn entry(&self, routed: &Routed) -> Option<Entry>;

    /// The frame for a gap a session finds itself (backlog skipped by `replay.window`).
    fn gap(&self, id: EventId, gap: &Gap) -> Bytes;
}
