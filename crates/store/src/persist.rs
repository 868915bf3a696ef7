//! Writes the state snapshots: `msgs/index.db`, the sidecars `msgs/thw.db`, `msgs/sched.db`
//! and the stream-root `sources.db`.

use std::path::Path;

use crate::error::Result;
use crate::fsutil::{self, put_uvarint, put_varint};
use crate::index;
use crate::sidecar;
use crate::state::State;

/// Version of thw.db.
pub const THW_VERSION: u8 = 1;
/// Version of sched.db.
pub const SCHED_VERSION: u8 = 1;

/// Writes index.db and thw.db for a file stream (nothing for memory streams).
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
    fsutil::atomic_write(&msgs.join("index.db"), &idx)?;
    write_thw(st, &msgs)?;
    write_sched(st, &msgs)?;
    let sources = dir.join("sources.db");
    if !st.sources.positions().is_empty() || sources.exists() {
        st.sources.write(&sources, st.table.last_seq + 1)?;
    }
    st.dirty = false;
    Ok(())
}

fn write_thw(st: &State, msgs: &Path) -> Result<()> {
    let mut body = Vec::new();
    for (at, seq) in st.ttl.entries() {
        put_varint(&mut body, at);
        put_uvarint(&mut body, seq);
    }
    sidecar::write(
        &msgs.join("thw.db"),
        THW_VERSION,
        st.ttl.len() as u64,
        st.table.last_seq + 1,
        &body,
    )
}

fn write_sched(st: &State, msgs: &Path) -> Result<()> {
    let mut body = Vec::new();
    for (subject, e) in st.schedules.entries() {
        body.extend_from_slice(&(subject.len() as u16).to_le_bytes());
        body.extend_from_slice(subject.as_bytes());
        put_varint(&mut body, e.next);
        put_uvarint(&mut body, e.seq);
    }
    sidecar::write(
        &msgs.join("sched.db"),
        SCHED_VERSION,
        st.schedules.len() as u64,
        st.table.last_seq + 1,
        &body,
    )
}
