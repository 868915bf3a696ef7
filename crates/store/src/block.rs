//! Block files: `msgs/<n>.blk`, append-only, rolled over at a configured size. The memory
//! storage mode keeps the same blocks in byte vectors, so both modes share one code path.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::{Result, StoreError, copy_io_error};
use crate::record::{Kind, RecordRef};

/// Default block size before rollover.
pub(crate) const DEFAULT_BLOCK_SIZE: u64 = 8 << 20;

/// A record ready to be read outside the stream's lock.
pub enum RecordSource {
    /// In a block file.
    File {
        /// The block's handle.
        file: Arc<File>,
        /// The directory of the block files, for errors (the path is made only for one: this
        /// is on every read).
        dir: Arc<Path>,
        /// The record's location.
        loc: Loc,
    },
    /// Already copied out of a memory block.
    Bytes(Vec<u8>),
}

impl RecordSource {
    /// The record's bytes.
    pub fn fetch(self) -> Result<Vec<u8>> {
        match self {
            RecordSource::Bytes(b) => Ok(b),
            RecordSource::File { file, dir, loc } => {
                let mut buf = vec![0; loc.len as usize];
                file.read_exact_at(&mut buf, loc.offset as u64)
                    .map_err(|e| StoreError::io(&block_path(&dir, loc.block))(e))?;
                Ok(buf)
            }
        }
    }

    /// Each of `sources` read and given to `decode` (with its index in `sources`), in order,
    /// reading a run of records that lie close together in one block file with one system call
    /// (at most [`RUN_MAX_BYTES`] at once) and decoding each from the run's buffer. A run whose
    /// read fails is read again record by record, so each record gets its own answer.
    pub fn fetch_all<T>(
        sources: Vec<RecordSource>,
        mut decode: impl FnMut(usize, &[u8]) -> Result<T>,
    ) -> Vec<Result<T>> {
        let mut out = Vec::with_capacity(sources.len());
        let mut sources = sources.into_iter().peekable();
        while let Some(first) = sources.next() {
            let index = out.len();
            let RecordSource::File { file, dir, loc } = first else {
                out.push(first.fetch().and_then(|bytes| decode(index, &bytes)));
                continue;
            };
            let mut run = vec![loc];
            while let Some(RecordSource::File {
                file: next,
                loc: at,
                ..
            }) = sources.peek()
                && Arc::ptr_eq(next, &file)
                && continues_run(&run, *at)
            {
                run.push(*at);
                sources.next();
            }
            read_run(
                &file,
                &dir,
                &run,
                &mut |i, bytes| decode(index + i, bytes),
                &mut out,
            );
        }
        out
    }

    /// How many bytes the record takes.
    pub fn len(&self) -> usize {
        match self {
            RecordSource::Bytes(b) => b.len(),
            RecordSource::File { loc, .. } => loc.len as usize,
        }
    }

    /// The file holding it (empty for memory).
    pub fn path(&self) -> PathBuf {
        self.origin().path()
    }

    /// Where the record is, for an error found once it is read.
    pub fn origin(&self) -> Origin {
        match self {
            RecordSource::File { dir, loc, .. } => Origin(Some((dir.clone(), loc.block))),
            RecordSource::Bytes(_) => Origin(None),
        }
    }
}

/// The block file a record was read from (its directory and block id), or none for memory;
/// cheap to keep, made into a path only for an error.
#[derive(Clone)]
pub struct Origin(Option<(Arc<Path>, u32)>);

impl Origin {
    /// The block file's path; empty for memory.
    pub fn path(&self) -> PathBuf {
        self.0
            .as_ref()
            .map(|(dir, block)| block_path(dir, *block))
            .unwrap_or_default()
    }
}

/// The most bytes one read of a run of records takes.
const RUN_MAX_BYTES: u64 = 1 << 20;

/// The most bytes of other records a run reads over between two it wants.
const RUN_MAX_GAP: u64 = 4096;

/// Whether the record at `at` extends `run` (records of one file, ascending): it starts after
/// the run's last one, close to it, and the run stays within [`RUN_MAX_BYTES`].
fn continues_run(run: &[Loc], at: Loc) -> bool {
    let (first, last) = (run[0], run[run.len() - 1]);
    let end = u64::from(last.offset) + u64::from(last.len);
    let start = u64::from(at.offset);
    start >= end
        && start - end <= RUN_MAX_GAP
        && start + u64::from(at.len) - u64::from(first.offset) <= RUN_MAX_BYTES
}

