//! Phase 2 of recovery: the forward scan of what index.db does not cover (what was appended
//! after it, or every block), verifying every record. A bad record costs only itself: the
//! walk steps over it to the next record that verifies (bounded by the block), and only a
//! tail with nothing valid behind it is cut, after being set aside. What the surviving
//! records prove about the sequences in the damage is gathered as [`Evidence`].

use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::ops::RangeInclusive;
use std::path::Path;

use super::baseline::Baseline;
use crate::block::{Loc, block_path};
use crate::decode::MAX_SEQ;
use crate::error::{Result, StoreError};
use crate::losses::Losses;
use crate::proto::{self, names};
use crate::ranges::RangeSet;
use crate::record::{self, DecodeError, Kind, RecordRef, flags};
use crate::table::{MsgMeta, Table};
use crate::types::{RecoveryPath, RecoveryReport, Truncation};

/// The stream after the scan.
pub struct Scanned {
    /// The table, with every valid record scanned applied.
    pub table: Table,
    /// The last message id.
    pub last_msg_id: Option<String>,
    /// Every block's size, up to its valid end.
    pub sizes: Vec<(u32, u64)>,
    /// The checksum of the last valid record.
    pub last_checksum: u64,
    /// What the records (and a stale index.db) prove existed.
    pub evidence: Evidence,
    /// Bytes of records read (0: index.db covered everything).
    pub bytes_scanned: u64,
    /// Damaged bytes stepped over or cut.
    pub damaged_bytes: u64,
}

/// What recovery learnt about sequences that existed: claims (from records beyond a cut, a torn
/// record's header, leading last-sequence markers, a stale index.db) and the deletions that
/// explain missing ones. Claimed, not live and not deleted = lost.
#[derive(Default)]
pub struct Evidence {
    claims: Vec<(u64, u64)>,
    deleted: BTreeSet<u64>,
    /// The sequences whose message records were read.
    messages: RangeSet,
    purged_below: u64,
    /// A block (or part of one) was read before the current one.
    after_another: bool,
    /// The first sequence of damage no message has been found after yet.
    open_damage: Option<u64>,
}

/// Scans the blocks from `base.scan_from` on, applying every valid record to the baseline's
/// table and cutting each block at its first bad record.
pub fn scan(msgs_dir: &Path, base: Baseline, report: &mut RecoveryReport) -> Result<Scanned> {
    let mut out = Scanned {
        table: base.table,
        last_msg_id: base.last_msg_id,
        sizes: base.sizes,
        last_checksum: base.last_checksum,
        evidence: Evidence::default(),
        bytes_scanned: 0,
        damaged_bytes: 0,
    };
    if let Some(from) = base.scan_from {
        out.sizes.retain(|(id, _)| *id < from.block);
        for &id in base.ids.iter().filter(|id| **id >= from.block) {
            let start = if id == from.block { from.offset } else { 0 };
            // Only a block after one already read can prove a gap with its leading marker.
            out.evidence.after_another |= start > 0;
            let block = scan_block(msgs_dir, id, start, &mut out, report)?;
            out.bytes_scanned += block.valid_end - start.min(block.valid_end);
            if let Some(sum) = block.last_checksum {
                out.last_checksum = sum;
            }
            out.sizes.push((id, block.valid_end));
        }
    }
    out.evidence.claims.extend(base.stale_claims);
    if report.path == RecoveryPath::Rebuild {
        expire_unexplained_front(&mut out.table, &out.evidence);
    }
    Ok(out)
}

/// On a rebuild: positions below the first message whose own record is gone (its block was
/// deleted once empty) went for reasons, or with subjects, that cannot be known any more (a
/// delete, a purge, a limit, their own TTL): readers that ask for them are told they expired,
/// rather than told nothing. A removed message whose record is still there explains itself:
/// its tombstone, if any, names its subject (told to the readers of that subject), and
/// without one it went as meant. (index.db keeps the removals with their subjects; only
/// without it does this apply.)
fn expire_unexplained_front(table: &mut Table, evidence: &Evidence) {
    let Some(mut seq) = table.first_seq().checked_sub(1) else {
        return;
    };
    while seq > 0 && seq >= table.expired_below {
        if let Some((start, _)) = evidence.messages.first_overlapping(seq, seq) {
            seq = start - 1;
        } else {
            tracing::info!(
                below = seq + 1,
                "a rebuild found no record of why the positions below this one went: readers \
                 asking for them are told they expired"
            );
            table.raise_expired_below(seq + 1);
            return;
        }
    }
}

/// How far one block was valid.
struct BlockScan {
    /// Length of the valid prefix (the file is cut there).
    valid_end: u64,
    /// Checksum of the last valid record read.
    last_checksum: Option<u64>,
}

