//! The `Nats-Schedule` header: when a scheduled message fires.
//!
//! Accepted patterns:
//! - `@at <RFC 3339 time>`: once, at that instant (`@at 2026-12-01T08:00:00Z`; a fraction of a
//!   second and a `±HH:MM` offset are allowed).
//! - `@every <Go duration>`: repeatedly, at least one second apart (`@every 5m`).
//! - A 6-field cron expression with seconds, `sec min hour day-of-month month day-of-week`, fields
//!   separated by whitespace. Each field is a comma-separated list of `*` (or `?`), a value
//!   `v`, a range `a-b`, each optionally followed by a step `/n`; `v/n` means from `v` to the
//!   field's maximum. Months are 1-12 or `jan`-`dec`, days of week 0-7 (0 and 7 are Sunday) or
//!   `sun`-`sat`, names in any case.
//! - `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`: the cron
//!   expressions `0 0 0 1 1 *`, `0 0 0 1 * *`, `0 0 0 * * 0`, `0 0 0 * * *` and `0 0 * * * *`.
//!
//! Day matching follows robfig/cron (which JetStream's scheduler follows): when both the
//! day-of-month and the day-of-week are restricted, a day matches if **either** matches; when
//! either field is written as `*` or `?` (without a step greater than one), both must match,
//! so the other field alone decides.
//!
//! Cron schedules are evaluated on the wall clock of the zone named by `Nats-Schedule-Time-Zone`
//! (an IANA name; UTC when absent or empty; an unknown zone is an error). A wall-clock time that
//! does not exist (skipped by a daylight-saving jump) fires at the equivalent time after the
//! jump; a wall-clock time that occurs twice fires once, at its first occurrence. `@at` and
//! `@every` name instants, so a time zone with them is an error.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

use crate::duration::{DurationError, format_duration, parse_duration};
use crate::quote::shown;

/// How far ahead a cron schedule is searched for its next run: ten years covers every
/// satisfiable expression, including 29 February across a skipped leap year (2100).
const HORIZON_DAYS: u32 = 3_660;

/// Why a schedule or its time zone was rejected (JetStream error 10189). Every variant names
/// the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The pattern is empty.
    #[error("invalid schedule \"\": it is empty")]
    Empty,
    /// Starts with `@` but is none of the known forms.
    #[error("invalid schedule {}: unknown form (expected @at, @every, @hourly, @daily, @weekly, @monthly, @yearly or a 6-field cron expression)", shown(.pattern))]
    UnknownForm {
        /// The rejected pattern.
        pattern: String,
    },
    /// The time after `@at` is not an RFC 3339 time.
    #[error("invalid schedule {}: {reason}", shown(.pattern))]
    BadAt {
        /// The rejected pattern.
        pattern: String,
        /// What is wrong with the time.
        reason: String,
    },
    /// The interval after `@every` is not a Go duration.
    #[error("invalid schedule {}: {source}", shown(.pattern))]
    BadEvery {
        /// The rejected pattern.
        pattern: String,
        /// Why the duration was rejected.
        source: DurationError,
    },
    /// The interval after `@every` is shorter than one second.
    #[error("invalid schedule {}: the interval must be at least one second", shown(.pattern))]
    EveryTooShort {
        /// The rejected pattern.
        pattern: String,
    },
    /// A cron expression without exactly six fields.
    #[error("invalid schedule {}: a cron expression has 6 fields (sec min hour day-of-month month day-of-week), found {count}", shown(.pattern))]
    FieldCount {
        /// The rejected pattern.
        pattern: String,
        /// How many fields it has.
        count: usize,
    },
    /// A cron field that does not parse or is out of range.
    #[error("invalid schedule {}: {field} field {}: {reason}", shown(.pattern), shown(.value))]
    BadField {
        /// The rejected pattern.
        pattern: String,
        /// Which field.
        field: &'static str,
        /// The field's text.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cron expression whose days can never occur (`0 0 0 30 2 *`).
    #[error("invalid schedule {}: no day ever matches its day-of-month and month", shown(.pattern))]
    NeverFires {
        /// The rejected pattern.
        pattern: String,
    },
    /// A time zone given with an `@at` or `@every` schedule.
    #[error("time zone {} is only allowed with cron schedules", shown(.tz))]
    TimeZoneNotAllowed {
        /// The rejected time zone.
        tz: String,
    },
    /// A time zone that is not a known IANA name.
    #[error("unknown time zone {}: {reason}", shown(.tz))]
    UnknownTimeZone {
        /// The rejected time zone.
        tz: String,
        /// Why it was not found.
        reason: String,
    },
}

