//! `from=` start positions: `StartFrom::parse` never panics, a refusal names the value (cut to
//! 64 characters) and the accepted forms, and what it accepts is one of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_server::fuzzing::StartFrom;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = jiff::Timestamp::UNIX_EPOCH;
    match StartFrom::parse(text, now) {
        Ok(StartFrom::Last(n)) => {
            assert!(n >= 1);
            let digits = text.strip_prefix("last:").expect("the form");
            assert!(digits.bytes().all(|b| b.is_ascii_digit()));
            assert_eq!(digits.parse::<u64>(), Ok(n));
        }
        Ok(StartFrom::Since(_)) => assert!(text.starts_with("since:")),
        Ok(other) => assert!(["live", "earliest", "latest"].contains(&text), "{other:?}"),
        Err(err) => {
            assert!(err.value.chars().count() <= 64);
            assert!(text.starts_with(&err.value));
            assert!(err.to_string().contains("last:<N>"));
        }
    }
});
