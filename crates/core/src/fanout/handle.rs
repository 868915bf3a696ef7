//! A topic set's feed as its readers hold it: a handle on its shared state whose last drop
//! takes the feed out of the dispatch.

use std::sync::Arc;

use super::FeedName;
use super::dispatch::{Dispatch, FeedKey};
use super::feed::FeedCore;

/// A topic set's feed; dropping the last handle takes it out of the dispatch.
pub struct Feed {
    /// The shared state.
    pub core: Arc<FeedCore>,
    dispatch: Arc<Dispatch>,
    key: FeedKey,
    on_drop: Box<dyn Fn(&FeedName) + Send + Sync>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

impl Feed {
    /// A handle on the feed `key` of `dispatch`; `on_drop` runs when the last handle goes.
    pub(super) fn new(
        core: Arc<FeedCore>,
        dispatch: Arc<Dispatch>,
        key: FeedKey,
        on_drop: Box<dyn Fn(&FeedName) + Send + Sync>,
    ) -> Self {
        Self {
            core,
            dispatch,
            key,
            on_drop,
        }
    }
}

#[cfg(test)]
impl Feed {
    /// The dispatch that fills this feed.
    pub(super) fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.dispatch.detach(self.key, &self.core.filters);
        (self.on_drop)(&self.core.name());
    }
}
