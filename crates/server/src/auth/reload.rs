//! Triggers for [`Authenticator::reload`]: SIGHUP, and changes to the key files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Authenticator;
use crate::file_version::fingerprints;

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
