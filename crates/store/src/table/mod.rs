//! The in-memory index of a stream, two levels deep: per block its counters, its deleted
//! sequences and — once first needed — its live messages; per subject its live count and the
//! blocks that may hold it. A stream opened from index.db starts with no block read, so open
//! costs O(blocks + subjects), and each query reads only the blocks it needs
//! ([`Table::blocks_loaded`] counts them). Read blocks stay in memory until the loaded ones
//! hold more messages than the stream's budget: then the least recently used sealed blocks
//! let go of theirs ([`Table::unload_idle`]) and are read again on next need.

mod block_entry;
mod load;
mod msg_meta;
mod recent;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use block_entry::{BlockEntry, BlockStats, Unread};
pub use msg_meta::MsgMeta;

use crate::block::Loc;
use crate::error::Result;
use crate::losses::{LossCause, Losses, Lost};
use crate::proto::{self, FilterSet};
use crate::removals::{Removals, Removed};
use crate::time::monotonic_ms;
use crate::types::LostState;

/// A subject's live count and the blocks that may hold it: no block outside
/// `[first_block, last_block]` does; blocks inside may not (bounds are tightened by reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubjectSummary {
    /// Live messages on the subject.
    pub count: u64,
    /// Lowest block that may hold it.
    pub first_block: u32,
    /// Highest block that may hold it.
    pub last_block: u32,
    /// Its last live sequence, when known (0: not known — a table opened from index.db
    /// learns it on first need, [`Table::latest_known`]); not saved.
    pub last_seq: u64,
}

/// The stream's message table.
#[derive(Debug, Default)]
pub struct Table {
    /// Last sequence ever assigned.
    pub last_seq: u64,
    /// Time of the last assigned sequence.
    pub last_ts: i64,
    count: u64,
    bytes: u64,
    blocks: BTreeMap<u32, BlockEntry>,
    /// First message sequence of each block holding (or having held) one → block id.
    starts: BTreeMap<u64, u32>,
    subjects: HashMap<Arc<str>, SubjectSummary>,
    /// Where unread blocks are read from (`None`: every block is in memory).
    msgs_dir: Option<PathBuf>,
    /// The first live message's time, valid while that message is first.
    first_time: Option<(u64, i64)>,
    blocks_loaded: u64,
    /// Counts uses of blocks: each use stamps the block ([`BlockEntry::last_used`]).
    uses: u64,
    /// Bumped whenever the loaded messages may have grown past the budget: a block read, a
    /// block begun; [`Table::unload_idle`] looks only when it moved.
    grown: u64,
    /// `grown` when [`Table::unload_idle`] last looked.
    weighed: u64,
    /// `uses` when [`Table::unload_idle`] last looked: a block used since is in use, and kept.
    used_when_weighed: u64,
    /// When [`Table::unload_idle`] last looked ([`monotonic_ms`]), and whether it left more
    /// than the budget in memory (blocks in use): then it looks again a second later.
    looked: (u64, bool),
    /// Positions known lost (from lost.db and recovery); readers are told of them.
    pub losses: Losses,
    /// Readers that ask for a position below this one that is no longer stored are told it
    /// expired: a limit or a purge removed it. Positions from here up to the first live one
    /// went as their publisher meant (their own TTL, a delete) and are skipped silently. At
    /// most the first live sequence; raised only by removals from the front
    /// ([`Table::raise_expired_below`]).
    pub expired_below: u64,
    /// Positions removed by a delete, a purge of some subjects or the per-subject limit, with
    /// their subjects: readers of those subjects are told of them, others are not.
    pub removals: Removals,
}

/// What a reader finds next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A live message that matches.
    Msg(u64),
    /// Positions that cannot be delivered, before any later match: damaged records recovery
    /// found, or live records of a block that could not be read back.
    Lost(Lost),
    /// Removed positions of the reader's subjects, before any later match.
    Removed(Removed),
}

