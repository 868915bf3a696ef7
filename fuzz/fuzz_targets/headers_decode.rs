//! NATS header blocks: decode never panics, and what it accepts is valid and re-encodes to a
//! block that decodes to the same headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::headers::Headers;

fuzz_target!(|data: &[u8]| {
    if let Ok(headers) = Headers::decode(data) {
        assert_eq!(headers.validate(), Ok(()));
        let block = headers.encode();
        assert_eq!(block.len(), headers.encoded_len());
        assert_eq!(Headers::decode(&block), Ok(headers));
    }
});
