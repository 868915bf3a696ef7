//! Message schedules: a message carrying `Nats-Schedule` on subject S fires copies of itself
//! into `Nats-Schedule-Target` (with `Nats-Scheduler: S`) per its pattern. The newest schedule
//! message on a subject is the one in force. After a restart, runs missed while down fire once.
//!
//! A produced message is stored with the fire's own time, and carries the next fire time in
//! `Nats-Schedule-Next` (`purge` for a one-shot): the schedule's next run after that stored
//! time ([`after_fire`]). Recovery takes the next fire from the newest produced message the
//! same way ([`crate::sched::catch_up`]), so a fire that was stored is never repeated within
//! its period, whatever snapshot of the schedules survived a crash; a fire that was not stored
//! happens after the restart.

use std::collections::{BTreeMap, BTreeSet};

use sluice_protocol::schedule::Schedule;

use crate::error::{ApiError, Result};
use crate::proto::{self, Headers, MsgTtl, names};
use crate::time::timestamp;

/// One schedule in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Sequence of the schedule message.
    pub seq: u64,
    /// Next fire time, ns.
    pub next: i64,
}

/// Schedules in force, by schedule subject, with a time order for firing.
#[derive(Debug, Default)]
pub struct Schedules {
    by_subject: BTreeMap<String, Entry>,
    by_time: BTreeSet<(i64, String)>,
    /// Messages of spent schedules that recovery found still stored (the fire was, its
    /// removal was not): removed at the next pass, never fired again.
    spent: BTreeSet<u64>,
}

/// A validated schedule message: its pattern, zone and first fire time.
pub struct Validated {
    /// First fire, ns.
    pub first: i64,
}

/// Checks a schedule message's headers (10188 disabled, 10189 bad pattern or zone, 10190 bad
/// target, 10191 bad TTL) and computes its first fire time.
pub fn validate(
    allowed: bool,
    subject: &str,
    h: &Headers,
    published: i64,
) -> Result<Option<Validated>> {
    let Some(pattern) = h.get(names::SCHEDULE) else {
        return Ok(None);
    };
    if !allowed {
        return Err(ApiError::schedules_disabled().into());
    }
    let schedule =
        Schedule::parse(pattern).map_err(|e| ApiError::new(400, 10189, e.to_string()))?;
    let tz = h.get(names::SCHEDULE_TIME_ZONE);
    let target = h.get(names::SCHEDULE_TARGET).unwrap_or("");
    if proto::validate_subject(target).is_err() || target == subject {
        return Err(ApiError::invalid_schedule_target().into());
    }
    if let Some(ttl) = h.get(names::SCHEDULE_TTL) {
        MsgTtl::parse(ttl).map_err(|_| ApiError::invalid_schedule_ttl())?;
    }
    let first = schedule
        .first_fire(timestamp(published), tz)
        .map_err(|e| ApiError::new(400, 10189, e.to_string()))?
        .ok_or_else(ApiError::invalid_schedule)?;
    Ok(Some(Validated {
        first: first.as_nanosecond() as i64,
    }))
}

/// What a stored fire of a schedule leaves of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFire {
    /// It fires next at this time, ns.
    Next(i64),
    /// It has no run after the fire (a one-shot, or a run beyond the representable times): its
    /// message is removed.
    Spent,
}

/// The next run of `schedule` (zone `tz`) strictly after `at`, ns; `None` when there is none.
fn run_after(schedule: &Schedule, tz: Option<&str>, at: i64) -> Option<i64> {
    schedule
        .next_after(timestamp(at), tz)
        .ok()
        .flatten()
        .map(|t| t.as_nanosecond() as i64)
}

/// What a fire of the schedule message with headers `h`, stored at `fired_at` (ns), leaves of
/// the schedule: the same next fire [`fire`] wrote into the produced message's
/// `Nats-Schedule-Next`. `None` when `h` holds no valid schedule.
pub fn after_fire(h: &Headers, fired_at: i64) -> Option<AfterFire> {
    let schedule = Schedule::parse(h.get(names::SCHEDULE)?).ok()?;
    let tz = h.get(names::SCHEDULE_TIME_ZONE);
    schedule.time_zone(tz).ok()?;
    Some(match run_after(&schedule, tz, fired_at) {
        Some(next) if schedule.is_repeating() => AfterFire::Next(next),
        // An `@at` whose instant is after the message: not a fire of it.
        Some(at) => AfterFire::Next(at),
        None => AfterFire::Spent,
    })
}

/// The message a schedule fires at `at` (ns; the time it is stored with): the schedule
/// message's headers without the schedule ones, plus `Nats-Scheduler`, `Nats-TTL` from
/// `Nats-Schedule-TTL`, and `Nats-Schedule-Next`: the next fire time (RFC 3339), or `purge`
/// for a one-shot. Returns the target subject, the headers, and the next fire time after `at`
/// (`None`: the schedule is spent).
pub fn fire(
    schedule_subject: &str,
    h: &Headers,
    at: i64,
) -> Option<(String, Headers, Option<i64>)> {
    let schedule = Schedule::parse(h.get(names::SCHEDULE)?).ok()?;
    let target = h.get(names::SCHEDULE_TARGET)?.to_string();
    let tz = h.get(names::SCHEDULE_TIME_ZONE);
    let next = run_after(&schedule, tz, at).filter(|_| schedule.is_repeating());
    let mut out = h.clone();
    let ttl = h.get(names::SCHEDULE_TTL).map(str::to_string);
    out.remove_prefixed("Nats-Schedule");
    out.remove_prefixed("Nats-Expected-");
    out.remove(names::MSG_ID);
    out.remove(names::TTL);
    out.insert(names::SCHEDULER, schedule_subject);
    if let Some(ttl) = ttl {
        out.insert(names::TTL, ttl);
    }
    match next {
        Some(next) => out.insert(names::SCHEDULE_NEXT, timestamp(next).to_string()),
        None => out.insert(names::SCHEDULE_NEXT, names::SCHEDULE_NEXT_PURGE),
    }
    Some((target, out, next))
}

