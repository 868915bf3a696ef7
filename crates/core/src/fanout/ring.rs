//! A bounded ring of stream positions in order: the encoded frames of one topic set, or (in the
//! dispatch) the recent entries of every topic with their subjects.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use jiff::Timestamp;

use sluice_backend::BackendMessage;
use sluice_protocol::subject::{FilterSet, is_literal};

use crate::frames::GapReason;

/// What an entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A message frame.
    Message,
    /// A `gap` frame replacing a message larger than `sse.max_event_size`.
    TooLarge,
    /// A `deleted` frame: a subject delete marker, told as the removal of its topic's value.
    Deleted,
    /// A `gap` frame for positions that cannot be delivered, and why: expired (removed
    /// from the stream's front) or removed (messages of the topic set deleted or purged)
    /// before they could be read, damaged, or unconfirmed.
    Lost(GapReason),
}

impl EntryKind {
    /// A `gap` frame for positions that cannot be delivered.
    pub fn is_lost(self) -> bool {
        matches!(self, Self::Lost(_))
    }
}

/// One encoded frame for one stream message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The message's sequence.
    pub seq: u64,
    /// When the stream stored it (for `replay.window`).
    pub time: Timestamp,
    /// Message or oversized placeholder.
    pub kind: EntryKind,
    /// The frame, encoded once and shared by every connection.
    pub frame: Bytes,
}

/// What a reader finds at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The first entry at or after the position.
    Entry(Entry),
    /// Nothing yet: every sequence up to the feed's position has been seen.
    Wait,
    /// The position is older than what the ring still holds.
    Behind,
}

/// What a ring holds: something at one stream position.
pub trait Positioned {
    /// The stream position (the last one, for a range).
    fn seq(&self) -> u64;

    /// The bytes it owns on the heap beyond its slot in the ring. A frame shared with other
    /// rings is counted in each of them.
    fn heap_bytes(&self) -> usize;
}

impl Positioned for Entry {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn heap_bytes(&self) -> usize {
        self.frame.len()
    }
}

/// Items covering every matching sequence in `low..high`.
#[derive(Debug)]
pub struct Ring<T = Entry> {
    entries: VecDeque<T>,
    capacity: usize,
    low: u64,
    high: u64,
    /// What the items own on the heap, summed ([`Positioned::heap_bytes`]).
    heap: usize,
}

impl<T: Positioned> Ring<T> {
    /// An empty ring whose coverage starts at `start`. Nothing is allocated until items come:
    /// a topic set that receives nothing costs only the ring itself.
    pub fn new(capacity: usize, start: u64) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            low: start,
            high: start,
            heap: 0,
        }
    }

    /// The bytes the ring keeps: its slots, filled or not, and what the items own.
    pub fn bytes(&self) -> usize {
        self.entries.capacity() * size_of::<T>() + self.heap
    }

    /// The position of the oldest item, if any.
    pub fn oldest(&self) -> Option<u64> {
        self.entries.front().map(Positioned::seq)
    }

    /// The oldest position still covered.
    pub fn low(&self) -> u64 {
        self.low
    }

    /// The next position the feed expects: everything before it has been seen.
    pub fn high(&self) -> u64 {
        self.high
    }

    /// Appends an item, evicting the oldest one when full; nothing is added for a position
    /// already covered. Items arrive in order. Returns how much the ring's bytes changed.
    pub fn push(&mut self, item: T) -> isize {
        if item.seq() < self.high {
            return 0;
        }
        let before = self.bytes();
        if self.entries.len() == self.capacity {
            self.evict_oldest();
        }
        self.high = item.seq() + 1;
        self.heap += item.heap_bytes();
        self.entries.push_back(item);
        self.bytes() as isize - before as isize
    }

    /// Drops the oldest item, so the ring covers only what comes after it, and gives back
    /// slots once fewer than a quarter of them are filled (all of them when none is); the
    /// bytes that freed (0 when the ring is empty).
    pub fn evict_oldest(&mut self) -> usize {
        let before = self.bytes();
        let Some(evicted) = self.entries.pop_front() else {
            return 0;
        };
        self.low = evicted.seq() + 1;
        self.heap -= evicted.heap_bytes();
        if self.entries.is_empty() {
            self.entries = VecDeque::new();
        } else if self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to(self.entries.capacity() / 2);
        }
        before - self.bytes()
    }

    /// Records that every sequence before `next` has been seen without adding an item.
    pub fn advance(&mut self, next: u64) {
        self.high = self.high.max(next);
    }

    /// The items at or after `from`, in order.
    pub fn from(&self, from: u64) -> impl Iterator<Item = &T> {
        self.entries.range(self.index_of(from)..)
    }

    /// Where the items at or after `from` begin. A reader is mostly at the live end, past
    /// every item or at the newest one: both are found without a search of the whole ring
    /// (a full ring is thousands of items, and a session reads after every delivery).
    fn index_of(&self, from: u64) -> usize {
        let len = self.entries.len();
        match self.entries.back() {
            None => return 0,
            Some(newest) if newest.seq() < from => return len,
            Some(_) => {}
        }
        if len < 2 || self.entries[len - 2].seq() < from {
            return len - 1;
        }
        self.entries.partition_point(|e| e.seq() < from)
    }
}

