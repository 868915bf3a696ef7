//! Triggers for [`Authenticator::reload`]: SIGHUP, and changes to the key files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;

use super::Authenticator;

impl Authenticator {
    /// Every key file named by the configuration (secret, PEM and JWKS files).
    pub fn key_files(&self) -> Vec<PathBuf> {
        self.configured()
            .flat_map(|d| d.config.keys.iter().filter_map(|k| k.file()))
            .map(PathBuf::from)
            .collect()
    }

    /// Reloads the keys every time the process receives SIGHUP, until the returned task is
    /// aborted. A failed reload is logged and the previous keys stay in use.
    ///
    /// Must be called inside a Tokio runtime; fails when the signal handler cannot be
    /// installed.
    #[cfg(unix)]
    pub fn reload_on_sighup(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let auth = Arc::clone(self);
        Ok(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                auth.reload_logged("SIGHUP");
            }
        }))
    }

    /// Checks the key files every `every` and reloads when one changed after this call (size, modification
    /// time or, on Unix, inode: a file renamed into place counts), until the returned task is
    /// aborted. A failed reload is logged and the previous keys stay in use; the next change
    /// is tried again.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn reload_on_change(self: &Arc<Self>, every: Duration) -> JoinHandle<()> {
        let auth = Arc::clone(self);
        let files = self.key_files();
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
                    auth.reload_logged("key file changed");
                }
            }
        })
    }

    fn reload_logged(&self, trigger: &str) {
        if let Err(e) = self.reload() {
            tracing::error!(trigger, error = %e, "auth key reload failed; keeping the previous keys");
        }
    }
}

/// What identifies one version of a file; `None` when it cannot be read (a reload then
/// happens once it reappears).
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

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
