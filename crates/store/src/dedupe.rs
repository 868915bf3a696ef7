//! The `Nats-Msg-Id` dedupe window (rebuilt on open by `recovery`).

use std::collections::{HashMap, VecDeque};

/// Message ids seen within the window, with the sequence they were stored at.
#[derive(Debug, Default)]
pub struct Dedupe {
    ids: HashMap<String, u64>,
    /// (store time ns, id) in arrival order, for expiry.
    order: VecDeque<(i64, String)>,
}

impl Dedupe {
    /// Forgets ids stored before `cutoff` (ns).
    pub fn expire(&mut self, cutoff: i64) {
        while let Some((ts, _)) = self.order.front() {
            if *ts >= cutoff {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                self.ids.remove(&id);
            }
        }
    }

    /// The sequence an id was stored at, if it is within the window.
    pub fn get(&self, id: &str) -> Option<u64> {
        self.ids.get(id).copied()
    }

    /// Records an id stored at `seq` at time `ts`.
    pub fn insert(&mut self, id: &str, seq: u64, ts: i64) {
        if self.ids.insert(id.to_string(), seq).is_none() {
            self.order.push_back((ts, id.to_string()));
        }
    }
}
