//! The in-memory index of a stream: every live message's location and subject, a per-subject
//! index of sequences for filtered reads, and per-block counters.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::block::Loc;
use crate::proto::{self, FilterSet};
use crate::record::flags;

/// One live message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgMeta {
    /// Its subject (shared with the subject index).
    pub subject: Arc<str>,
    /// Store time, ns since the epoch.
    pub ts: i64,
    /// Where its record lives.
    pub loc: Loc,
    /// Record flags.
    pub flags: u8,
}

/// Counters of one block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Live messages.
    pub msgs: u64,
    /// Bytes of live messages' records.
    pub bytes: u64,
    /// Lowest and highest message sequence ever written to the block (0 when none).
    pub first: u64,
    /// See `first`.
    pub last: u64,
    /// Messages written with a TTL (live or not).
    pub ttl: u32,
    /// Messages written with a schedule.
    pub sched: u32,
    /// Sourced messages written.
    pub sourced: u32,
    /// Tombstones, purge and last-sequence markers written.
    pub markers: u32,
}

/// The stream's message table.
#[derive(Debug, Default)]
pub struct Table {
    /// Live messages by sequence. Sparse on purpose: interior deletes leave no slots behind,
    /// so memory follows the live messages, never the sequence range (a stream — or a damaged
    /// index.db — with messages at 1 and 10^12 costs two entries).
    msgs: BTreeMap<u64, MsgMeta>,
    /// Last sequence ever assigned.
    pub last_seq: u64,
    /// Time of the last assigned sequence.
    pub last_ts: i64,
    count: u64,
    bytes: u64,
    subjects: HashMap<Arc<str>, BTreeSet<u64>>,
    /// Per-block counters.
    pub blocks: BTreeMap<u32, BlockStats>,
}

impl Table {
    /// Live messages.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Bytes of live messages.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// First live sequence, or `last_seq + 1` when empty.
    pub fn first_seq(&self) -> u64 {
        self.msgs
            .keys()
            .next()
            .map_or(self.last_seq + 1, |seq| *seq)
    }

    /// A live message.
    pub fn get(&self, seq: u64) -> Option<&MsgMeta> {
        self.msgs.get(&seq)
    }

    /// Records a marker written to `block`.
    pub fn note_marker(&mut self, block: u32) {
        self.blocks.entry(block).or_default().markers += 1;
    }

    /// Raises the last sequence (from a marker or tombstone).
    pub fn raise_last(&mut self, seq: u64) {
        self.last_seq = self.last_seq.max(seq);
    }

    /// Adds a message with a sequence above every earlier one.
    pub fn insert(&mut self, seq: u64, meta: MsgMeta) {
        debug_assert!(seq > self.last_seq || self.get(seq).is_none());
        let stats = self.blocks.entry(meta.loc.block).or_default();
        stats.msgs += 1;
        stats.bytes += meta.loc.len as u64;
        if stats.first == 0 {
            stats.first = seq;
        }
        stats.last = stats.last.max(seq);
        stats.ttl += u32::from(meta.flags & flags::TTL != 0);
        stats.sched += u32::from(meta.flags & flags::SCHEDULE != 0);
        stats.sourced += u32::from(meta.flags & flags::SOURCED != 0);
        self.count += 1;
        self.bytes += meta.loc.len as u64;
        self.subjects
            .entry(meta.subject.clone())
            .or_default()
            .insert(seq);
        self.last_seq = self.last_seq.max(seq);
        self.last_ts = self.last_ts.max(meta.ts);
        self.msgs.insert(seq, meta);
    }

    /// Removes a live message; returns it.
    pub fn remove(&mut self, seq: u64) -> Option<MsgMeta> {
        let meta = self.msgs.remove(&seq)?;
        self.count -= 1;
        self.bytes -= meta.loc.len as u64;
        if let Some(stats) = self.blocks.get_mut(&meta.loc.block) {
            stats.msgs -= 1;
            stats.bytes -= meta.loc.len as u64;
        }
        if let Some(set) = self.subjects.get_mut(&meta.subject) {
            set.remove(&seq);
            if set.is_empty() {
                self.subjects.remove(&meta.subject);
            }
        }
        Some(meta)
    }