/// The records of `run` (ascending, in `file`), read with one call, each given to `decode`
/// (with its index in `run`) and its answer added to `out`; each read again alone when that
/// fails.
fn read_run<T>(
    file: &File,
    dir: &Path,
    run: &[Loc],
    decode: &mut impl FnMut(usize, &[u8]) -> Result<T>,
    out: &mut Vec<Result<T>>,
) {
    let (first, last) = (run[0], run[run.len() - 1]);
    let span = (u64::from(last.offset) + u64::from(last.len) - u64::from(first.offset)) as usize;
    let mut buf = vec![0; span];
    if run.len() == 1
        || file
            .read_exact_at(&mut buf, u64::from(first.offset))
            .is_err()
    {
        for (i, loc) in run.iter().enumerate() {
            let mut buf = vec![0; loc.len as usize];
            let read = file
                .read_exact_at(&mut buf, u64::from(loc.offset))
                .map_err(|e| StoreError::io(&block_path(dir, loc.block))(e));
            out.push(read.and_then(|()| decode(i, &buf)));
        }
        return;
    }
    for (i, loc) in run.iter().enumerate() {
        let at = (loc.offset - first.offset) as usize;
        out.push(decode(i, &buf[at..at + loc.len as usize]));
    }
}

/// Where a record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Block id.
    pub block: u32,
    /// Byte offset of the record in the block.
    pub offset: u32,
    /// Encoded record length.
    pub len: u32,
}

enum Body {
    /// A block file, opened on first use (open does not touch the blocks it never reads).
    File(OnceLock<Arc<File>>),
    Memory(Vec<u8>),
}

/// The handle of block `id` in `dir`, opening the file on first use.
fn handle(dir: &Path, id: u32, cell: &OnceLock<Arc<File>>) -> Result<Arc<File>> {
    if let Some(f) = cell.get() {
        return Ok(f.clone());
    }
    let path = block_path(dir, id);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(StoreError::io(&path))?;
    Ok(cell.get_or_init(|| Arc::new(file)).clone())
}

struct Block {
    /// Bytes written (flushed) to the block.
    size: u64,
    body: Body,
    /// Written since the last fsync.
    dirty: bool,
}

/// The blocks of one stream, with a pending buffer for the group-commit batch.
pub struct Blocks {
    dir: Option<Arc<Path>>,
    blocks: BTreeMap<u32, Block>,
    pending: Vec<u8>,
    max_size: u64,
    /// Checksum of the last record appended.
    last_sum: u64,
    /// The first write of this batch that failed: the batch can no longer be completed, so
    /// every later flush fails with it until [`Blocks::undo_since`].
    failed: Option<(PathBuf, std::io::Error)>,
    /// The end of the active block file as last written (at most [`KEPT_TAIL`] bytes; empty
    /// when none).
    kept: KeptTail,
}

/// The most bytes of the active block's end kept in memory after their write.
const KEPT_TAIL: usize = 64 * 1024;

/// A copy of the last bytes written to the active block file: the records live readers ask for
/// next (the fan-out reads each new message right after it is stored, a batch or two behind
/// the writer when publishers come at once), which this answers without a read from the file.
#[derive(Default)]
struct KeptTail {
    block: u32,
    offset: u64,
    bytes: Vec<u8>,
}

impl KeptTail {
    /// The bytes of the record at `loc`, when the copy holds all of it.
    fn record(&self, loc: Loc) -> Option<&[u8]> {
        if self.bytes.is_empty() || loc.block != self.block {
            return None;
        }
        let start = (loc.offset as u64).checked_sub(self.offset)? as usize;
        self.bytes.get(start..start.checked_add(loc.len as usize)?)
    }