/// A parsed `Nats-Schedule` pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Schedule {
    /// `@at`: once, at this instant.
    At(Timestamp),
    /// `@every`: repeatedly, this far apart (at least one second).
    Every(Duration),
    /// A cron expression or a predefined `@daily`-style schedule.
    Cron(Cron),
}

impl Schedule {
    /// Parses a `Nats-Schedule` value (see the [module docs](self)).
    pub fn parse(pattern: &str) -> Result<Schedule, ScheduleError> {
        if pattern.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if let Some(time) = pattern.strip_prefix("@at ") {
            return parse_rfc3339(time)
                .map(Schedule::At)
                .map_err(|reason| ScheduleError::BadAt {
                    pattern: pattern.to_owned(),
                    reason,
                });
        }
        if let Some(interval) = pattern.strip_prefix("@every ") {
            let every = parse_duration(interval).map_err(|source| ScheduleError::BadEvery {
                pattern: pattern.to_owned(),
                source,
            })?;
            if every < Duration::from_secs(1) {
                return Err(ScheduleError::EveryTooShort {
                    pattern: pattern.to_owned(),
                });
            }
            return Ok(Schedule::Every(every));
        }
        let expression = match pattern {
            "@yearly" | "@annually" => "0 0 0 1 1 *",
            "@monthly" => "0 0 0 1 * *",
            "@weekly" => "0 0 0 * * 0",
            "@daily" | "@midnight" => "0 0 0 * * *",
            "@hourly" => "0 0 * * * *",
            other if other.starts_with('@') => {
                return Err(ScheduleError::UnknownForm {
                    pattern: pattern.to_owned(),
                });
            }
            other => other,
        };
        Cron::parse(expression).map(Schedule::Cron)
    }

    /// True for schedules that fire more than once (`@every` and cron).
    pub fn is_repeating(&self) -> bool {
        !matches!(self, Schedule::At(_))
    }

    /// Resolves the `Nats-Schedule-Time-Zone` value for this schedule: UTC when absent or empty,
    /// an error for an unknown zone or for a zone given with `@at` or `@every`.
    pub fn time_zone(&self, tz: Option<&str>) -> Result<TimeZone, ScheduleError> {
        match (self, tz) {
            (_, None | Some("")) => Ok(TimeZone::UTC),
            (Schedule::Cron(_), Some(name)) => resolve_time_zone(name),
            (_, Some(name)) => Err(ScheduleError::TimeZoneNotAllowed {
                tz: name.to_owned(),
            }),
        }
    }

    /// The first run strictly after `after`: for `@at`, its instant if that is later than
    /// `after` and `None` otherwise (a one-shot schedule has no run after its instant); for
    /// `@every`, `after` plus the interval; for cron, the next matching second. `None` also when
    /// the run would fall beyond the representable time range (or, for cron, more than ten years
    /// ahead, which no accepted expression needs).
    pub fn next_after(
        &self,
        after: Timestamp,
        tz: Option<&str>,
    ) -> Result<Option<Timestamp>, ScheduleError> {
        let zone = self.time_zone(tz)?;
        Ok(match self {
            Schedule::At(at) => (*at > after).then_some(*at),
            Schedule::Every(every) => after.checked_add(*every).ok(),
            Schedule::Cron(cron) => cron.next_after(after, &zone),
        })
    }

