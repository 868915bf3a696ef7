//! `msgs/index.db`: a snapshot of the stream's index so open does not re-read every block.
//!
//! Layout (FORMAT.md): magic `SLIX`, version, last seq/time, the active block's size and last
//! record checksum, per-block counters, per-subject totals, the live message table, the last
//! message id, and an xxh3-64 of everything before it. Decoding checks every count against the
//! bytes that remain, so no content can make it panic or over-allocate.

use std::collections::HashMap;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::block::Loc;
use crate::fsutil::{Reader, put_uvarint, put_varint};
use crate::table::{BlockStats, MsgMeta, Table};

const MAGIC: &[u8; 4] = b"SLIX";
const VERSION: u8 = 1;

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
    /// The rebuilt table.
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
    let mut out = Vec::with_capacity(64 + table.count() as usize * 12);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&table.last_seq.to_le_bytes());
    out.extend_from_slice(&table.last_ts.to_le_bytes());
    out.extend_from_slice(&last_checksum.to_le_bytes());
    put_uvarint(&mut out, sizes.len() as u64);
    for &(id, size) in sizes {
        let s = table.blocks.get(&id).cloned().unwrap_or_default();
        for v in [
            id as u64,
            size,
            s.msgs,
            s.bytes,
            s.first,
            s.last,
            s.ttl as u64,
            s.sched as u64,
            s.sourced as u64,
            s.markers as u64,
        ] {
            put_uvarint(&mut out, v);
        }
    }
    let subjects = table.subject_counts(None);
    let ids: HashMap<&str, u64> = subjects
        .keys()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i as u64))
        .collect();
    put_uvarint(&mut out, subjects.len() as u64);
    for (s, n) in &subjects {
        put_uvarint(&mut out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
        put_uvarint(&mut out, *n);
    }
    put_uvarint(&mut out, table.count());
    let (mut prev_seq, mut prev_ts) = (0u64, 0i64);
    for seq in table.seqs_in(0, table.last_seq) {
        let m = table.get(seq).expect("live");
        put_uvarint(&mut out, seq - prev_seq);
        put_uvarint(&mut out, ids[&*m.subject]);
        put_uvarint(&mut out, m.loc.block as u64);
        put_uvarint(&mut out, m.loc.offset as u64);
        put_uvarint(&mut out, m.loc.len as u64);
        put_varint(&mut out, m.ts.wrapping_sub(prev_ts));
        out.push(m.flags);
        (prev_seq, prev_ts) = (seq, m.ts);
    }
    let id = last_msg_id.unwrap_or("");
    put_uvarint(&mut out, id.len() as u64);
    out.extend_from_slice(id.as_bytes());
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes index.db; the error says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    if bytes.len() < MAGIC.len() + 1 + 24 + 8 {
        return Err(format!("too short ({} bytes)", bytes.len()));
    }
    let (signed, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(signed).to_le_bytes() != sum {
        return Err("checksum mismatch".into());
    }
    let mut r = Reader::new(signed);
    let bad = |what: &str| format!("malformed {what}");
    if r.bytes(4) != Some(MAGIC) {
        return Err("bad magic".into());
    }
    let version = r.u8().ok_or_else(|| bad("version"))?;
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    let last_seq = r.u64().ok_or_else(|| bad("header"))?;
    let last_ts = r.u64().ok_or_else(|| bad("header"))? as i64;
    let last_checksum = r.u64().ok_or_else(|| bad("header"))?;
    let mut table = Table::default();
    let n = r.count(10).ok_or_else(|| bad("block count"))?;
    let mut blocks = Vec::with_capacity(n);
    let mut stats = Vec::with_capacity(n);
    for _ in 0..n {
        let mut v = [0u64; 10];
        for x in &mut v {
            *x = r.uvarint().ok_or_else(|| bad("block"))?;
        }
        let id = u32::try_from(v[0]).map_err(|_| bad("block id"))?;
        let small = |x: u64| u32::try_from(x).map_err(|_| bad("block counter"));
        blocks.push(BlockClaim { id, size: v[1] });
        stats.push((
            id,
            BlockStats {
                msgs: v[2],
                bytes: v[3],
                first: v[4],
                last: v[5],
                ttl: small(v[6])?,
                sched: small(v[7])?,
                sourced: small(v[8])?,
                markers: small(v[9])?,
            },
        ));
    }
    let n = r.count(2).ok_or_else(|| bad("subject count"))?;
    let mut subjects: Vec<Arc<str>> = Vec::with_capacity(n);
    for _ in 0..n {
        subjects.push(Arc::from(r.string().ok_or_else(|| bad("subject"))?));
        r.uvarint().ok_or_else(|| bad("subject total"))?;
    }
    let n = r.count(7).ok_or_else(|| bad("message count"))?;
    let (mut seq, mut ts) = (0u64, 0i64);
    for _ in 0..n {
        let delta = r
            .uvarint()
            .filter(|d| *d > 0)
            .ok_or_else(|| bad("message sequence"))?;
        seq = seq
            .checked_add(delta)
            .filter(|s| *s <= last_seq)
            .ok_or_else(|| bad("message sequence"))?;
        let subject = usize::try_from(r.uvarint().ok_or_else(|| bad("message"))?)
            .ok()
            .and_then(|i| subjects.get(i))
            .ok_or_else(|| bad("subject index"))?;
        let mut loc = [0u32; 3];
        for x in &mut loc {
            *x = r
                .uvarint()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| bad("message location"))?;
        }
        ts = ts.wrapping_add(r.varint().ok_or_else(|| bad("message time"))?);
        let flags = r.u8().ok_or_else(|| bad("message flags"))?;
        let loc = Loc {
            block: loc[0],
            offset: loc[1],
            len: loc[2],
        };
        table.insert(
            seq,
            MsgMeta {
                subject: subject.clone(),
                ts,
                loc,
                flags,
            },
        );
    }
    let id = r.string().ok_or_else(|| bad("last message id"))?;
    if r.remaining() != 0 {
        return Err(bad("trailer"));
    }
    table.raise_last(last_seq);
    table.last_ts = table.last_ts.max(last_ts);
    for (id, s) in stats {
        table.blocks.insert(id, s);
    }
    Ok(Snapshot {
        table,
        blocks,
        last_checksum,
        last_msg_id: (!id.is_empty()).then(|| id.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Loc;
    use crate::table::MsgMeta;

    /// Found by the `store_index` fuzz target: an index.db whose two messages are 2^40
    /// sequences apart once made the decoder allocate a slot per sequence in between.
    #[test]
    fn far_apart_sequences_cost_memory_per_message_not_per_sequence() {
        let mut table = Table::default();
        for seq in [1, 1 << 40] {
            let meta = MsgMeta {
                subject: table.intern("a"),
                ts: 1,
                loc: Loc {
                    block: 1,
                    offset: 0,
                    len: 40,
                },
                flags: 0,
            };
            table.insert(seq, meta);
        }
        let bytes = encode(&table, &[(1, 80)], 7, None);
        let snapshot = decode(&bytes).expect("a valid index");
        assert_eq!(snapshot.table.count(), 2);
        assert_eq!(snapshot.table.first_seq(), 1);
        assert_eq!(
            snapshot.table.seqs_in(0, u64::MAX).collect::<Vec<_>>(),
            [1, 1 << 40]
        );
    }
}
