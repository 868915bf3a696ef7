//! Nats-TTL: canonical values round-trip and anything accepted is one of the three forms.

use std::time::Duration;

use proptest::prelude::*;
use sluice_protocol::duration::{MAX_DURATION, parse_duration};
use sluice_protocol::ttl::MsgTtl;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn canonical_values_round_trip(secs in 1..=MAX_DURATION.as_secs()) {
        let ttl = MsgTtl::After(Duration::from_secs(secs));
        prop_assert_eq!(MsgTtl::parse(&ttl.to_string()), Ok(ttl));
        prop_assert_eq!(MsgTtl::parse(&format!("{secs}s")), Ok(ttl));
    }

    #[test]
    fn accepted_values_are_never_durations_or_seconds(value in prop_oneof![
        prop::collection::vec(prop::sample::select(vec!["1", "0", "5", ".", "-", "s", "ms", "h", "never", "NeVeR", " "]), 0..5)
            .prop_map(|p| p.concat()),
        any::<String>(),
    ]) {
        match MsgTtl::parse(&value) {
            Ok(MsgTtl::Never) => prop_assert!(value.eq_ignore_ascii_case("never")),
            Ok(MsgTtl::After(d)) => {
                prop_assert!(d >= Duration::from_secs(1) && d.subsec_nanos() == 0);
                let as_duration = parse_duration(&value).ok();
                let as_seconds = value.bytes().all(|b| b.is_ascii_digit()).then(|| value.parse::<u64>().ok()).flatten();
                prop_assert!(
                    as_duration.is_some_and(|p| p.as_secs() == d.as_secs()) || as_seconds == Some(d.as_secs()),
                    "{:?} -> {:?}", value, d
                );
            }
            Err(e) => prop_assert!(e.to_string().starts_with("invalid Nats-TTL ")),
        }
    }
}