    /// When a schedule stored at `published` first fires. As [`Schedule::next_after`], except
    /// that an `@at` instant at or before `published` is returned as is: it is due immediately,
    /// as JetStream fires an `@at` schedule published after its time.
    pub fn first_fire(
        &self,
        published: Timestamp,
        tz: Option<&str>,
    ) -> Result<Option<Timestamp>, ScheduleError> {
        match self {
            Schedule::At(at) => self.time_zone(tz).map(|_| Some(*at)),
            _ => self.next_after(published, tz),
        }
    }
}

/// A pattern that parses back to an equal schedule: `@at <RFC 3339>`, `@every <Go duration>`
/// or the cron expression in canonical form (predefined names are written out).
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::At(at) => write!(f, "@at {at}"),
            Schedule::Every(every) => write!(f, "@every {}", format_duration(*every)),
            Schedule::Cron(cron) => cron.fmt(f),
        }
    }
}

/// Looks up an IANA time zone name, refusing anything that could not be one before asking.
fn resolve_time_zone(name: &str) -> Result<TimeZone, ScheduleError> {
    let unknown = |reason: String| ScheduleError::UnknownTimeZone {
        tz: name.to_owned(),
        reason,
    };
    // No dot is allowed, so a name can never climb out of the zone database (`..`); nor can it
    // be an absolute path.
    let plausible = name.len() <= 255
        && !name.starts_with('/')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_-+".contains(&b));
    if !plausible {
        return Err(unknown("not an IANA time zone name".to_owned()));
    }
    TimeZone::get(name).map_err(|e| unknown(e.to_string()))
}

/// Parses an RFC 3339 time (`2026-01-02T03:04:05Z`, `…05.25+01:00`): the exact shape first, so
/// the looser forms a general parser takes (lowercase `t`, a space, missing seconds) are refused.
fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
    let shape_ok = {
        let b = text.as_bytes();
        let digits = |range: std::ops::Range<usize>| {
            b.get(range)
                .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
        };
        let mut ok = b.len() >= 20
            && digits(0..4)
            && b[4] == b'-'
            && digits(5..7)
            && b[7] == b'-'
            && digits(8..10)
            && b[10] == b'T'
            && digits(11..13)
            && b[13] == b':'
            && digits(14..16)
            && b[16] == b':'
            && digits(17..19);
        let mut rest = b.get(19..).unwrap_or_default();
        if ok && rest.first() == Some(&b'.') {
            let n = rest[1..].iter().take_while(|d| d.is_ascii_digit()).count();
            ok = n > 0;
            rest = &rest[1 + n..];
        }
        ok && (rest == b"Z"
            || (rest.len() == 6
                && (rest[0] == b'+' || rest[0] == b'-')
                && rest[1..3].iter().all(u8::is_ascii_digit)
                && rest[3] == b':'
                && rest[4..6].iter().all(u8::is_ascii_digit)))
    };
    if !shape_ok {
        return Err(format!(
            "{} is not an RFC 3339 time such as \"2026-01-02T03:04:05Z\"",
            shown(text)
        ));
    }
    text.parse::<Timestamp>()
        .map_err(|e| format!("{} is not a valid time: {e}", shown(text)))
}

/// A cron expression with seconds, reduced to the values each field selects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_star: bool,
    weekdays_star: bool,
}

/// One cron field: its name (for errors), bounds and value names.
struct Field {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
/// Month names; index 0 is month 1.
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Day names; index 0 is day 0 (Sunday). 7 is also Sunday.
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// The most days each month can have (February: 29).
const MONTH_DAYS: [u8; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

impl Field {
    /// Parses the field into a bit per selected value, and whether it is a `*`/`?` wildcard
    /// (which decides day matching).
    fn parse(&self, text: &str) -> Result<(u64, bool), String> {
        let mut bits = 0u64;
        let mut star = false;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (part, None),
            };
            let step = match step {
                None => 1,
                Some(step) => match step.parse::<u8>() {
                    Ok(0) | Err(_) => {
                        return Err(format!(
                            "step {} is not a number from 1 to 255",
                            shown(step)
                        ));
                    }
                    Ok(step) => step,
                },
            };
            let (start, end) = if range == "*" || range == "?" {
                star |= step == 1;
                (self.min, self.max)
            } else if let Some((low, high)) = range.split_once('-') {
                let (low, high) = (self.value(low)?, self.value(high)?);
                if low > high {
                    return Err(format!("range {} starts after it ends", shown(range)));
                }
                (low, high)
            } else {
                let value = self.value(range)?;
                (value, if step > 1 { self.max } else { value })
            };
            for v in (start..=end).step_by(usize::from(step)) {
                bits |= 1 << v;
            }
        }
        Ok((bits, star))
    }

