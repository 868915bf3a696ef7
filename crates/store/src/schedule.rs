//! Message schedules: a message carrying `Nats-Schedule` on subject S fires copies of itself
//! into `Nats-Schedule-Target` (with `Nats-Scheduler: S`) per its pattern. The newest schedule
//! message on a subject is the one in force. After a restart, runs missed while down fire once.

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

/// The message a schedule fires: the schedule message's headers without the schedule ones,
/// plus `Nats-Scheduler`, `Nats-TTL` from `Nats-Schedule-TTL`, and `Nats-Schedule-Next: purge`
/// for a one-shot. Returns the target subject, the headers, and the next fire time after `now`.
pub fn fire(
    schedule_subject: &str,
    h: &Headers,
    now: i64,
) -> Option<(String, Headers, Option<i64>)> {
    let schedule = Schedule::parse(h.get(names::SCHEDULE)?).ok()?;
    let target = h.get(names::SCHEDULE_TARGET)?.to_string();
    let tz = h.get(names::SCHEDULE_TIME_ZONE);
    let next = schedule
        .next_after(timestamp(now), tz)
        .ok()
        .flatten()
        .map(|t| t.as_nanosecond() as i64);
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
    let next = if schedule.is_repeating() {
        next
    } else {
        out.insert(names::SCHEDULE_NEXT, names::SCHEDULE_NEXT_PURGE);
        None
    };
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

    /// The next fire time.
    pub fn next(&self) -> Option<i64> {
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
