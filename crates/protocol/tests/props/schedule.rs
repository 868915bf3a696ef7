//! Schedules: generated cron expressions parse and round-trip through their canonical text, the
//! next run agrees with an independent reference evaluator (UTC), is always later than the given
//! instant in any zone, and arbitrary patterns never panic.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use proptest::prelude::*;
use sluice_protocol::schedule::{Schedule, ScheduleError};

/// How one field is written.
#[derive(Debug, Clone)]
enum Spec {
    Star,
    Question,
    Step(u8),
    List(Vec<u8>),
    Range(u8, u8, u8),
}

struct Bounds {
    min: u8,
    max: u8,
    names: &'static [&'static str],
}

const SEC: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const MIN: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

fn spec(b: &'static Bounds) -> impl Strategy<Value = Spec> {
    let (min, max) = (b.min, b.max);
    prop_oneof![
        2 => Just(Spec::Star),
        1 => Just(Spec::Question),
        1 => (1u8..=max).prop_map(Spec::Step),
        3 => prop::collection::vec(min..=max, 1..4).prop_map(Spec::List),
        2 => (min..=max, min..=max, 1u8..4).prop_map(|(a, b, s)| Spec::Range(a.min(b), a.max(b), s)),
    ]
}

impl Spec {
    /// The field text, using names for some values when the field has them.
    fn text(&self, b: &Bounds, use_names: bool) -> String {
        let value = |v: u8| {
            if use_names && !b.names.is_empty() {
                b.names[usize::from(v - b.min)].to_uppercase()
            } else {
                v.to_string()
            }
        };
        match self {
            Spec::Star => "*".to_owned(),
            Spec::Question => "?".to_owned(),
            Spec::Step(n) => format!("*/{n}"),
            Spec::List(values) => values
                .iter()
                .map(|v| value(*v))
                .collect::<Vec<_>>()
                .join(","),
            Spec::Range(a, z, 1) => format!("{}-{}", value(*a), value(*z)),
            Spec::Range(a, z, s) => format!("{}-{}/{s}", value(*a), value(*z)),
        }
    }

    /// The selected values and whether the field counts as a wildcard for day matching.
    fn set(&self, b: &Bounds) -> (Vec<bool>, bool) {
        let mut set = vec![false; 64];
        let (range, step, star) = match self {
            Spec::Star | Spec::Question => ((b.min, b.max), 1, true),
            Spec::Step(n) => ((b.min, b.max), *n, *n == 1),
            Spec::List(values) => {
                for v in values {
                    set[usize::from(*v)] = true;
                }
                return (set, false);
            }
            Spec::Range(a, z, s) => ((*a, *z), *s, false),
        };
        let mut v = range.0;
        while v <= range.1 {
            set[usize::from(v)] = true;
            v = v.saturating_add(step);
            if step == 0 {
                break;
            }
        }
        (set, star)
    }
}

#[derive(Debug, Clone)]
struct CronSpec {
    fields: [Spec; 6],
    names: bool,
}

const BOUNDS: [&Bounds; 6] = [&SEC, &MIN, &HOUR, &DOM, &MONTH, &DOW];

fn cron_spec() -> impl Strategy<Value = CronSpec> {
    (
        spec(&SEC),
        spec(&MIN),
        spec(&HOUR),
        spec(&DOM),
        spec(&MONTH),
        spec(&DOW),
        any::<bool>(),
    )
        .prop_map(|(s, m, h, d, mo, w, names)| CronSpec {
            fields: [s, m, h, d, mo, w],
            names,
        })
}