impl Table {
    /// A table of blocks known from index.db (with ascending, disjoint sequence ranges), none
    /// read yet.
    pub fn unloaded(
        msgs_dir: PathBuf,
        last_seq: u64,
        last_ts: i64,
        blocks: BTreeMap<u32, BlockEntry>,
    ) -> Self {
        // Decoded counters are claims: saturate rather than trust them not to overflow.
        let count = blocks
            .values()
            .fold(0u64, |n, b| n.saturating_add(b.stats.msgs));
        let bytes = blocks
            .values()
            .fold(0u64, |n, b| n.saturating_add(b.stats.bytes));
        let starts = blocks
            .iter()
            .filter(|(_, b)| b.stats.first != 0)
            .map(|(id, b)| (b.stats.first, *id))
            .collect();
        Self {
            last_seq,
            last_ts,
            count,
            bytes,
            blocks,
            starts,
            msgs_dir: Some(msgs_dir),
            ..Self::default()
        }
    }

    /// Adds a subject known from index.db.
    pub fn add_subject(&mut self, subject: &str, summary: SubjectSummary) {
        self.subjects.insert(Arc::from(subject), summary);
    }

    /// Records the first live message's time as index.db gives it (ignored unless `seq` is the
    /// first live sequence).
    pub fn set_first_time(&mut self, seq: u64, ts: i64) {
        if seq != 0 && seq == self.first_seq() {
            self.first_time = Some((seq, ts));
        }
    }

    /// The first live message's time as known without reading, for index.db: `(seq, ts)`.
    pub fn known_first_time(&self) -> Option<(u64, i64)> {
        self.first_time.filter(|(seq, _)| *seq == self.first_seq())
    }

    /// Live messages.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Bytes of live messages.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Blocks read from their files since open.
    pub fn blocks_loaded(&self) -> u64 {
        self.blocks_loaded
    }

