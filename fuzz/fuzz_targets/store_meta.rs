//! `meta.inf`: decoding the stream's metadata JSON never panics, and what decodes re-encodes
//! to JSON that decodes to the same metadata.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_store::fuzzing::Meta;

fuzz_target!(|data: &[u8]| {
    let Ok(meta) = serde_json::from_slice::<Meta>(data) else {
        return;
    };
    let json = serde_json::to_vec_pretty(&meta).expect("decoded metadata encodes");
    let again: Meta = serde_json::from_slice(&json).expect("encoded metadata decodes");
    assert_eq!(again, meta);
});
