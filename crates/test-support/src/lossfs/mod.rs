//! A power-loss file system for tests, on FUSE, after Jepsen's lazyfs: every write and every
//! directory change not made durable is held in a volatile layer, and [`LossFs::power_loss`]
//! drops it, as a machine losing power would. `kill -9` keeps the page cache, so only this shows
//! whether a store's fsyncs are the right ones, on the right files and directories.
//!
//! The file system runs in the test process (a `fuser` session thread); the processes under test
//! use it through the kernel like any other. Mounting needs root and `/dev/fuse` (it mounts with
//! the `mount` system call, no `fusermount`); where it cannot be done [`LossFs::mount`] says why
//! the test is skipped and returns `None`.
//!
//! # What survives a power loss
//!
//! - A file's data and size are durable as they were at its last successful `fsync` (or
//!   `fdatasync`). Writes and truncations after it are not.
//! - A directory's entries (names to inodes: what `create`, `mkdir`, `rename`, `unlink` and
//!   `rmdir` change) are durable as they were at its last successful `fsync` of the directory.
//!   Fsyncing a file does not make its name durable.
//! - After the loss, a file or directory exists where the root reaches it through durable
//!   entries: a file fsynced in a directory never fsynced is gone, and so is everything under a
//!   directory whose own name never became durable (`mkdir -p streams/s/msgs` needs `fsync` of
//!   `streams/s`, `streams` and the root too). An inode that durable entries still name survives
//!   with its durable data even if it was unlinked or renamed away before the loss; renamed over
//!   without the directory fsynced, a name still shows the old file.
//! - A failed `fsync` (see [`LossFs::fail`]) drops what was pending on that file from the durable
//!   future: it stays readable until the loss, and a later successful `fsync` does not make it
//!   durable (fsyncgate).
//! - [`Loss`] says what happens to what was not durable: all dropped, or torn at a sector
//!   boundary, or a random subset kept as a disk reordering writes would. Every choice follows
//!   from the seed, so a failing seed replays.
//! - Modes, owners and times are not modelled: they survive as they are.
//!
//! # How it decides
//!
//! Each file keeps its visible bytes, its durable bytes and the list of writes and truncations
//! since its last fsync; each directory keeps its visible and its durable entries, and every
//! change of an entry (a name linked to an inode, or removed; a rename is both, one in each
//! directory) is queued, in the order made, until its directory is fsynced. At the loss, each
//! file starts again from its durable bytes with the writes [`Loss`] keeps applied in order, and
//! each directory from its durable entries with the kept changes applied in order (an unlink of
//! a name that by then names another inode, or nothing, is skipped). Then only what the root
//! reaches survives: entries are walked breadth first from the root, names in byte order, and a
//! directory reached a second time (partly durable renames of directories can leave two names,
//! or a cycle) keeps only the name reached first. Link counts are recounted from what is left.
//!
//! Only regular files and directories exist (no links, symlinks or devices). `flock` and `fcntl`
//! locks are the kernel's own, so [`std::fs::File::try_lock`] works. The kernel caches nothing
//! (zero entry and attribute timeouts, direct I/O on every open), so after a loss lookups, `stat`
//! and reads see what survived; the price is that a shared `mmap` of a file is refused
//! (`ENODEV`). Processes writing to it must be dead before the loss; file handles opened before
//! it answer `EIO` after it.
//!
//! # Example
//!
//! ```
//! use std::io::Write;
//!
//! use sluice_test_support::lossfs::{Loss, LossFs};
//!
//! let Some(fs) = LossFs::mount("lossfs example") else {
//!     return; // not root, or no FUSE here: skipped, and it said so
//! };
//! let path = fs.path().join("log");
//! let mut file = std::fs::File::create(&path).unwrap();
//! file.write_all(b"acknowledged").unwrap();
//! file.sync_all().unwrap(); // the bytes are durable,
//! std::fs::File::open(fs.path()).unwrap().sync_all().unwrap(); // and so is the name
//! file.write_all(b", and more").unwrap(); // not durable
//! drop(file);
//! assert_eq!(fs.unsynced().bytes, 10);
//!
//! let report = fs.power_loss(Loss::DropAll);
//! assert_eq!(std::fs::read(&path).unwrap(), b"acknowledged");
//! assert_eq!(report.bytes_dropped, 10);
//! ```

