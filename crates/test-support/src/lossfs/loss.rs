//! The power loss: what of the writes and directory changes not yet durable survives, and the
//! file system that is left.
//!
//! Each file starts again from its durable bytes, with those of its pending writes that `Loss`
//! keeps applied in order; each directory from its durable entries, with the kept queued changes
//! applied in the order they were made (one that no longer applies, an unlink of a name that
//! names another inode by then, is skipped). Then whatever the root no longer reaches is gone: the
//! entries are walked breadth first from the root, names in byte order, and a directory reached a
//! second time (by two names, or in a cycle, which partly durable renames of directories can
//! leave) keeps only the first name. Link counts are recounted from what is left.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use super::model::{DirChange, FileNode, FileOp, Ino, Kind, Model, Node, ROOT, write_at};

/// How a power loss treats what was not made durable. Whatever mode, what was durable stays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Every write and directory change not made durable is dropped.
    DropAll,
    /// The unsynced writes of each file are kept in order up to a random point; the write at
    /// that point is torn at a `boundary`-byte boundary of the file (512 or 4096, say: a sector
    /// or a page) and the later ones are dropped. Directory changes are kept in order up to a
    /// random point too, as a journal commits them. The same `seed` on the same history gives
    /// the same result.
    Torn {
        /// Bytes of the unit a disk writes whole (0 counts as 1).
        boundary: u64,
        /// Seed of every random choice.
        seed: u64,
    },
    /// A random subset of each file's unsynced writes is kept, each write split at
    /// `boundary`-byte blocks of the file that are kept or dropped on their own (a disk may
    /// reorder what was not flushed: later writes kept, earlier ones dropped). A random subset
    /// of the unsynced directory changes is kept (a rename whole), applied in order, any that
    /// no longer applies skipped.
    Reorder {
        /// Bytes of the unit a disk writes whole (0 counts as 1).
        boundary: u64,
        /// Seed of every random choice.
        seed: u64,
    },
}

/// What a power loss dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossReport {
    /// Bytes of unsynced writes not kept, with those a failed fsync had discarded.
    pub bytes_dropped: u64,
    /// Unsynced writes dropped whole.
    pub writes_dropped: u64,
    /// Unsynced writes kept in part.
    pub writes_torn: u64,
    /// Unsynced directory changes not kept, kept but no longer applying, or discarded by a
    /// failed fsync of their directory.
    pub dir_changes_dropped: u64,
    /// Files and directories that had a name before and are gone.
    pub inodes_lost: u64,
}

impl fmt::Display for LossReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bytes_dropped={} writes_dropped={} writes_torn={} dir_changes_dropped={} inodes_lost={}",
            self.bytes_dropped,
            self.writes_dropped,
            self.writes_torn,
            self.dir_changes_dropped,
            self.inodes_lost
        )
    }
}

/// A small deterministic generator (splitmix64): the same seed gives the same choices on every
/// machine and version, which a random crate does not promise.
struct Rng(u64);

