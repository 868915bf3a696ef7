//! Writes a file stream's snapshots — `msgs/index.db`, the sidecars `msgs/thw.db` and
//! `msgs/sched.db`, and the stream-root `sources.db` — each through the module that owns its
//! format ([`crate::index`], [`crate::thw`], [`crate::sched`], [`crate::sources`]), and removes
//! the block files a snapshot no longer names.

use crate::error::{Result, StoreError};
use crate::fsutil;
use crate::index;
use crate::losses;
use crate::sched;
use crate::sources;
use crate::state::State;
use crate::thw;

/// Writes index.db and the sidecars of a file stream (nothing for memory streams).
pub fn write_state(st: &mut State) -> Result<()> {
    let Some(dir) = st.dir.clone() else {
        return Ok(());
    };
    let msgs = dir.join("msgs");
    let sizes: Vec<(u32, u64)> = st
        .blocks
        .ids()
        .map(|id| (id, st.blocks.size(id).unwrap_or(0)))
        .collect();
    let idx = index::encode(
        &st.table,
        &sizes,
        st.blocks.last_checksum(),
        st.last_msg_id.as_deref(),
    );
    fsutil::atomic_write(&msgs.join(index::FILE), &idx)?;
    // After index.db: it names the last sequence exactly, so the lease is no longer needed
    // beyond it.
    st.settle_lease()?;
    // Runs below the first retained message are told to readers as no longer retained.
    let first = st.table.first_seq();
    if st.table.losses.forget_below(first) {
        let path = msgs.join(losses::FILE);
        let stamp = stamp_after(st);
        st.table.losses.write(&path, stamp)?;
    }
    // Each sidecar's stamp says which sequences it covers; recovery rescans from there, so a
    // crash between any two of these writes loses nothing.
    let stamp = stamp_after(st);
    thw::write(&msgs.join(thw::FILE), &st.ttl, stamp)?;
    sched::write(&msgs.join(sched::FILE), &st.schedules, stamp)?;
    let sources = dir.join(sources::FILE);
    if !st.sources.positions().is_empty() || sources.exists() {
        st.sources.write(&sources, stamp)?;
    }
    st.dirty = false;
    Ok(())
}

/// A sidecar's stamp: the sequences it covers are below it.
fn stamp_after(st: &State) -> u64 {
    st.table.last_seq + 1
}

/// Writes index.db and the sidecars, then deletes the block files they no longer name: those
/// a removal forgot but could not delete because its index.db write failed (a full disk).
pub fn write_snapshots(st: &mut State) -> Result<()> {
    write_state(st)?;
    st.blocks.remove_stray_files()
}

/// Removes every block that holds nothing needed any more: forgets them, then (for a file
/// stream) deletes their files once a snapshot that no longer names them is on disk. Called
/// after a batch is written: nothing a failed batch did is ever deleted.
pub fn drop_empty_blocks(st: &mut State) -> Result<()> {
    if !st.forget_empty_blocks() || st.dir.is_none() {
        return Ok(());
    }
    // IMPORTANT: index.db records the last record's checksum, so the batch must be in the
    // active block's file before index.db is written.
    st.flush()?;
    // IMPORTANT: the records that made the blocks removable (a purge marker, tombstones) are
    // synced before any block goes, under every sync policy: a deleted block cannot come back.
    sync_written_blocks(st)?;
    // IMPORTANT: index.db first, the files after. The index.db on disk then never names a block
    // file that is gone, and open can trust it without listing the directory (FORMAT.md); a
    // crash in between leaves files that the next removal (or snapshot) deletes as strays.
    write_state(st)?;
    st.blocks.remove_stray_files()
}

/// fsyncs every block written since its last fsync.
fn sync_written_blocks(st: &mut State) -> Result<()> {
    for (path, f) in st.blocks.take_unsynced() {
        crate::fsutil::sync_data(&f).map_err(StoreError::write_failed(path))?;
        st.stats.fsyncs += 1;
    }
    Ok(())
}