mod faults;
mod fuse;
mod loss;
mod model;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use faults::FaultOp;
pub use loss::{Loss, LossReport};
pub use model::Unsynced;

use fuse::{LossFuse, Shared, State, lock};
use model::Model;

/// A power-loss file system mounted on a directory; unmounted when dropped (also while a failing
/// test unwinds; lazily where a process still holds a file in it).
pub struct LossFs {
    state: Shared,
    path: PathBuf,
    session: Option<fuser::BackgroundSession>,
    /// The temporary mount point, removed after the unmount (fields drop after `drop`).
    temp_dir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for LossFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossFs").field("path", &self.path).finish()
    }
}

impl LossFs {
    /// Mounts an empty power-loss file system on a new temporary directory. `None`, after
    /// printing `skipping {test}: {why}`, where it cannot be mounted (not root, no `/dev/fuse`,
    /// mount refused).
    pub fn mount(test: &str) -> Option<LossFs> {
        if !rustix::process::geteuid().is_root() {
            println!("skipping {test}: mounting a FUSE file system needs root");
            return None;
        }
        if !Path::new("/dev/fuse").exists() {
            println!("skipping {test}: no /dev/fuse");
            return None;
        }
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(err) => {
                println!("skipping {test}: no temporary directory: {err}");
                return None;
            }
        };
        match Self::mount_on(dir.path()) {
            Ok(mut fs) => {
                fs.temp_dir = Some(dir);
                Some(fs)
            }
            Err(err) => {
                println!("skipping {test}: cannot mount a FUSE file system: {err}");
                None
            }
        }
    }

    /// Mounts an empty power-loss file system on `dir`, an existing empty directory.
    ///
    /// # Errors
    /// When the mount is refused (not root, no `/dev/fuse`, `dir` missing).
    pub fn mount_on(dir: &Path) -> io::Result<LossFs> {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let state: Shared = Arc::new(Mutex::new(State {
            model: Model::new(uid, gid),
            faults: faults::Faults::default(),
        }));
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("lossfs".to_owned()),
            fuser::MountOption::Subtype("lossfs".to_owned()),
        ];
        // Other users too: a process under test may drop privileges.
        config.acl = fuser::SessionACL::All;
        let session = fuser::spawn_mount(LossFuse::new(Arc::clone(&state)), dir, &config)?;
        Ok(LossFs {
            state,
            path: dir.to_owned(),
            session: Some(session),
            temp_dir: None,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Simulates a power loss: everything not durable is dropped (as `loss` says), and the file
    /// system goes on serving what survived. The processes writing to it must be dead first
    /// (the caller kills them with SIGKILL and waits for them); open handles from before are
    /// invalid after (`EIO`).
    pub fn power_loss(&self, loss: Loss) -> LossReport {
        lock(&self.state).model.power_loss(loss)
    }

    /// Makes everything written so far durable, as the writeback of an idle system (or
    /// `sync(1)`) would: what a data directory that has been running for a while looks like
    /// before the next power loss.
    pub fn settle(&self) {
        lock(&self.state).model.sync_all();
    }

    /// Makes the next `times` operations of kind `op` on a path containing `path_contains` fail
    /// with `EIO`. Paths are relative to the mount point (`streams/s/msgs/0001`); a rename
    /// matches on its old or new path. Faults armed earlier are used first.
    pub fn fail(&self, op: FaultOp, path_contains: &str, times: u32) {
        lock(&self.state).faults.arm(op, path_contains, times);
    }

    /// Disarms every fault [`LossFs::fail`] armed: the disk works again.
    pub fn heal(&self) {
        lock(&self.state).faults.clear();
    }

    /// Bytes of file data and count of directory changes not yet durable (for tests that want
    /// to know a loss will drop something).
    pub fn unsynced(&self) -> Unsynced {
        lock(&self.state).model.unsynced()
    }
}

impl Drop for LossFs {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        if session.umount_and_join().is_err() {
            // Busy: a process (a hub being killed) still holds a file in it. Detach it; it goes
            // when they do, and the session thread with it.
            let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
        }
    }
}