    /// Adds `batch`, just written at `offset` of `block`, dropping what no longer fits from the
    /// front (half the copy at a time, so the bytes kept are moved rarely).
    fn extend(&mut self, block: u32, offset: u64, batch: &[u8]) {
        let follows = self.block == block && self.offset + self.bytes.len() as u64 == offset;
        if !follows || batch.len() > KEPT_TAIL {
            self.bytes.clear();
        }
        if self.bytes.is_empty() {
            self.block = block;
            self.offset = offset;
        }
        if batch.len() > KEPT_TAIL {
            return;
        }
        if self.bytes.len() + batch.len() > KEPT_TAIL {
            let dropped = (self.bytes.len() + batch.len() - KEPT_TAIL).max(KEPT_TAIL / 2);
            let dropped = dropped.min(self.bytes.len());
            self.bytes.drain(..dropped);
            self.offset += dropped as u64;
        }
        self.bytes.extend_from_slice(batch);
    }
}

/// Where the block files ended when a batch began: what [`Blocks::undo_since`] goes back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlocksEnd {
    /// The active block then (`None`: there was none).
    active: Option<u32>,
    /// Its size then.
    size: u64,
}

/// The path of block `id` in `msgs_dir`.
pub fn block_path(msgs_dir: &Path, id: u32) -> PathBuf {
    msgs_dir.join(format!("{id}.blk"))
}

/// Creates the file of a new block `id` in `dir` and makes its directory entry durable (acks
/// come to depend on it); a file whose entry could not be synced is removed again, so the id
/// stays free for the next try.
fn create_block_file(dir: &Path, id: u32) -> Result<File> {
    let path = block_path(dir, id);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(StoreError::write_failed(&path))?;
    if let Err(e) = crate::fsutil::sync_dir(dir) {
        // Nothing was written to it: removing it cannot lose anything.
        let _ = fs::remove_file(&path);
        return Err(e.into_write_failure());
    }
    Ok(file)
}

/// The `LastSeq` marker a block starts with.
fn last_seq_marker(last_seq: u64, ts: i64) -> RecordRef<'static> {
    RecordRef {
        kind: Kind::LastSeq,
        flags: 0,
        seq: last_seq,
        ts,
        subject: &[],
        headers: &[],
        payload: &[],
    }
}

