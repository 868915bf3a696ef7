//! `msgs/sched.db`: the message schedules in force ([`Schedules`]), in the sidecar form
//! ([`crate::sidecar`]). Each entry is a u16 (little-endian) subject length, the subject, a
//! varint next fire time (ns) and a uvarint sequence. Written with every snapshot; read on
//! open, keeping only the entries whose message is still in the table under the same subject.

use std::path::Path;

use crate::decode::FileDecodeError;
use crate::error::Result;
use crate::fsutil::{Reader, put_uvarint, put_varint};
use crate::schedule::Schedules;
use crate::sidecar::{self, Sidecar};
use crate::table::Table;

/// The file's name in `msgs/`.
pub const FILE: &str = "sched.db";
/// Version of sched.db.
pub const SCHED_VERSION: u8 = 1;

/// Writes `schedules` to `path` with `stamp` = the stream's last sequence + 1.
pub fn write(path: &Path, schedules: &Schedules, stamp: u64) -> Result<()> {
    let mut body = Vec::new();
    for (subject, e) in schedules.entries() {
        body.extend_from_slice(&(subject.len() as u16).to_le_bytes());
        body.extend_from_slice(subject.as_bytes());
        put_varint(&mut body, e.next);
        put_uvarint(&mut body, e.seq);
    }
    sidecar::write(path, SCHED_VERSION, schedules.len() as u64, stamp, &body)
}

/// Decodes the entries of a verified sidecar, keeping those whose message is still in `table`
/// under the same subject (reading the table's blocks as needed; a later entry for the same
/// subject wins). The count is capped by the bytes that remain (an entry takes at least 4).
pub fn decode(s: &Sidecar<'_>, table: &mut Table) -> Result<Schedules, FileDecodeError> {
    let mut r = Reader::new(s.body);
    let n = s.entry_count(4)?;
    let mut schedules = Schedules::default();
    for _ in 0..n {
        let len = r
            .bytes(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or(FileDecodeError::Malformed("entry"))?;
        let subject = r
            .bytes(len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or(FileDecodeError::Malformed("subject"))?;
        let next = r.varint().ok_or(FileDecodeError::Malformed("entry"))?;
        let seq = r.uvarint().ok_or(FileDecodeError::Malformed("entry"))?;
        let live = table
            .get(seq)
            .map_err(|e| FileDecodeError::Read(e.to_string()))?;
        if live.is_some_and(|m| &*m.subject == subject) {
            schedules.insert(subject, seq, next);
        }
    }
    Ok(schedules)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::table::table_of;

    proptest! {
        /// What is written reads back the same, less the schedule whose message now has
        /// another subject.
        #[test]
        fn sched_db_round_trips(
            entries in proptest::collection::btree_map("[a-z]{1,8}", any::<i64>(), 0..8),
            moved in 0usize..8,
        ) {
            let mut schedules = Schedules::default();
            let mut live = Vec::new();
            let mut kept = Vec::new();
            for (i, (subject, &next)) in entries.iter().enumerate() {
                let seq = i as u64 + 1;
                schedules.insert(subject, seq, next);
                if i == moved {
                    live.push((seq, "elsewhere"));
                } else {
                    live.push((seq, subject.as_str()));
                    kept.push((subject.clone(), seq, next));
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(FILE);
            write(&path, &schedules, 42).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let s = sidecar::decode(&bytes, SCHED_VERSION).unwrap();
            prop_assert_eq!(s.stamp, 42);
            let read = decode(&s, &mut table_of(&live)).unwrap();
            let read: Vec<(String, u64, i64)> =
                read.entries().map(|(subject, e)| (subject.to_owned(), e.seq, e.next)).collect();
            prop_assert_eq!(read, kept);
        }
    }
}
