//! A stream's mutable state and its write primitives: append a message, remove messages
//! (recorded as purge markers or tombstones), forget empty blocks, read a message.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::block::{Blocks, RecordSource};
use crate::config::StreamConfig;
use crate::dedupe::Dedupe;
use crate::error::{Result, StoreError};
use crate::health::Health;
use crate::lease;
use crate::losses::Lost;
use crate::proto::{self, FilterSet};
use crate::record::{self, Kind, RecordRef};
use crate::removals::Removed;
use crate::schedule::Schedules;
use crate::sources::SourceIndex;
use crate::table::{Found, MsgMeta, Table};
use crate::time::{now_ns, timestamp};
use crate::ttl::TtlWheel;
use crate::types::{StoredMessage, StreamInfo, StreamState, WriteStats};

/// Everything about one stream that the writer mutates and readers look at.
pub struct State {
    /// The stream's configuration.
    pub config: StreamConfig,
    /// Creation time.
    pub created: jiff::Timestamp,
    /// Incarnation identity.
    pub incarnation: u64,
    /// `streams/<name>` for file streams with a data directory.
    pub dir: Option<PathBuf>,
    /// Message index.
    pub table: Table,
    /// Block files.
    pub blocks: Blocks,
    /// Highest sequence readers may see (written and synced per policy).
    pub visible: u64,
    /// Dedupe window.
    pub dedupe: Dedupe,
    /// `Nats-Msg-Id` of the last stored message.
    pub last_msg_id: Option<String>,
    /// Per-message TTL expiry.
    pub ttl: TtlWheel,
    /// Message schedules in force.
    pub schedules: Schedules,
    /// Source positions.
    pub sources: SourceIndex,
    /// Set on close, or when a failed write could not be undone: every further operation fails.
    pub closed: bool,
    /// Set when an fsync failed (what failed): every further write fails, reads go on.
    pub fenced: Option<String>,
    /// Whether writes fail now, and the log of their failures.
    pub health: Health,
    /// Write-path counters.
    pub stats: WriteStats,
    /// Front removals of this batch not yet recorded: a purge marker for this first sequence.
    pub purge_to: Option<u64>,
    /// Front removals of this batch by a limit or a purge not yet recorded: a purge marker
    /// without `INTENDED` for this sequence (at most `purge_to`).
    pub expired_to: Option<u64>,
    /// Changed since index.db and the sidecars were last written.
    pub dirty: bool,
    /// The sequence lease on disk: every sequence handed out is below it (file streams).
    pub lease: u64,
    /// Most messages the table keeps in memory for the blocks read or written (file streams;
    /// from `StoreOptions::index_memory`).
    pub index_budget: u64,
    /// How long a block's messages stay in memory after its last use, whatever the budget
    /// (`StoreOptions::index_idle`).
    pub index_idle: std::time::Duration,
}

/// Why messages are removed, which decides whether a reader that asked for them is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// By a limit on the whole stream (messages, bytes, age) or a purge of every subject:
    /// positions removed from the front are told to every reader that asks for them (an
    /// `expired` gap, [`Table::expired_below`](crate::table::Table::expired_below)); any other
    /// is told as [`Removal::Removed`] is.
    Expired,
    /// By a delete, a purge of some subjects or the per-subject limit, wherever they are in
    /// the stream: told to the readers whose filters match their subjects
    /// ([`Table::removals`](crate::table::Table::removals)), and to no other reader.
    Removed,
    /// As their publisher meant: their own TTL, a schedule that has fired. Nothing was lost,
    /// so nothing is told.
    Intended,
}

impl State {
    /// A timestamp for a new record: now, but never before the last one.
    pub fn next_ts(&self) -> i64 {
        now_ns().max(self.table.last_ts)
    }

