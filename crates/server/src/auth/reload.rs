//! Triggers for [`Authenticator::reload`]: SIGHUP, and changes to the key files.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Authenticator;
use crate::file_version::{self, Reloadable};

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
        file_version::reload_on_sighup(self)
    }

    /// Checks the key files every `every` and reloads when one changed after this call (size,
    /// modification time or, on Unix, inode: a file renamed into place counts), until the
    /// returned task is aborted. A failed reload is logged and the previous keys stay in use;
    /// the next change is tried again.
    ///
    /// Must be called inside a Tokio runtime.
    pub fn reload_on_change(self: &Arc<Self>, every: Duration) -> JoinHandle<()> {
        file_version::reload_on_change(self, every, "key file changed")
    }
}

impl Reloadable for Authenticator {
    fn files(&self) -> Vec<PathBuf> {
        self.key_files()
    }

    fn reload_logged(&self, trigger: &str) {
        if let Err(e) = self.reload() {
            tracing::error!(trigger, error = %e, "auth key reload failed; keeping the previous keys");
        }
    }
}
