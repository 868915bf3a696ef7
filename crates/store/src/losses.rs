//! The positions a stream knows it cannot deliver, and why, kept in `msgs/lost.db` (the
//! sidecar form, [`crate::sidecar`]).
//!
//! Two kinds, told to readers differently:
//! - **damaged**: sequences recovery proved existed (records beyond damage, markers, a torn
//!   record's header) whose records could not be read. Every reader whose range covers one is
//!   told, whatever its filter: a damaged record's subject cannot be read.
//! - **unconfirmed**: sequences above the last intact record up to the sequence lease
//!   ([`crate::lease`]): after a crash or a cut tail they may have been handed out, or never
//!   used. Only a reader resuming from inside them (it holds one of their ids) is told.
//!
//! Unlike the other sidecars this file is not a cache: the evidence of a cut tail is gone
//! once the tail is set aside, so lost.db is written as soon as recovery finds a loss, and a
//! lost.db that does not verify is set aside (never deleted) with a warning.
//!
//! Entries: uvarint lost bytes, then per range `u8 kind` (0 damaged, 1 unconfirmed),
//! `uvarint first`, `uvarint last − first`, ascending per kind.

use std::path::Path;

use crate::decode::{FileDecodeError, MAX_SEQ};
use crate::error::Result;
use crate::fsutil::{Reader, put_uvarint};
use crate::ranges::RangeSet;
use crate::sidecar;

/// The file's name in `msgs/`.
pub const FILE: &str = "lost.db";
/// Version of lost.db.
pub const LOST_VERSION: u8 = 1;

/// Why positions cannot be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossCause {
    /// Records that existed but are damaged or missing.
    Damaged,
    /// Positions between the last intact record and the sequence lease after a crash or a
    /// cut tail: handed out and lost, or never used.
    Unconfirmed,
}

/// A run of positions a reader cannot be given, as a subscription reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// First position.
    pub first: u64,
    /// Last position (inclusive).
    pub last: u64,
    /// Why.
    pub cause: LossCause,
}

/// The lost positions of one stream.
#[derive(Debug, Clone, Default)]
pub struct Losses {
    damaged: RangeSet,
    unconfirmed: RangeSet,
    bytes: u64,
    /// Changed since lost.db was written or read.
    unsaved: bool,
}

impl PartialEq for Losses {
    fn eq(&self, other: &Self) -> bool {
        (&self.damaged, &self.unconfirmed, self.bytes)
            == (&other.damaged, &other.unconfirmed, other.bytes)
    }
}

impl Losses {
    /// Records `first..=last` as lost for `cause`.
    pub fn add(&mut self, cause: LossCause, first: u64, last: u64) {
        self.unsaved = true;
        match cause {
            LossCause::Damaged => self.damaged.insert(first, last),
            LossCause::Unconfirmed => self.unconfirmed.insert(first, last),
        }
    }