    /// Appends a message at `last_seq + 1`.
    pub fn append_msg(
        &mut self,
        subject: &str,
        hdrs: &[u8],
        payload: &[u8],
        flags: u8,
        ts: i64,
    ) -> Result<u64> {
        let seq = self.table.last_seq + 1;
        let flags = if hdrs.is_empty() {
            flags & !record::flags::HEADERS
        } else {
            flags | record::flags::HEADERS
        };
        let rec = RecordRef {
            kind: Kind::Msg,
            flags,
            seq,
            ts,
            subject: subject.as_bytes(),
            headers: hdrs,
            payload,
        };
        let (loc, _, roll) = self.blocks.append(&rec, self.table.last_seq, ts)?;
        if let Some(m) = roll {
            self.table.note_marker(m.block);
        }
        self.table.insert(
            seq,
            MsgMeta {
                subject: self.table.intern(subject),
                ts,
                loc,
                flags,
            },
        );
        self.stats.msgs_stored += 1;
        self.dirty = true;
        Ok(seq)
    }

    /// Appends a tombstone, purge or last-sequence marker.
    pub fn append_marker(&mut self, kind: Kind, seq: u64) -> Result<()> {
        self.append_marker_with(kind, seq, 0)
    }

    /// Appends a marker with record flags `flags`.
    fn append_marker_with(&mut self, kind: Kind, seq: u64, flags: u8) -> Result<()> {
        let ts = self.next_ts();
        let rec = RecordRef {
            kind,
            flags,
            seq,
            ts,
            subject: &[],
            headers: &[],
            payload: &[],
        };
        let (loc, _, roll) = self.blocks.append(&rec, self.table.last_seq, ts)?;
        if let Some(m) = roll {
            self.table.note_marker(m.block);
        }
        self.table.note_marker(loc.block);
        self.dirty = true;
        Ok(())
    }

    /// Removes live messages and records the removal durably: one purge marker for those
    /// below the new first sequence, and a tombstone for each other one — and for each one
    /// removed as [`Removal::Removed`], so that recovery finds their subjects again. `why`
    /// decides which readers are told of them: see [`Removal`]. Every tombstone without the
    /// `INTENDED` flag stands for a removal told to the readers of its message's subject.
    /// Returns what was removed.
    pub fn remove(&mut self, seqs: &[u64], why: Removal) -> Result<Vec<(u64, MsgMeta)>> {
        let mut removed: Vec<(u64, MsgMeta)> = Vec::with_capacity(seqs.len());
        for &s in seqs {
            if let Some(meta) = self.table.remove(s)? {
                removed.push((s, meta));
            }
        }
        if removed.is_empty() {
            return Ok(removed);
        }
        let first = self.table.first_seq();
        if removed.iter().any(|(s, _)| *s < first) {
            // One purge marker per batch is enough: written by `flush` with the batch.
            self.purge_to = Some(first);
        }
        if why == Removal::Expired {
            let front = removed.iter().map(|(s, _)| *s).filter(|s| *s < first).max();
            if let Some(front) = front {
                self.expire_below(front + 1);
            }
        }
        for (s, meta) in &removed {
            match why {
                Removal::Removed => self.tombstone(*s, &meta.subject)?,
                _ if *s < first => {}
                Removal::Expired => self.tombstone(*s, &meta.subject)?,
                Removal::Intended => {
                    self.append_marker_with(Kind::Tombstone, *s, record::flags::INTENDED)?;
                }
            }
        }
        for (s, meta) in &removed {
            self.ttl.forget(*s);
            self.schedules.forget(&meta.subject, *s);
        }
        Ok(removed)
    }

    /// Writes the tombstone of `seq`, a message of `subject`, whose readers are told of it.
    fn tombstone(&mut self, seq: u64, subject: &Arc<str>) -> Result<()> {
        self.append_marker(Kind::Tombstone, seq)?;
        self.table.note_removal(seq, subject);
        Ok(())
    }

