//! Nats-TTL: never panics, and an accepted value is `never`, a duration of at least a second or
//! whole seconds, and its canonical form parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_protocol::duration::parse_duration;
use sluice_protocol::ttl::MsgTtl;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ttl) = MsgTtl::parse(text) {
        assert_eq!(MsgTtl::parse(&ttl.to_string()), Ok(ttl));
        match ttl {
            MsgTtl::Never => assert!(text.eq_ignore_ascii_case("never")),
            MsgTtl::After(d) => {
                assert!(d.as_secs() >= 1 && d.subsec_nanos() == 0);
                let seconds = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
                assert!(seconds || parse_duration(text).is_ok(), "{text:?}");
            }
        }
    }
});
