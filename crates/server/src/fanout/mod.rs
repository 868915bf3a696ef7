//! Fan-out: per node, one backend subscription per distinct topic set, feeding a bounded ring
//! of frames encoded once; every connection is only a cursor into that ring.
//!
//! One algorithm turns the stream into entries, [`Source`]; it has two readers:
//!
//! ```text
//! backend ─► Source ─► feed task ─► Ring ─► Cursor ─► session
//!    └─────► Source (a cursor's own, while it is behind the ring) ─┘
//! ```
//!
//! A [`Cursor`] that falls behind the ring (or starts before it) reads from the stream itself
//! until it reaches the ring, then rejoins it — no gap, no duplicate, no disconnect.
//!
//! | file        | job                                                                  |
//! |-------------|----------------------------------------------------------------------|
//! | `source.rs` | a backend subscription in one incarnation → entries, losses reported |
//! | `encode.rs` | a stream message → the frame every subscriber gets                   |
//! | `ring.rs`   | the bounded ring of encoded frames                                   |
//! | `feed.rs`   | the shared feed: its own source → the ring                           |
//! | `cursor.rs` | one reader's position: the ring, or its own source while behind      |

mod cursor;
mod encode;
mod feed;
mod ring;
mod source;
#[cfg(test)]
mod testing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sluice_protocol::subject::FilterSet;

pub use cursor::Cursor;
pub use encode::Encoder;
pub use feed::Feed;
pub use ring::{Entry, EntryKind};
pub use source::{Lost, record};

use crate::backend::{Backend, StreamState};
use crate::metrics::Metrics;
use feed::FeedStart;

type FeedMap = Mutex<HashMap<FilterSet, Weak<Feed>>>;

/// The feeds of one hub.
#[derive(Debug)]
pub struct Fanout {
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    /// The encoder every incarnation's is made from (its incarnation is replaced).
    encoding: Encoder,
    ring_size: usize,
    feeds: Arc<FeedMap>,
}

impl Fanout {
    /// A fan-out over `backend`, encoding as `encoding` does (whatever its incarnation).
    pub fn new(
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        encoding: Encoder,
        ring_size: usize,
    ) -> Self {
        Self {
            backend,
            metrics,
            encoding,
            ring_size,
            feeds: Arc::default(),
        }
    }

    /// The encoder for messages of incarnation `incarnation`.
    pub fn encoder(&self, incarnation: u64) -> Encoder {
        Encoder {
            incarnation,
            ..self.encoding.clone()
        }
    }

    /// The shared feed for `filters` in the incarnation of `state`, started at its live end
    /// when there is none yet (or the existing one belongs to an older incarnation).
    pub fn feed(&self, filters: &FilterSet, state: &StreamState) -> Arc<Feed> {
        let existing = self
            .feeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(filters)
            .and_then(Weak::upgrade);
        // A stale feed is dropped here, outside the lock its drop hook takes.
        if let Some(feed) = existing
            && feed.core.encoder.incarnation == state.incarnation
            && !feed.core.is_closed()
        {
            return feed;
        }
        let map = Arc::downgrade(&self.feeds);
        let metrics = self.metrics.clone();
        let on_drop = Box::new(move |filters: &FilterSet| {
            metrics.active_feeds.dec();
            if let Some(map) = map.upgrade() {
                let mut feeds = map.lock().unwrap_or_else(|e| e.into_inner());
                if feeds.get(filters).is_some_and(|w| w.strong_count() == 0) {
                    feeds.remove(filters);
                }
            }
        });
        let start = FeedStart {
            filters: filters.clone(),
            encoder: self.encoder(state.incarnation),
            start: state.last_seq.saturating_add(1),
            ring_size: self.ring_size,
        };
        self.metrics.active_feeds.inc();
        let feed = Arc::new(Feed::spawn(
            start,
            self.backend.clone(),
            self.metrics.clone(),
            on_drop,
        ));
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.insert(filters.clone(), Arc::downgrade(&feed));
        feed
    }

    /// Wakes every reader of every feed (at shutdown: readers wait only on their feed).
    pub fn wake_all(&self) {
        let feeds: Vec<Arc<Feed>> = {
            let feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
            feeds.values().filter_map(Weak::upgrade).collect()
        };
        // Woken, and dropped, outside the lock the drop hook takes.
        for feed in feeds {
            feed.core.wake();
        }
    }

    /// How many feeds are running.
    pub fn feed_count(&self) -> usize {
        let feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.values().filter(|w| w.strong_count() > 0).count()
    }
}
