//! Block records: `decode_record` never panics, what it returns lies inside the input, and an
//! accepted record re-encodes to exactly the bytes it was decoded from, with the same checksum.
//!
//! Input: byte 0 odd: the rest is a record body after the length prefix and before the
//! checksum, and the target adds both (plus byte 0 / 2 trailing bytes from the next record);
//! even: the rest is decoded as is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::with_checksum;
use sluice_store::fuzzing::{DecodeError, decode_record};

fuzz_target!(|data: &[u8]| {
    let [mode, rest @ ..] = data else {
        return;
    };
    let buf = if mode & 1 == 1 {
        let body = u32::try_from(rest.len() + 8).unwrap_or(u32::MAX);
        let mut signed = body.to_le_bytes().to_vec();
        signed.extend_from_slice(rest);
        let mut buf = with_checksum(&signed);
        buf.resize(buf.len() + usize::from(mode / 2), 0xa5);
        buf
    } else {
        rest.to_vec()
    };
    match decode_record(&buf) {
        Ok((record, used, sum)) => {
            assert!(used <= buf.len());
            let parts = record.subject.len() + record.headers.len() + record.payload.len();
            assert!(
                parts < used,
                "{parts} bytes of fields in a {used}-byte record"
            );
            assert_eq!(record.encoded_len(), used);
            let mut again = Vec::new();
            assert_eq!(record.encode_into(&mut again), sum);
            assert_eq!(again, buf[..used], "re-encoding changed the record");
        }
        Err(DecodeError::Incomplete) => {}
        Err(DecodeError::Corrupt) => {}
    }
});
