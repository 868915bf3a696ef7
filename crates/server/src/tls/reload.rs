//! Triggers for [`Certificates::reload`]: SIGHUP, and changes to the certificate or key file —
//! the same two as for the auth keys (`auth/reload.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Certificates;
use crate::file_version::fingerprints;

impl Certificates {
    /// Reloads the certificate every time the process receives SIGHUP, until the returned task
    /// is aborted. A failed reload is logged and the previous certificate stays in use.
    ///
    /// Must be called inside a Tokio runtime; fails when the signal handler cannot be
    /// installed.
    #[cfg(unix)]
    pub fn reload_on_sighup(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = signal(SignalKind::hangup())?;
        let certificates = Arc::clone(self);
        Ok(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                certificates.reload_logged("SIGHUP");
            }
        }))
    }

    /// Checks both files every `every` and reloads when one changed after this call (size,
    /// modification time or inode), until the returned task is aborted. A failed reload (a
    /// certificate written before its key, say) is logged and the previous certificate stays
    /// in use; the next change is tried again.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn reload_on_change(self: &Arc<Self>, every: Duration) -> JoinHandle<()> {
        let certificates = Arc::clone(self);
        let files: Vec<PathBuf> = self.files().map(PathBuf::from).to_vec();
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
                    certificates.reload_logged("certificate file changed");
                }
            }
        })
    }

    fn reload_logged(&self, trigger: &str) {
        if let Err(e) = self.reload() {
            tracing::error!(trigger, error = %e, "TLS certificate reload failed; keeping the previous certificate");
        }
    }
}
