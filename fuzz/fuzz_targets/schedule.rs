//! Nats-Schedule: never panics; an accepted pattern round-trips through its canonical text, and
//! its next run (in the zone on the input's second line, if any) is later than the given time.
//! Input: `<pattern>` or `<pattern>\n<time zone>`.
#![no_main]

use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use sluice_fuzz::split_line;
use sluice_protocol::schedule::Schedule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, zone) = split_line(text);
    let Ok(schedule) = Schedule::parse(pattern) else {
        return;
    };
    assert_eq!(
        Schedule::parse(&schedule.to_string()),
        Ok(schedule.clone()),
        "{pattern:?}"
    );
    for after in [
        Timestamp::MIN,
        Timestamp::from_second(1_800_000_000).unwrap(),
        Timestamp::MAX,
    ] {
        if let Ok(Some(next)) = schedule.next_after(after, zone) {
            assert!(next > after, "{pattern:?} {zone:?}");
        }
        let _ = schedule.first_fire(after, zone);
    }
});