    /// Every block with its entry, ascending.
    pub fn blocks(&self) -> impl DoubleEndedIterator<Item = (u32, &BlockEntry)> + '_ {
        self.blocks.iter().map(|(id, b)| (*id, b))
    }

    /// Every subject with its summary.
    pub fn subjects(&self) -> impl Iterator<Item = (&str, &SubjectSummary)> + '_ {
        self.subjects.iter().map(|(s, v)| (&**s, v))
    }

    /// First live sequence, or `last_seq + 1` when empty (no block is read).
    pub fn first_seq(&self) -> u64 {
        self.blocks
            .values()
            .find_map(|b| b.first_live(0))
            .unwrap_or(self.last_seq + 1)
    }

    /// The time of the first live message (reads its block if it is not known).
    pub fn first_time(&mut self) -> Result<Option<i64>> {
        if let Some((_, ts)) = self.known_first_time() {
            return Ok(Some(ts));
        }
        let first = self.first_seq();
        let ts = self.get(first)?.map(|m| m.ts);
        self.first_time = ts.map(|ts| (first, ts));
        Ok(ts)
    }

    /// The block that holds (or held) sequence `seq`.
    fn block_of(&self, seq: u64) -> Option<u32> {
        let (_, &id) = self.starts.range(..=seq).next_back()?;
        self.blocks
            .get(&id)
            .filter(|b| b.stats.last >= seq)
            .map(|_| id)
    }

    /// Whether `seq` is live (no block is read).
    pub fn contains(&self, seq: u64) -> bool {
        self.block_of(seq)
            .is_some_and(|id| self.blocks[&id].is_live(seq))
    }

    /// Reads block `id` if it is not in memory yet; returns its entry.
    fn load(&mut self, id: u32) -> Result<&mut BlockEntry> {
        self.uses += 1;
        let entry = self.blocks.get_mut(&id).expect("load of a known block");
        entry.last_used = self.uses;
        entry.last_used_ms = monotonic_ms();
        if entry.unread.is_some() {
            self.grown += 1;
            let dir = self
                .msgs_dir
                .as_deref()
                .expect("unread blocks have a directory");
            let subjects = &self.subjects;
            let intern = |s: &str| {
                subjects
                    .get_key_value(s)
                    .map_or_else(|| Arc::from(s), |(k, _)| k.clone())
            };
            match load::load(dir, id, entry, intern) {
                Ok(load::Loaded::Read) => {}
                // Not a loss: the block is read again by the next start.
                Ok(load::Loaded::ReadFailed) => return Ok(entry),
                Err(e) => {
                    tracing::error!(block = id, "reading a block failed: {e}");
                    return Err(e);
                }
            }
            self.blocks_loaded += 1;
            // Damage found by reading is remembered (lost.db), like damage recovery finds.
            let mut from = 0;
            while let Some((first, last)) = entry.unreadable_run(from, u64::MAX) {
                self.losses.add(LossCause::Damaged, first, last);
                match last.checked_add(1) {
                    Some(next) => from = next,
                    None => break,
                }
            }
        }
        Ok(entry)
    }

    /// A live message (reads its block on first need); an error if its record is damaged.
    pub fn get(&mut self, seq: u64) -> Result<Option<&MsgMeta>> {
        let Some(id) = self.block_of(seq) else {
            return Ok(None);
        };
        // A block read whole and undamaged answers from its map alone (the reading hot path).
        self.uses += 1;
        let block = self.blocks.get_mut(&id).expect("a block of the table");
        block.last_used = self.uses;
        block.last_used_ms = monotonic_ms();
        if block.unread.is_none() && block.unreadable.ranges_len() == 0 {
            return Ok(self.blocks[&id].msgs.get(&seq));
        }
        if !block.is_live(seq) {
            return Ok(None);
        }
        self.load(id)?;
        self.readable(id, seq)?;
        Ok(self.blocks[&id].msgs.get(&seq))
    }

    /// An error naming `seq` and its block when its record could not be read.
    fn readable(&self, id: u32, seq: u64) -> Result<()> {
        if !self.blocks[&id].is_unreadable(seq) {
            return Ok(());
        }
        let path = self
            .msgs_dir
            .as_deref()
            .map(|d| crate::block::block_path(d, id))
            .unwrap_or_default();
        Err(crate::error::StoreError::Corrupt { seq, path })
    }

    /// What is known lost (lost.db's runs, with the damage found by reading blocks).
    pub fn lost_state(&self) -> LostState {
        let damaged: Vec<(u64, u64)> = self.losses.damaged().collect();
        LostState {
            msgs: self.losses.damaged_msgs(),
            bytes: self.losses.bytes(),
            damaged,
            unconfirmed: self.losses.unconfirmed().collect(),
        }
    }

    /// Records a marker written to `block`.
    pub fn note_marker(&mut self, block: u32) {
        self.blocks.entry(block).or_default().stats.markers += 1;
    }

    /// Raises the last sequence (from a marker or tombstone).
    pub fn raise_last(&mut self, seq: u64) {
        self.last_seq = self.last_seq.max(seq);
    }

    /// Adds a message with a sequence above every earlier one.
    pub fn insert(&mut self, seq: u64, meta: MsgMeta) {
        debug_assert!(seq > self.last_seq || !self.contains(seq));
        let id = meta.loc.block;
        self.count += 1;
        self.bytes += meta.loc.len as u64;
        // Above the stream's last sequence, it is certainly its subject's last one.
        let newest = seq > self.last_seq;
        match self.subjects.get_mut(&meta.subject) {
            Some(s) => {
                s.count += 1;
                s.first_block = s.first_block.min(id);
                s.last_block = s.last_block.max(id);
                if newest || (s.last_seq != 0 && seq > s.last_seq) {
                    s.last_seq = seq;
                }
            }
            None => {
                let summary = SubjectSummary {
                    count: 1,
                    first_block: id,
                    last_block: id,
                    last_seq: seq,
                };
                self.subjects.insert(meta.subject.clone(), summary);
            }
        }
        self.last_seq = self.last_seq.max(seq);
        self.last_ts = self.last_ts.max(meta.ts);
        if self.count == 1 {
            self.first_time = Some((seq, meta.ts));
        }
        // Written, not read: in use until the next look, but not kept for `idle` (readers
        // right behind the writer stamp that).
        self.uses += 1;
        let block = self.blocks.entry(id).or_default();
        block.last_used = self.uses;
        if block.stats.first == 0 {
            self.starts.insert(seq, id);
            self.grown += 1;
        }
        block.add(seq, meta);
    }

    /// Removes a live message (reading its block on first need); returns it.
    pub fn remove(&mut self, seq: u64) -> Result<Option<MsgMeta>> {
        let Some(id) = self.block_of(seq).filter(|id| self.blocks[id].is_live(seq)) else {
            return Ok(None);
        };
        let Some(meta) = self.load(id)?.take(id, seq) else {
            return Ok(None);
        };
        self.count -= 1;
        self.bytes -= meta.loc.len as u64;
        if let Some(s) = self.subjects.get_mut(&meta.subject) {
            s.count -= 1;
            if s.last_seq == seq {
                s.last_seq = 0;
            }
            if s.count == 0 {
                self.subjects.remove(&meta.subject);
            }
        }
        if self.first_time.is_some_and(|(first, _)| first == seq) {
            // Keep the first message's time known when the new first is already in memory.
            let first = self.first_seq();
            self.first_time = self
                .block_of(first)
                .and_then(|b| self.blocks[&b].msgs.get(&first))
                .map(|m| (first, m.ts));
        }
        Ok(Some(meta))
    }

    /// The first block with an id in `ids` that may hold live messages in `[from, upto]`.
    /// Blocks wholly below `from` are skipped by one lookup, so a reader moving forward pays
    /// O(log blocks) per step, not a walk over the blocks behind it.
    fn next_block(&self, ids: (u32, u32), from: u64, upto: u64) -> Option<u32> {
        let below = self
            .starts
            .range(..=from)
            .next_back()
            .map_or(0, |(_, id)| *id);
        let start = below.max(ids.0);
        if start > ids.1 {
            return None;
        }
        self.blocks
            .range(start..=ids.1)
            .find(|(_, b)| b.stats.msgs > 0 && b.stats.last >= from)
            .filter(|(_, b)| b.stats.first <= upto)
            .map(|(id, _)| *id)
    }

    /// True when `seq` falls in the newest block, or after every block.
    fn in_newest_block(&self, seq: u64) -> bool {
        let Some((&newest, _)) = self.blocks.last_key_value() else {
            return true;
        };
        self.starts
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &id)| id >= newest)
    }

    /// The last block with an id in `ids` that may hold live messages at or below `upto`.
    fn prev_block(&self, ids: (u32, u32), upto: u64) -> Option<u32> {
        let (_, &containing) = self.starts.range(..=upto).next_back()?;
        let end = containing.min(ids.1);
        if end < ids.0 {
            return None;
        }
        self.blocks
            .range(ids.0..=end)
            .rev()
            .find(|(_, b)| b.stats.msgs > 0)
            .map(|(id, _)| *id)
    }

    /// Visits live messages in `[from, upto]` in ascending order until `visit` returns false,
    /// reading blocks as it reaches them.
    pub fn walk(
        &mut self,
        from: u64,
        upto: u64,
        mut visit: impl FnMut(u64, &MsgMeta) -> bool,
    ) -> Result<()> {
        let mut lo = 0;
        while let Some(id) = self.next_block((lo, u32::MAX), from, upto) {
            for (seq, m) in self.load(id)?.msgs.range(from..=upto) {
                if !visit(*seq, m) {
                    return Ok(());
                }
            }
            let Some(next) = id.checked_add(1) else { break };
            lo = next;
        }
        Ok(())
    }

    /// Removes every live message without reading a block; returns how many there were.
    pub fn clear(&mut self) -> u64 {
        let n = self.count;
        for b in self.blocks.values_mut().filter(|b| b.stats.msgs > 0) {
            b.clear();
        }
        self.subjects.clear();
        (self.count, self.bytes) = (0, 0);
        self.first_time = None;
        n
    }

    /// Live sequences in `[from, upto]`, ascending (reads every block in the range).
    pub fn seqs_in(&mut self, from: u64, upto: u64) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        self.walk(from, upto, |seq, _| {
            out.push(seq);
            true
        })?;
        Ok(out)
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
        self.subjects.get(subject).map_or(0, |s| s.count)
    }

    /// Subjects (all, or those matching `filter`) with their live counts.
    pub fn subject_counts(&self, filter: Option<&FilterSet>) -> BTreeMap<String, u64> {
        self.subjects
            .iter()
            .filter(|(s, _)| filter.is_none_or(|f| f.matches(s)))
            .map(|(s, v)| (s.to_string(), v.count))
            .collect()
    }

    /// The block range that may hold `subject`.
    fn subject_blocks(&self, subject: &str) -> Option<(u32, u32)> {
        self.subjects
            .get(subject)
            .map(|s| (s.first_block, s.last_block))
    }

    /// Narrows `subject`'s block range when block `id`, read, does not hold it and is one of
    /// the range's ends.
    fn tighten(&mut self, subject: &str, id: u32) {
        if self.blocks[&id].by_subject.contains_key(subject) {
            return;
        }
        if let Some(s) = self.subjects.get_mut(subject) {
            if s.first_block == id && s.first_block < s.last_block {
                s.first_block += 1;
            } else if s.last_block == id && s.first_block < s.last_block {
                s.last_block -= 1;
            }
        }
    }

    /// The first `max` live sequences on one literal subject, ascending.
    pub fn subject_seqs(&mut self, subject: &str, max: usize) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let Some((mut lo, hi)) = self.subject_blocks(subject) else {
            return Ok(out);
        };
        while out.len() < max
            && let Some(id) = self.next_block((lo, hi), 0, u64::MAX)
        {
            if let Some(set) = self.load(id)?.by_subject.get(subject) {
                out.extend(set.iter().take(max - out.len()));
            }
            self.tighten(subject, id);
            let Some(next) = id.checked_add(1) else { break };
            lo = next;
        }
        Ok(out)
    }

    /// The last live sequence on a subject at or below `upto`.
    pub fn last_for_subject(&mut self, subject: &str, upto: u64) -> Result<Option<u64>> {
        let Some((lo, mut hi)) = self.subject_blocks(subject) else {
            return Ok(None);
        };
        while let Some(id) = self.prev_block((lo, hi), upto) {
            let found = self.load(id)?.by_subject.get(subject);
            if let Some(seq) = found.and_then(|set| set.range(..=upto).next_back()) {
                return Ok(Some(*seq));
            }
            self.tighten(subject, id);
            let Some(prev) = id.checked_sub(1) else { break };
            hi = prev;
        }
        Ok(None)
    }

    /// What a reader of `filter` from `from` meets first in `[from, upto]`: the first live
    /// matching message, or positions before it that cannot be delivered (a damaged run, or
    /// unreadable records of a block the filter may match: their subjects cannot be read, so
    /// they are reported whatever the filter), or — with `tell_removed` — removed positions of
    /// the filter's subjects before it ([`Removals::told`]). Only blocks that may hold a
    /// matching subject are read; within a block a literal filter is one range lookup, and a
    /// wildcard walks at most as many messages as the block has subjects, then does one lookup
    /// per matching subject.
    pub fn next_matching(
        &mut self,
        from: u64,
        upto: u64,
        filter: &FilterSet,
        tell_removed: bool,
    ) -> Result<Option<Found>> {
        let damaged = self.losses.damaged_in(from, upto);
        let found = match damaged.filter(|l| l.first == from) {
            Some(lost) => Some(Found::Lost(lost)),
            None => {
                let before_damage = damaged.map_or(upto, |l| l.first - 1);
                self.next_readable(from, before_damage, filter)?
                    .or(damaged.map(Found::Lost))
            }
        };
        if !tell_removed {
            return Ok(found);
        }
        // Removals are told only before what the reader meets next: never across a message
        // it is given.
        let before = match &found {
            Some(Found::Msg(seq)) => seq.checked_sub(1),
            Some(Found::Lost(lost)) => lost.first.checked_sub(1),
            Some(Found::Removed(r)) => r.first.checked_sub(1),
            None => Some(upto),
        };
        let told = before.and_then(|before| self.removals.told(from, before, filter));
        Ok(told.map(Found::Removed).or(found))
    }

    /// Records that `seq`, a message of `subject` (empty: not known), was removed and that
    /// readers of its subject are to be told ([`Table::removals`]).
    pub fn note_removal(&mut self, seq: u64, subject: &Arc<str>) {
        let subject = (!subject.is_empty()).then(|| subject.clone());
        let (blocks, starts) = (&self.blocks, &self.starts);
        self.removals
            .record(seq, subject, |a, b| live_in(blocks, starts, a, b));
    }

    /// Raises [`Table::expired_below`] to `seq`: the removals below it are forgotten, as
    /// every reader is told of those positions.
    pub fn raise_expired_below(&mut self, seq: u64) {
        if seq > self.expired_below {
            self.expired_below = seq;
            self.removals.forget_below(seq);
        }
    }

    /// [`Self::next_matching`] over the blocks alone.
    fn next_readable(&mut self, from: u64, upto: u64, filter: &FilterSet) -> Result<Option<Found>> {
        if from > upto {
            return Ok(None);
        }
        let everything = proto::matches_everything(filter);
        let range = if everything {
            Some((0, u32::MAX))
        } else if let Some(subject) = proto::literal(filter) {
            self.subject_blocks(subject)
        } else if self.subjects.len() > NARROW_WILDCARD_MAX_SUBJECTS || self.in_newest_block(from) {
            // Every read of a wildcard would match every subject, or no later block is left to
            // skip to (a reader following the stream live): walk the blocks instead.
            Some((0, u32::MAX))
        } else {
            self.subjects
                .iter()
                .filter(|(s, _)| filter.matches(s))
                .map(|(_, v)| (v.first_block, v.last_block))
                .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
        };
        let Some((mut lo, hi)) = range else {
            return Ok(None);
        };
        let literal = proto::literal(filter);
        while let Some(id) = self.next_block((lo, hi), from, upto) {
            let block = self.load(id)?;
            let found = match literal {
                _ if everything => block.msgs.range(from..=upto).next().map(|(s, _)| *s),
                Some(subject) => block
                    .by_subject
                    .get(subject)
                    .and_then(|set| set.range(from..=upto).next().copied()),
                None => first_match_in(block, from, upto, filter),
            };
            // An unreadable message before the match might have matched: say so.
            let before = found.map_or(upto, |seq| seq - 1);
            if let Some((first, last)) = block.unreadable_run(from, before) {
                return Ok(Some(Found::Lost(Lost {
                    first,
                    last,
                    cause: LossCause::Damaged,
                })));
            }
            if let Some(seq) = found {
                return Ok(Some(Found::Msg(seq)));
            }
            if let Some(subject) = literal {
                self.tighten(subject, id);
            }
            let Some(next) = id.checked_add(1) else { break };
            lo = next;
        }
        Ok(None)
    }

    /// The first live sequence whose time is at or after `ts` (`last_seq + 1` when none).
    /// Times never decrease with sequences, so only the first block whose last time reaches
    /// `ts` (and the next, if its later messages were deleted) is read.
    pub fn first_at_or_after(&mut self, ts: i64) -> Result<u64> {
        let ids: Vec<u32> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.stats.msgs > 0 && b.stats.last_ts >= ts)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some((seq, _)) = self.load(id)?.msgs.iter().find(|(_, m)| m.ts >= ts) {
                return Ok(*seq);
            }
        }
        Ok(self.last_seq + 1)
    }

    /// Blocks that hold no live message, no marker and are not `active`: safe to remove.
    /// Leading blocks with no live message may also go: their markers only concern
    /// sequences at or below their own.
    pub fn removable_blocks(&self, active: Option<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut leading = true;
        for (&id, b) in &self.blocks {
            if Some(id) == active {
                break;
            }
            if b.stats.msgs == 0 && (leading || b.stats.markers == 0) {
                out.push(id);
            } else {
                leading = false;
            }
        }
        out
    }

    /// Messages of the blocks in memory.
    pub fn messages_in_memory(&self) -> u64 {
        self.blocks.values().map(|b| b.msgs.len() as u64).sum()
    }

    /// Whether [`Table::unload_idle`] has something to look at: a block was read or begun
    /// since it last looked, or it left more than the budget then and a second has passed.
    pub fn due_for_a_look(&self) -> bool {
        let (when, over) = self.looked;
        self.weighed != self.grown || (over && monotonic_ms() >= when + 1000)
    }

    /// When the blocks in memory hold more than `max_msgs` messages, lets go of those of the
    /// least recently used sealed blocks that are idle — every block but `active` whose size
    /// `size_of` knows, not used since the last look nor for `idle` — until they hold no more
    /// (or none is left to let go of); each is read again from its file in `msgs_dir` on
    /// next need. Returns how many blocks it let go of. Callers look when
    /// [`Table::due_for_a_look`] says so.
    ///
    /// IMPORTANT: a block in use is kept whatever the budget: several readers going through
    /// old blocks that together exceed the budget would otherwise take turns reading them
    /// again for every message. So the blocks in memory hold at most `max_msgs` beyond
    /// `active` and those used in the last `idle` (or since the last look): one per reader
    /// going through old blocks.
    pub fn unload_idle(
        &mut self,
        max_msgs: u64,
        idle: Duration,
        msgs_dir: &Path,
        active: Option<u32>,
        size_of: impl Fn(u32) -> Option<u64>,
    ) -> usize {
        let now = monotonic_ms();
        self.weighed = self.grown;
        let in_use_after = std::mem::replace(&mut self.used_when_weighed, self.uses);
        let mut loaded = self.messages_in_memory();
        if loaded <= max_msgs {
            self.looked = (now, false);
            return 0;
        }
        let idle_since = now.saturating_sub(idle.as_millis() as u64);
        let mut candidates: Vec<(u64, u32)> = self
            .blocks
            .iter()
            .filter(|(id, b)| {
                Some(**id) != active
                    && b.last_used <= in_use_after
                    && b.last_used_ms <= idle_since
                    && b.unread.is_none()
                    && !b.msgs.is_empty()
            })
            .map(|(id, b)| (b.last_used, *id))
            .collect();
        candidates.sort_unstable();
        let mut unloaded = 0;
        for (_, id) in candidates {
            if loaded <= max_msgs {
                break;
            }
            let Some(size) = size_of(id) else {
                continue;
            };
            let block = self.blocks.get_mut(&id).expect("listed above");
            let msgs = block.msgs.len() as u64;
            if block.unload(size) {
                loaded -= msgs;
                unloaded += 1;
            }
        }
        self.looked = (now, loaded > max_msgs);
        if unloaded > 0 && self.msgs_dir.is_none() {
            self.msgs_dir = Some(msgs_dir.to_owned());
        }
        unloaded
    }

    /// Forgets a removed block.
    pub fn drop_block(&mut self, id: u32) {
        if let Some(b) = self.blocks.remove(&id) {
            self.starts.remove(&b.stats.first);
        }
    }

    /// Live sequences as inclusive ranges, ascending (no block is read).
    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        self.blocks
            .values()
            .flat_map(BlockEntry::live_ranges)
            .collect()
    }
}

