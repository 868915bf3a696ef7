//! Phase 5 of recovery: the `Nats-Msg-Id` dedupe window, rebuilt from the newest messages
//! within it that carry an id. Only blocks whose last message is within the window and that
//! hold messages written with an id are read.

use std::time::Duration;

use crate::block::Blocks;
use crate::dedupe::Dedupe;
use crate::error::Result;
use crate::proto::names;
use crate::record::flags;
use crate::state::decode_message;
use crate::table::Table;
use crate::time::{nanos, now_ns};

/// The dedupe window of `window` ending now.
pub fn rebuild(table: &mut Table, blocks: &Blocks, window: Duration) -> Result<Dedupe> {
    let cutoff = now_ns().saturating_sub(nanos(window));
    let ranges: Vec<(u64, u64)> = table
        .blocks()
        .rev()
        .map(|(_, b)| &b.stats)
        .take_while(|s| s.msgs == 0 || s.last_ts >= cutoff)
        .filter(|s| s.msgs > 0 && s.msg_ids > 0)
        .map(|s| (s.first, s.last))
        .collect();
    let mut dedupe = Dedupe::default();
    for (first, last) in ranges.into_iter().rev() {
        let mut carrying = Vec::new();
        table.walk(first, last, |seq, m| {
            if m.ts >= cutoff && m.flags & flags::MSG_ID != 0 {
                carrying.push((seq, m.loc, m.ts));
            }
            true
        })?;
        for (seq, loc, ts) in carrying {
            if let Ok(Some(msg)) = blocks.read(loc).map(|b| decode_message(&b, seq))
                && let Some(id) = msg.headers.get(names::MSG_ID)
            {
                dedupe.insert(id, seq, ts);
            }
        }
    }
    Ok(dedupe)
}
