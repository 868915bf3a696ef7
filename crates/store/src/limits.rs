//! Retention: message, byte, per-subject and age limits, and TTL expiry.

use crate::config::{DiscardPolicy, limit};
use crate::error::{ApiError, Result};
use crate::record::flags;
use crate::state::{Removal, State};
use crate::table::MsgMeta;

/// Rejects a new message that would exceed a limit under discard `new`.
pub fn check_discard_new(st: &State, subject: &str, record_len: u64) -> Result<(), ApiError> {
    let c = &st.config;
    let t = &st.table;
    if c.discard == DiscardPolicy::New {
        if limit(c.max_msgs).is_some_and(|m| t.count() + 1 > m) {
            return Err(ApiError::max_messages_exceeded());
        }
        if limit(c.max_bytes).is_some_and(|m| t.bytes() + record_len > m) {
            return Err(ApiError::max_bytes_exceeded());
        }
        if c.discard_new_per_subject
            && limit(c.max_msgs_per_subject).is_some_and(|m| t.subject_count(subject) + 1 > m)
        {
            return Err(ApiError::max_messages_per_subject_exceeded());
        }
    }
    Ok(())
}

/// Removes the oldest messages beyond the message, byte and per-subject limits
/// (after a publish on `subject`, or for every subject after a config change).
pub fn enforce(st: &mut State, subject: Option<&str>) -> Result<()> {
    let mut doomed = Vec::new();
    if let Some(max) = limit(st.config.max_msgs_per_subject) {
        match subject {
            // After every publish: no copy of the subject.
            Some(s) => over_subject_limit(st, s, max, &mut doomed)?,
            None => {
                for s in st.table.subject_counts(None).into_keys() {
                    over_subject_limit(st, &s, max, &mut doomed)?;
                }
            }
        }
    }
    // Superseded messages are told to the readers of their subjects, wherever they are.
    st.remove(&doomed, Removal::Removed)?;
    let max_msgs = limit(st.config.max_msgs).unwrap_or(u64::MAX);
    let max_bytes = limit(st.config.max_bytes).unwrap_or(u64::MAX);
    let (mut count, mut bytes) = (st.table.count(), st.table.bytes());
    let mut front = Vec::new();
    if count > max_msgs || bytes > max_bytes {
        st.table.walk(0, u64::MAX, |seq, m| {
            front.push(seq);
            count -= 1;
            bytes -= m.loc.len as u64;
            count > max_msgs || bytes > max_bytes
        })?;
    }
    st.remove(&front, Removal::Expired)?;
    Ok(())
}

/// Adds to `doomed` the oldest messages of `subject` beyond `max`.
fn over_subject_limit(
    st: &mut State,
    subject: &str,
    max: u64,
    doomed: &mut Vec<u64>,
) -> Result<()> {
    let excess = st.table.subject_count(subject).saturating_sub(max) as usize;
    if excess > 0 {
        doomed.extend(st.table.subject_seqs(subject, excess)?);
    }
    Ok(())
}

/// Removes messages older than `max_age` (except TTL `never` ones) and those whose TTL is due;
/// returns the messages `max_age` removed (whose subjects may get delete markers). A message
/// gone by its own TTL was meant to go: readers are not told of it, as they are of those
/// `max_age` removed.
pub fn expire(st: &mut State, now: i64) -> Result<Vec<(u64, MsgMeta)>> {
    let mut due = st.ttl.due(now);
    due.sort_unstable();
    let mut aged = Vec::new();
    let max_age = crate::time::nanos(st.config.max_age);
    if max_age > 0 {
        let cutoff = now.saturating_sub(max_age);
        st.table.walk(0, u64::MAX, |seq, m| {
            if m.ts >= cutoff {
                return false;
            }
            if m.flags & flags::TTL_NEVER == 0 && due.binary_search(&seq).is_err() {
                aged.push(seq);
            }
            true
        })?;
    }
    // IMPORTANT: the TTL's removals first: an aged message right behind them is then at the
    // front when it goes, so readers are told of it.
    st.remove(&due, Removal::Intended)?;
    st.remove(&aged, Removal::Expired)
}

/// When the next age or TTL expiry is due (ns), if any.
pub fn next_due(st: &mut State) -> Result<Option<i64>> {
    let max_age = crate::time::nanos(st.config.max_age);
    let mut age = None;
    if max_age > 0 {
        st.table.walk(0, u64::MAX, |_, m| {
            if m.flags & flags::TTL_NEVER == 0 {
                age = Some(m.ts.saturating_add(max_age));
            }
            age.is_none()
        })?;
    }
    Ok([age, st.ttl.next(), st.schedules.next()]
        .into_iter()
        .flatten()
        .min())
}
