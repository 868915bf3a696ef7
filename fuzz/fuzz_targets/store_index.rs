//! `index.db`: `decode_index` never panics or over-allocates, and every count it decodes is
//! bounded by the input's size.
//! Messages at far-apart sequences (`corpus/store_index/oom_sequence_gap`) must cost memory per
//! message, not per sequence in between.
//!
//! Input: byte 0 odd: the rest is the file without its checksum, which the target appends;
//! even: the rest is decoded as is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::with_checksum;
use sluice_store::fuzzing::decode_index;

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    let bytes = if mode & 1 == 1 {
        with_checksum(rest)
    } else {
        rest.to_vec()
    };
    let Ok(snapshot) = decode_index(&bytes) else {
        return;
    };
    let len = bytes.len() as u64;
    assert!(snapshot.blocks.len() as u64 <= len);
    assert!(snapshot.table.blocks.len() as u64 <= len);
    assert!(
        snapshot.table.count() <= len,
        "{} messages from {len} bytes",
        snapshot.table.count()
    );
    assert!(snapshot.last_msg_id.as_ref().map_or(0, String::len) as u64 <= len);
});