    /// Adds to the bytes known lost (damaged records, a cut tail).
    pub fn add_bytes(&mut self, bytes: u64) {
        self.unsaved |= bytes > 0;
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// Changed since lost.db was last written or read.
    pub fn is_unsaved(&self) -> bool {
        self.unsaved
    }

    /// Nothing lost.
    pub fn is_empty(&self) -> bool {
        self.damaged.ranges_len() == 0 && self.unconfirmed.ranges_len() == 0 && self.bytes == 0
    }

    /// Damaged sequences.
    pub fn damaged_msgs(&self) -> u64 {
        self.damaged.len()
    }

    /// Bytes lost to damage.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The damaged ranges, ascending.
    pub fn damaged(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.damaged.ranges()
    }

    /// The unconfirmed ranges, ascending.
    pub fn unconfirmed(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.unconfirmed.ranges()
    }

    /// The first damaged run overlapping `[from, upto]`, clipped to it.
    pub fn damaged_in(&self, from: u64, upto: u64) -> Option<Lost> {
        let (first, last) = self.damaged.first_overlapping(from, upto)?;
        Some(Lost {
            first: first.max(from),
            last: last.min(upto),
            cause: LossCause::Damaged,
        })
    }

    /// For a reader that last saw `last_seen`: the rest of the unconfirmed run it is inside of,
    /// up to `upto`.
    pub fn unconfirmed_after(&self, last_seen: u64, upto: u64) -> Option<Lost> {
        let (_, end) = self.unconfirmed.first_overlapping(last_seen, last_seen)?;
        (last_seen < end && last_seen < upto).then(|| Lost {
            first: last_seen + 1,
            last: end.min(upto),
            cause: LossCause::Unconfirmed,
        })
    }

    /// Forgets the runs wholly below `first_seq` (a reader from there is told those positions
    /// are no longer retained); true when lost.db is to be written.
    pub fn forget_below(&mut self, first_seq: u64) -> bool {
        let keep = |set: &RangeSet| {
            RangeSet::from_sorted(set.ranges().filter(|(_, end)| *end >= first_seq).collect())
        };
        let (damaged, unconfirmed) = (keep(&self.damaged), keep(&self.unconfirmed));
        self.unsaved |= damaged != self.damaged || unconfirmed != self.unconfirmed;
        self.damaged = damaged;
        self.unconfirmed = unconfirmed;
        self.unsaved
    }

    /// Encodes lost.db.
    pub fn encode(&self, stamp: u64) -> Vec<u8> {
        let mut body = Vec::new();
        put_uvarint(&mut body, self.bytes);
        let runs = (self.damaged.ranges().map(|r| (0u8, r)))
            .chain(self.unconfirmed.ranges().map(|r| (1u8, r)));
        let mut count = 0;
        for (kind, (first, last)) in runs {
            body.push(kind);
            put_uvarint(&mut body, first);
            put_uvarint(&mut body, last - first);
            count += 1;
        }
        sidecar::encode(LOST_VERSION, count, stamp, &body)
    }

    /// Decodes lost.db; the error names what is wrong.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, FileDecodeError> {
        let s = sidecar::decode(bytes, LOST_VERSION)?;
        let n = s.entry_count(3)?;
        let mut r = Reader::new(s.body);
        let mut losses = Losses {
            bytes: r
                .uvarint()
                .ok_or(FileDecodeError::Malformed("lost bytes"))?,
            ..Losses::default()
        };
        for _ in 0..n {
            let malformed = FileDecodeError::Malformed("entry");
            let kind = r.u8().ok_or(malformed.clone())?;
            let first = r.uvarint().ok_or(malformed.clone())?;
            let len = r.uvarint().ok_or(malformed)?;
            let last = first
                .checked_add(len)
                .filter(|last| *last <= MAX_SEQ)
                .ok_or(FileDecodeError::PastHighestSequence {
                    what: "lost run from",
                    seq: first,
                })?;
            let cause = match kind {
                0 => LossCause::Damaged,
                1 => LossCause::Unconfirmed,
                other => return Err(FileDecodeError::LossKind(other)),
            };
            losses.add(cause, first, last);
        }
        losses.unsaved = false;
        Ok(losses)
    }

    /// Writes lost.db atomically.
    pub fn write(&mut self, path: &Path, stamp: u64) -> Result<()> {
        crate::fsutil::atomic_write(path, &self.encode(stamp))?;
        self.unsaved = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// What is written reads back the same; garbage never panics the decoder.
        #[test]
        fn lost_db_round_trips(
            runs in proptest::collection::vec((any::<bool>(), 0u64..1000, 0u64..20), 0..12),
            bytes in any::<u64>(),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
            first_of_forged in any::<u64>(),
        ) {
            let mut losses = Losses::default();
            for (damaged, first, len) in runs {
                let cause = if damaged { LossCause::Damaged } else { LossCause::Unconfirmed };
                losses.add(cause, first, first + len);
            }
            losses.add_bytes(bytes);
            prop_assert_eq!(Losses::decode(&losses.encode(7)), Ok(losses));
            let _ = Losses::decode(&junk);
            let mut forged = Losses::default();
            forged.add(LossCause::Damaged, first_of_forged, u64::MAX);
            prop_assert!(Losses::decode(&forged.encode(7)).is_err());
        }
    }

    #[test]
    fn damaged_runs_are_clipped_to_the_range_asked_for() {
        let mut losses = Losses::default();
        losses.add(LossCause::Damaged, 5, 9);
        let lost = |first, last| Lost {
            first,
            last,
            cause: LossCause::Damaged,
        };
        assert_eq!(losses.damaged_in(1, 4), None);
        assert_eq!(losses.damaged_in(1, 6), Some(lost(5, 6)));
        assert_eq!(losses.damaged_in(7, 20), Some(lost(7, 9)));
        assert_eq!(losses.damaged_in(10, 20), None);
    }

    #[test]
    fn only_a_reader_inside_an_unconfirmed_run_is_told() {
        let mut losses = Losses::default();
        losses.add(LossCause::Unconfirmed, 8, 100);
        // The last intact record is 7: a reader that saw it resumes cleanly.
        assert_eq!(losses.unconfirmed_after(7, 200), None);
        let inside = losses.unconfirmed_after(10, 200).unwrap();
        assert_eq!((inside.first, inside.last), (11, 100));
        assert_eq!(losses.unconfirmed_after(100, 200), None);
    }
}
