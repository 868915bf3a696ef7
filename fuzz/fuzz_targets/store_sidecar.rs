//! The sidecar files `thw.db`, `sched.db` and `sources.db`: `decode_sidecar` never panics and
//! returns a body inside the input; `SourceIndex::decode` (the `sources.db` entries) never
//! panics and decodes no more entries, names or idents than the body holds.
//!
//! Input: byte 0 picks the file (mod 3: thw, sched, sources) and, when bit 2 is set, has the
//! target append the checksum to the rest; otherwise the rest is decoded as is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::with_checksum;
use sluice_store::fuzzing::{
    SCHED_VERSION, SOURCES_VERSION, SourceIndex, THW_VERSION, decode_sidecar,
};

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    let version = [THW_VERSION, SCHED_VERSION, SOURCES_VERSION][usize::from(mode % 3)];
    let bytes = if mode & 4 == 4 {
        with_checksum(rest)
    } else {
        rest.to_vec()
    };
    let Ok(sidecar) = decode_sidecar(&bytes, version) else {
        return;
    };
    // The body is what lies between the 17-byte header and the 8-byte checksum.
    assert_eq!(sidecar.body.len() + 17 + 8, bytes.len());
    assert!(bytes[..bytes.len() - 8].ends_with(sidecar.body));
    if mode % 3 != 2 {
        return;
    }
    let Ok(index) = SourceIndex::decode(&sidecar) else {
        return;
    };
    let positions = index.positions();
    assert!(positions.len() as u64 <= sidecar.count);
    let text: usize = positions
        .iter()
        .map(|(name, pos)| name.len() + pos.ident.len())
        .sum();
    assert!(positions.len() * 3 + text <= sidecar.body.len());
});
