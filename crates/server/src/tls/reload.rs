//! Triggers for [`Certificates::reload`]: SIGHUP, and changes to the certificate or key file —
//! the same two as for the auth keys, through [`crate::file_version`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Certificates;
use crate::file_version::{self, Reloadable};

impl Reloadable for Certificates {
    fn files(&self) -> Vec<PathBuf> {
        Certificates::files(self).map(PathBuf::from).to_vec()
    }

    fn reload_logged(&self, trigger: &str) {
        if let Err(e) = self.reload() {
            tracing::error!(trigger, error = %e, "TLS certificate reload failed; keeping the previous certificate");
        }
    }
}

impl Certificates {
    /// Reloads the certificate every time the process receives SIGHUP, until the returned task
    /// is aborted. A failed reload is logged and the previous certificate stays in use.
    ///
    /// Must be called inside a Tokio runtime; fails when the signal handler cannot be
    /// installed.
    #[cfg(unix)]
    pub fn reload_on_sighup(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        file_version::reload_on_sighup(self)
    }

    /// Checks both files every `every` and reloads when one changed after this call (size,
    /// modification time or inode), until the returned task is aborted. A failed reload (a
    /// certificate written before its key, say) is logged and the previous certificate stays
    /// in use; the next change is tried again.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn reload_on_change(self: &Arc<Self>, every: Duration) -> JoinHandle<()> {
        file_version::reload_on_change(self, every, "certificate file changed")
    }
}
