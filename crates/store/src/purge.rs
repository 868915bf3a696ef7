//! Purge and single-message delete.

use crate::error::{ApiError, Result, StoreError};
use crate::markers::{self, Reason};
use crate::proto::{self, FilterSet};
use crate::state::{Removal, State};
use crate::types::PurgeRequest;

/// Removes one message; `Ok(false)` when it did not exist.
pub fn delete_msg(st: &mut State, seq: u64) -> Result<bool> {
    if st.config.sealed {
        return Err(ApiError::stream_sealed().into());
    }
    if st.config.deny_delete {
        return Err(ApiError::msg_delete_not_permitted().into());
    }
    // Readers of its subject that had not read it are told (a `removed` gap); those that had
    // get the marker, if the stream keeps them.
    let removed = st.remove(&[seq], Removal::Removed)?;
    let orphaned = markers::orphaned(st, &removed);
    markers::leave(st, &orphaned, Reason::Remove)?;
    Ok(!removed.is_empty())
}

/// Purges per the request; returns how many messages were removed.
pub fn purge(st: &mut State, req: &PurgeRequest) -> Result<u64> {
    if st.config.sealed {
        return Err(ApiError::stream_sealed().into());
    }
    if st.config.deny_purge {
        return Err(ApiError::purge_not_permitted().into());
    }
    let filter = FilterSet::new([req.filter.as_deref().unwrap_or(">")])
        .map_err(|e| StoreError::InvalidSubject(e.to_string()))?;
    let upto = req
        .up_to_seq
        .map_or(st.table.last_seq, |s| s.saturating_sub(1));
    // Purging every message needs none of them: the counters say it all, no block is read.
    let all = proto::matches_everything(&filter)
        && req.keep.is_none()
        && upto >= st.table.last_seq
        && st.table.count() > 0;
    // Purging everything starts a fresh block, so that every old one can go once the purge
    // marker is durable: the writer deletes them after the batch is written, synced first
    // (`persist::drop_empty_blocks`).
    if all {
        st.roll()?;
        return Ok(st.remove_all());
    }
    let doomed = doomed(st, &filter, upto, req)?;
    if !doomed.is_empty() && doomed.len() as u64 == st.table.count() {
        st.roll()?;
    }
    // A purge of some subjects is told to the readers of those subjects only; one of every
    // subject (up to a sequence, or keeping the newest) is a removal from the front.
    let why = match req.filter {
        Some(_) => Removal::Removed,
        None => Removal::Expired,
    };
    let removed = st.remove(&doomed, why)?;
    // Subjects a purge of subjects left empty get a marker, if the stream keeps them: their
    // readers are told the value is gone. A purge from the front is no deletion of keys.
    if req.filter.is_some() {
        let orphaned = markers::orphaned(st, &removed);
        markers::leave(st, &orphaned, Reason::Purge)?;
    }
    Ok(removed.len() as u64)
}

/// The live sequences a purge of `filter` up to `upto` (keeping `req.keep`) removes.
fn doomed(st: &mut State, filter: &FilterSet, upto: u64, req: &PurgeRequest) -> Result<Vec<u64>> {
    let mut doomed: Vec<(u64, std::sync::Arc<str>)> = Vec::new();
    match proto::literal(filter) {
        Some(subject) => {
            let subject = st.table.intern(subject);
            for seq in st.table.subject_seqs(&subject, usize::MAX)? {
                if seq <= upto {
                    doomed.push((seq, subject.clone()));
                }
            }
        }
        None => st.table.walk(0, upto, |seq, m| {
            if filter.matches(&m.subject) {
                doomed.push((seq, m.subject.clone()));
            }
            true
        })?,
    }
    if let Some(keep) = req.keep {
        if req.filter.is_some() {
            // Keep the newest `keep` per matching subject, as JetStream does.
            let mut per_subject: std::collections::HashMap<std::sync::Arc<str>, u64> =
                Default::default();
            let mut kept = std::collections::HashSet::new();
            for (s, subject) in doomed.iter().rev() {
                let n = per_subject.entry(subject.clone()).or_default();
                if *n < keep {
                    *n += 1;
                    kept.insert(*s);
                }
            }
            doomed.retain(|(s, _)| !kept.contains(s));
        } else {
            let cut = doomed.len().saturating_sub(keep as usize);
            doomed.truncate(cut);
        }
    }
    Ok(doomed.into_iter().map(|(s, _)| s).collect())
}