    /// Live sequences in `[from, to]`, ascending.
    pub fn seqs_in(&self, from: u64, to: u64) -> impl Iterator<Item = u64> + '_ {
        self.msgs
            .range(from..)
            .map(|(seq, _)| *seq)
            .take_while(move |seq| *seq <= to)
    }

    /// The shared copy of `subject` (allocated only for a subject with no live message).
    pub fn intern(&self, subject: &str) -> Arc<str> {
        self.subjects
            .get_key_value(subject)
            .map_or_else(|| Arc::from(subject), |(k, _)| k.clone())
    }

    /// Distinct subjects with live messages.
    pub fn num_subjects(&self) -> u64 {
        self.subjects.len() as u64
    }

    /// Number of live messages on a subject.
    pub fn subject_count(&self, subject: &str) -> u64 {
        self.subjects.get(subject).map_or(0, |s| s.len() as u64)
    }

    /// Live sequences on one literal subject, ascending.
    pub fn subject_seqs(&self, subject: &str) -> impl Iterator<Item = u64> + '_ {
        self.subjects
            .get(subject)
            .into_iter()
            .flat_map(|s| s.iter().copied())
    }

    /// The last live sequence on a subject at or below `upto`.
    pub fn last_for_subject(&self, subject: &str, upto: u64) -> Option<u64> {
        self.subjects
            .get(subject)?
            .range(..=upto)
            .next_back()
            .copied()
    }

    /// Subjects (all, or those matching `filter`) with their live counts.
    pub fn subject_counts(&self, filter: Option<&FilterSet>) -> BTreeMap<String, u64> {
        self.subjects
            .iter()
            .filter(|(s, _)| filter.is_none_or(|f| f.matches(s)))
            .map(|(s, set)| (s.to_string(), set.len() as u64))
            .collect()
    }

    /// The first live sequence in `[from, upto]` whose subject matches `filter`, found through
    /// the per-subject index: a literal filter is one range lookup; a wildcard walks at most as
    /// many messages as there are subjects, then does one lookup per matching subject.
    pub fn next_matching(&self, from: u64, upto: u64, filter: &FilterSet) -> Option<u64> {
        if from > upto {
            return None;
        }
        if proto::matches_everything(filter) {
            return self.seqs_in(from, upto).next();
        }
        if let Some(subject) = proto::literal(filter) {
            return self
                .subjects
                .get(subject)?
                .range(from..=upto)
                .next()
                .copied();
        }
        // Walking the messages costs the distance to the next match, asking every matching
        // subject costs the number of subjects: walk up to that many steps, then ask.
        let budget = self.subjects.len();
        for (step, (seq, m)) in self.msgs.range(from..=upto).enumerate() {
            if step >= budget {
                return self
                    .subjects
                    .iter()
                    .filter(|(s, _)| filter.matches(s))
                    .filter_map(|(_, set)| set.range(*seq..=upto).next().copied())
                    .min();
            }
            if filter.matches(&m.subject) {
                return Some(*seq);
            }
        }
        None
    }

    /// The first live sequence whose time is at or after `ts` (`last_seq + 1` when none).
    /// Times never decrease with sequences, so this is a binary search over the sequence range.
    pub fn first_at_or_after(&self, ts: i64) -> u64 {
        let reaches = |from: u64| {
            self.msgs
                .range(from..)
                .next()
                .is_none_or(|(_, m)| m.ts >= ts)
        };
        let (mut lo, mut hi) = (self.first_seq(), self.last_seq + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if reaches(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.msgs
            .range(lo..)
            .next()
            .map_or(self.last_seq + 1, |(s, _)| *s)
    }

    /// Blocks that hold no live message, no marker and are not `active`: safe to remove.
    /// Leading blocks with no live message may also go: their markers only concern
    /// sequences at or below their own.
    pub fn removable_blocks(&self, active: Option<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut leading = true;
        for (&id, stats) in &self.blocks {
            if Some(id) == active {
                break;
            }
            if stats.msgs == 0 && (leading || stats.markers == 0) {
                out.push(id);
            } else {
                leading = false;
            }
        }
        out
    }

    /// Forgets a removed block's counters.
    pub fn drop_block(&mut self, id: u32) {
        self.blocks.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::block::Loc;

    fn table(subjects: &[(u64, String)]) -> Table {
        let mut t = Table::default();
        for (i, (gap, subject)) in subjects.iter().enumerate() {
            let seq = t.last_seq + 1 + gap;
            t.insert(
                seq,
                MsgMeta {
                    subject: Arc::from(subject.as_str()),
                    ts: i as i64,
                    loc: Loc {
                        block: 1,
                        offset: 0,
                        len: 1,
                    },
                    flags: 0,
                },
            );
        }
        t
    }

    proptest! {
        /// Whether it walks messages or asks subjects, the answer is the first match; the time
        /// search finds the first message at or after a time.
        #[test]
        fn next_matching_and_time_search_agree_with_a_walk(
            msgs in proptest::collection::vec((0u64..3, "[a-c]\\.[a-e]"), 0..60),
            filter in prop_oneof![Just("a.*"), Just("*.e"), Just("b.>"), Just("c.d"), Just(">")],
            from in 0u64..80,
            ts in -1i64..62,
        ) {
            let t = table(&msgs);
            let f = FilterSet::new([filter]).unwrap();
            let want = t.msgs.range(from..).find(|(_, m)| f.matches(&m.subject)).map(|(s, _)| *s);
            prop_assert_eq!(t.next_matching(from, t.last_seq, &f), want);
            let want = t.msgs.iter().find(|(_, m)| m.ts >= ts).map_or(t.last_seq + 1, |(s, _)| *s);
            prop_assert_eq!(t.first_at_or_after(ts), want);
        }
    }
}
