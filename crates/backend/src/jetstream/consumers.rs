//! The consumers the feeds hold on the server, so that shutting down deletes every one of them
//! before the connection closes. A feed deletes its consumer when it lets go of it, but from a
//! task that may never run once the hub stops (its runtime is gone, the connection drained);
//! the server would then keep the consumer until its inactivity threshold.

use std::collections::HashSet;
use std::sync::Mutex;

use tokio::sync::{RwLock, RwLockReadGuard};

/// The live consumers, and whether new ones may still be created.
#[derive(Default)]
pub(super) struct Consumers {
    /// `true` once closed. Held shared while a consumer is created and registered, exclusively
    /// by [`Consumers::close`], so no creation is halfway when the names are collected.
    closed: RwLock<bool>,
    names: Mutex<HashSet<String>>,
}

/// Permission to create a consumer, held until it is registered.
pub(super) struct Creating<'a> {
    _open: RwLockReadGuard<'a, bool>,
}

impl Consumers {
    /// Permission to create a consumer; `None` once closed.
    pub async fn creating(&self) -> Option<Creating<'_>> {
        let closed = self.closed.read().await;
        (!*closed).then_some(Creating { _open: closed })
    }

    /// Records a consumer created under `_permission`.
    pub fn register(&self, _permission: &Creating<'_>, name: &str) {
        self.lock().insert(name.to_owned());
    }

    /// Forgets a consumer once it is deleted.
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Refuses new consumers, waits for creations in flight, and returns every consumer still
    /// registered: the caller deletes them.
    pub async fn close(&self) -> Vec<String> {
        *self.closed.write().await = true;
        self.lock().drain().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // A panic while holding the lock cannot leave the set inconsistent.
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
