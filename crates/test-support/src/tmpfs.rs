//! A small tmpfs mounted for one test: a real file system that fills up, for the tests of what a
//! full disk does. Mounting needs root; where it cannot be done the test is skipped, and says so.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file [`Tmpfs::fill`] writes.
const FILLER: &str = "filler";

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it, e.g. `"2m"`) on a new temporary
    /// directory. `None` after printing why `test` is skipped, where this process may not mount
    /// one (not root, or no right to mount).
    pub fn mount(size: &str, test: &str) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            println!("skipping {test}: mounting a tmpfs needs root");
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Self { dir }),
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                println!("skipping {test}: mount -t tmpfs failed: {}", why.trim());
                None
            }
            Err(err) => {
                println!("skipping {test}: cannot run mount: {err}");
                None
            }
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills it up: appends to a filler file until a write fails for want of space (a few bytes
    /// may be left in pages other files already hold). Returns the bytes written.
    ///
    /// # Errors
    /// Any error other than a full disk.
    pub fn fill(&self) -> std::io::Result<u64> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())?;
        let chunk = [0x5au8; 4096];
        let mut written = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => return Ok(written),
                Ok(n) => written += n as u64,
                Err(err) if err.kind() == ErrorKind::StorageFull => return Ok(written),
                Err(err) => return Err(err),
            }
        }
    }

    /// Frees what [`Tmpfs::fill`] took.
    ///
    /// # Errors
    /// When the filler file cannot be removed.
    pub fn free(&self) -> std::io::Result<()> {
        fs::remove_file(self.filler())
    }

    fn filler(&self) -> PathBuf {
        self.path().join(FILLER)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a process still holding a file in it (a hub being killed) must not keep the
        // mount alive, nor fail the test.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
