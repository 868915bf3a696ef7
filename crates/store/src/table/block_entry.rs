//! One block's part of the table: its counters, its deleted sequences, and — once loaded —
//! its live messages with a per-subject index.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::msg_meta::MsgMeta;
use crate::ranges::RangeSet;
use crate::record::flags;

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
    /// Store time of the first and last message written to the block (0 when none).
    pub first_ts: i64,
    /// See `first_ts`.
    pub last_ts: i64,
    /// Messages written with a TTL (live or not).
    pub ttl: u32,
    /// Messages written with a schedule.
    pub sched: u32,
    /// Sourced messages written.
    pub sourced: u32,
    /// Messages written with a `Nats-Msg-Id`.
    pub msg_ids: u32,
    /// Tombstones, purge and last-sequence markers written.
    pub markers: u32,
}

/// The part of a block file not read into the table yet (a block known from index.db).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread {
    /// Records in `[0, end)` are not in `msgs` yet.
    pub end: u64,
    /// The file must be exactly `end` bytes long (a sealed block); else at least `end`.
    pub sealed: bool,
}

/// One block's entry.
#[derive(Debug, Default)]
pub struct BlockEntry {
    /// Counters.
    pub stats: BlockStats,
    /// Sequences in `[first, last]` that are not live (deleted, purged or never written).
    pub deleted: RangeSet,
    /// Live messages read so far: all of them when `unread` is `None`.
    pub msgs: BTreeMap<u64, MsgMeta>,
    /// Live sequences of `msgs` per subject.
    pub by_subject: HashMap<Arc<str>, BTreeSet<u64>>,
    /// What is still to be read from the file.
    pub unread: Option<Unread>,
    /// Live sequences of a damaged block whose records could not be read (those deleted since
    /// are in `deleted` too).
    pub unreadable: RangeSet,
    /// When the table last used the block's messages, on its count of uses: the least
    /// recently used are let go of first.
    pub last_used: u64,
    /// When a reader last used them, in [`monotonic_ms`](crate::time::monotonic_ms) (0:
    /// never).
    pub last_used_ms: u64,
}

impl BlockEntry {
    /// A block known from index.db, none of its messages read yet.
    pub fn unloaded(stats: BlockStats, deleted: RangeSet, unread: Unread) -> Self {
        Self {
            stats,
            deleted,
            unread: Some(unread),
            ..Self::default()
        }
    }

    /// Whether `seq` is a live message of this block (known without reading the block).
    pub fn is_live(&self, seq: u64) -> bool {
        self.stats.first != 0
            && (self.stats.first..=self.stats.last).contains(&seq)
            && !self.deleted.contains(seq)
    }

    /// The first live sequence at or above `from`, known without reading the block.
    pub fn first_live(&self, from: u64) -> Option<u64> {
        if self.stats.msgs == 0 {
            return None;
        }
        let s = self.deleted.next_absent(from.max(self.stats.first));
        (s <= self.stats.last).then_some(s)
    }

    /// Whether `seq` is live but its record could not be read.
    pub fn is_unreadable(&self, seq: u64) -> bool {
        self.unreadable.contains(seq) && !self.deleted.contains(seq)
    }

    /// The first run of unreadable live sequences in `[from, upto]`, as `(first, last)`: from
    /// the first such sequence to the end of its unreadable range (sequences deleted inside it
    /// are not messages, so a reader passing over them misses nothing more).
    pub fn unreadable_run(&self, from: u64, upto: u64) -> Option<(u64, u64)> {
        for (start, end) in self.unreadable.ranges() {
            let (mut seq, end) = (start.max(from), end.min(upto));
            while seq <= end {
                let next = self.deleted.next_absent(seq);
                if next == seq {
                    return Some((seq, end));
                }
                seq = next;
            }
        }
        None
    }

