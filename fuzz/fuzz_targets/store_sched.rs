//! `sched.db` entries (schedules in force): the reader never panics or over-allocates,
//! accepts exactly the bodies the grammar in `src/lib.rs` allows (accepted ⇒ valid, valid ⇒
//! accepted), keeps exactly the entries whose message is in the table on the same subject (a
//! later entry for the same subject wins), and what it keeps, written back as the store writes
//! it, reads back the same.
//!
//! Input: byte 0 is the message table (bit `i`: a message at sequence `i + 1` on subject
//! `a`, `b.c`, `s.x` or `s.y`), byte 1 the entry count (top bit: near `u64::MAX`), the rest the
//! entry bytes.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{entry_count, sched_grammar, table_messages};
use sluice_store::fuzzing::{Sidecar, put_uvarint, put_varint, read_sched_entries, table_of};

fuzz_target!(|data: &[u8]| {
    let [mask, count, body @ ..] = data else {
        return;
    };
    let messages = table_messages(*mask);
    let mut table = table_of(&messages);
    let count = entry_count(*count);
    let sidecar = Sidecar {
        count,
        stamp: 9,
        body,
    };
    let read = read_sched_entries(&sidecar, &mut table);
    let Some(grammar) = sched_grammar(body, count) else {
        assert!(read.is_err(), "accepted a body outside the grammar");
        return;
    };
    let entries = read.expect("refused a body in the grammar");
    let mut expected: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for (subject, next, seq) in grammar {
        if messages.iter().any(|(s, sub)| *s == seq && *sub == subject) {
            expected.insert(subject, (seq, next));
        }
    }
    let expected: Vec<_> = expected
        .into_iter()
        .map(|(subject, (seq, next))| (subject, seq, next))
        .collect();
    assert_eq!(entries, expected);

    let mut written = Vec::new();
    for (subject, seq, next) in &entries {
        let len = u16::try_from(subject.len()).expect("table subjects are short");
        written.extend_from_slice(&len.to_le_bytes());
        written.extend_from_slice(subject.as_bytes());
        put_varint(&mut written, *next);
        put_uvarint(&mut written, *seq);
    }
    let again = Sidecar {
        count: entries.len() as u64,
        stamp: 9,
        body: &written,
    };
    assert_eq!(read_sched_entries(&again, &mut table), Ok(entries));
});