impl CronSpec {
    fn expression(&self) -> String {
        self.fields
            .iter()
            .zip(BOUNDS)
            .map(|(f, b)| f.text(b, self.names))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The robfig rule, restated: a wildcard day field leaves the other to decide; two
    /// restricted day fields match when either does.
    fn matches(&self, dt: DateTime) -> bool {
        let sets: Vec<(Vec<bool>, bool)> = self
            .fields
            .iter()
            .zip(BOUNDS)
            .map(|(f, b)| f.set(b))
            .collect();
        let has = |i: usize, v: i8| sets[i].0[v as usize];
        let dom = has(3, dt.day());
        let dow = has(5, dt.weekday().to_sunday_zero_offset());
        let day = if sets[3].1 || sets[5].1 {
            dom && dow
        } else {
            dom || dow
        };
        has(0, dt.second()) && has(1, dt.minute()) && has(2, dt.hour()) && has(4, dt.month()) && day
    }

    /// A reference next-run search in UTC that jumps by day, hour, minute and second (the classic
    /// algorithm), unlike the implementation's nested walk over the selected values.
    fn reference_next(&self, after: Timestamp) -> Option<Timestamp> {
        let floor = after.as_second() - i64::from(after.subsec_nanosecond() < 0);
        let mut t = floor + 1;
        let limit = floor + 12 * 366 * 86_400;
        let sets: Vec<(Vec<bool>, bool)> = self
            .fields
            .iter()
            .zip(BOUNDS)
            .map(|(f, b)| f.set(b))
            .collect();
        while t < limit {
            let dt = TimeZone::UTC.to_datetime(Timestamp::from_second(t).ok()?);
            let dom = sets[3].0[dt.day() as usize];
            let dow = sets[5].0[dt.weekday().to_sunday_zero_offset() as usize];
            let day = if sets[3].1 || sets[5].1 {
                dom && dow
            } else {
                dom || dow
            };
            if !sets[4].0[dt.month() as usize] || !day {
                t = t - t.rem_euclid(86_400) + 86_400;
            } else if !sets[2].0[dt.hour() as usize] {
                t = t - t.rem_euclid(3_600) + 3_600;
            } else if !sets[1].0[dt.minute() as usize] {
                t = t - t.rem_euclid(60) + 60;
            } else if !sets[0].0[dt.second() as usize] {
                t += 1;
            } else {
                return Timestamp::from_second(t).ok();
            }
        }
        None
    }
}

fn instant() -> impl Strategy<Value = Timestamp> {
    // 1900 to 2200, with a fraction of a second.
    (-2_208_988_800i64..7_258_118_400, 0i32..1_000_000_000)
        .prop_map(|(s, ns)| Timestamp::new(s, ns).unwrap())
}

const ZONES: [&str; 5] = [
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cron_next_run_agrees_with_the_reference(spec in cron_spec(), after in instant()) {
        let expression = spec.expression();
        let schedule = match Schedule::parse(&expression) {
            Ok(s) => s,
            Err(ScheduleError::NeverFires { .. }) => {
                // Only a day-of-month/month combination that cannot exist may be refused.
                prop_assert_eq!(spec.reference_next(after), None, "{}", expression);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{expression}: {e}"))),
        };
        let next = schedule.next_after(after, None).unwrap();
        prop_assert_eq!(next, spec.reference_next(after), "{} after {}", expression, after);
        let next = next.unwrap();
        prop_assert!(next > after);
        prop_assert!(spec.matches(TimeZone::UTC.to_datetime(next)));
        prop_assert_eq!(Schedule::parse(&schedule.to_string()), Ok(schedule.clone()), "{}", expression);
    }

    #[test]
    fn cron_next_run_in_a_zone_is_later_and_matching(spec in cron_spec(), after in instant(), zone in prop::sample::select(ZONES.to_vec())) {
        let Ok(schedule) = Schedule::parse(&spec.expression()) else { return Ok(()) };
        let tz = TimeZone::get(zone).unwrap();
        let next = schedule.next_after(after, Some(zone)).unwrap().unwrap();
        prop_assert!(next > after);
        let wall = tz.to_datetime(next);
        // The wall clock matches, unless the matching time was skipped by a forward jump just before.
        let jumped = tz.to_offset(next) != tz.to_offset(next.checked_sub(jiff::SignedDuration::from_hours(25)).unwrap());
        prop_assert!(spec.matches(wall) || jumped, "{} in {} after {} gave {}", spec.expression(), zone, after, next);
        let again = schedule.next_after(next, Some(zone)).unwrap().unwrap();
        prop_assert!(again > next);
    }

    #[test]
    fn every_and_at_round_trip(secs in 1u64..10_000_000, after in instant(), at in instant()) {
        let every = Schedule::Every(Duration::from_secs(secs));
        prop_assert_eq!(Schedule::parse(&every.to_string()), Ok(every.clone()));
        prop_assert_eq!(every.next_after(after, None), Ok(after.checked_add(Duration::from_secs(secs)).ok()));
        let once = Schedule::At(at);
        prop_assert_eq!(Schedule::parse(&once.to_string()), Ok(once.clone()));
        prop_assert_eq!(once.next_after(after, None), Ok((at > after).then_some(at)));
        prop_assert_eq!(once.first_fire(after, None), Ok(Some(at)));
    }

    #[test]
    fn arbitrary_patterns_never_panic_and_round_trip(pattern in prop_oneof![
        prop::collection::vec(prop::sample::select(vec!["*", "?", "/", "-", ",", " ", "0", "1", "5", "59", "31", "7", "jan", "SUN", "@every ", "@at ", "@daily", "s", "2026-01-01T00:00:00Z"]), 0..14)
            .prop_map(|p| p.concat()),
        any::<String>(),
    ], zone in prop_oneof![Just(None), prop::sample::select(ZONES.to_vec()).prop_map(|z| Some(z.to_owned())), any::<String>().prop_map(Some)]) {
        if let Ok(schedule) = Schedule::parse(&pattern) {
            prop_assert_eq!(Schedule::parse(&schedule.to_string()), Ok(schedule.clone()), "{:?}", pattern);
            let after = Timestamp::from_second(1_800_000_000).unwrap();
            if let Ok(Some(next)) = schedule.next_after(after, zone.as_deref()) {
                prop_assert!(next > after);
            }
        }
    }
}
