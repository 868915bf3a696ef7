//! Go durations: formatting round-trips, generated Go-grammar strings parse to their value, and
//! anything accepted is in the grammar.

use std::time::Duration;

use proptest::prelude::*;
use sluice_protocol::duration::{MAX_DURATION, format_duration, parse_duration};

const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Go's grammar, restated: optional sign, then `0` or one or more `<number><unit>` parts.
fn grammar_holds(value: &str) -> bool {
    let body = value.strip_prefix(['+', '-']).unwrap_or(value);
    if body == "0" {
        return true;
    }
    let mut rest = body;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let int = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest = &rest[int..];
        let mut frac = 0;
        if let Some(after) = rest.strip_prefix('.') {
            frac = after.bytes().take_while(u8::is_ascii_digit).count();
            rest = &after[frac..];
        }
        if int + frac == 0 {
            return false;
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !UNITS.iter().any(|(u, _)| *u == &rest[..unit_len]) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn format_round_trips(nanos in 0..=MAX_DURATION.as_nanos() as u64) {
        let d = Duration::from_nanos(nanos);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }

    #[test]
    fn format_round_trips_round_values(secs in 0u64..10_000_000, millis in prop::sample::select(vec![0u32, 1, 500, 999])) {
        let d = Duration::new(secs, millis * 1_000_000);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }

    #[test]
    fn generated_durations_parse_to_their_value(
        parts in prop::collection::vec((0u64..100_000, prop::option::of("[0-9]{1,12}"), 0usize..8), 1..5),
        plus in any::<bool>(),
    ) {
        let mut text = String::from(if plus { "+" } else { "" });
        let mut expected: u128 = 0;
        for (int, frac, unit) in &parts {
            let (name, ns) = UNITS[*unit];
            text.push_str(&int.to_string());
            expected += u128::from(*int) * ns;
            if let Some(frac) = frac {
                text.push('.');
                text.push_str(frac);
                let scale = 10u128.pow(frac.len() as u32);
                expected += frac.parse::<u128>().unwrap() * ns / scale;
            }
            text.push_str(name);
        }
        let parsed = parse_duration(&text);
        if expected <= MAX_DURATION.as_nanos() {
            prop_assert_eq!(parsed, Ok(Duration::from_nanos(expected as u64)), "{}", text);
        } else {
            prop_assert!(parsed.is_err(), "{}", text);
        }
    }

    #[test]
    fn accepted_strings_are_in_the_grammar(value in prop_oneof![
        prop::collection::vec(prop::sample::select(vec!["1", "0", "9", ".", "-", "+", "h", "m", "s", "ms", "us", "µ", "μs", "n", "x", " "]), 0..8)
            .prop_map(|p| p.concat()),
        any::<String>(),
    ]) {
        if let Ok(d) = parse_duration(&value) {
            prop_assert!(grammar_holds(&value), "{:?}", value);
            prop_assert!(d <= MAX_DURATION);
            prop_assert!(!value.starts_with('-') || d.is_zero());
        } else if let Err(e) = parse_duration(&value) {
            prop_assert!(e.to_string().contains(&format!("{:?}", value.chars().take(64).collect::<String>())), "{}", e);
        }
    }
}
