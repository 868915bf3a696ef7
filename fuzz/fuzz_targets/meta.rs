//! The stream metadata files (`meta.inf` + `meta.sum`, and the copy `meta.bak`): the decoders
//! never panic on any bytes; what they accept carries the checksum restated in `src/lib.rs` and
//! names the stream; an accepted meta.inf and its copy decode to the same metadata; a copy
//! re-encodes to exactly its bytes; metadata JSON with a correct checksum is accepted exactly
//! when it decodes (`store_meta` covers the JSON round trip alone); one flipped bit anywhere in
//! a copy is refused.
//!
//! Input: a mode byte, then — mode 0: meta.inf bytes, a `0xFF` byte, meta.sum bytes; mode 1:
//! meta.bak bytes; mode 2: metadata JSON, checksummed by the target; mode 3: a position byte,
//! then metadata JSON whose copy gets one bit flipped at that position.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::meta_checksum;
use sluice_store::fuzzing::{Meta, decode_copy, decode_primary, encode_copy};

/// The stream every input is decoded for (the seeds are the default stream's).
const NAME: &str = "sluice";

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    match mode % 4 {
        0 => raw_primary(rest),
        1 => raw_copy(rest),
        2 => checksummed(rest),
        _ => flipped(rest),
    }
});

fn raw_primary(bytes: &[u8]) {
    let (inf, sum) = match bytes.iter().position(|&b| b == 0xFF) {
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (bytes, &[][..]),
    };
    let Ok(meta) = decode_primary(NAME, inf, sum) else {
        return;
    };
    assert_eq!(sum.trim_ascii(), meta_checksum(NAME, inf).as_bytes());
    assert_eq!(meta.config.name, NAME);
    let copy = encode_copy(NAME, inf);
    assert_eq!(decode_copy(NAME, &copy).map(|(m, _)| m), Ok(meta));
}

fn raw_copy(bak: &[u8]) {
    let Ok((meta, json)) = decode_copy(NAME, bak) else {
        return;
    };
    assert_eq!(meta.config.name, NAME);
    assert_eq!(
        encode_copy(NAME, json),
        bak,
        "a copy re-encodes to its bytes"
    );
    let sum = meta_checksum(NAME, json);
    assert_eq!(decode_primary(NAME, json, sum.as_bytes()), Ok(meta));
}

fn checksummed(json: &[u8]) {
    let decodes = serde_json::from_slice::<Meta>(json).is_ok_and(|m| m.config.name == NAME);
    let sum = meta_checksum(NAME, json);
    assert_eq!(decode_primary(NAME, json, sum.as_bytes()).is_ok(), decodes);
    assert_eq!(decode_copy(NAME, &encode_copy(NAME, json)).is_ok(), decodes);
}

fn flipped(bytes: &[u8]) {
    let [position, json @ ..] = bytes else {
        return;
    };
    let mut copy = encode_copy(NAME, json);
    let at = usize::from(*position) % copy.len();
    copy[at] ^= 1 << (position % 8);
    assert!(
        decode_copy(NAME, &copy).is_err(),
        "a flipped bit at {at} went unseen"
    );
}
