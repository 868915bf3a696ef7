//! Recovery on open: load index.db when it matches the blocks (then scan only what was
//! appended after it), else rebuild from every block, verifying every record. A bad record
//! cuts its block there; the sequences lost are worked out from the records that survive
//! beyond the cut, reported, and never reused. Then per-message state (TTL) is recovered in one
//! forward scan from the sidecar stamp over the blocks whose counters say they matter.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::block::{Blocks, block_path, list_block_files};
use crate::error::{Result, StoreError};
use crate::fsutil::Reader;
use crate::index;
use crate::persist::{SCHED_VERSION, THW_VERSION};
use crate::proto::{self, MsgTtl, names};
use crate::record::{self, DecodeError, Kind, flags};
use crate::schedule::Schedules;
use crate::sidecar;
use crate::sources::{SOURCES_VERSION, SourceIndex, parse_header};
use crate::table::{MsgMeta, Table};
use crate::ttl::TtlWheel;
use crate::types::{RecoveryPath, RecoveryReport, SidecarRecovery, Truncation};

/// The recovered parts of a file stream.
pub struct Recovered {
    /// Message index.
    pub table: Table,
    /// Block files, ready for appends.
    pub blocks: Blocks,
    /// Last message id.
    pub last_msg_id: Option<String>,
    /// Pending TTL expiries.
    pub ttl: TtlWheel,
    /// Schedules in force.
    pub schedules: Schedules,
    /// Source positions.
    pub sources: SourceIndex,
    /// index.db described the blocks exactly (nothing to rewrite on close).
    pub index_current: bool,
}

/// Recovers the stream whose messages are in `msgs_dir`.
pub fn recover(
    name: &str,
    msgs_dir: &Path,
    block_size: u64,
    report: &mut RecoveryReport,
) -> Result<Recovered> {
    fs::create_dir_all(msgs_dir).map_err(StoreError::io(msgs_dir))?;
    // A readable index.db that no longer matches the blocks still proves how far the stream went.
    let mut index_evidence = None;
    let index = try_index(msgs_dir);
    let ids = match &index {
        Ok(Some((_, _, ids))) => ids.clone(),
        _ => list_block_files(msgs_dir)?,
    };
    let (mut table, mut last_msg_id, mut sizes, mut last_sum, scan_from) = match index {
        Ok(Some((snap, from, _))) => {
            report.path = RecoveryPath::Index;
            let sizes = snap
                .blocks
                .iter()
                .map(|b| (b.id, b.size))
                .collect::<Vec<_>>();
            (
                snap.table,
                snap.last_msg_id,
                sizes,
                snap.last_checksum,
                from,
            )
        }
        Ok(None) => {
            report.path = RecoveryPath::Rebuild;
            (
                Table::default(),
                None,
                Vec::new(),
                0,
                ids.first().map(|id| (*id, 0)),
            )
        }
        Err(why) => {
            report.path = RecoveryPath::Rebuild;
            if let Some(snap) = fs::read(msgs_dir.join("index.db"))
                .ok()
                .and_then(|b| index::decode(&b, msgs_dir.to_path_buf()).ok())
            {
                let last = snap.table.last_seq;
                let mut live = snap.table.live_ranges();
                live.push((last, last));
                index_evidence = Some(live);
            }
            warn(
                report,
                name,
                format!("index.db ignored: {why}; rebuilding from blocks"),
            );
            (
                Table::default(),
                None,
                Vec::new(),
                0,
                ids.first().map(|id| (*id, 0)),
            )
        }
    };
    let mut scanned = 0;
    let mut evidence = Evidence::default();
    if let Some((from_id, from_offset)) = scan_from {
        sizes.retain(|(id, _)| *id < from_id);
        for &id in ids.iter().filter(|id| **id >= from_id) {
            let start = if id == from_id { from_offset } else { 0 };
            // Only a block after one already read can prove a gap with its leading marker.
            evidence.after_another |= start > 0;
            let scan = scan_block(
                msgs_dir,
                id,
                start,
                &mut table,
                &mut last_msg_id,
                &mut evidence,
                report,
            )?;
            scanned += scan.valid_end - start.min(scan.valid_end);
            if let Some(sum) = scan.last_sum {
                last_sum = sum;
            }
            sizes.push((id, scan.valid_end));
        }
    }
    evidence.claims.extend(index_evidence.unwrap_or_default());
    report.lost = evidence.lost(&mut table);
    for r in &report.lost {
        tracing::warn!(
            stream = name,
            first = r.start(),
            last = r.end(),
            "sequences lost to a damaged block"
        );
    }
    let index_current = report.path == RecoveryPath::Index && scanned == 0 && report.is_clean();
    let mut blocks = Blocks::file(msgs_dir.to_path_buf(), block_size, &sizes)?;
    blocks.set_last_checksum(last_sum);
    let per_message = recover_per_message(name, msgs_dir, &mut table, &blocks, report)?;
    let sources_current = match report.sources {
        SidecarRecovery::Current => true,
        SidecarRecovery::Missing => per_message.sources.positions().is_empty(),
        SidecarRecovery::Stale | SidecarRecovery::Rejected => false,
    };
    let index_current = index_current && sources_current && report.per_message_blocks_scanned == 0;
    Ok(Recovered {
        table,
        blocks,
        last_msg_id: last_msg_id.take(),
        ttl: per_message.ttl,
        schedules: per_message.schedules,
        sources: per_message.sources,
        index_current,
    })
}