/// Applies every valid record of block `id` from `start`. A bad record (torn, failing its
/// checksum, or contradicting what came before) does not end the block: the walk resumes at
/// the next record that verifies and fits, and the bytes in between stay in place, reported.
/// Only a tail with no valid record behind it is cut, after being set aside.
fn scan_block(
    msgs_dir: &Path,
    id: u32,
    start: u64,
    out: &mut Scanned,
    report: &mut RecoveryReport,
) -> Result<BlockScan> {
    let path = block_path(msgs_dir, id);
    let data = read_from(&path, start)?;
    let base = start as usize;
    let mut off = 0;
    let mut last_checksum = None;
    let mut bad: Option<(usize, &str)> = None;
    while off < data.len() {
        let reason = match record::decode(&data[off..]) {
            // Verifies, but names a sequence the store never hands out (see `MAX_SEQ`).
            Ok((rec, _, _)) if rec.seq > MAX_SEQ => "record past the highest sequence",
            Ok((rec, len, sum)) => {
                let last_seq = out.table.last_seq;
                if apply(
                    &mut out.table,
                    &mut out.last_msg_id,
                    id,
                    base + off,
                    len,
                    &rec,
                )? {
                    out.evidence.note(&rec, base + off == 0, last_seq);
                    if let Some((from, reason)) = bad.take() {
                        step_over(&path, base, from, off, reason, out, report);
                    }
                    off += len;
                    last_checksum = Some(sum);
                    continue;
                }
                "out-of-order record"
            }
            Err(DecodeError::Incomplete) => "torn record",
            Err(DecodeError::Corrupt) => "corrupt record",
        };
        if bad.is_none() {
            out.evidence.damage_at(&data[off..], out.table.last_seq + 1);
            bad = Some((off, reason));
        }
        // The bounded search: the next offset where a record verifies, if any.
        match record::resync(&data[off + 1..]).next() {
            Some((at, _, _)) => off += 1 + at,
            None => {
                off = data.len();
                break;
            }
        }
    }
    let valid_end = match bad {
        Some((from, reason)) => {
            let dropped = &data[from..];
            cut(&path, (base + from) as u64, dropped, reason, report)?;
            out.damaged_bytes += dropped.len() as u64;
            from
        }
        None => off,
    };
    out.evidence.after_another = true;
    Ok(BlockScan {
        valid_end: (base + valid_end) as u64,
        last_checksum,
    })
}

/// Records the damaged bytes `[from, to)` of a block (offsets in `data`, which starts at
/// `base` in the file) that the walk stepped over; they stay in the file.
fn step_over(
    path: &Path,
    base: usize,
    from: usize,
    to: usize,
    reason: &str,
    out: &mut Scanned,
    report: &mut RecoveryReport,
) {
    let (offset, bytes) = ((base + from) as u64, (to - from) as u64);
    let msg = format!(
        "{}: {reason} at offset {offset}; stepped over {bytes} damaged bytes to the next valid record (left in place)",
        path.display()
    );
    tracing::warn!("{msg}");
    report.warnings.push(msg);
    report.damaged.push(Truncation {
        path: path.to_path_buf(),
        offset,
        bytes_dropped: bytes,
    });
    out.damaged_bytes += bytes;
}

/// The bytes of `path` from `start` on (with index.db, just what was appended after it).
fn read_from(path: &Path, start: u64) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut file = fs::File::open(path).map_err(StoreError::io(path))?;
    file.seek(SeekFrom::Start(start))
        .and_then(|_| file.read_to_end(&mut data))
        .map_err(StoreError::io(path))?;
    Ok(data)
}

/// Sets the bytes `dropped` from `offset` of the block aside (`<n>.blk.damaged-<ns>`), then
/// cuts the block file there, and records both in `report`.
fn cut(
    path: &Path,
    offset: u64,
    dropped: &[u8],
    reason: &str,
    report: &mut RecoveryReport,
) -> Result<()> {
    let aside = crate::fsutil::damaged_name(path);
    crate::fsutil::atomic_write(&aside, dropped)?;
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(StoreError::io(path))?;
    // IMPORTANT: the cut is synced before recovery goes on: from here the block's size is its
    // valid end, where appends continue, so the bad bytes must not come back after a crash.
    // They were set aside (and synced) first, so a crash in between loses nothing.
    f.set_len(offset)
        .and_then(|_| crate::fsutil::sync_all(&f))
        .map_err(StoreError::io(path))?;
    let msg = format!(
        "{}: {reason} at offset {offset} with no valid record after it; cut {} bytes, kept in {}",
        path.display(),
        dropped.len(),
        aside.display()
    );
    tracing::warn!("{msg}");
    report.warnings.push(msg);
    report.truncated.push(Truncation {
        path: path.to_path_buf(),
        offset,
        bytes_dropped: dropped.len() as u64,
    });
    Ok(())
}

