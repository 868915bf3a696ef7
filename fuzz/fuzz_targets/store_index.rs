//! `index.db` (version 2): `decode_index` never panics or over-allocates — what it keeps (blocks,
//! deleted ranges, subjects, last message id) is bounded by the input's size, whatever message
//! counts the input claims — and what it accepts re-encodes to a file that decodes to the same
//! table (encode ∘ decode is stable after one round).
//! Messages at far-apart sequences (`corpus/store_index/oom_sequence_gap`) cost one deleted
//! range, not a slot per sequence in between.
//!
//! Input: byte 0 odd: the rest is the file without its checksum, which the target appends;
//! even: the rest is decoded as is.
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::with_checksum;
use sluice_store::fuzzing::{Snapshot, decode_index, encode_index};

fn encode(s: &Snapshot) -> Vec<u8> {
    let sizes: Vec<(u32, u64)> = s.blocks.iter().map(|b| (b.id, b.size)).collect();
    encode_index(&s.table, &sizes, s.last_checksum, s.last_msg_id.as_deref())
}

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    let bytes = if mode & 1 == 1 {
        with_checksum(rest)
    } else {
        rest.to_vec()
    };
    let Ok(snapshot) = decode_index(&bytes, PathBuf::new()) else {
        return;
    };
    let len = bytes.len() as u64;
    let t = &snapshot.table;
    assert!(snapshot.blocks.len() as u64 <= len);
    assert!(t.blocks().count() as u64 <= len);
    let ranges: usize = t.blocks().map(|(_, b)| b.deleted.ranges_len()).sum();
    assert!(
        ranges as u64 <= len,
        "{ranges} deleted ranges from {len} bytes"
    );
    assert!(t.num_subjects() <= len);
    assert!(snapshot.last_msg_id.as_ref().map_or(0, String::len) as u64 <= len);
    assert_eq!(t.blocks_loaded(), 0, "decoding read a block");

    let once = encode(&snapshot);
    let again = decode_index(&once, PathBuf::new()).expect("a re-encoded index decodes");
    assert_eq!(again.table.count(), t.count());
    assert_eq!(again.table.live_ranges(), t.live_ranges());
    assert_eq!(again.table.subject_counts(None), t.subject_counts(None));
    assert_eq!(encode(&again), once, "encode ∘ decode is not stable");
});