fn warn(report: &mut RecoveryReport, name: &str, msg: String) {
    tracing::warn!(stream = name, "{msg}");
    report.warnings.push(msg);
}

/// Where the forward scan of blocks starts: block id and offset.
type ScanFrom = Option<(u32, u64)>;

/// An index.db that matches the blocks, where to scan from, and the block ids present.
type IndexMatch = (index::Snapshot, ScanFrom, Vec<u32>);

/// Loads index.db if it matches the blocks; returns it, where to scan from and the block ids.
///
/// Blocks are deleted only after an index.db that no longer names them is on disk, and new
/// blocks take the next id, so when no block follows index.db's last one, the blocks are
/// exactly those it names and the directory is not listed (a listing costs O(blocks)). When one
/// follows (blocks started after the snapshot), the directory is listed and must match.
fn try_index(msgs_dir: &Path) -> Result<Option<IndexMatch>, String> {
    let path = msgs_dir.join("index.db");
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let snap = index::decode(&bytes, msgs_dir.to_path_buf())?;
    let claimed: Vec<u32> = snap.blocks.iter().map(|b| b.id).collect();
    let last_claimed = claimed.last().copied();
    let followed = last_claimed
        .and_then(|l| l.checked_add(1))
        .is_none_or(|next| block_path(msgs_dir, next).exists());
    let ids = if followed {
        let ids = list_block_files(msgs_dir).map_err(|e| e.to_string())?;
        let listed_then: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|id| last_claimed.is_some_and(|l| *id <= l))
            .collect();
        if listed_then != claimed {
            return Err("it lists different blocks than the directory holds".into());
        }
        ids
    } else {
        claimed
    };
    // Sealed blocks are checked (size, every record) when first read, so open stays
    // O(blocks); the last block is checked now because appends after the snapshot continue it.
    if let Some(last) = snap.blocks.last() {
        let file = fs::File::open(block_path(msgs_dir, last.id)).map_err(|e| e.to_string())?;
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        if len < last.size {
            return Err(format!(
                "block {} is {len} bytes, index.db says {}",
                last.id, last.size
            ));
        }
        if last.size >= 8 {
            let mut sum = [0u8; 8];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut sum, last.size - 8)
                .map_err(|e| e.to_string())?;
            if u64::from_le_bytes(sum) != snap.last_checksum {
                return Err("the last record's checksum does not match".into());
            }
        }
    }
    let from = match last_claimed {
        Some(id) => Some((id, snap.blocks.last().map_or(0, |b| b.size))),
        None => ids.first().map(|id| (*id, 0)),
    };
    Ok(Some((snap, from, ids)))
}

struct BlockScan {
    /// Length of the valid prefix (the file is cut there).
    valid_end: u64,
    /// Checksum of the last valid record.
    last_sum: Option<u64>,
}

