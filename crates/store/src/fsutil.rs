//! Small file-system helpers: fsyncs (counted), atomic replace and little-endian varints.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, StoreError};

/// fsyncs of files and directories made by the stores of this process, whatever they were for
/// (block files, index.db and sidecars, the sequence lease, directories).
static FSYNCS: AtomicU64 = AtomicU64::new(0);

/// How many fsyncs the stores of this process have made: what durability costs, for the
/// metrics and the benchmarks.
pub fn fsyncs() -> u64 {
    FSYNCS.load(Ordering::Relaxed)
}

/// `file.sync_data()`, counted.
pub fn sync_data(file: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_data()
}

/// `file.sync_all()`, counted.
pub fn sync_all(file: &File) -> std::io::Result<()> {
    FSYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_all()
}

/// Replaces `path` with `bytes` atomically: write a temp file, fsync it, rename it over the
/// target, fsync the directory. A temp file that fails to be written is removed, so a full disk is not left fuller.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    if let Err(e) = write_synced(&tmp, bytes) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path).map_err(StoreError::io(path))?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// `<path>.damaged-<ns>`: where bytes or a file that recovery cannot use are kept for
/// inspection. The name ends in neither `.blk` nor `.db`, so no later open mistakes it for a
/// block or a sidecar.
pub fn damaged_name(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".damaged-{}", crate::time::now_ns()));
    name.into()
}

/// Creates (or replaces) `path` with `bytes` and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(StoreError::io(path))?;
    f.write_all(bytes).map_err(StoreError::io(path))?;
    sync_all(&f).map_err(StoreError::io(path))
}

/// Creates `dir` and whatever of its ancestors is missing, each one's name made durable: the
/// parent of every directory created is fsynced after it. Without that a power loss can drop
/// the new directory's name, and with it every file later fsynced inside it.
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut ancestor = Some(dir);
    while let Some(path) = ancestor.filter(|path| !path.as_os_str().is_empty() && !path.is_dir()) {
        missing.push(path);
        ancestor = path.parent();
    }
    // IMPORTANT: outermost first, so that each parent exists (and is durable) before its child.
    for path in missing.into_iter().rev() {
        match fs::create_dir(path) {
            Ok(()) => {}
            // Another creator won the race; its name is made durable below all the same.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => {}
            Err(e) => {
                return Err(StoreError::Io {
                    path: path.to_path_buf(),
                    source: e,
                });
            }
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Whether `e` is the disk failing to read or write (`EIO`, the same number on every Unix), as
/// opposed to a missing file, a refused permission or a lack of resources.
pub fn is_disk_failure(e: &std::io::Error) -> bool {
    const EIO: i32 = 5;
    e.raw_os_error() == Some(EIO)
}

/// fsyncs a directory so that entries created or renamed in it survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| sync_all(&d))
        .map_err(StoreError::io(dir))
}

/// Appends an unsigned LEB128 varint.
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a zigzag-encoded signed varint.
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// A bounds-checked reader over a byte slice; every read fails cleanly past the end.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Takes `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Some(head)
    }

    /// A u8.
    pub fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        self.bytes(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// An unsigned varint.
    pub fn uvarint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    /// A zigzag signed varint.
    pub fn varint(&mut self) -> Option<i64> {
        let u = self.uvarint()?;
        Some(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// A count of entries that each take at least `min_entry` bytes, capped by what remains.
    pub fn count(&mut self, min_entry: usize) -> Option<usize> {
        let n = usize::try_from(self.uvarint()?).ok()?;
        (n <= self.remaining() / min_entry.max(1)).then_some(n)
    }

    /// A length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.uvarint()?).ok()?;
        std::str::from_utf8(self.bytes(n)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn varints_round_trip(u in any::<u64>(), i in any::<i64>()) {
            let mut out = Vec::new();
            put_uvarint(&mut out, u);
            put_varint(&mut out, i);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.uvarint(), Some(u));
            prop_assert_eq!(r.varint(), Some(i));
            prop_assert_eq!(r.remaining(), 0);
        }
    }
}
