//! `msgs/sched.db`: the message schedules in force ([`Schedules`]), in the sidecar form
//! ([`crate::sidecar`]). Each entry is a u16 (little-endian) subject length, the subject, a
//! varint next fire time (ns) and a uvarint sequence. Written with every snapshot; read on
//! open, keeping only the entries whose message is still in the table under the same subject.
//!
//! The file is a snapshot: a crash leaves it older than the messages stored after it, among
//! them fires. [`catch_up`] brings the schedules recovered from it (and from the schedule
//! messages after it) up to the newest fire each produced, so no stored fire is repeated.

use std::path::Path;

use crate::decode::FileDecodeError;
use crate::error::Result;
use crate::fsutil::{Reader, put_uvarint, put_varint};
use crate::proto::{Headers, names};
use crate::record::flags;
use crate::schedule::{self, AfterFire, Schedules};
use crate::sidecar::{self, Sidecar};
use crate::table::{MsgMeta, Table};

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

/// Brings the recovered `schedules` up to the fires stored at or above sequence `from` (the
/// sidecar's stamp: the fire times it holds account for every message below it; 0 when it was
/// missing or refused). For each schedule, the newest message it produced after its own
/// message — on its target, with `Nats-Scheduler` naming it, not sourced — sets its next fire
/// to the schedule's next run after that message's store time (what the message's
/// `Nats-Schedule-Next` says), unless the schedule already fires later; a one-shot (or a
/// schedule with no run left) that produced its message is spent. `headers` reads a message's
/// headers (`None`: unreadable); an unreadable message is passed over. A block that cannot be
/// read leaves its schedule as it was; the first such error is returned once every other
/// schedule is brought up to date.
pub fn catch_up(
    schedules: &mut Schedules,
    table: &mut Table,
    from: u64,
    mut headers: impl FnMut(&MsgMeta) -> Option<Headers>,
) -> Result<()> {
    if from > table.last_seq {
        return Ok(());
    }
    let entries: Vec<(String, u64, i64)> = schedules
        .entries()
        .map(|(subject, e)| (subject.to_owned(), e.seq, e.next))
        .collect();
    let mut first_error = None;
    for (subject, seq, next) in entries {
        let fired = last_fire_of(table, &subject, seq, from, &mut headers);
        let (h, fired_at) = match fired {
            Ok(Some(found)) => found,
            Ok(None) => continue,
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        match schedule::after_fire(&h, fired_at) {
            Some(AfterFire::Next(after)) if after > next => schedules.insert(&subject, seq, after),
            Some(AfterFire::Spent) => schedules.mark_spent(&subject, seq),
            Some(AfterFire::Next(_)) | None => {}
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The headers of the schedule message `seq` on `subject` and the store time of the newest
/// message it produced at or above `from`, if any.
fn last_fire_of(
    table: &mut Table,
    subject: &str,
    seq: u64,
    from: u64,
    headers: &mut impl FnMut(&MsgMeta) -> Option<Headers>,
) -> Result<Option<(Headers, i64)>> {
    let Some(h) = table.get(seq)?.cloned().and_then(|m| headers(&m)) else {
        return Ok(None);
    };
    let Some(target) = h.get(names::SCHEDULE_TARGET) else {
        return Ok(None);
    };
    // Fires of this schedule message come after it; those below `from` are accounted for.
    let floor = seq.max(from.saturating_sub(1));
    let mut upto = table.last_seq;
    while upto > floor {
        let Some(found) = table.last_for_subject(target, upto)? else {
            break;
        };
        if found <= floor {
            break;
        }
        // A record that cannot be read is passed over, as one that is not a fire.
        if let Ok(Some(m)) = table.get(found).map(|m| m.cloned())
            && m.flags & flags::HEADERS != 0
            && m.flags & flags::SOURCED == 0
            && headers(&m).is_some_and(|p| {
                p.get(names::SCHEDULER) == Some(subject) && p.get(names::STREAM_SOURCE).is_none()
            })
        {
            return Ok(Some((h, m.ts)));
        }
        upto = found - 1;
    }
    Ok(None)
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