/// Most blocks [`live_in`] looks at before it answers "maybe".
const LIVE_CHECK_MAX_BLOCKS: usize = 64;

/// Whether a live message may lie in `a..=b`, from the blocks' deleted ranges (no block is
/// read); `true` when finding out would take more than [`LIVE_CHECK_MAX_BLOCKS`] blocks.
fn live_in(
    blocks: &BTreeMap<u32, BlockEntry>,
    starts: &BTreeMap<u64, u32>,
    a: u64,
    b: u64,
) -> bool {
    if a > b {
        return false;
    }
    let from = starts.range(..=a).next_back().map_or(0, |(_, id)| *id);
    for (looked, (_, block)) in blocks.range(from..).enumerate() {
        if looked >= LIVE_CHECK_MAX_BLOCKS {
            return true;
        }
        let s = &block.stats;
        if s.first == 0 || s.last < a {
            continue;
        }
        if s.first > b {
            return false;
        }
        if block.first_live(a).is_some_and(|seq| seq <= b) {
            return true;
        }
    }
    false
}

/// Up to this many subjects, a wildcard read that starts before the newest block first narrows
/// the blocks to those its matching subjects may be in (one pass over the subjects, every
/// read); with more, that pass would cost more than walking the blocks in range.
const NARROW_WILDCARD_MAX_SUBJECTS: usize = 256;