    /// Parses one value: a number within bounds or a name.
    fn value(&self, text: &str) -> Result<u8, String> {
        if let Some(index) = self.names.iter().position(|n| n.eq_ignore_ascii_case(text)) {
            // Month names start at 1, day names at 0.
            return Ok(index as u8 + self.min);
        }
        match text.parse::<u8>() {
            Ok(v)
                if (self.min..=self.max).contains(&v)
                    && text.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Ok(v)
            }
            _ => Err(format!(
                "{} is not {}from {} to {}",
                shown(text),
                if self.names.is_empty() {
                    "a number "
                } else {
                    "a name or a number "
                },
                self.min,
                self.max
            )),
        }
    }
}

impl Cron {
    /// Parses a 6-field cron expression (see the [module docs](self)).
    pub fn parse(expression: &str) -> Result<Cron, ScheduleError> {
        let fields: Vec<&str> = expression.split_whitespace().take(7).collect();
        if fields.len() != 6 {
            return Err(ScheduleError::FieldCount {
                pattern: expression.to_owned(),
                count: expression.split_whitespace().count(),
            });
        }
        let parse = |field: &Field, text: &str| {
            field.parse(text).map_err(|reason| ScheduleError::BadField {
                pattern: expression.to_owned(),
                field: field.name,
                value: text.to_owned(),
                reason,
            })
        };
        let (seconds, _) = parse(&SECOND, fields[0])?;
        let (minutes, _) = parse(&MINUTE, fields[1])?;
        let (hours, _) = parse(&HOUR, fields[2])?;
        let (days, days_star) = parse(&DAY_OF_MONTH, fields[3])?;
        let (months, _) = parse(&MONTH, fields[4])?;
        let (weekdays, weekdays_star) = parse(&DAY_OF_WEEK, fields[5])?;
        // Day 7 is Sunday, like day 0.
        let weekdays = (weekdays | weekdays >> 7) & 0x7f;
        let cron = Cron {
            seconds,
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            days_star,
            weekdays_star,
        };
        if !cron.can_fire() {
            return Err(ScheduleError::NeverFires {
                pattern: expression.to_owned(),
            });
        }
        Ok(cron)
    }

    /// False when the day-of-month alone decides and no selected month has a selected day.
    fn can_fire(&self) -> bool {
        let day_of_month_decides = !self.days_star && self.weekdays_star;
        !day_of_month_decides
            || (1..=12).any(|m| {
                self.months & (1 << m) != 0
                    && (1..=MONTH_DAYS[m - 1]).any(|d| self.days & (1 << d) != 0)
            })
    }

    /// True when `date` is a day this expression fires on.
    fn matches_day(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let day = self.days & (1 << date.day()) != 0;
        let weekday = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        if self.days_star || self.weekdays_star {
            day && weekday
        } else {
            day || weekday
        }
    }

