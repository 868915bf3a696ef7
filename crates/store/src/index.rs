//! `msgs/index.db`: a snapshot of the stream's table so open reads no block.
//!
//! Version 4 (FORMAT.md) holds no per-message entry: the header (last sequence and time, the
//! last record's checksum, the first live message's time, the position below which removed
//! messages are told as expired), per block its size, counters, time
//! range and deleted sequences as ranges, per subject its live count and block range, the last
//! message id, the runs of removed positions readers of their subjects are told of
//! ([`crate::removals`]), and an xxh3-64 of everything before it. Its size follows blocks +
//! subjects + runs of deletes, not the messages. Decoding checks every count against the bytes that
//! remain and every block's counters against its sequence range, so no content can make it
//! panic or over-allocate.

use std::collections::BTreeMap;
use std::path::PathBuf;

use xxhash_rust::xxh3::xxh3_64;

use crate::decode::{BlockProblem, FileDecodeError, MAX_SEQ};
use crate::fsutil::{Reader, put_uvarint, put_varint};
use crate::ranges::RangeSet;
use crate::removals::Removals;
use crate::table::{BlockEntry, BlockStats, SubjectSummary, Table, Unread};

/// The file's name in `msgs/`.
pub const FILE: &str = "index.db";
const MAGIC: &[u8; 4] = b"SLIX";
const VERSION: u8 = 4;
/// The version before the told removals were kept; still read (none is known then).
const VERSION_WITHOUT_REMOVALS: u8 = 3;
/// The version before `expired_below` was kept; still read (every removed position counts as
/// expired then, as it did).
const VERSION_WITHOUT_EXPIRED_BELOW: u8 = 2;

/// What index.db says about the blocks, to check against the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockClaim {
    /// Block id.
    pub id: u32,
    /// Its size when the index was written.
    pub size: u64,
}

/// A decoded index.
#[derive(Debug)]
pub struct Snapshot {
    /// The table, no block read yet.
    pub table: Table,
    /// Block sizes claimed.
    pub blocks: Vec<BlockClaim>,
    /// Checksum of the last record of the last block.
    pub last_checksum: u64,
    /// `Nats-Msg-Id` of the last message.
    pub last_msg_id: Option<String>,
}