/// The first sequence in `[from, upto]` of a loaded block whose subject matches `filter`:
/// walking the messages costs the distance to the match, asking every matching subject costs
/// the number of subjects, so walk up to that many steps, then ask.
fn first_match_in(block: &BlockEntry, from: u64, upto: u64, filter: &FilterSet) -> Option<u64> {
    let budget = block.by_subject.len();
    for (step, (seq, m)) in block.msgs.range(from..=upto).enumerate() {
        if step >= budget {
            return block
                .by_subject
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

/// A message table holding one message per `(sequence, subject)`, in block 1: what the sidecar
/// readers' tests and fuzz targets check entries against.
pub fn table_of(messages: &[(u64, &str)]) -> Table {
    let mut table = Table::default();
    for &(seq, subject) in messages {
        let meta = MsgMeta {
            subject: Arc::from(subject),
            ts: 0,
            loc: Loc {
                block: 1,
                offset: 0,
                len: 0,
            },
            flags: 0,
        };
        table.insert(seq, meta);
    }
    table
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A table of `(gap before, subject)` messages, `per_block` to a block.
    fn table(subjects: &[(u64, String)], per_block: usize) -> Table {
        let mut t = Table::default();
        for (i, (gap, subject)) in subjects.iter().enumerate() {
            let seq = t.last_seq + 1 + gap;
            t.insert(
                seq,
                MsgMeta {
                    subject: Arc::from(subject.as_str()),
                    ts: i as i64,
                    loc: Loc {
                        block: 1 + (i / per_block.max(1)) as u32,
                        offset: 0,
                        len: 1,
                    },
                    flags: 0,
                },
            );
        }
        t
    }

    fn all(t: &mut Table) -> Vec<(u64, MsgMeta)> {
        let mut out = Vec::new();
        t.walk(0, u64::MAX, |s, m| {
            out.push((s, m.clone()));
            true
        })
        .unwrap();
        out
    }

    /// With more subjects than a wildcard read narrows by, it walks the blocks and still
    /// finds the first match from every position.
    #[test]
    fn a_wildcard_over_many_subjects_finds_the_first_match() {
        let msgs: Vec<(u64, String)> = (0..2 * NARROW_WILDCARD_MAX_SUBJECTS)
            .map(|i| {
                (
                    0,
                    format!(
                        "{}.{}",
                        ["a", "b"][i % 2],
                        i % (NARROW_WILDCARD_MAX_SUBJECTS + 7)
                    ),
                )
            })
            .collect();
        let mut t = table(&msgs, 16);
        assert!(t.num_subjects() as usize > NARROW_WILDCARD_MAX_SUBJECTS);
        let filter = FilterSet::new(["b.*"]).unwrap();
        let walk = all(&mut t);
        for from in [0, 1, 2, 100, 511, 512, 513] {
            let want = walk
                .iter()
                .find(|(seq, m)| *seq >= from && filter.matches(&m.subject))
                .map(|(seq, _)| *seq);
            assert_eq!(
                t.next_matching(from, t.last_seq, &filter, false).unwrap(),
                want.map(Found::Msg),
                "from {from}"
            );
        }
    }

    proptest! {
        /// Whether it walks messages or asks subjects, and however messages fall into blocks,
        /// the answer is the first match; the time search finds the first message at or after
        /// a time; the per-subject answers and the live ranges agree with a walk.
        #[test]
        fn queries_agree_with_a_walk(
            msgs in proptest::collection::vec((0u64..3, "[a-c]\\.[a-e]"), 0..60),
            removed in proptest::collection::vec(0u64..120, 0..20),
            per_block in 1usize..8,
            filter in prop_oneof![Just("a.*"), Just("*.e"), Just("b.>"), Just("c.d"), Just(">")],
            from in 0u64..80,
            ts in -1i64..62,
        ) {
            let mut t = table(&msgs, per_block);
            for s in removed {
                t.remove(s).unwrap();
            }
            let live = all(&mut t);
            let f = FilterSet::new([filter]).unwrap();
            let want = live.iter().find(|(s, m)| *s >= from && f.matches(&m.subject)).map(|(s, _)| *s);
            prop_assert_eq!(t.next_matching(from, t.last_seq, &f, false).unwrap(), want.map(Found::Msg));
            let want = live.iter().find(|(_, m)| m.ts >= ts).map_or(t.last_seq + 1, |(s, _)| *s);
            prop_assert_eq!(t.first_at_or_after(ts).unwrap(), want);
            prop_assert_eq!(t.first_seq(), live.first().map_or(t.last_seq + 1, |(s, _)| *s));
            prop_assert_eq!(t.count(), live.len() as u64);
            for subject in ["a.a", "b.c", "c.d"] {
                let seqs: Vec<u64> = live.iter().filter(|(_, m)| &*m.subject == subject).map(|(s, _)| *s).collect();
                prop_assert_eq!(t.subject_seqs(subject, usize::MAX).unwrap(), seqs.clone());
                prop_assert_eq!(t.subject_count(subject), seqs.len() as u64);
                let upto = from + 10;
                prop_assert_eq!(
                    t.last_for_subject(subject, upto).unwrap(),
                    seqs.iter().rev().find(|s| **s <= upto).copied()
                );
            }
            let ranges: Vec<u64> = t.live_ranges().into_iter().flat_map(|(s, e)| s..=e).collect();
            prop_assert_eq!(ranges, live.iter().map(|(s, _)| *s).collect::<Vec<_>>());
            for seq in 0..t.last_seq + 2 {
                prop_assert_eq!(t.contains(seq), live.iter().any(|(s, _)| *s == seq));
            }
        }
    }
}