    /// The first whole second strictly after `after` whose wall-clock time in `zone` matches,
    /// or `None` beyond ten years or the representable range.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        // Candidates are whole seconds from the wall-clock second of `after` on; the first one,
        // not later than `after`, is skipped by the `candidate > after` check below.
        let start = zone.to_datetime(after);
        let mut date = start.date();
        for _ in 0..HORIZON_DAYS {
            if self.matches_day(date) {
                let first_day = date == start.date();
                for hour in bits(u64::from(self.hours), 0, 23) {
                    if first_day && hour < start.hour() {
                        continue;
                    }
                    let first_hour = first_day && hour == start.hour();
                    for minute in bits(self.minutes, 0, 59) {
                        if first_hour && minute < start.minute() {
                            continue;
                        }
                        for second in bits(self.seconds, 0, 59) {
                            let candidate =
                                zone.to_timestamp(date.at(hour, minute, second, 0)).ok()?;
                            // Skips the seconds of the first minute up to `after`, and a
                            // wall-clock time repeated by a backward jump, which maps to its
                            // first occurrence and may precede `after`.
                            if candidate > after {
                                return Some(candidate);
                            }
                        }
                    }
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }
}

/// The values `min..=max` whose bit is set, ascending.
fn bits(set: u64, min: i8, max: i8) -> impl Iterator<Item = i8> {
    (min..=max).filter(move |v| set & (1 << v) != 0)
}

/// Writes a field: `*` when it is the wildcard, else values and `a-b` runs, comma-separated.
fn write_field(f: &mut fmt::Formatter<'_>, set: u64, min: u8, max: u8, star: bool) -> fmt::Result {
    if star {
        return f.write_str("*");
    }
    let values: Vec<u8> = (min..=max).filter(|v| set & (1 << v) != 0).collect();
    let runs: Vec<String> = values
        .chunk_by(|a, b| a + 1 == *b)
        .map(|run| {
            // `chunk_by` never yields an empty run.
            let (first, last) = (run[0], run[run.len() - 1]);
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    f.write_str(&runs.join(","))
}

/// The canonical expression: `*` for wildcards (and full second, minute, hour and month
/// fields), otherwise values and ranges. It parses back to an equal `Cron`.
impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = |set: u64, min: u8, max: u8| (min..=max).all(|v| set & (1 << v) != 0);
        write_field(f, self.seconds, 0, 59, full(self.seconds, 0, 59))?;
        f.write_str(" ")?;
        write_field(f, self.minutes, 0, 59, full(self.minutes, 0, 59))?;
        f.write_str(" ")?;
        let hours = u64::from(self.hours);
        write_field(f, hours, 0, 23, full(hours, 0, 23))?;
        f.write_str(" ")?;
        write_field(f, u64::from(self.days), 1, 31, self.days_star)?;
        f.write_str(" ")?;
        let months = u64::from(self.months);
        write_field(f, months, 1, 12, full(months, 1, 12))?;
        f.write_str(" ")?;
        write_field(f, u64::from(self.weekdays), 0, 6, self.weekdays_star)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn next(pattern: &str, after: &str, tz: Option<&str>) -> Option<String> {
        Schedule::parse(pattern)
            .unwrap()
            .next_after(ts(after), tz)
            .unwrap()
            .map(|t| t.to_string())
    }

    #[test]
    fn at_fires_once() {
        let s = Schedule::parse("@at 2026-12-01T08:00:00+01:00").unwrap();
        assert_eq!(s, Schedule::At(ts("2026-12-01T07:00:00Z")));
        assert!(!s.is_repeating());
        assert_eq!(
            s.next_after(ts("2026-12-01T06:59:59Z"), None),
            Ok(Some(ts("2026-12-01T07:00:00Z")))
        );
        assert_eq!(s.next_after(ts("2026-12-01T07:00:00Z"), None), Ok(None));
        // Published after its time: due immediately.
        assert_eq!(
            s.first_fire(ts("2027-01-01T00:00:00Z"), None),
            Ok(Some(ts("2026-12-01T07:00:00Z")))
        );
        assert_eq!(Schedule::parse(&s.to_string()), Ok(s));
        assert!(Schedule::parse("@at 2026-12-01T08:00:00.25Z").is_ok());
    }

    #[test]
    fn every_adds_its_interval() {
        let s = Schedule::parse("@every 1m30s").unwrap();
        assert_eq!(s, Schedule::Every(Duration::from_secs(90)));
        assert!(s.is_repeating());
        assert_eq!(s.to_string(), "@every 1m30s");
        assert_eq!(
            s.next_after(ts("2026-01-01T00:00:00Z"), None),
            Ok(Some(ts("2026-01-01T00:01:30Z")))
        );
        assert_eq!(s.next_after(Timestamp::MAX, None), Ok(None));
    }

    #[test]
    fn cron_fields() {
        assert_eq!(
            next("*/15 * * * * *", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-01-01T00:00:15Z")
        );
        assert_eq!(
            next("*/15 * * * * *", "2026-01-01T00:00:14.5Z", None).as_deref(),
            Some("2026-01-01T00:00:15Z")
        );
        assert_eq!(
            next("0 30 9 * * mon-fri", "2026-01-02T09:30:00Z", None).as_deref(),
            Some("2026-01-05T09:30:00Z")
        );
        assert_eq!(
            next("0 0 12 1,15 * *", "2026-01-02T00:00:00Z", None).as_deref(),
            Some("2026-01-15T12:00:00Z")
        );
        assert_eq!(
            next("0 0 0 29 feb *", "2026-03-01T00:00:00Z", None).as_deref(),
            Some("2028-02-29T00:00:00Z")
        );
        assert_eq!(
            next("0 0 0 1 JAN-MAR/2 *", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-03-01T00:00:00Z")
        );
        assert_eq!(
            next("5/20 0 0 * * ?", "2026-01-01T00:00:05Z", None).as_deref(),
            Some("2026-01-01T00:00:25Z")
        );
        assert_eq!(
            next("0 0 0 * * 7", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-01-04T00:00:00Z")
        );
    }

    #[test]
    fn restricted_day_of_month_and_week_match_either() {
        // 2026-01-13 is a Tuesday; the 13th or any Friday (the 2nd) fires.
        assert_eq!(
            next("0 0 0 13 * fri", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-01-02T00:00:00Z")
        );
        assert_eq!(
            next("0 0 0 13 * fri", "2026-01-09T00:00:00Z", None).as_deref(),
            Some("2026-01-13T00:00:00Z")
        );
        // A wildcard day-of-week leaves the day-of-month alone deciding, and vice versa.
        assert_eq!(
            next("0 0 0 13 * *", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-01-13T00:00:00Z")
        );
        assert_eq!(
            next("0 0 0 * * fri", "2026-01-03T00:00:00Z", None).as_deref(),
            Some("2026-01-09T00:00:00Z")
        );
        // An impossible day-of-month still fires through a restricted day-of-week.
        assert_eq!(
            next("0 0 0 30 2 fri", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-02-06T00:00:00Z")
        );
        // A stepped wildcard counts as restricted.
        assert_eq!(
            next("0 0 0 */10 * fri", "2026-01-01T00:00:00Z", None).as_deref(),
            Some("2026-01-02T00:00:00Z")
        );
    }

    #[test]
    fn predefined_schedules() {
        let after = "2026-05-17T10:20:30Z";
        assert_eq!(
            next("@hourly", after, None).as_deref(),
            Some("2026-05-17T11:00:00Z")
        );
        assert_eq!(
            next("@daily", after, None).as_deref(),
            Some("2026-05-18T00:00:00Z")
        );
        assert_eq!(
            next("@midnight", after, None).as_deref(),
            Some("2026-05-18T00:00:00Z")
        );
        assert_eq!(
            next("@weekly", after, None).as_deref(),
            Some("2026-05-24T00:00:00Z")
        );
        assert_eq!(
            next("@monthly", after, None).as_deref(),
            Some("2026-06-01T00:00:00Z")
        );
        assert_eq!(
            next("@yearly", after, None).as_deref(),
            Some("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            next("@annually", after, None).as_deref(),
            Some("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            Schedule::parse("@daily").unwrap().to_string(),
            "0 0 0 * * *"
        );
    }

    #[test]
    fn cron_in_a_time_zone_across_daylight_saving() {
        let paris = Some("Europe/Paris");
        assert_eq!(
            next("0 0 9 * * *", "2026-01-01T00:00:00Z", paris).as_deref(),
            Some("2026-01-01T08:00:00Z")
        );
        assert_eq!(
            next("0 0 9 * * *", "2026-07-01T00:00:00Z", paris).as_deref(),
            Some("2026-07-01T07:00:00Z")
        );
        // 2026-03-29 02:30 does not exist in Paris: it fires at 03:30 CEST.
        assert_eq!(
            next("0 30 2 * * *", "2026-03-29T00:00:00Z", paris).as_deref(),
            Some("2026-03-29T01:30:00Z")
        );
        // 2026-10-25 02:30 happens twice in Paris: it fires once, at the first.
        assert_eq!(
            next("0 30 2 * * *", "2026-10-24T12:00:00Z", paris).as_deref(),
            Some("2026-10-25T00:30:00Z")
        );
        assert_eq!(
            next("0 30 2 * * *", "2026-10-25T00:30:00Z", paris).as_deref(),
            Some("2026-10-26T01:30:00Z")
        );
    }

    #[test]
    fn time_zone_errors_name_the_zone() {
        let cron = Schedule::parse("@daily").unwrap();
        let err = cron
            .next_after(ts("2026-01-01T00:00:00Z"), Some("Mars/Olympus"))
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown time zone \"Mars/Olympus\""),
            "{err}"
        );
        for bad in [
            "../../etc/passwd",
            "/etc/localtime",
            "Europe/Paris ",
            &"A".repeat(256),
        ] {
            let err = cron.time_zone(Some(bad)).unwrap_err().to_string();
            let quoted: String = bad.chars().take(10).collect();
            assert!(
                err.starts_with(&format!("unknown time zone \"{quoted}")),
                "{err}"
            );
            assert!(err.ends_with(": not an IANA time zone name"), "{err}");
        }
        assert!(
            cron.time_zone(Some(&format!("Etc/{}", "A".repeat(251))))
                .is_err()
        );
        assert!(cron.time_zone(Some("Etc/GMT+5")).is_ok());
        assert!(cron.time_zone(Some("America/Port-au-Prince")).is_ok());
        assert_eq!(cron.time_zone(Some("")), Ok(TimeZone::UTC));
        let at = Schedule::parse("@at 2026-01-01T00:00:00Z").unwrap();
        let err = at
            .first_fire(ts("2026-01-01T00:00:00Z"), Some("UTC"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "time zone \"UTC\" is only allowed with cron schedules"
        );
        let every = Schedule::parse("@every 1s").unwrap();
        assert!(
            every
                .next_after(ts("2026-01-01T00:00:00Z"), Some("Europe/Paris"))
                .is_err()
        );
    }

    #[test]
    fn pattern_errors_name_the_value() {
        let cases = [
            ("", "invalid schedule \"\": it is empty"),
            (
                "@sometimes",
                "invalid schedule \"@sometimes\": unknown form",
            ),
            (
                "@at tomorrow",
                "invalid schedule \"@at tomorrow\": \"tomorrow\" is not an RFC 3339 time",
            ),
            (
                "@at 2026-01-01 00:00:00Z",
                "invalid schedule \"@at 2026-01-01 00:00:00Z\": \"2026-01-01 00:00:00Z\" is not an RFC 3339",
            ),
            (
                "@at 2026-01-01T00:00:00.Z",
                "invalid schedule \"@at 2026-01-01T00:00:00.Z\": \"2026-01-01T00:00:00.Z\" is not an RFC 3339",
            ),
            (
                "@at 2026-01-01T00:00:00+0100",
                "invalid schedule \"@at 2026-01-01T00:00:00+0100\": \"2026-01-01T00:00:00+0100\" is not an RFC 3339",
            ),
            (
                "@at 2026-01-01T00:00Z",
                "invalid schedule \"@at 2026-01-01T00:00Z\": \"2026-01-01T00:00Z\" is not an RFC 3339",
            ),
            (
                "@at 2026-02-30T00:00:00Z",
                "invalid schedule \"@at 2026-02-30T00:00:00Z\": \"2026-02-30T00:00:00Z\" is not a valid time",
            ),
            (
                "@every 500ms",
                "invalid schedule \"@every 500ms\": the interval must be at least one second",
            ),
            (
                "@every soon",
                "invalid schedule \"@every soon\": invalid duration \"soon\"",
            ),
            ("@every", "invalid schedule \"@every\": unknown form"),
            (
                "* * * * *",
                "invalid schedule \"* * * * *\": a cron expression has 6 fields (sec min hour day-of-month month day-of-week), found 5",
            ),
            (
                "60 * * * * *",
                "invalid schedule \"60 * * * * *\": second field \"60\": \"60\" is not a number from 0 to 59",
            ),
            (
                "0 0 24 * * *",
                "invalid schedule \"0 0 24 * * *\": hour field \"24\": \"24\" is not a number from 0 to 23",
            ),
            (
                "0 0 0 0 * *",
                "invalid schedule \"0 0 0 0 * *\": day-of-month field \"0\"",
            ),
            (
                "0 0 0 * 13 *",
                "invalid schedule \"0 0 0 * 13 *\": month field \"13\": \"13\" is not a name or a number from 1 to 12",
            ),
            (
                "0 0 0 * * 8",
                "invalid schedule \"0 0 0 * * 8\": day-of-week field \"8\"",
            ),
            (
                "0 0 0 * * funday",
                "invalid schedule \"0 0 0 * * funday\": day-of-week field \"funday\"",
            ),
            (
                "0 5-1 * * * *",
                "invalid schedule \"0 5-1 * * * *\": minute field \"5-1\": range \"5-1\" starts after it ends",
            ),
            (
                "*/0 * * * * *",
                "invalid schedule \"*/0 * * * * *\": second field \"*/0\": step \"0\" is not a number from 1 to 255",
            ),
            (
                "0 0 0 1,,2 * *",
                "invalid schedule \"0 0 0 1,,2 * *\": day-of-month field \"1,,2\": \"\" is not a number",
            ),
            (
                "+1 * * * * *",
                "invalid schedule \"+1 * * * * *\": second field \"+1\"",
            ),
            (
                "0 0 0 30 2 *",
                "invalid schedule \"0 0 0 30 2 *\": no day ever matches",
            ),
        ];
        for (pattern, message) in cases {
            let err = Schedule::parse(pattern).unwrap_err().to_string();
            assert!(err.starts_with(message), "{pattern:?}: {err}");
        }
    }

    #[test]
    fn at_offsets_must_be_sign_hours_colon_minutes() {
        for offset in [
            "+0100", "x01:00", "+a1:00", "+01-00", "+01:a0", "+01:000", "z",
        ] {
            let time = format!("2026-01-01T00:00:00{offset}");
            let err = Schedule::parse(&format!("@at {time}"))
                .unwrap_err()
                .to_string();
            assert!(
                err.ends_with(&format!(
                    "{time:?} is not an RFC 3339 time such as \"2026-01-02T03:04:05Z\""
                )),
                "{err}"
            );
        }
        assert!(Schedule::parse("@at 2026-01-01T00:00:00-05:30").is_ok());
    }

    #[test]
    fn cron_display_is_canonical_and_round_trips() {
        let cases = [
            ("0 0 0 * * *", "0 0 0 * * *"),
            ("0-59 */1 0-23 1-31 1-12 0-7", "* * * 1-31 * 0-6"),
            ("1,2,3,10 0 0 ? jan,feb,MAR 7", "1-3,10 0 0 * 1-3 0"),
            ("0 0 0 */10 * *", "0 0 0 1,11,21,31 * *"),
        ];
        for (pattern, canonical) in cases {
            let cron = Schedule::parse(pattern).unwrap();
            assert_eq!(cron.to_string(), canonical);
            assert_eq!(Schedule::parse(canonical), Ok(cron));
        }
    }
}
