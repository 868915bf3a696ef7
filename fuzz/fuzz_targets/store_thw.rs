//! `thw.db` entries (TTL expiries): the reader never panics or over-allocates, accepts exactly
//! the bodies the grammar in `src/lib.rs` allows (accepted ⇒ valid, valid ⇒ accepted), keeps
//! exactly the entries whose message is in the table (a later entry for the same sequence
//! wins), and what it keeps, written back as the store writes it, reads back the same.
//!
//! Input: byte 0 is the message table (bit `i`: a message at sequence `i + 1`), byte 1 the
//! entry count (top bit: near `u64::MAX`), the rest the entry bytes.
#![no_main]

use std::collections::{BTreeSet, HashMap};

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{entry_count, table_messages, thw_grammar};
use sluice_store::fuzzing::{Sidecar, put_uvarint, put_varint, read_thw_entries, table_of};

fuzz_target!(|data: &[u8]| {
    let [mask, count, body @ ..] = data else {
        return;
    };
    let messages = table_messages(*mask);
    let table = table_of(&messages);
    let count = entry_count(*count);
    let sidecar = Sidecar {
        count,
        stamp: 9,
        body,
    };
    let read = read_thw_entries(&sidecar, &table);
    let Some(grammar) = thw_grammar(body, count) else {
        assert!(read.is_err(), "accepted a body outside the grammar");
        return;
    };
    let entries = read.expect("refused a body in the grammar");
    let mut expected: HashMap<u64, i64> = HashMap::new();
    for (at, seq) in grammar {
        if messages.iter().any(|(s, _)| *s == seq) {
            expected.insert(seq, at);
        }
    }
    let expected: BTreeSet<(i64, u64)> = expected.into_iter().map(|(s, a)| (a, s)).collect();
    assert_eq!(entries, expected.into_iter().collect::<Vec<_>>());

    let mut written = Vec::new();
    for &(at, seq) in &entries {
        put_varint(&mut written, at);
        put_uvarint(&mut written, seq);
    }
    let again = Sidecar {
        count: entries.len() as u64,
        stamp: 9,
        body: &written,
    };
    assert_eq!(read_thw_entries(&again, &table), Ok(entries));
});
