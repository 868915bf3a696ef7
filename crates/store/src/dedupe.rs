//! The `Nats-Msg-Id` dedupe window.

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

/// Rebuilds the dedupe window after open: walks back from the newest message while it is
/// within the window, reading the ids of messages flagged as carrying one.
pub fn rebuild(st: &mut crate::state::State) {
    let cutoff =
        crate::state::now_ns().saturating_sub(crate::state::nanos(st.config.dedupe_window()));
    let mut found = Vec::new();
    let mut seq = st.table.last_seq;
    while seq >= 1 && seq >= st.table.first_seq() {
        if let Some(m) = st.table.get(seq) {
            if m.ts < cutoff {
                break;
            }
            if m.flags & crate::record::flags::MSG_ID != 0
                && let Ok(Some(msg)) = st
                    .blocks
                    .read(m.loc)
                    .map(|b| crate::state::decode_message(&b, seq))
                && let Some(id) = msg.headers.get(crate::proto::names::MSG_ID)
            {
                found.push((m.ts, id.to_string(), seq));
            }
        }
        seq -= 1;
    }
    for (ts, id, seq) in found.into_iter().rev() {
        st.dedupe.insert(&id, seq, ts);
    }
}