    /// Removes every live message without reading one (a purge of everything): recorded by
    /// one purge marker, written by `flush` with the batch. Returns how many were removed.
    pub fn remove_all(&mut self) -> u64 {
        let n = self.table.clear();
        self.ttl = TtlWheel::default();
        self.schedules = Schedules::default();
        self.purge_to = Some(self.table.last_seq + 1);
        self.expire_below(self.table.last_seq + 1);
        self.dirty = true;
        n
    }

    /// Raises the first position readers are not told of to `seq`, for the next purge marker.
    fn expire_below(&mut self, seq: u64) {
        if seq > self.table.expired_below {
            self.table.raise_expired_below(seq);
            self.expired_to = Some(seq);
        }
    }

    /// Whether the batch holds records not written yet (what [`State::flush`] writes).
    pub fn has_unwritten(&self) -> bool {
        self.blocks.has_pending() || self.purge_to.is_some()
    }

    /// Writes the batch's front-removal marker (if any) and the batch to the active block.
    pub fn flush(&mut self) -> Result<()> {
        // Two markers when the batch removed some of the front by a limit or a purge and the
        // rest as meant: recovery raises `expired_below` only for the first.
        let expired_to = self.expired_to.take();
        if let Some(expired_to) = expired_to {
            self.append_marker(Kind::PurgeTo, expired_to)?;
        }
        if let Some(first) = self.purge_to.take()
            && expired_to.is_none_or(|to| first > to)
        {
            self.append_marker_with(Kind::PurgeTo, first, record::flags::INTENDED)?;
        }
        // IMPORTANT: the lease covers the batch's sequences before any of its records reaches
        // a block: whatever is later cut from the block, they are never handed out again.
        if let Some(dir) = &self.dir
            && self.table.last_seq >= self.lease
        {
            let bound = self.table.last_seq + 1 + lease::STRIDE;
            lease::write(&dir.join("msgs"), bound)?;
            self.lease = bound;
        }
        self.blocks.flush()
    }

    /// Sets the lease back to exactly the last sequence + 1 (with a snapshot): after a clean
    /// close nothing is unconfirmed.
    pub fn settle_lease(&mut self) -> Result<()> {
        let exact = self.table.last_seq + 1;
        if let Some(dir) = &self.dir
            && self.lease != exact
        {
            lease::write(&dir.join("msgs"), exact)?;
            self.lease = exact;
        }
        Ok(())
    }

    /// Forgets every block that holds nothing needed any more (in memory only: their files are
    /// deleted by `persist::drop_empty_blocks`). Returns whether any was forgotten.
    pub fn forget_empty_blocks(&mut self) -> bool {
        let doomed = self.table.removable_blocks(self.blocks.active());
        for &id in &doomed {
            self.blocks.forget(id);
            self.table.drop_block(id);
        }
        !doomed.is_empty()
    }

    /// Starts a new block so that every older one can be removed once empty.
    pub fn roll(&mut self) -> Result<()> {
        let ts = self.next_ts();
        let m = self.blocks.roll(self.table.last_seq, ts)?;
        self.table.note_marker(m.block);
        Ok(())
    }

    /// Locates a visible message; read it with [`PendingRead::finish`] after unlocking.
    pub fn prepare(&mut self, seq: u64) -> Result<Option<PendingRead>> {
        if seq > self.visible {
            return Ok(None);
        }
        self.prepare_any(seq)
    }

    /// Locates a live message whether or not it is visible yet (for the writer).
    pub fn prepare_any(&mut self, seq: u64) -> Result<Option<PendingRead>> {
        let loc = self.table.get(seq).map(|meta| meta.map(|m| m.loc));
        self.settle_after_read();
        let Some(loc) = loc? else {
            return Ok(None);
        };
        Ok(Some(PendingRead {
            seq,
            source: self.blocks.source(loc)?,
        }))
    }

