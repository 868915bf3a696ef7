//! Reading a block's live messages into the table on first need, verifying every record as
//! the rebuild does. A damaged block is read as far as it verifies, then past the damage from
//! the next valid record; the live messages it cannot give back are marked unreadable (a read
//! of one is an error, a reader passing over them is told they are lost), and the damage is
//! logged naming the block and offset. A missing block file makes all of its live messages
//! unreadable, and so does a block the disk fails to read (`EIO`), for as long as the process
//! runs: its bytes may be intact, so that is not remembered as a loss, and the next start reads
//! the block again.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::block_entry::BlockEntry;
use super::msg_meta::MsgMeta;
use crate::block::{Loc, block_path};
use crate::error::{Result, StoreError};
use crate::record::{self, Kind, RecordRef};

/// What reading a block came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Its records were read; whatever did not verify is marked unreadable and is a loss.
    Read,
    /// The disk failed to read it: its messages are unreadable until the process restarts,
    /// and are no loss to remember.
    ReadFailed,
}

/// Reads the unread part of block `id` of `msgs_dir` into `entry`. Fails only when the file
/// cannot be read at all for another reason than the disk's (the entry then stays unread).
pub fn load(
    msgs_dir: &Path,
    id: u32,
    entry: &mut BlockEntry,
    intern: impl Fn(&str) -> Arc<str>,
) -> Result<Loaded> {
    let Some(unread) = entry.unread else {
        return Ok(Loaded::Read);
    };
    let path = block_path(msgs_dir, id);
    let disk_failed = |entry: &mut BlockEntry, e: std::io::Error| {
        if !crate::fsutil::is_disk_failure(&e) {
            return Err(StoreError::io(&path)(e));
        }
        entry.unread = None;
        let unreadable = entry.mark_unreadable();
        tracing::error!(path = %path.display(), unreadable, error = %e, "reading a block failed; its messages are reported as damaged until sluice restarts");
        Ok(Loaded::ReadFailed)
    };
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        // A block index.db names is gone: every live message of it is unreadable.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            entry.unread = None;
            let missing = entry.mark_unreadable();
            tracing::error!(path = %path.display(), unreadable = missing, "damaged stream: a block file is missing; its messages are reported as lost");
            return Ok(Loaded::Read);
        }
        Err(e) => return disk_failed(entry, e),
    };
    let len = match file.metadata() {
        Ok(meta) => meta.len(),
        Err(e) => return disk_failed(entry, e),
    };
    let mut damage = None;
    if len < unread.end {
        damage = Some((
            len,
            format!("block is {len} bytes, index.db says {}", unread.end),
        ));
    } else if unread.sealed && len > unread.end {
        tracing::warn!(path = %path.display(), "block is {len} bytes, index.db says {}; the rest is ignored", unread.end);
    }
    let mut data = vec![0; usize::try_from(len.min(unread.end)).unwrap_or(usize::MAX)];
    if let Err(e) = file.read_exact_at(&mut data, 0) {
        return disk_failed(entry, e);
    }
    let mut found = BTreeMap::new();
    let mut keep = |off: usize, rec: &RecordRef<'_>, rec_len: usize| {
        if rec.kind != Kind::Msg || !entry.is_live(rec.seq) || entry.msgs.contains_key(&rec.seq) {
            return;
        }
        let Ok(subject) = std::str::from_utf8(rec.subject) else {
            return;
        };
        let loc = Loc {
            block: id,
            offset: off as u32,
            len: rec_len as u32,
        };
        let meta = MsgMeta {
            subject: intern(subject),
            ts: rec.ts,
            loc,
            flags: rec.flags,
        };
        found.entry(rec.seq).or_insert(meta);
    };
    let mut off = 0;
    while off < data.len() {
        match record::decode(&data[off..]) {
            Ok((rec, rec_len, _)) => {
                keep(off, &rec, rec_len);
                off += rec_len;
            }
            Err(e) => {
                damage = Some((off as u64, format!("{e:?} record")));
                for (at, rec, rec_len) in record::resync(&data[off + 1..]) {
                    keep(off + 1 + at, &rec, rec_len);
                }
                break;
            }
        }
    }
    for (seq, meta) in found {
        entry.keep(seq, meta);
    }
    entry.unread = None;
    let missing = entry.mark_unreadable();
    if missing > 0 || damage.is_some() {
        let (offset, why) = damage.unwrap_or((0, "live messages missing".into()));
        tracing::error!(
            path = %path.display(),
            offset,
            unreadable = missing,
            "damaged block: {why}; its unreadable messages are reported as lost"
        );
    }
    Ok(Loaded::Read)
}
