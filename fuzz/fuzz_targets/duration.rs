//! Go durations: accepted ⇔ grammar (and not negative, not too long), and format/parse
//! round-trips for any value.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::duration_grammar;
use sluice_protocol::duration::{MAX_DURATION, format_duration, parse_duration};

fuzz_target!(|data: &[u8]| {
    if data.len() == 8 {
        let nanos =
            u64::from_le_bytes(data.try_into().unwrap()) % (MAX_DURATION.as_nanos() as u64 + 1);
        let d = Duration::from_nanos(nanos);
        assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_duration(text) {
        Ok(d) => {
            assert!(duration_grammar(text), "{text:?}");
            assert!(d <= MAX_DURATION);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        Err(_) => {
            // Rejected although in the grammar: only for a negative or too long duration.
            if duration_grammar(text) {
                let positive = text.trim_start_matches('-');
                assert!(
                    text.starts_with('-') || parse_duration(positive).is_err(),
                    "{text:?}"
                );
            }
        }
    }
});