    /// Live sequences as inclusive ranges, ascending.
    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if self.stats.msgs == 0 {
            return out;
        }
        let mut next = Some(self.stats.first);
        for (start, end) in self.deleted.ranges() {
            if let Some(n) = next.filter(|n| *n < start) {
                out.push((n, start - 1));
            }
            next = end.checked_add(1);
        }
        if let Some(n) = next.filter(|n| *n <= self.stats.last) {
            out.push((n, self.stats.last));
        }
        out
    }

    /// Lets go of the messages of a sealed block `size` bytes long, to be read again from its
    /// file on next need, when they are all in memory, undamaged, and agree with the block's
    /// counters and deleted ranges (so the read gives back exactly these messages); false,
    /// and nothing changed, otherwise. Returns whether it did.
    pub fn unload(&mut self, size: u64) -> bool {
        let whole = self.unread.is_none()
            && self.unreadable.ranges_len() == 0
            && self.msgs.len() as u64 == self.stats.msgs
            && self.counts_agree();
        if whole {
            self.msgs = BTreeMap::new();
            self.by_subject = HashMap::new();
            self.unread = Some(Unread {
                end: size,
                sealed: true,
            });
        }
        whole
    }

    /// After a read of the whole block: marks the live sequences it did not give back as
    /// unreadable; returns how many there are.
    pub fn mark_unreadable(&mut self) -> u64 {
        let missing = self.stats.msgs - self.msgs.len() as u64;
        if missing == 0 {
            return 0;
        }
        for (start, end) in self.live_ranges() {
            let mut from = start;
            for &seq in self.msgs.range(start..=end).map(|(s, _)| s) {
                if seq > from {
                    self.unreadable.insert(from, seq - 1);
                }
                from = seq + 1;
            }
            if from <= end {
                self.unreadable.insert(from, end);
            }
        }
        missing
    }

    /// Adds a message with a sequence above every earlier one of the block; sequences skipped
    /// since the block's last one (lost to damage) are recorded as not live.
    pub fn add(&mut self, seq: u64, meta: MsgMeta) {
        let s = &mut self.stats;
        if s.first == 0 {
            s.first = seq;
            s.first_ts = meta.ts;
        } else if seq > s.last + 1 {
            self.deleted.insert(s.last + 1, seq - 1);
        }
        s.last = s.last.max(seq);
        s.last_ts = s.last_ts.max(meta.ts);
        s.msgs += 1;
        s.bytes += meta.loc.len as u64;
        s.ttl += u32::from(meta.flags & flags::TTL != 0);
        s.sched += u32::from(meta.flags & flags::SCHEDULE != 0);
        s.sourced += u32::from(meta.flags & flags::SOURCED != 0);
        s.msg_ids += u32::from(meta.flags & flags::MSG_ID != 0);
        self.keep(seq, meta);
    }

    /// Puts a live message in the loaded maps (counters unchanged).
    pub fn keep(&mut self, seq: u64, meta: MsgMeta) {
        self.by_subject
            .entry(meta.subject.clone())
            .or_default()
            .insert(seq);
        self.msgs.insert(seq, meta);
    }

    /// Removes a live message of a loaded block. An unreadable one gives back what is known:
    /// its block, with an empty subject (no subject is empty) and zero length.
    pub fn take(&mut self, id: u32, seq: u64) -> Option<MsgMeta> {
        if self.is_unreadable(seq) {
            self.deleted.insert(seq, seq);
            self.stats.msgs -= 1;
            return Some(MsgMeta {
                subject: Arc::from(""),
                ts: 0,
                loc: crate::block::Loc {
                    block: id,
                    offset: 0,
                    len: 0,
                },
                flags: 0,
            });
        }
        let meta = self.msgs.remove(&seq)?;
        if let Some(set) = self.by_subject.get_mut(&meta.subject) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_subject.remove(&meta.subject);
            }
        }
        self.deleted.insert(seq, seq);
        self.stats.msgs -= 1;
        self.stats.bytes -= meta.loc.len as u64;
        Some(meta)
    }

    /// Removes every live message: the whole sequence range becomes deleted, nothing is left
    /// to read.
    pub fn clear(&mut self) {
        self.deleted.insert(self.stats.first, self.stats.last);
        self.msgs.clear();
        self.by_subject.clear();
        self.unread = None;
        self.stats.msgs = 0;
        self.stats.bytes = 0;
    }

    /// Whether the block's counters agree with its sequences: live = `[first, last]` minus
    /// the deleted ones (none at all when the block never held a message).
    pub fn counts_agree(&self) -> bool {
        if self.stats.first == 0 {
            return self.stats.msgs == 0 && self.deleted.ranges_len() == 0;
        }
        self.stats.first <= self.stats.last
            && self
                .deleted
                .ranges()
                .all(|(s, e)| s >= self.stats.first && e <= self.stats.last)
            && (self.stats.last - self.stats.first + 1).checked_sub(self.deleted.len())
                == Some(self.stats.msgs)
    }
}
