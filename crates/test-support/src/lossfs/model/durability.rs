//! Making things durable: `fsync` and `fsyncdir` (and their failure), freeing what nothing can
//! bring back, and the count of what is not durable yet.

use std::collections::{BTreeSet, VecDeque};

use fuser::Errno;

use super::{DirChange, FileOp, Ino, Inode, Model, Node, ROOT, Unsynced, Usage};

impl Model {
    /// `fsync` (file) or `fsyncdir` (directory) succeeded: the file's data and size, or the
    /// directory's entries, as they are now are durable (less what a failed fsync discarded).
    pub(crate) fn sync(&mut self, ino: Ino) -> Result<(), Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::File(file) => {
                for op in std::mem::take(&mut file.pending) {
                    op.apply(&mut file.durable);
                }
                Ok(())
            }
            Node::Dir(_) => {
                let (mine, others) = std::mem::take(&mut self.changes)
                    .into_iter()
                    .partition::<Vec<_>, _>(|change| change.dir == ino);
                self.changes = others;
                let dir = self.dir_mut(ino)?;
                let mut touched = BTreeSet::new();
                for change in &mine {
                    if let Some(old) = dir.durable.get(&change.name) {
                        touched.insert(*old);
                    }
                    change.apply(&mut dir.durable);
                    touched.insert(change.ino());
                }
                for candidate in touched {
                    self.try_free(candidate);
                }
                Ok(())
            }
        }
    }

    /// Everything made durable, as the writeback of an idle system (or `sync(1)`) would.
    pub(crate) fn sync_all(&mut self) {
        let inodes: Vec<Ino> = self.inodes.keys().copied().collect();
        for ino in inodes {
            // An inode freed by an earlier sync of this loop is simply gone.
            let _ = self.sync(ino);
        }
    }

    /// `fsync` or `fsyncdir` failed: what was pending is dropped from the durable future (the
    /// fsyncgate lesson: the kernel marks the pages clean and a later fsync does not write them
    /// again). A file's bytes stay readable until the power loss.
    pub(crate) fn sync_failed(&mut self, ino: Ino) -> Result<(), Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::File(file) => {
                let pending = std::mem::take(&mut file.pending);
                file.discarded += pending.iter().map(FileOp::len).sum::<u64>();
                Ok(())
            }
            Node::Dir(_) => {
                let (mine, others) = std::mem::take(&mut self.changes)
                    .into_iter()
                    .partition::<Vec<_>, _>(|change| change.dir == ino);
                self.changes = others;
                self.discarded_changes += mine.len() as u64;
                for change in mine {
                    self.try_free(change.ino());
                }
                Ok(())
            }
        }
    }

    /// Frees an inode nothing can bring back: no visible name, no open handle, no durable name
    /// and no queued change naming it. A freed directory's children are checked in turn.
    pub(super) fn try_free(&mut self, ino: Ino) {
        let mut queue = VecDeque::from([ino]);
        while let Some(ino) = queue.pop_front() {
            if ino == ROOT {
                continue;
            }
            let Some(inode) = self.inodes.get(&ino) else {
                continue;
            };
            if inode.nlink > 0
                || self.handles.values().any(|handle| handle.ino == ino)
                || self.changes.iter().any(|change| change.ino() == ino)
                || self.inodes.values().any(|other| match &other.node {
                    Node::Dir(dir) => dir.durable.values().any(|&child| child == ino),
                    Node::File(_) => false,
                })
            {
                continue;
            }
            if let Some(Inode {
                node: Node::Dir(dir),
                ..
            }) = self.inodes.remove(&ino)
            {
                // Its entries and queued changes can never be reached again.
                let (mine, others) = std::mem::take(&mut self.changes)
                    .into_iter()
                    .partition::<Vec<_>, _>(|change| change.dir == ino);
                self.changes = others;
                queue.extend(mine.iter().map(DirChange::ino));
                queue.extend(dir.durable.values());
                queue.extend(dir.entries.values());
            }
        }
    }

    /// What is not durable yet.
    pub(crate) fn unsynced(&self) -> Unsynced {
        let mut unsynced = Unsynced {
            dir_changes: self.changes.len() as u64 + self.discarded_changes,
            ..Unsynced::default()
        };
        for inode in self.inodes.values() {
            if let Node::File(file) = &inode.node {
                let bytes = file.pending.iter().map(FileOp::len).sum::<u64>() + file.discarded;
                // What a failed fsync discarded shows as visible bytes the durable ones lack.
                if !file.pending.is_empty() || file.data != file.durable {
                    unsynced.files += 1;
                    unsynced.bytes += bytes;
                }
            }
        }
        unsynced
    }

    /// Bytes and inodes in use, for `statfs`.
    pub(crate) fn usage(&self) -> Usage {
        let bytes = self
            .inodes
            .values()
            .map(|inode| match &inode.node {
                Node::File(file) => file.data.len() as u64,
                Node::Dir(_) => 4096,
            })
            .sum();
        Usage {
            bytes,
            inodes: self.inodes.len() as u64,
        }
    }
}
