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

/// Rebuilds the dedupe window after open from the newest messages within the window that carry
/// an id: only blocks whose last message is within the window and that hold messages written
/// with an id are read.
pub fn rebuild(st: &mut crate::state::State) -> crate::error::Result<()> {
    let cutoff =
        crate::state::now_ns().saturating_sub(crate::state::nanos(st.config.dedupe_window()));
    let ranges: Vec<(u64, u64)> = st
        .table
        .blocks()
        .rev()
        .map(|(_, b)| &b.stats)
        .take_while(|s| s.msgs == 0 || s.last_ts >= cutoff)
        .filter(|s| s.msgs > 0 && s.msg_ids > 0)
        .map(|s| (s.first, s.last))
        .collect();
    let mut found = Vec::new();
    for (first, last) in ranges.into_iter().rev() {
        let mut carrying = Vec::new();
        st.table.walk(first, last, |seq, m| {
            if m.ts >= cutoff && m.flags & crate::record::flags::MSG_ID != 0 {
                carrying.push((seq, m.loc, m.ts));
            }
            true
        })?;
        for (seq, loc, ts) in carrying {
            if let Ok(Some(msg)) = st
                .blocks
                .read(loc)
                .map(|b| crate::state::decode_message(&b, seq))
                && let Some(id) = msg.headers.get(crate::proto::names::MSG_ID)
            {
                found.push((ts, id.to_string(), seq));
            }
        }
    }
    for (ts, id, seq) in found {
        st.dedupe.insert(&id, seq, ts);
    }
    Ok(())
}