/// The block ids present in `msgs_dir`, ascending; files not named `<n>.blk` are ignored.
pub fn list_block_files(msgs_dir: &Path) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(msgs_dir).map_err(StoreError::io(msgs_dir))? {
        let entry = entry.map_err(StoreError::io(msgs_dir))?;
        let name = entry.file_name();
        if let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".blk"))
            .and_then(|n| n.parse::<u32>().ok())
        {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

impl Blocks {
    /// Blocks kept in memory.
    pub fn memory(max_size: u64) -> Self {
        Self {
            dir: None,
            blocks: BTreeMap::new(),
            pending: Vec::new(),
            kept: KeptTail::default(),
            max_size,
            last_sum: 0,
            failed: None,
        }
    }

    /// Blocks in `msgs_dir`, adopting the existing (already recovered) blocks `existing`
    /// as `(id, size)`; their files are opened on first use.
    pub fn file(msgs_dir: PathBuf, max_size: u64, existing: &[(u32, u64)]) -> Result<Self> {
        crate::fsutil::create_dir_durable(&msgs_dir)?;
        let blocks = existing
            .iter()
            .map(|&(id, size)| {
                let block = Block {
                    size,
                    body: Body::File(OnceLock::new()),
                    dirty: false,
                };
                (id, block)
            })
            .collect();
        Ok(Self {
            dir: Some(Arc::from(msgs_dir)),
            blocks,
            pending: Vec::new(),
            kept: KeptTail::default(),
            max_size,
            last_sum: 0,
            failed: None,
        })
    }

    /// The active (last) block id, if any block exists.
    pub fn active(&self) -> Option<u32> {
        self.blocks.keys().next_back().copied()
    }

    /// Every block id, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.blocks.keys().copied()
    }

    /// Checksum of the last record appended (and the block it went to).
    pub fn last_checksum(&self) -> u64 {
        self.last_sum
    }

    /// Sets the last checksum after recovery.
    pub fn set_last_checksum(&mut self, sum: u64) {
        self.last_sum = sum;
    }

    /// Block size before rollover.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// Whether records were appended that are not written yet.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Flushed size of a block.
    pub fn size(&self, id: u32) -> Option<u64> {
        self.blocks.get(&id).map(|b| b.size)
    }

    /// Appends a record to the pending batch, rolling to a new block first when the active one
    /// is full. A new block starts with a `LastSeq` marker holding `last_seq`, so the stream's
    /// last sequence survives the removal of every older block. Returns the record's location
    /// and checksum, and the new block's marker location when a roll happened.
    pub fn append(
        &mut self,
        rec: &RecordRef<'_>,
        last_seq: u64,
        ts: i64,
    ) -> Result<(Loc, u64, Option<Loc>)> {
        let len = rec.encoded_len() as u64;
        let mut marker = None;
        let used = self
            .active()
            .map(|id| self.blocks[&id].size + self.pending.len() as u64);
        if used.is_none_or(|u| u > 0 && u + len > self.max_size) {
            marker = Some(self.roll(last_seq, ts)?);
        } else if used == Some(0) {
            // A block recovery left empty (its bytes cut) starts with the marker as a new one
            // does: it proves the sequences of an earlier block that loses its end.
            marker = Some(self.push(&last_seq_marker(last_seq, ts)));
        }
        let loc = self.push(rec);
        Ok((loc, self.last_sum, marker))
    }

    fn push(&mut self, rec: &RecordRef<'_>) -> Loc {
        let id = self.active().unwrap_or(0);
        let offset = self.blocks.get(&id).map_or(0, |b| b.size) + self.pending.len() as u64;
        let start = self.pending.len();
        self.last_sum = rec.encode_into(&mut self.pending);
        Loc {
            block: id,
            offset: offset as u32,
            len: (self.pending.len() - start) as u32,
        }
    }

    /// Flushes pending bytes and starts a new block beginning with a `LastSeq` marker.
    pub fn roll(&mut self, last_seq: u64, ts: i64) -> Result<Loc> {
        self.flush()?;
        let id = self.active().map_or(1, |id| id + 1);
        let created = self.dir.as_deref().map(|dir| create_block_file(dir, id));
        let body = match created.transpose().inspect_err(|e| self.note_failure(e))? {
            Some(file) => Body::File(OnceLock::from(Arc::new(file))),
            None => Body::Memory(Vec::new()),
        };
        self.blocks.insert(
            id,
            Block {
                size: 0,
                body,
                dirty: true,
            },
        );
        Ok(self.push(&last_seq_marker(last_seq, ts)))
    }

    /// Writes the pending batch to the active block (one write call). Once a write of the batch
    /// failed, fails with that error without writing.
    pub fn flush(&mut self) -> Result<()> {
        if let Some((path, source)) = &self.failed {
            return Err(StoreError::WriteFailed {
                path: path.clone(),
                source: copy_io_error(source),
            });
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let Some(id) = self.active() else {
            return Ok(());
        };
        self.write_pending(id)
            .inspect_err(|e| self.note_failure(e))?;
        let block = self.blocks.get_mut(&id).expect("active block exists");
        let offset = block.size;
        block.size += self.pending.len() as u64;
        block.dirty = true;
        if matches!(block.body, Body::File(_)) {
            self.kept.extend(id, offset, &self.pending);
        }
        self.pending.clear();
        Ok(())
    }

    /// Writes the pending bytes at the end of block `id` (one write call).
    fn write_pending(&mut self, id: u32) -> Result<()> {
        let dir = self.dir.as_deref().unwrap_or(Path::new(""));
        let block = self.blocks.get_mut(&id).expect("active block exists");
        match &mut block.body {
            Body::File(cell) => {
                let file = handle(dir, id, cell).map_err(StoreError::into_write_failure)?;
                // The path is made only for the error: this runs on every batch.
                file.write_all_at(&self.pending, block.size)
                    .map_err(|source| StoreError::WriteFailed {
                        path: block_path(dir, id),
                        source,
                    })
            }
            Body::Memory(v) => {
                v.extend_from_slice(&self.pending);
                Ok(())
            }
        }
    }

    /// Records the batch's first failed write (see [`Blocks::flush`]).
    fn note_failure(&mut self, e: &StoreError) {
        if let (None, StoreError::WriteFailed { path, source }) = (&self.failed, e) {
            self.failed = Some((path.clone(), copy_io_error(source)));
        }
    }

    /// Where the block files end now (call between batches, when nothing is pending).
    pub fn end(&self) -> BlocksEnd {
        let active = self.active();
        BlocksEnd {
            active,
            size: active.and_then(|id| self.size(id)).unwrap_or(0),
        }
    }

    /// Undoes every write since `end`: drops the pending bytes, deletes the blocks started
    /// since, and cuts the block that was active back to its size then, so the bytes a failed
    /// write left past it (whole records among them) can never be read, and the next record is
    /// written where the last durable one ended.
    pub fn undo_since(&mut self, end: BlocksEnd) -> Result<()> {
        self.pending.clear();
        self.kept.bytes.clear();
        self.failed = None;
        let started: Vec<u32> = self
            .blocks
            .keys()
            .copied()
            .filter(|id| end.active.is_none_or(|active| *id > active))
            .collect();
        for id in started {
            self.delete_started(id)?;
        }
        match end.active {
            Some(id) => self.cut(id, end.size),
            None => Ok(()),
        }
    }

    /// Deletes block `id`, started by a batch being undone.
    fn delete_started(&mut self, id: u32) -> Result<()> {
        self.blocks.remove(&id);
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let path = block_path(dir, id);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::Io { path, source: e });
            }
            _ => {}
        }
        // Should the removal not be durable, a crash brings back a block whose records recovery
        // would find: make it so now, or at least say so.
        if let Err(e) = crate::fsutil::sync_dir(dir) {
            tracing::warn!(path = %path.display(), error = %e, "syncing the removal of a block failed");
        }
        Ok(())
    }

    /// Cuts block `id` back to `size` bytes, syncing the cut (a later sync of the block does
    /// that too, should this one fail: the next batch writes and syncs the same block).
    fn cut(&mut self, id: u32, size: u64) -> Result<()> {
        let path = self.path(id);
        let dir = self.dir.as_deref().unwrap_or(Path::new(""));
        let Some(block) = self.blocks.get_mut(&id) else {
            return Ok(());
        };
        block.size = size;
        match &mut block.body {
            Body::Memory(v) => v.truncate(size as usize),
            Body::File(cell) => {
                let file = handle(dir, id, cell)?;
                file.set_len(size).map_err(StoreError::io(&path))?;
                if let Err(e) = crate::fsutil::sync_all(&file) {
                    tracing::warn!(path = %path.display(), error = %e, "syncing a cut block failed");
                }
            }
        }
        Ok(())
    }

    /// The files written since their last fsync, to be synced outside the stream lock.
    pub fn take_unsynced(&mut self) -> Vec<(PathBuf, Arc<File>)> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        self.blocks
            .iter_mut()
            .filter_map(|(id, b)| std::mem::take(&mut b.dirty).then_some((id, &*b)))
            .filter_map(|(id, b)| match &b.body {
                // A written block's file was opened by the write.
                Body::File(cell) => Some((block_path(dir, *id), cell.get()?.clone())),
                Body::Memory(_) => None,
            })
            .collect()
    }

    /// Reads one record's bytes.
    pub fn read(&self, loc: Loc) -> Result<Vec<u8>> {
        self.source(loc)?.fetch()
    }

    /// What is needed to read a record without holding the stream's lock: the block's file
    /// handle (it stays readable even if the block is removed meanwhile), or the record's bytes
    /// copied from a memory block.
    pub fn source(&self, loc: Loc) -> Result<RecordSource> {
        let block = self.blocks.get(&loc.block).ok_or_else(|| StoreError::Io {
            path: self.path(loc.block),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "block removed"),
        })?;
        let end = loc.offset as u64 + loc.len as u64;
        Ok(match &block.body {
            Body::Memory(v) => RecordSource::Bytes(
                v.get(loc.offset as usize..end as usize)
                    .unwrap_or_default()
                    .to_vec(),
            ),
            Body::File(_) if let Some(record) = self.kept.record(loc) => {
                RecordSource::Bytes(record.to_vec())
            }
            Body::File(cell) => {
                let dir = self.dir.clone().unwrap_or_else(|| Arc::from(Path::new("")));
                RecordSource::File {
                    file: handle(&dir, loc.block, cell)?,
                    dir,
                    loc,
                }
            }
        })
    }

    /// The path of a block (empty for memory blocks).
    pub fn path(&self, id: u32) -> PathBuf {
        self.dir
            .as_deref()
            .map(|d| block_path(d, id))
            .unwrap_or_default()
    }

    /// Stops using a block; its file stays until [`Self::remove_stray_files`].
    pub fn forget(&mut self, id: u32) {
        if self.kept.block == id {
            self.kept.bytes.clear();
        }
        self.blocks.remove(&id);
    }

    /// Deletes every block file older than the active block that is not in use: forgotten
    /// blocks, and any left by a crash between writing index.db and deleting them.
    pub fn remove_stray_files(&self) -> Result<()> {
        let (Some(dir), Some(active)) = (&self.dir, self.active()) else {
            return Ok(());
        };
        for id in list_block_files(dir)? {
            if id < active && !self.blocks.contains_key(&id) {
                let path = block_path(dir, id);
                fs::remove_file(&path).map_err(StoreError::io(&path))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use proptest::prelude::*;

    use super::*;
    use crate::record::{Kind, RecordRef};

    fn message(seq: u64, payload: &[u8]) -> RecordRef<'_> {
        RecordRef {
            kind: Kind::Msg,
            flags: 0,
            seq,
            ts: 1,
            subject: b"s",
            headers: b"",
            payload,
        }
    }

    /// What the block file holds at `loc`.
    fn on_disk(dir: &Path, loc: Loc) -> Vec<u8> {
        let mut buf = vec![0; loc.len as usize];
        let file = File::open(block_path(dir, loc.block)).unwrap();
        file.read_exact_at(&mut buf, u64::from(loc.offset)).unwrap();
        buf
    }

    #[test]
    fn the_end_of_the_active_block_is_read_from_memory_older_records_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut blocks = Blocks::file(dir.path().to_path_buf(), 1 << 20, &[]).unwrap();
        // One batch each: the oldest falls out of the kept end once ~64 KiB follow it.
        let payloads = [
            vec![1u8; 100],
            vec![2; 40_000],
            vec![3; 30_000],
            vec![4; 100],
        ];
        let mut locs = Vec::new();
        for (n, payload) in payloads.iter().enumerate() {
            let seq = n as u64 + 1;
            locs.push(blocks.append(&message(seq, payload), seq - 1, 1).unwrap().0);
            blocks.flush().unwrap();
        }
        let written: Vec<Vec<u8>> = locs.iter().map(|loc| on_disk(dir.path(), *loc)).collect();
        // Every record changed on disk behind the store's back.
        let file = fs::OpenOptions::new()
            .write(true)
            .open(block_path(dir.path(), locs[0].block))
            .unwrap();
        for loc in &locs {
            file.write_all_at(&vec![0xff; loc.len as usize], u64::from(loc.offset))
                .unwrap();
        }
        for n in [2, 3] {
            assert_eq!(
                blocks.read(locs[n]).unwrap(),
                written[n],
                "{n}: kept in memory"
            );
        }
        for n in [0, 1] {
            let from_file = vec![0xff; locs[n].len as usize];
            assert_eq!(
                blocks.read(locs[n]).unwrap(),
                from_file,
                "{n}: read from the file"
            );
        }
        // Once undone, nothing written is kept.
        blocks
            .undo_since(BlocksEnd {
                active: Some(locs[3].block),
                size: u64::from(locs[3].offset),
            })
            .unwrap();
        assert!(blocks.kept.record(locs[2]).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Batches of any size, across block rolls: every record reads as the file holds it.
        #[test]
        fn every_record_reads_as_the_file_holds_it(
            batches in prop::collection::vec(prop::collection::vec(0usize..40_000, 1..6), 1..12),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut blocks = Blocks::file(dir.path().to_path_buf(), 100_000, &[]).unwrap();
            let mut locs = Vec::new();
            let mut seq = 0;
            for batch in batches {
                for size in batch {
                    seq += 1;
                    let payload = vec![(seq % 251) as u8; size];
                    locs.push(blocks.append(&message(seq, &payload), seq - 1, 1).unwrap().0);
                }
                blocks.flush().unwrap();
                for loc in &locs {
                    prop_assert_eq!(blocks.read(*loc).unwrap(), on_disk(dir.path(), *loc));
                }
            }
        }
    }
}