impl Ring<Entry> {
    /// The first entry at or after `from`.
    pub fn read(&self, from: u64) -> Read {
        if from < self.low {
            return Read::Behind;
        }
        match self.from(from).next() {
            Some(entry) => Read::Entry(entry.clone()),
            None => Read::Wait,
        }
    }
}

/// Which topic sets an entry concerns: what the dispatch routes it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Those whose filters match this subject: a message's.
    Subject(Box<str>),
    /// Those whose filters match one of these subjects, or overlap one of these subject
    /// filters: removed messages' (a JetStream purge of a filter names the filter).
    Subjects(Box<[Box<str>]>),
    /// Every topic set: positions any of them may have held (expired, damaged, unconfirmed,
    /// or removed messages whose subjects are not known).
    Everyone,
}

impl Audience {
    /// Whether the entry concerns the topic set `filters`.
    pub fn concerns(&self, filters: &FilterSet) -> bool {
        match self {
            Self::Subject(subject) => filters.matches(subject),
            Self::Subjects(subjects) => subjects.iter().any(|s| concerns(filters, s)),
            Self::Everyone => true,
        }
    }
}

/// Whether `subject` — a subject, or a subject filter — concerns the topic set `filters`.
pub fn concerns(filters: &FilterSet, subject: &str) -> bool {
    if is_literal(subject) {
        filters.matches(subject)
    } else {
        filters.overlaps(subject)
    }
}

/// An entry with the topic sets the dispatch routes it to.
#[derive(Debug, Clone)]
pub struct Routed {
    /// The entry.
    pub entry: Entry,
    /// The topic sets it concerns.
    pub audience: Audience,
    /// The message itself, for the subjects whose feeds encode it through their own
    /// [`View`](super::View) ([`Encoder::view_prefix`](super::Encoder::view_prefix)); `None` for every other entry.
    pub message: Option<Arc<BackendMessage>>,
}

impl Audience {
    /// The bytes its subjects keep on the heap.
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Subject(subject) => subject.len(),
            Self::Subjects(subjects) => subjects
                .iter()
                .map(|subject| size_of_val(subject) + subject.len())
                .sum(),
            Self::Everyone => 0,
        }
    }
}

impl Positioned for Routed {
    fn seq(&self) -> u64 {
        self.entry.seq
    }

    fn heap_bytes(&self) -> usize {
        let message = self.message.as_deref().map_or(0, |message| {
            size_of_val(message)
                + message.subject.len()
                + message.headers.encoded_len()
                + message.payload.len()
        });
        self.entry.frame.len() + self.audience.heap_bytes() + message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(seq: u64) -> Entry {
        Entry {
            seq,
            time: Timestamp::UNIX_EPOCH,
            kind: EntryKind::Message,
            frame: Bytes::from(seq.to_string()),
        }
    }

    #[test]
    fn evicts_oldest_and_reports_behind() {
        let mut ring = Ring::new(2, 1);
        for seq in [1, 3, 5] {
            ring.push(entry(seq));
        }
        assert_eq!(ring.low(), 2);
        assert_eq!(ring.read(1), Read::Behind);
        assert_eq!(ring.read(2), Read::Entry(entry(3)));
        assert_eq!(ring.read(4), Read::Entry(entry(5)));
        assert_eq!(ring.read(6), Read::Wait);
        ring.advance(9);
        assert_eq!(ring.high(), 9);
    }

    proptest! {
        /// A reader walking the ring from any covered position sees exactly the pushed entries
        /// after it, in order: nothing skipped, nothing twice, however many entries were
        /// evicted to free memory; and the ring's bytes are always its slots and what its
        /// entries own.
        #[test]
        fn readers_see_every_covered_entry_once(
            steps in proptest::collection::vec((1u64..4, 0usize..3), 1..60),
            capacity in 1usize..20,
            from_offset in 0u64..100,
            seen_beyond in 0u64..3,
        ) {
            let mut ring = Ring::new(capacity, 1);
            let mut seq = 0;
            let mut pushed = Vec::new();
            for (gap, evictions) in steps {
                seq += gap;
                ring.push(entry(seq));
                pushed.push(seq);
                for _ in 0..evictions / 2 {
                    ring.evict_oldest();
                }
                let owned: usize = ring.from(0).map(Positioned::heap_bytes).sum();
                let slots = ring.entries.capacity() * size_of::<Entry>();
                prop_assert_eq!(ring.bytes(), slots + owned);
            }
            // Positions after the newest entry that held nothing for this ring.
            ring.advance(seq + 1 + seen_beyond);
            let from = ring.low() + from_offset % (ring.high() - ring.low() + 1);
            let mut next = from;
            let mut seen = Vec::new();
            while let Read::Entry(e) = ring.read(next) {
                seen.push(e.seq);
                next = e.seq + 1;
            }
            let expected: Vec<u64> = pushed.into_iter().filter(|s| *s >= from).collect();
            prop_assert_eq!(seen, expected);
        }
    }
}