/// What recovery learnt about sequences that existed: claims (from records beyond a cut, a torn
/// record's header, leading last-sequence markers, a stale index.db) and the deletions that
/// explain missing ones. Claimed, not live and not deleted = lost.
#[derive(Default)]
struct Evidence {
    claims: Vec<(u64, u64)>,
    deleted: std::collections::BTreeSet<u64>,
    purged_below: u64,
    /// A block (or part of one) was read before the current one.
    after_another: bool,
}

impl Evidence {
    /// The lost sequences as ranges; raises the table's last sequence past them so they are never
    /// reused.
    fn lost(&self, table: &mut Table) -> Vec<std::ops::RangeInclusive<u64>> {
        let mut lost: Vec<std::ops::RangeInclusive<u64>> = Vec::new();
        let mut claimed: Vec<u64> = Vec::new();
        for &(from, to) in &self.claims {
            table.raise_last(to);
            claimed.extend((from..=to).filter(|s| {
                *s >= self.purged_below && !self.deleted.contains(s) && !table.contains(*s)
            }));
        }
        claimed.sort_unstable();
        claimed.dedup();
        for s in claimed {
            match lost.last_mut() {
                Some(r) if *r.end() + 1 == s => *r = *r.start()..=s,
                _ => lost.push(s..=s),
            }
        }
        lost
    }
}

/// Applies every valid record of block `id` from `start`; cuts the file at the first bad one.
fn scan_block(
    msgs_dir: &Path,
    id: u32,
    start: u64,
    table: &mut Table,
    last_msg_id: &mut Option<String>,
    evidence: &mut Evidence,
    report: &mut RecoveryReport,
) -> Result<BlockScan> {
    let path = block_path(msgs_dir, id);
    // Only the bytes from `start` are read: with index.db that is just what was appended after it.
    let mut data = Vec::new();
    let mut file = fs::File::open(&path).map_err(StoreError::io(&path))?;
    file.seek(SeekFrom::Start(start))
        .and_then(|_| file.read_to_end(&mut data))
        .map_err(StoreError::io(&path))?;
    let base = start as usize;
    let mut off = 0;
    let mut scan = BlockScan {
        valid_end: 0,
        last_sum: None,
    };
    while off < data.len() {
        let decoded = record::decode(&data[off..]);
        if let Ok((rec, _, _)) = &decoded {
            // A leading marker above what came before proves those sequences existed.
            if base + off == 0
                && rec.kind == Kind::LastSeq
                && evidence.after_another
                && rec.seq > table.last_seq
            {
                evidence.claims.push((table.last_seq + 1, rec.seq));
            }
            match rec.kind {
                Kind::Tombstone => {
                    evidence.deleted.insert(rec.seq);
                }
                Kind::PurgeTo => evidence.purged_below = evidence.purged_below.max(rec.seq),
                Kind::Msg | Kind::LastSeq => {}
            }
        }
        let applied = match &decoded {
            Ok((rec, len, _)) => apply(table, last_msg_id, id, base + off, *len, rec)?,
            Err(_) => false,
        };
        match decoded {
            Ok((_, len, sum)) if applied => {
                off += len;
                scan.last_sum = Some(sum);
            }
            result => {
                let reason = match result {
                    Err(DecodeError::Incomplete) => "torn record",
                    Err(DecodeError::Corrupt) => "corrupt record",
                    Ok(_) => "out-of-order record",
                };
                // Records beyond the damage, and the header of a torn record naming the next
                // sequence, prove which sequences existed.
                let first_lost = table.last_seq + 1;
                let torn = data
                    .get(off + 6..off + 14)
                    .filter(|_| data.get(off + 4) == Some(&0));
                let torn_seq = torn
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
                    .filter(|s| *s == first_lost);
                if let Some(max) = resync_max_seq(&data[off + 1..])
                    .max(torn_seq)
                    .filter(|m| *m >= first_lost)
                {
                    evidence.claims.push((first_lost, max));
                }
                let dropped = (data.len() - off) as u64;
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(StoreError::io(&path))?;
                f.set_len((base + off) as u64)
                    .and_then(|_| f.sync_all())
                    .map_err(StoreError::io(&path))?;
                let msg = format!(
                    "{}: {reason} at offset {}; cut {dropped} bytes",
                    path.display(),
                    base + off
                );
                tracing::warn!("{msg}");
                report.warnings.push(msg);
                report.truncated.push(Truncation {
                    path: path.clone(),
                    offset: (base + off) as u64,
                    bytes_dropped: dropped,
                });
                break;
            }
        }
    }
    scan.valid_end = (base + off) as u64;
    evidence.after_another = true;
    Ok(scan)
}