impl Rng {
    /// The generator for one file (`stream` is its inode number) or, with 0, for the directory
    /// changes: a file's choices do not depend on which other files exist.
    fn new(seed: u64, stream: u64) -> Self {
        let mut rng = Rng(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

impl Model {
    /// Simulates a power loss: everything not durable is dropped as `loss` says, and the file
    /// system left is all durable. Open handles are forgotten.
    pub(crate) fn power_loss(&mut self, loss: Loss) -> LossReport {
        let mut report = LossReport {
            dir_changes_dropped: std::mem::take(&mut self.discarded_changes),
            ..LossReport::default()
        };
        let named_before: BTreeSet<Ino> = self
            .inodes
            .iter()
            .filter(|(ino, inode)| **ino == ROOT || inode.nlink > 0)
            .map(|(ino, _)| *ino)
            .collect();

        // Directories: durable entries plus the kept changes, in order.
        let changes = std::mem::take(&mut self.changes);
        let kept = kept_changes(loss, &changes);
        let mut entries: BTreeMap<Ino, BTreeMap<Vec<u8>, Ino>> = self
            .inodes
            .iter()
            .filter_map(|(ino, inode)| match &inode.node {
                Node::Dir(dir) => Some((*ino, dir.durable.clone())),
                Node::File(_) => None,
            })
            .collect();
        for (change, keep) in changes.iter().zip(kept) {
            let applied = keep
                && entries
                    .get_mut(&change.dir)
                    .is_some_and(|dir| change.apply(dir));
            if !applied {
                report.dir_changes_dropped += 1;
            }
        }

        // Files: durable bytes plus the kept writes.
        for (ino, inode) in &mut self.inodes {
            if let Node::File(file) = &mut inode.node {
                if file.pending.is_empty() && file.data == file.durable {
                    continue; // all durable already
                }
                let data = surviving_data(loss, *ino, file, &mut report);
                report.bytes_dropped += file.discarded;
                *file = FileNode {
                    data: data.clone(),
                    durable: data,
                    pending: Vec::new(),
                    discarded: 0,
                };
            }
        }

        self.handles.clear();
        self.keep_reachable(entries);
        report.inodes_lost = named_before
            .iter()
            .filter(|ino| !self.inodes.contains_key(ino))
            .count() as u64;
        report
    }

    /// Installs `entries` as every directory's (visible and durable) entries, keeping only what
    /// the root reaches, a directory by its first name; recounts links and parents.
    fn keep_reachable(&mut self, mut entries: BTreeMap<Ino, BTreeMap<Vec<u8>, Ino>>) {
        let mut visited = BTreeSet::from([ROOT]);
        let mut first_name: BTreeMap<Ino, (Ino, Vec<u8>)> = BTreeMap::new();
        let mut links: BTreeMap<Ino, u32> = BTreeMap::new();
        let mut queue = VecDeque::from([ROOT]);
        let mut reached: BTreeMap<Ino, BTreeMap<Vec<u8>, Ino>> = BTreeMap::new();
        while let Some(dir) = queue.pop_front() {
            let mut kept = BTreeMap::new();
            let mut subdirs = 0;
            for (name, child) in entries.remove(&dir).unwrap_or_default() {
                let Some(kind) = self.inodes.get(&child).map(|inode| inode.kind()) else {
                    continue;
                };
                let first = visited.insert(child);
                if first {
                    first_name.insert(child, (dir, name.clone()));
                }
                match kind {
                    Kind::Dir if first => {
                        subdirs += 1;
                        queue.push_back(child);
                    }
                    // A second name of a directory, or a cycle: dropped.
                    Kind::Dir => continue,
                    Kind::File => *links.entry(child).or_default() += 1,
                }
                kept.insert(name, child);
            }
            links.insert(dir, 2 + subdirs);
            reached.insert(dir, kept);
        }
        self.inodes.retain(|ino, _| visited.contains(ino));
        for (ino, inode) in &mut self.inodes {
            inode.nlink = links.get(ino).copied().unwrap_or(0);
            if let Some((parent, name)) = first_name.remove(ino) {
                inode.parent = parent;
                inode.name = name;
            }
            if let Node::Dir(dir) = &mut inode.node {
                let kept = reached.remove(ino).unwrap_or_default();
                dir.entries = kept.clone();
                dir.durable = kept;
            }
        }
    }
}

/// Which of the queued directory changes a loss keeps, one flag each. Changes of one group (one
/// rename) are kept or dropped together.
fn kept_changes(loss: Loss, changes: &[DirChange]) -> Vec<bool> {
    match loss {
        Loss::DropAll => vec![false; changes.len()],
        Loss::Torn { seed, .. } => {
            let groups: BTreeSet<u64> = changes.iter().map(|change| change.group).collect();
            let kept_groups = Rng::new(seed, 0).below(groups.len() as u64 + 1) as usize;
            let last_kept = groups.iter().nth(kept_groups.wrapping_sub(1)).copied();
            changes
                .iter()
                .map(|change| kept_groups > 0 && Some(change.group) <= last_kept)
                .collect()
        }
        Loss::Reorder { seed, .. } => {
            let mut rng = Rng::new(seed, 0);
            let mut kept: BTreeMap<u64, bool> = BTreeMap::new();
            changes
                .iter()
                .map(|change| *kept.entry(change.group).or_insert_with(|| rng.coin()))
                .collect()
        }
    }
}

/// A file's bytes after the loss: its durable bytes with the kept part of its pending writes.
fn surviving_data(loss: Loss, ino: Ino, file: &FileNode, report: &mut LossReport) -> Vec<u8> {
    let mut data = file.durable.clone();
    match loss {
        Loss::DropAll => {
            for op in &file.pending {
                dropped(op, report);
            }
        }
        Loss::Torn { boundary, seed } => {
            let boundary = boundary.max(1);
            let mut rng = Rng::new(seed, ino);
            let whole = rng.below(file.pending.len() as u64 + 1) as usize;
            let (kept, rest) = file.pending.split_at(whole.min(file.pending.len()));
            for op in kept {
                op.apply(&mut data);
            }
            let mut rest = rest.iter();
            if let Some(op) = rest.next() {
                match op {
                    FileOp::Write {
                        offset,
                        data: bytes,
                    } => match tear(*offset, bytes.len() as u64, boundary, &mut rng) {
                        Some(keep) => {
                            let keep = usize::try_from(keep).unwrap_or(0).min(bytes.len());
                            write_at(&mut data, *offset, bytes.get(..keep).unwrap_or_default());
                            report.writes_torn += 1;
                            report.bytes_dropped += (bytes.len() - keep) as u64;
                        }
                        None => dropped(op, report),
                    },
                    FileOp::Truncate { .. } => dropped(op, report),
                }
            }
            for op in rest {
                dropped(op, report);
            }
        }
        Loss::Reorder { boundary, seed } => {
            let boundary = boundary.max(1);
            let mut rng = Rng::new(seed, ino);
            for op in &file.pending {
                match op {
                    FileOp::Truncate { .. } => {
                        if rng.coin() {
                            op.apply(&mut data);
                        }
                    }
                    FileOp::Write {
                        offset,
                        data: bytes,
                    } => {
                        let (mut kept_any, mut dropped_any) = (false, false);
                        for (start, end) in blocks(*offset, bytes.len(), boundary) {
                            let piece = bytes.get(start..end).unwrap_or_default();
                            if rng.coin() {
                                write_at(&mut data, offset + start as u64, piece);
                                kept_any = true;
                            } else {
                                report.bytes_dropped += piece.len() as u64;
                                dropped_any = true;
                            }
                        }
                        match (kept_any, dropped_any) {
                            (true, true) => report.writes_torn += 1,
                            (false, true) => report.writes_dropped += 1,
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    data
}

fn dropped(op: &FileOp, report: &mut LossReport) {
    if let FileOp::Write { data, .. } = op {
        report.writes_dropped += 1;
        report.bytes_dropped += data.len() as u64;
    }
}

/// Where a write of `len` bytes at `offset` is torn: how many of its first bytes are kept, up
/// to a random `boundary` of the file strictly inside it; `None` where it lies within one block
/// (a block is written whole or not at all, so it is dropped).
fn tear(offset: u64, len: u64, boundary: u64, rng: &mut Rng) -> Option<u64> {
    let end = offset.checked_add(len)?;
    let first = (offset / boundary).checked_add(1)?.checked_mul(boundary)?;
    if first >= end {
        return None;
    }
    let cuts = (end - 1 - first) / boundary + 1;
    let cut = first + rng.below(cuts) * boundary;
    Some(cut - offset)
}

/// The pieces (ranges of the write's own bytes) of a write of `len` bytes at `offset` split at
/// `boundary`-byte blocks of the file.
fn blocks(offset: u64, len: usize, boundary: u64) -> Vec<(usize, usize)> {
    let mut pieces = Vec::new();
    let mut start = 0usize;
    while start < len {
        let at = offset + start as u64;
        let to_boundary = boundary - at % boundary;
        let end = usize::try_from(to_boundary)
            .map_or(len, |step| start.saturating_add(step))
            .min(len);
        pieces.push((start, end));
        start = end;
    }
    pieces
}
