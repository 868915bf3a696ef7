//! `msgs/thw.db`: the pending TTL expiries of a [`TtlWheel`], in the sidecar form
//! ([`crate::sidecar`]). Each entry is a varint expiry (ns) and a uvarint sequence, in expiry
//! order. Written with every snapshot; read on open, keeping only the entries whose message is
//! still in the table.

use std::path::Path;

use crate::decode::FileDecodeError;
use crate::error::Result;
use crate::fsutil::{Reader, put_uvarint, put_varint};
use crate::sidecar::{self, Sidecar};
use crate::table::Table;
use crate::ttl::TtlWheel;

/// The file's name in `msgs/`.
pub const FILE: &str = "thw.db";
/// Version of thw.db.
pub const THW_VERSION: u8 = 1;

/// Writes `wheel` to `path` with `stamp` = the stream's last sequence + 1.
pub fn write(path: &Path, wheel: &TtlWheel, stamp: u64) -> Result<()> {
    let mut body = Vec::new();
    for (at, seq) in wheel.entries() {
        put_varint(&mut body, at);
        put_uvarint(&mut body, seq);
    }
    sidecar::write(path, THW_VERSION, wheel.len() as u64, stamp, &body)
}

/// Decodes the entries of a verified sidecar, keeping those whose message is still in `table`
/// (a later entry for the same sequence wins). The count is capped by the bytes that remain
/// (an entry takes at least 2 bytes).
pub fn decode(s: &Sidecar<'_>, table: &Table) -> Result<TtlWheel, FileDecodeError> {
    let mut r = Reader::new(s.body);
    let n = s.entry_count(2)?;
    let mut wheel = TtlWheel::default();
    for _ in 0..n {
        let at = r.varint().ok_or(FileDecodeError::Malformed("entry"))?;
        let seq = r.uvarint().ok_or(FileDecodeError::Malformed("entry"))?;
        if table.contains(seq) {
            wheel.insert(seq, at);
        }
    }
    Ok(wheel)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::table::table_of;

    proptest! {
        /// What is written reads back the same, less the entry whose message is gone.
        #[test]
        fn thw_db_round_trips(
            entries in proptest::collection::btree_map(1u64..16, any::<i64>(), 0..12),
            gone in 1u64..16,
        ) {
            let mut wheel = TtlWheel::default();
            for (&seq, &at) in &entries {
                wheel.insert(seq, at);
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(FILE);
            write(&path, &wheel, 42).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let s = sidecar::decode(&bytes, THW_VERSION).unwrap();
            prop_assert_eq!(s.stamp, 42);
            let live: Vec<(u64, &str)> = (1..16).filter(|s| *s != gone).map(|s| (s, "t")).collect();
            let read = decode(&s, &table_of(&live)).unwrap();
            let kept: Vec<(i64, u64)> = wheel.entries().filter(|(_, seq)| *seq != gone).collect();
            prop_assert_eq!(read.entries().collect::<Vec<_>>(), kept);
        }
    }
}