/// Applies one record to the table; false when it contradicts what came before. Deletes read
/// the blocks they concern (after an index.db, only what was appended after it deletes).
fn apply(
    table: &mut Table,
    last_msg_id: &mut Option<String>,
    block: u32,
    off: usize,
    len: usize,
    rec: &record::RecordRef<'_>,
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
            let loc = crate::block::Loc { block, offset, len };
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
            table.remove(rec.seq)?;
            table.note_marker(block);
            table.raise_last(rec.seq);
        }
        Kind::PurgeTo => {
            for s in table.seqs_in(0, rec.seq.saturating_sub(1))? {
                table.remove(s)?;
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

/// The highest message sequence among valid records found at any offset of `data`.
fn resync_max_seq(data: &[u8]) -> Option<u64> {
    record::resync(data)
        .filter(|(_, rec, _)| rec.kind != Kind::PurgeTo)
        .map(|(_, rec, _)| rec.seq)
        .max()
}

/// Loads one sidecar with `read`: its stamp and how it went. A missing file gives stamp 0 (scan
/// everything); a bad one is deleted with a warning and also gives stamp 0.
fn load_sidecar(
    name: &str,
    path: &Path,
    version: u8,
    last_seq: u64,
    report: &mut RecoveryReport,
    read: impl FnOnce(&sidecar::Sidecar<'_>) -> Result<(), String>,
) -> (u64, SidecarRecovery) {
    let Ok(bytes) = fs::read(path) else {
        return (0, SidecarRecovery::Missing);
    };
    match sidecar::decode(&bytes, version).and_then(|s| read(&s).map(|_| s.stamp)) {
        Ok(stamp) if stamp > last_seq => (stamp, SidecarRecovery::Current),
        Ok(stamp) => (stamp, SidecarRecovery::Stale),
        Err(why) => {
            warn(
                report,
                name,
                format!("{} ignored: {why}; rescanning", path.display()),
            );
            let _ = fs::remove_file(path);
            (0, SidecarRecovery::Rejected)
        }
    }
}

/// Per-message state recovered in one pass.
pub struct PerMessage {
    /// TTL expiries.
    pub ttl: TtlWheel,
    /// Schedules in force.
    pub schedules: Schedules,
    /// Source positions.
    pub sources: SourceIndex,
}

/// Recovers TTL, schedule and source state: the entries of thw.db, sched.db and sources.db,
/// then ONE forward scan from the oldest of their stamps over only the blocks whose counters
/// show TTL'd, scheduled or sourced messages at or above the matching stamp.
fn recover_per_message(
    name: &str,
    msgs_dir: &Path,
    table: &mut Table,
    blocks: &Blocks,
    report: &mut RecoveryReport,
) -> Result<PerMessage> {
    let mut ttl = TtlWheel::default();
    let mut schedules = Schedules::default();
    let mut sources = SourceIndex::default();
    let last = table.last_seq;
    let (thw_stamp, _) = load_sidecar(
        name,
        &msgs_dir.join("thw.db"),
        THW_VERSION,
        last,
        report,
        // A file refused part way through is ignored whole (as sources.db is): the entries read
        // before the bad one are dropped with it.
        |s| {
            let mut read = TtlWheel::default();
            read_thw(s, table, &mut read)?;
            ttl = read;
            Ok(())
        },
    );
    let (sched_stamp, _) = load_sidecar(
        name,
        &msgs_dir.join("sched.db"),
        SCHED_VERSION,
        last,
        report,
        |s| {
            let mut read = Schedules::default();
            read_sched(s, table, &mut read)?;
            schedules = read;
            Ok(())
        },
    );
    let sources_path = msgs_dir.parent().unwrap_or(msgs_dir).join("sources.db");
    let (src_stamp, how) = load_sidecar(name, &sources_path, SOURCES_VERSION, last, report, |s| {
        sources = SourceIndex::decode(s)?;
        Ok(())
    });
    report.sources = how;
    let stamp = thw_stamp.min(sched_stamp).min(src_stamp);
    let relevant: Vec<(u64, u64)> = table
        .blocks()
        .map(|(_, b)| &b.stats)
        .filter(|s| {
            (s.ttl > 0 && s.last >= thw_stamp)
                || (s.sched > 0 && s.last >= sched_stamp)
                || (s.sourced > 0 && s.last >= src_stamp)
        })
        .map(|s| (s.first.max(stamp), s.last))
        .collect();
    for (from, upto) in relevant {
        report.per_message_blocks_scanned += 1;
        let mut wanted = Vec::new();
        table.walk(from, upto, |seq, m| {
            let needs_ttl =
                m.flags & flags::TTL != 0 && m.flags & flags::TTL_NEVER == 0 && seq >= thw_stamp;
            let needs_sched = m.flags & flags::SCHEDULE != 0 && seq >= sched_stamp;
            let needs_source = m.flags & flags::SOURCED != 0 && seq >= src_stamp;
            if needs_ttl || needs_sched || needs_source {
                wanted.push((seq, m.clone(), needs_ttl, needs_sched, needs_source));
            }
            true
        })?;
        for (seq, m, needs_ttl, needs_sched, needs_source) in wanted {
            let Some(h) = blocks.read(m.loc).ok().and_then(|b| {
                record::decode(&b)
                    .ok()
                    .and_then(|(r, _, _)| proto::decode_headers(r.headers))
            }) else {
                continue;
            };
            if let Some(MsgTtl::After(d)) = h
                .get(names::TTL)
                .and_then(|v| MsgTtl::parse(v).ok())
                .filter(|_| needs_ttl)
            {
                ttl.insert(seq, m.ts.saturating_add(crate::state::nanos(d)));
            }
            if let Ok(Some(v)) = crate::schedule::validate(needs_sched, &m.subject, &h, m.ts)
                .map(|v| v.filter(|_| needs_sched))
            {
                schedules.insert(&m.subject, seq, v.first);
            }
            if let Some((iname, origin, ident)) = h
                .get(names::STREAM_SOURCE)
                .filter(|_| needs_source)
                .and_then(parse_header)
            {
                sources.record(&iname, origin, &ident);
            }
        }
    }
    Ok(PerMessage {
        ttl,
        schedules,
        sources,
    })
}

/// Reads the `thw.db` entries into `wheel`, keeping those whose message is still in `table`.
/// (Crate-visible for the fuzz targets, through `crate::fuzzing`.)
pub(crate) fn read_thw(
    s: &sidecar::Sidecar<'_>,
    table: &Table,
    wheel: &mut TtlWheel,
) -> Result<(), String> {
    let mut r = Reader::new(s.body);
    let n = usize::try_from(s.count)
        .ok()
        .filter(|n| *n <= s.body.len() / 2)
        .ok_or("entry count exceeds the file")?;
    for _ in 0..n {
        let at = r.varint().ok_or("malformed entry")?;
        let seq = r.uvarint().ok_or("malformed entry")?;
        if table.contains(seq) {
            wheel.insert(seq, at);
        }
    }
    Ok(())
}

/// Reads the `sched.db` entries into `schedules`, keeping those whose message is still in
/// `table` under the same subject (reading the blocks they live in). (Crate-visible for the fuzz targets, through
/// `crate::fuzzing`.)
pub(crate) fn read_sched(
    s: &sidecar::Sidecar<'_>,
    table: &mut Table,
    schedules: &mut Schedules,
) -> Result<(), String> {
    let mut r = Reader::new(s.body);
    let n = usize::try_from(s.count)
        .ok()
        .filter(|n| *n <= s.body.len() / 4)
        .ok_or("entry count exceeds the file")?;
    for _ in 0..n {
        let len = r
            .bytes(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or("malformed entry")?;
        let subject = r
            .bytes(len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or("malformed subject")?;
        let next = r.varint().ok_or("malformed entry")?;
        let seq = r.uvarint().ok_or("malformed entry")?;
        let live = table.get(seq).map_err(|e| e.to_string())?;
        if live.is_some_and(|m| &*m.subject == subject) {
            schedules.insert(subject, seq, next);
        }
    }
    Ok(())
}