    /// Reads a live message whether or not it is visible yet (for the writer).
    pub fn read_any(&mut self, seq: u64) -> Result<Option<StoredMessage>> {
        self.prepare_any(seq)?.map(PendingRead::finish).transpose()
    }

    /// What a reader of `filter` meets first at or after `from` among the visible positions
    /// below `until`: a message (read it with [`PendingRead::finish`] after unlocking),
    /// positions it cannot be given, or — with `tell_removed` — removed positions of its
    /// subjects (none at or above `until`). Nothing at or above `until` is looked at.
    pub fn next_matching(
        &mut self,
        from: u64,
        until: u64,
        filter: &FilterSet,
        tell_removed: bool,
    ) -> Result<Option<Next>> {
        let upto = self.visible.min(until.saturating_sub(1));
        let found = self.table.next_matching(from, upto, filter, tell_removed);
        self.settle_after_read();
        Ok(match found? {
            Some(Found::Msg(seq)) => self.prepare(seq)?.map(Next::Read),
            Some(Found::Lost(lost)) => Some(Next::Lost(lost)),
            Some(Found::Removed(removed)) => Some(Next::Removed(removed)),
            None => None,
        })
    }

    /// After the table was read: damage the read found makes the next snapshot write lost.db,
    /// and blocks it read beyond the budget make the least recently used ones let go of their
    /// messages ([`State::keep_index_within_budget`]).
    pub fn settle_after_read(&mut self) {
        self.dirty |= self.table.losses.is_unsaved();
        self.keep_index_within_budget();
    }

    /// When the blocks in memory hold more messages than `index_budget`, lets go of those of
    /// the least recently used sealed blocks: they are read again from their files on next
    /// need. A file stream's only: a memory stream's blocks are nowhere else.
    pub fn keep_index_within_budget(&mut self) {
        let Some(dir) = &self.dir else {
            return;
        };
        if !self.table.due_for_a_look() {
            return;
        }
        let msgs = dir.join("msgs");
        let blocks = &self.blocks;
        self.table.unload_idle(
            self.index_budget,
            self.index_idle,
            &msgs,
            blocks.active(),
            |id| blocks.size(id),
        );
    }

    /// For a reader that last saw `last_seen`: the rest of the unconfirmed run it is inside of.
    pub fn unconfirmed_after(&self, last_seen: u64) -> Option<Lost> {
        self.table.losses.unconfirmed_after(last_seen, self.visible)
    }

    /// The first and last sequence readers may see (first = last + 1 when none is retained).
    pub fn visible_range(&self) -> (u64, u64) {
        let last = self.table.last_seq.min(self.visible);
        (self.table.first_seq().min(last + 1), last)
    }

    /// Info about the stream as readers see it. The first message's time may need its block
    /// read; a block that cannot be read leaves it out (the error is logged).
    pub fn info(&mut self, subjects: Option<&FilterSet>) -> StreamInfo {
        let (first, last) = self.visible_range();
        let first_time = if first <= last {
            self.table.first_time().unwrap_or_else(|e| {
                tracing::warn!(stream = %self.config.name, "first message time unknown: {e}");
                None
            })
        } else {
            None
        };
        let unseen = self.unseen_appends(last);
        let t = &self.table;
        let mut subject_counts = subjects.map(|f| t.subject_counts(Some(f)));
        let mut num_subjects = t.num_subjects();
        for (subject, n) in &unseen.per_subject {
            if t.subject_count(subject) == *n {
                num_subjects -= 1;
            }
            if let Some(counts) = subject_counts.as_mut()
                && let Some(count) = counts.get_mut(&**subject)
            {
                *count -= n;
                if *count == 0 {
                    counts.remove(&**subject);
                }
            }
        }
        let msgs = t.count() - unseen.msgs;
        let last_ts = unseen.last_ts.unwrap_or(t.last_ts);
        StreamInfo {
            config: self.config.clone(),
            created: self.created,
            incarnation: self.incarnation,
            state: StreamState {
                msgs,
                bytes: t.bytes() - unseen.bytes,
                first_seq: first,
                expired_below: t.expired_below.min(first),
                first_time: first_time.map(timestamp),
                last_seq: last,
                last_time: (last_ts > 0).then(|| timestamp(last_ts)),
                num_deleted: (last + 1 - first).saturating_sub(msgs),
                num_subjects,
                num_schedules: self.schedules.len() as u64,
                subjects: subject_counts,
                lost: t.lost_state(),
            },
            stats: self.stats,
        }
    }

