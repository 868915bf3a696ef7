//! Reloading what is read from files (auth keys, TLS certificates): the two triggers, SIGHUP
//! and a change to one of the files, and telling versions of a file apart for the second
//! (size, modification time and, on Unix, inode: a file renamed into place counts as a change).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;

/// Something loaded from files that can be loaded again.
pub(crate) trait Reloadable: Send + Sync + 'static {
    /// The files it is loaded from.
    fn files(&self) -> Vec<PathBuf>;
    /// Loads it again; a failure is logged (naming `trigger`) and the previous version stays in
    /// use.
    fn reload_logged(&self, trigger: &str);
}

/// Reloads `target` every time the process receives SIGHUP, until the returned task is
/// aborted. Must be called inside a Tokio runtime; fails when the signal handler cannot be
/// installed.
#[cfg(unix)]
pub(crate) fn reload_on_sighup<T: Reloadable>(target: &Arc<T>) -> std::io::Result<JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    let target = Arc::clone(target);
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            target.reload_logged("SIGHUP");
        }
    }))
}

/// Checks `target`'s files every `every` and reloads it when one changed after this call,
/// until the returned task is aborted; `trigger` names the change in the log of a failed
/// reload, and the next change is tried again. Must be called inside a Tokio runtime.
pub(crate) fn reload_on_change<T: Reloadable>(
    target: &Arc<T>,
    every: Duration,
    trigger: &'static str,
) -> JoinHandle<()> {
    let target = Arc::clone(target);
    let files = target.files();
    // Taken now, so that a change made right after this call is seen as one.
    let mut seen = fingerprints(&files);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let now = fingerprints(&files);
            if now != seen {
                seen = now;
                target.reload_logged(trigger);
            }
        }
    })
}

/// What identifies one version of a file; `None` when it cannot be read (a reload then
/// happens once it reappears).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// The current version of each of `files`, in order.
fn fingerprints(files: &[PathBuf]) -> Vec<Option<Fingerprint>> {
    files
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some(Fingerprint {
                len: meta.len(),
                modified: meta.modified().ok(),
                inode: inode(&meta),
            })
        })
        .collect()
}

/// The file's inode number; 0 where there is none (then size and time tell versions apart).
///
/// One function with a body per platform, not one function per platform: mutation testing
/// runs on Unix, and a twin compiled only elsewhere would give it mutants no test can see.
fn inode(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_file_renamed_into_place_changes_the_fingerprint_even_with_the_same_size_and_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("key");
        let next = dir.path().join("key.next");
        fs::write(&key, "old-secret").expect("write");
        fs::write(&next, "new-secret").expect("write");
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for path in [&key, &next] {
            let file = File::options().write(true).open(path).expect("open");
            file.set_modified(time).expect("set mtime");
        }
        let files = vec![key.clone()];
        let before = fingerprints(&files);
        assert!(
            before[0]
                .as_ref()
                .is_some_and(|f| f.len == 10 && f.modified == Some(time))
        );
        fs::rename(&next, &key).expect("rename into place");
        let after = fingerprints(&files);
        assert_ne!(before, after, "only the inode tells them apart");
        fs::remove_file(&key).expect("remove");
        assert_eq!(
            fingerprints(&files),
            vec![None],
            "a missing file has no fingerprint"
        );
    }
}