/// Applies one record to the table; false when it contradicts what came before. Deletes read
/// the blocks they concern (after an index.db, only what was appended after it deletes).
fn apply(
    table: &mut Table,
    last_msg_id: &mut Option<String>,
    block: u32,
    off: usize,
    len: usize,
    rec: &RecordRef<'_>,
) -> Result<bool> {
    match rec.kind {
        Kind::Msg => {
            if rec.seq <= table.last_seq {
                return Ok(false);
            }
            let Ok(subject) = std::str::from_utf8(rec.subject) else {
                return Ok(false);
            };
            let (Ok(offset), Ok(len)) = (u32::try_from(off), u32::try_from(len)) else {
                return Ok(false);
            };
            *last_msg_id = if rec.flags & flags::MSG_ID != 0 {
                proto::decode_headers(rec.headers)
                    .and_then(|h| h.get(names::MSG_ID).map(str::to_string))
            } else {
                None
            };
            let loc = Loc { block, offset, len };
            table.insert(
                rec.seq,
                MsgMeta {
                    subject: table.intern(subject),
                    ts: rec.ts,
                    loc,
                    flags: rec.flags,
                },
            );
        }
        Kind::Tombstone => {
            let removed = table.remove(rec.seq)?;
            // Readers of its subject are told of it, unless it went as meant (its own TTL).
            if let Some(meta) = removed.filter(|_| rec.flags & flags::INTENDED == 0) {
                table.note_removal(rec.seq, &meta.subject);
            }
            table.note_marker(block);
            table.raise_last(rec.seq);
        }
        Kind::PurgeTo => {
            for s in table.seqs_in(0, rec.seq.saturating_sub(1))? {
                table.remove(s)?;
            }
            if rec.flags & flags::INTENDED == 0 {
                table.raise_expired_below(rec.seq);
            }
            table.note_marker(block);
            table.raise_last(rec.seq.saturating_sub(1));
        }
        Kind::LastSeq => {
            table.note_marker(block);
            table.raise_last(rec.seq);
        }
    }
    Ok(true)
}

impl Evidence {
    /// Notes what a valid record proves, before it is applied (`last_seq` is the table's last
    /// sequence so far): a leading last-sequence marker above what came before proves those
    /// sequences existed; tombstones and purge markers explain missing ones.
    fn note(&mut self, rec: &RecordRef<'_>, at_block_start: bool, last_seq: u64) {
        if at_block_start && rec.kind == Kind::LastSeq && self.after_another && rec.seq > last_seq {
            self.claims.push((last_seq + 1, rec.seq));
        }
        match rec.kind {
            Kind::Tombstone => {
                self.deleted.insert(rec.seq);
            }
            Kind::PurgeTo => self.purged_below = self.purged_below.max(rec.seq),
            Kind::Msg => {
                self.messages.insert(rec.seq, rec.seq);
                self.message_after_damage(rec.seq);
            }
            Kind::LastSeq => {}
        }
    }

    /// Notes damage at the start of `rest`, where the next sequence was `first_lost`: the
    /// sequences from there up to the next message found after the damage existed. The header
    /// of a torn record naming that next sequence proves it existed too.
    fn damage_at(&mut self, rest: &[u8], first_lost: u64) {
        self.open_damage.get_or_insert(first_lost);
        let torn = rest.get(6..14).filter(|_| rest.get(4) == Some(&0));
        let torn_seq = torn
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .filter(|s| *s == first_lost);
        if let Some(seq) = torn_seq {
            self.claims.push((first_lost, seq));
        }
    }

    /// Notes a message applied after damage: the sequences between them existed.
    fn message_after_damage(&mut self, seq: u64) {
        if let Some(from) = self.open_damage.take()
            && seq > from
        {
            self.claims.push((from, seq - 1));
        }
    }

    /// The lost sequences as ranges; raises the table's last sequence past them so they are never
    /// reused. Positions `known` (lost.db) already holds as unconfirmed are not: a leading marker
    /// of a block begun after them claims them, but no record of them was ever proven. Works on
    /// ranges: the cost follows the claims, the live runs and the deletions, never the number of
    /// sequences a claim spans (a marker or a stale index.db can claim billions).
    pub fn lost(&self, table: &mut Table, known: &Losses) -> Vec<RangeInclusive<u64>> {
        if self.claims.is_empty() {
            return Vec::new();
        }
        let mut explained = RangeSet::default();
        for (first, last) in table.live_ranges() {
            explained.insert(first, last);
        }
        for &s in &self.deleted {
            explained.insert(s, s);
        }
        if self.purged_below > 0 {
            explained.insert(0, self.purged_below - 1);
        }
        for (first, last) in known.unconfirmed() {
            explained.insert(first, last);
        }
        let mut claimed = RangeSet::default();
        for &(from, to) in &self.claims {
            table.raise_last(to);
            claimed.insert(from, to);
        }
        let mut lost = Vec::new();
        for (from, to) in claimed.ranges() {
            let mut at = from;
            loop {
                at = explained.next_absent(at);
                // (`next_absent` saturates: a set reaching `u64::MAX` gives it back.)
                if at > to || explained.contains(at) {
                    break;
                }
                let end = explained
                    .next_present(at)
                    .map_or(to, |next| to.min(next - 1));
                lost.push(at..=end);
                match end.checked_add(1) {
                    Some(next) if end < to => at = next,
                    _ => break,
                }
            }
        }
        lost
    }
}