/// Encodes the index of `table`; `sizes` are the flushed block sizes.
pub fn encode(
    table: &Table,
    sizes: &[(u32, u64)],
    last_checksum: u64,
    last_msg_id: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + sizes.len() * 48 + table.num_subjects() as usize * 24);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    let (first_seq, first_ts) = table.known_first_time().unwrap_or((0, 0));
    for v in [
        table.last_seq,
        table.last_ts as u64,
        last_checksum,
        first_seq,
        first_ts as u64,
        table.expired_below,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_uvarint(&mut out, sizes.len() as u64);
    let empty = BlockEntry::default();
    let entries: std::collections::HashMap<u32, &BlockEntry> = table.blocks().collect();
    for &(id, size) in sizes {
        let b = entries.get(&id).copied().unwrap_or(&empty);
        let s = &b.stats;
        for v in [id as u64, size, s.msgs, s.bytes, s.first, s.last] {
            put_uvarint(&mut out, v);
        }
        put_varint(&mut out, s.first_ts);
        put_varint(&mut out, s.last_ts.wrapping_sub(s.first_ts));
        for v in [s.ttl, s.sched, s.sourced, s.msg_ids, s.markers] {
            put_uvarint(&mut out, v as u64);
        }
        put_uvarint(&mut out, b.deleted.ranges_len() as u64);
        let mut prev = s.first;
        for (start, end) in b.deleted.ranges() {
            put_uvarint(&mut out, start - prev);
            put_uvarint(&mut out, end - start);
            prev = end;
        }
    }
    let mut subjects: Vec<(&str, &SubjectSummary)> = table.subjects().collect();
    subjects.sort_unstable_by_key(|(s, _)| *s);
    put_uvarint(&mut out, subjects.len() as u64);
    for (s, v) in subjects {
        put_uvarint(&mut out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
        for x in [v.count, v.first_block as u64, v.last_block as u64] {
            put_uvarint(&mut out, x);
        }
    }
    let id = last_msg_id.unwrap_or("");
    put_uvarint(&mut out, id.len() as u64);
    out.extend_from_slice(id.as_bytes());
    table.removals.encode(&mut out);
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The error for block `block`'s description.
fn block_error(block: u32, problem: BlockProblem) -> FileDecodeError {
    FileDecodeError::Block { block, problem }
}

/// Decodes index.db; the error says what is wrong. Blocks are read later from `msgs_dir`.
///
/// IMPORTANT: the parts are read in file order — header, blocks, subjects, trailer — and each
/// is checked against what came before it.
pub fn decode(bytes: &[u8], msgs_dir: PathBuf) -> Result<Snapshot, FileDecodeError> {
    let mut r = Reader::new(verified(bytes)?);
    let (header, version) = decode_header(&mut r)?;
    let (blocks, entries) = decode_blocks(&mut r, header.last_seq)?;
    let mut table = Table::unloaded(msgs_dir, header.last_seq, header.last_ts as i64, entries);
    let first_live = table.first_seq();
    table.expired_below = match header.expired_below {
        Some(seq) if seq > first_live => {
            return Err(FileDecodeError::ExpiredPastFirst {
                expired: seq,
                first: first_live,
            });
        }
        Some(seq) => seq,
        None => first_live,
    };
    decode_subjects(&mut r, &mut table)?;
    let id = r
        .string()
        .ok_or(FileDecodeError::Malformed("last message id"))?;
    if version == VERSION {
        table.removals = Removals::decode(&mut r, header.last_seq)?;
        table.removals.forget_below(table.expired_below);
    }
    if r.remaining() != 0 {
        return Err(FileDecodeError::Malformed("trailer"));
    }
    table.set_first_time(header.first_seq, header.first_ts as i64);
    Ok(Snapshot {
        table,
        blocks,
        last_checksum: header.last_checksum,
        last_msg_id: (!id.is_empty()).then(|| id.to_string()),
    })
}

/// The bytes of index.db before its checksum, once the checksum verifies.
fn verified(bytes: &[u8]) -> Result<&[u8], FileDecodeError> {
    if bytes.len() < MAGIC.len() + 1 + 40 + 8 {
        return Err(FileDecodeError::TooShort { len: bytes.len() });
    }
    let (signed, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(signed).to_le_bytes() != sum {
        return Err(FileDecodeError::Checksum);
    }
    Ok(signed)
}

/// The fixed part of index.db.
struct Header {
    last_seq: u64,
    last_ts: u64,
    last_checksum: u64,
    first_seq: u64,
    first_ts: u64,
    /// Absent from version 1 files.
    expired_below: Option<u64>,
}

/// Magic, version and the stream's counters; the version.
fn decode_header(r: &mut Reader<'_>) -> Result<(Header, u8), FileDecodeError> {
    let bad = FileDecodeError::Malformed;
    if r.bytes(4) != Some(MAGIC) {
        return Err(FileDecodeError::BadMagic);
    }
    let version = r.u8().ok_or(bad("version"))?;
    if ![
        VERSION,
        VERSION_WITHOUT_REMOVALS,
        VERSION_WITHOUT_EXPIRED_BELOW,
    ]
    .contains(&version)
    {
        return Err(FileDecodeError::Version {
            found: version,
            expected: None,
        });
    }
    let mut fields = [0u64; 5];
    for x in &mut fields {
        *x = r.u64().ok_or(bad("header"))?;
    }
    let [last_seq, last_ts, last_checksum, first_seq, first_ts] = fields;
    let expired_below = match version {
        VERSION_WITHOUT_EXPIRED_BELOW => None,
        _ => Some(r.u64().ok_or(bad("header"))?),
    };
    // The next sequences must exist (found by the `store_index` and `store_open` targets).
    if last_seq > MAX_SEQ {
        return Err(FileDecodeError::PastHighestSequence {
            what: "last sequence",
            seq: last_seq,
        });
    }
    let header = Header {
        last_seq,
        last_ts,
        last_checksum,
        first_seq,
        first_ts,
        expired_below,
    };
    Ok((header, version))
}

/// The blocks' claims and entries, in ascending, disjoint order, none past `last_seq`.
fn decode_blocks(
    r: &mut Reader<'_>,
    last_seq: u64,
) -> Result<(Vec<BlockClaim>, BTreeMap<u32, BlockEntry>), FileDecodeError> {
    // A block takes at least 14 bytes: 13 one-byte uvarints/varints and a range count.
    let n = r
        .count(14)
        .ok_or(FileDecodeError::Malformed("block count"))?;
    let mut blocks: Vec<BlockClaim> = Vec::with_capacity(n);
    // Inserted in ascending order straight into the map: a block entry is moved once.
    let mut entries = BTreeMap::new();
    let mut max_last = 0;
    for i in 0..n {
        let (claim, stats, deleted) = decode_block(r).ok_or(FileDecodeError::Malformed("block"))?;
        if blocks.last().is_some_and(|b| b.id >= claim.id) {
            return Err(block_error(claim.id, BlockProblem::OutOfOrder));
        }
        if stats.last > last_seq {
            return Err(block_error(claim.id, BlockProblem::PastLastSequence));
        }
        // Blocks hold ascending, disjoint sequence ranges.
        if stats.first != 0 && stats.first <= max_last {
            return Err(block_error(claim.id, BlockProblem::Overlaps));
        }
        max_last = max_last.max(stats.last);
        let unread = Unread {
            end: claim.size,
            sealed: i + 1 < n,
        };
        let entry = BlockEntry::unloaded(stats, deleted, unread);
        if !entry.counts_agree() {
            return Err(block_error(claim.id, BlockProblem::CountsContradict));
        }
        entries.insert(claim.id, entry);
        blocks.push(claim);
    }
    Ok((blocks, entries))
}

/// The subjects' summaries, into `table`: each listed once, their counts adding up to the
/// blocks'.
fn decode_subjects(r: &mut Reader<'_>, table: &mut Table) -> Result<(), FileDecodeError> {
    let bad = FileDecodeError::Malformed;
    let msgs = table.count();
    let n = r.count(5).ok_or(bad("subject count"))?;
    let mut subject_msgs = 0u64;
    for _ in 0..n {
        let subject = r.string().ok_or(bad("subject"))?;
        let mut v = [0u64; 3];
        for x in &mut v {
            *x = r.uvarint().ok_or(bad("subject summary"))?;
        }
        let block = |x: u64| u32::try_from(x).map_err(|_| bad("subject block"));
        let summary = SubjectSummary {
            count: v[0],
            first_block: block(v[1])?,
            last_block: block(v[2])?,
            last_seq: 0,
        };
        if summary.count == 0 || summary.first_block > summary.last_block {
            return Err(bad("subject summary"));
        }
        if table.subject_count(subject) != 0 {
            return Err(FileDecodeError::SubjectTwice {
                subject: subject.to_owned(),
            });
        }
        subject_msgs = subject_msgs.saturating_add(summary.count);
        table.add_subject(subject, summary);
    }
    if subject_msgs != msgs {
        return Err(FileDecodeError::CountsDisagree {
            subjects: subject_msgs,
            blocks: msgs,
        });
    }
    Ok(())
}

/// One block's claim, counters and deleted ranges; `None` when malformed.
fn decode_block(r: &mut Reader<'_>) -> Option<(BlockClaim, BlockStats, RangeSet)> {
    let mut v = [0u64; 6];
    for x in &mut v {
        *x = r.uvarint()?;
    }
    let first_ts = r.varint()?;
    let last_ts = first_ts.wrapping_add(r.varint()?);
    let mut c = [0u32; 5];
    for x in &mut c {
        *x = u32::try_from(r.uvarint()?).ok()?;
    }
    let stats = BlockStats {
        msgs: v[2],
        bytes: v[3],
        first: v[4],
        last: v[5],
        first_ts,
        last_ts,
        ttl: c[0],
        sched: c[1],
        sourced: c[2],
        msg_ids: c[3],
        markers: c[4],
    };
    let n = r.count(2)?;
    let mut ranges = Vec::with_capacity(n);
    let mut prev = stats.first;
    for i in 0..n {
        let start = prev.checked_add(r.uvarint()?)?;
        let end = start.checked_add(r.uvarint()?)?;
        // Ranges are disjoint and not adjacent: each starts at least two past the last end.
        if i > 0 && start < prev.checked_add(2)? {
            return None;
        }
        ranges.push((start, end));
        prev = end;
    }
    let deleted = RangeSet::from_sorted(ranges);
    let claim = BlockClaim {
        id: u32::try_from(v[0]).ok()?,
        size: v[1],
    };
    Some((claim, stats, deleted))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::block::Loc;
    use crate::table::MsgMeta;

    fn meta(table: &Table, block: u32, ts: i64) -> MsgMeta {
        MsgMeta {
            subject: table.intern("a"),
            ts,
            loc: Loc {
                block,
                offset: 0,
                len: 40,
            },
            flags: 0,
        }
    }

    /// Found by the `store_index` fuzz target (version 1): two messages 2^40 sequences apart
    /// once cost a slot per sequence in between. Version 2 keeps the gap as one deleted range.
    #[test]
    fn far_apart_sequences_cost_one_range_not_one_slot_per_sequence() {
        let mut table = Table::default();
        for seq in [1, 1 << 40] {
            let m = meta(&table, 1, 1);
            table.insert(seq, m);
        }
        let bytes = encode(&table, &[(1, 80)], 7, None);
        let snapshot = decode(&bytes, PathBuf::new()).expect("a valid index");
        let t = &snapshot.table;
        assert_eq!(t.count(), 2);
        assert_eq!(t.first_seq(), 1);
        assert_eq!(t.live_ranges(), [(1, 1), (1 << 40, 1 << 40)]);
        let (_, block) = t.blocks().next().unwrap();
        assert_eq!(block.deleted.ranges_len(), 1);
    }

    /// Found by the `store_index` fuzz target: a last sequence of `u64::MAX` left no first
    /// sequence for an empty stream (`last + 1` overflowed).
    #[test]
    fn a_last_sequence_with_no_next_one_is_refused() {
        let mut table = Table::default();
        table.raise_last(u64::MAX);
        let bytes = encode(&table, &[], 7, None);
        let err = decode(&bytes, PathBuf::new()).unwrap_err();
        assert_eq!(
            err,
            FileDecodeError::PastHighestSequence {
                what: "last sequence",
                seq: u64::MAX
            }
        );
    }

    /// Everything the table knows without reading a block survives an encode/decode, and the
    /// decoded table has read no block.
    #[test]
    fn round_trip_keeps_counters_deletes_and_subjects() {
        let mut table = Table::default();
        for seq in 1..=10u64 {
            let mut m = meta(&table, 1 + (seq > 5) as u32, seq as i64 * 10);
            if seq % 2 == 0 {
                m.subject = Arc::from("b");
            }
            table.insert(seq, m);
        }
        for seq in [1, 4, 7, 8] {
            table.remove(seq).unwrap();
        }
        let bytes = encode(&table, &[(1, 200), (2, 200)], 7, Some("id-9"));
        let snap = decode(&bytes, PathBuf::new()).expect("a valid index");
        let t = &snap.table;
        assert_eq!(snap.last_msg_id.as_deref(), Some("id-9"));
        assert_eq!(t.count(), 6);
        assert_eq!(t.live_ranges(), table.live_ranges());
        assert_eq!(t.subject_counts(None), table.subject_counts(None));
        assert_eq!(t.first_seq(), 2);
        assert_eq!(t.known_first_time(), Some((2, 20)));
        assert_eq!(t.blocks_loaded(), 0);
        let stats: Vec<BlockStats> = t.blocks().map(|(_, b)| b.stats.clone()).collect();
        let want: Vec<BlockStats> = table.blocks().map(|(_, b)| b.stats.clone()).collect();
        assert_eq!(stats, want);
    }
}