impl Schedules {
    /// Puts the schedule on `subject` in force (replacing an older one).
    pub fn insert(&mut self, subject: &str, seq: u64, next: i64) {
        self.remove_subject(subject);
        self.by_subject
            .insert(subject.to_string(), Entry { seq, next });
        self.by_time.insert((next, subject.to_string()));
    }

    fn remove_subject(&mut self, subject: &str) -> Option<Entry> {
        let old = self.by_subject.remove(subject)?;
        self.by_time.remove(&(old.next, subject.to_string()));
        Some(old)
    }

    /// Drops the schedule whose message `seq` was removed.
    pub fn forget(&mut self, subject: &str, seq: u64) {
        if self.by_subject.get(subject).is_some_and(|e| e.seq == seq) {
            self.remove_subject(subject);
        }
        self.spent.remove(&seq);
    }

    /// Takes the schedule on `subject` out of force as spent: its message `seq` is to be
    /// removed ([`Schedules::take_spent`]) and it never fires again.
    pub fn mark_spent(&mut self, subject: &str, seq: u64) {
        if self.by_subject.get(subject).is_some_and(|e| e.seq == seq) {
            self.remove_subject(subject);
            self.spent.insert(seq);
        }
    }

    /// The messages of spent schedules still to remove, taken.
    pub fn take_spent(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.spent).into_iter().collect()
    }

    /// Schedules due at `now`, removed from the set (the caller re-inserts repeating ones).
    pub fn due(&mut self, now: i64) -> Vec<(String, Entry)> {
        let mut out = Vec::new();
        while let Some((at, _)) = self.by_time.first() {
            if *at > now {
                break;
            }
            let Some((_, subject)) = self.by_time.pop_first() else {
                break;
            };
            if let Some(e) = self.by_subject.remove(&subject) {
                out.push((subject, e));
            }
        }
        out
    }

    /// The next fire time (the earliest time when a spent schedule's message is to be removed).
    pub fn next(&self) -> Option<i64> {
        if !self.spent.is_empty() {
            return Some(i64::MIN);
        }
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Entries in force.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> + '_ {
        self.by_subject.iter().map(|(s, e)| (s.as_str(), e))
    }

    /// Number in force.
    pub fn len(&self) -> usize {
        self.by_subject.len()
    }

    /// Whether a schedule on `subject` is in force.
    pub fn has(&self, subject: &str) -> bool {
        self.by_subject.contains_key(subject)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(pattern: &str) -> Headers {
        let mut h = Headers::new();
        h.insert(names::SCHEDULE, pattern);
        h.insert(names::SCHEDULE_TARGET, "out.a");
        h
    }

    const SECOND: i64 = 1_000_000_000;
    /// 2026-11-29T19:07:50.123456789Z.
    const AT: i64 = 1_795_979_270 * SECOND + 123_456_789;

    /// The next fire a fire writes into `Nats-Schedule-Next` is the one recovery derives from
    /// the fire's stored time.
    #[test]
    fn the_next_fire_written_is_the_one_recovered() {
        for (pattern, next) in [
            ("@every 1s", AT + SECOND),
            ("@every 90m", AT + 5_400 * SECOND),
            ("0 30 * * * *", 1_795_980_600 * SECOND),
        ] {
            let h = schedule(pattern);
            let (target, out, armed) = fire("sched.a", &h, AT).unwrap();
            assert_eq!((target.as_str(), armed), ("out.a", Some(next)), "{pattern}");
            let written: jiff::Timestamp = out.get(names::SCHEDULE_NEXT).unwrap().parse().unwrap();
            assert_eq!(written.as_nanosecond() as i64, next, "{pattern}");
            assert_eq!(after_fire(&h, AT), Some(AfterFire::Next(next)), "{pattern}");
            assert_eq!(out.get(names::SCHEDULER), Some("sched.a"));
            assert_eq!(out.get(names::SCHEDULE), None);
        }
    }

    /// A one-shot's fire says `purge` and leaves it spent; a message stored before its
    /// instant is no fire of it.
    #[test]
    fn a_one_shot_is_spent_by_its_fire() {
        let h = schedule("@at 2026-11-29T19:07:50.123456789Z");
        let (_, out, armed) = fire("sched.a", &h, AT).unwrap();
        assert_eq!(armed, None);
        assert_eq!(
            out.get(names::SCHEDULE_NEXT),
            Some(names::SCHEDULE_NEXT_PURGE)
        );
        assert_eq!(after_fire(&h, AT), Some(AfterFire::Spent));
        assert_eq!(after_fire(&h, AT + SECOND), Some(AfterFire::Spent));
        assert_eq!(after_fire(&h, AT - 1), Some(AfterFire::Next(AT)));
        assert_eq!(after_fire(&Headers::new(), AT), None);
    }

    /// A spent schedule leaves force at once and makes its removal due now.
    #[test]
    fn a_spent_schedule_is_out_of_force_and_its_removal_due() {
        let mut s = Schedules::default();
        s.insert("a", 1, 100);
        s.insert("b", 2, 200);
        s.mark_spent("a", 1);
        // Not the message in force on its subject: nothing changes.
        s.mark_spent("b", 9);
        assert!(!s.has("a") && s.has("b"));
        assert_eq!(s.len(), 1);
        assert_eq!(s.next(), Some(i64::MIN));
        assert_eq!(s.take_spent(), vec![1]);
        assert_eq!(s.next(), Some(200));
        assert!(s.due(150).is_empty());
    }
}
