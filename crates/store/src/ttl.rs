//! Per-message TTL state: expiry times ordered for the background expiry pass.

use std::collections::{BTreeSet, HashMap};

/// Pending expiries, ordered by time.
#[derive(Debug, Default)]
pub struct TtlWheel {
    by_time: BTreeSet<(i64, u64)>,
    by_seq: HashMap<u64, i64>,
}

impl TtlWheel {
    /// Schedules `seq` to expire at `at` (ns).
    pub fn insert(&mut self, seq: u64, at: i64) {
        if let Some(old) = self.by_seq.insert(seq, at) {
            self.by_time.remove(&(old, seq));
        }
        self.by_time.insert((at, seq));
    }

    /// Stops tracking `seq` (removed by other means).
    pub fn forget(&mut self, seq: u64) {
        if let Some(at) = self.by_seq.remove(&seq) {
            self.by_time.remove(&(at, seq));
        }
    }

    /// Removes and returns every sequence due at or before `now`.
    pub fn due(&mut self, now: i64) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(&(at, seq)) = self.by_time.first() {
            if at > now {
                break;
            }
            self.by_time.pop_first();
            self.by_seq.remove(&seq);
            out.push(seq);
        }
        out
    }

    /// The next expiry time.
    pub fn next(&self) -> Option<i64> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Entries as (expiry ns, seq), ordered by time.
    pub fn entries(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.by_time.iter().copied()
    }

    /// Number of pending expiries.
    pub fn len(&self) -> usize {
        self.by_seq.len()
    }
}
