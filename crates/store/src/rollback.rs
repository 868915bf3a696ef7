//! Undoing a batch whose write failed (a full disk, a quota, an I/O error), so the stream stays
//! open and the next batch is tried again.
//!
//! A batch is applied to the in-memory state before it is written: sequences assigned, the table
//! changed, limits enforced (removing older messages), TTL, schedules, dedupe and source
//! positions updated. Undoing each of those by hand would be a second, rarely run copy of all
//! of them; instead the files are put back as they were when the batch began — the bytes it
//! wrote cut off, the blocks it started deleted — and the state is rebuilt from them by
//! recovery, the code that opens a stream. Nothing a batch does to the files before it is
//! written and synced cannot be cut back: blocks are deleted and index.db is written only after
//! a batch succeeded (`writer`, `persist::drop_empty_blocks`).
//!
//! The failed batch's sequences are used again by the next batch: they were never acknowledged
//! and never visible (visibility moves only after a batch is written and synced), so no reader
//! or publisher can tell.

use crate::block::BlocksEnd;
use crate::error::Result;
use crate::recovery::{self, Recovered};
use crate::state::State;
use crate::types::{RecoveryReport, WriteStats};

/// What a failed batch is undone to: where the block files ended and the counters when it
/// began.
pub struct BatchStart {
    blocks: BlocksEnd,
    stats: WriteStats,
}

impl BatchStart {
    /// The state a batch begins from (taken before anything of it is applied).
    pub fn of(st: &State) -> Self {
        Self {
            blocks: st.blocks.end(),
            stats: st.stats,
        }
    }
}

/// Undoes the failed batch begun at `start`: cuts its bytes from the files, then — when
/// `rebuild` (not for a stream that is stopping, whose state is never read again) — rebuilds
/// the state from them. An error means the files could not be put back; the stream must then
/// stop writing.
pub fn undo(st: &mut State, start: BatchStart, rebuild: bool) -> Result<()> {
    st.blocks.undo_since(start.blocks)?;
    st.purge_to = None;
    st.expired_to = None;
    st.stats = start.stats;
    if rebuild {
        reload(st)?;
    }
    Ok(())
}

/// Rebuilds a file stream's state from its files, as open does (a memory stream's writes do not
/// fail, so it never gets here).
fn reload(st: &mut State) -> Result<()> {
    let Some(dir) = st.dir.clone() else {
        return Ok(());
    };
    let settings = recovery::Settings {
        block_size: st.blocks.max_size(),
        dedupe_window: st.config.dedupe_window(),
        raise_to_lease: false,
    };
    let mut report = RecoveryReport::new(st.config.name.clone());
    // Whatever recovery finds and repairs, it logs itself.
    let recovered = recovery::recover(&dir.join("msgs"), &settings, &mut report)?;
    restore(st, recovered);
    Ok(())
}

/// Replaces what the stream holds with what recovery found in its files; the configuration,
/// identity, write health and counters stay.
fn restore(st: &mut State, r: Recovered) {
    st.table = r.table;
    st.blocks = r.blocks;
    st.dedupe = r.dedupe;
    st.last_msg_id = r.last_msg_id;
    st.ttl = r.ttl;
    st.schedules = r.schedules;
    st.sources = r.sources;
    st.purge_to = None;
    st.expired_to = None;
    st.dirty = !r.index_current;
    st.lease = r.lease;
    // Never above the last sequence: the next one appended must not be visible before it
    // is written.
    st.visible = st.visible.min(st.table.last_seq);
}