    /// The messages above `last_visible`: a batch being made durable, counted in the table
    /// but not readable until its fsync returns. Only the writer's open block holds them, so
    /// nothing is read from disk.
    fn unseen_appends(&mut self, last_visible: u64) -> Unseen {
        let mut unseen = Unseen::default();
        if last_visible >= self.table.last_seq {
            return unseen;
        }
        if let Ok(Some(m)) = self.table.get(last_visible) {
            unseen.last_ts = Some(m.ts);
        }
        for seq in last_visible + 1..=self.table.last_seq {
            if let Ok(Some(m)) = self.table.get(seq) {
                unseen.msgs += 1;
                unseen.bytes += u64::from(m.loc.len);
                *unseen.per_subject.entry(m.subject.clone()).or_default() += 1;
            }
        }
        unseen
    }
}

/// Messages the table counts that readers cannot see yet ([`State::unseen_appends`]).
#[derive(Default)]
struct Unseen {
    msgs: u64,
    bytes: u64,
    per_subject: BTreeMap<Arc<str>, u64>,
    /// The last visible message's time, when there are unseen messages and it is live.
    last_ts: Option<i64>,
}

/// What a reader meets next.
pub enum Next {
    /// A message, to read without the lock held.
    Read(PendingRead),
    /// Positions that cannot be delivered.
    Lost(Lost),
    /// Removed positions of the reader's subjects.
    Removed(Removed),
}

/// A located message, read and decoded without the stream's lock held.
pub struct PendingRead {
    seq: u64,
    source: RecordSource,
}

impl PendingRead {
    /// The message's sequence.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// How many bytes its record takes.
    pub fn len(&self) -> usize {
        self.source.len()
    }

    /// Reads and verifies the records of `reads`, in order, as [`PendingRead::finish`] does
    /// each, reading records that lie close together in a block with one system call.
    pub fn finish_all(reads: Vec<PendingRead>) -> Vec<Result<StoredMessage>> {
        let mut sources = Vec::with_capacity(reads.len());
        let mut seqs = Vec::with_capacity(reads.len());
        for read in reads {
            seqs.push((read.seq, read.source.origin()));
            sources.push(read.source);
        }
        RecordSource::fetch_all(sources, |i, bytes| {
            let (seq, origin) = &seqs[i];
            decode_message(bytes, *seq).ok_or_else(|| StoreError::Corrupt {
                seq: *seq,
                path: origin.path(),
            })
        })
    }

    /// Reads and verifies the record.
    pub fn finish(self) -> Result<StoredMessage> {
        let path = self.source.path();
        let bytes = self.source.fetch()?;
        decode_message(&bytes, self.seq).ok_or(StoreError::Corrupt {
            seq: self.seq,
            path,
        })
    }
}

/// Decodes a stored message record; `None` when it is not a valid message for `seq`.
pub fn decode_message(bytes: &[u8], seq: u64) -> Option<StoredMessage> {
    let (rec, _, _) = record::decode(bytes).ok()?;
    if rec.kind != Kind::Msg || rec.seq != seq {
        return None;
    }
    Some(StoredMessage {
        seq,
        subject: std::str::from_utf8(rec.subject).ok()?.to_string(),
        time: timestamp(rec.ts),
        headers: proto::decode_headers(rec.headers)?,
        payload: Bytes::copy_from_slice(rec.payload),
    })
}
