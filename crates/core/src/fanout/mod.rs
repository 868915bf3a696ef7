//! Fan-out: per node, one read of the stream, dispatched by subject to a bounded ring of frames
//! (encoded once) per distinct topic set; every connection is only a cursor into its ring.
//!
//! One algorithm turns the stream into entries, [`Source`]; it has two readers:
//!
//! ```text
//! backend ─► Source ─► dispatch ─► Ring (one per topic set) ─► Cursor ─► session
//!    └─────► Source (a cursor's own, while it is behind its ring) ─┘
//! ```
//!
//! A message wakes only the readers of the topic sets it matches. A [`Cursor`] that falls
//! behind its ring (or starts before it) reads the stream itself, bounded to where the ring
//! begins, then rejoins it — no gap, no duplicate, no disconnect.
//!
//! | file          | job                                                                   |
//! |---------------|-----------------------------------------------------------------------|
//! | `source.rs`   | a backend subscription in one incarnation → entries, losses reported  |
//! | `encode.rs`   | a stream message → the frame every subscriber gets                    |
//! | `ring.rs`     | the bounded ring of entries                                           |
//! | `memory.rs`   | what one dispatch's rings hold, against `fanout.ring_memory`          |
//! | `dispatch.rs` | the node's one read of the stream → the rings of the matching sets    |
//! | `feed.rs`     | one topic set: its ring and its readers' wake-up                      |
//! | `cursor.rs`   | one reader's position: the ring, or its own source while behind       |
//! | `view.rs`     | a feed's own selection and encoding of its entries (Mercure's feeds)  |

mod config;
mod cursor;
mod dispatch;
mod encode;
mod feed;
mod handle;
mod memory;
mod ring;
mod source;
#[cfg(test)]
pub(crate) mod testing;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sluice_protocol::subject::FilterSet;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;

pub use config::FanoutConfig;
pub use cursor::Cursor;
pub use encode::Encoder;
pub use handle::Feed;
pub use ring::Routed;
pub use ring::{Entry, EntryKind};
pub use source::{Lost, Role, Source, SourceSpec, record};
pub use view::View;

use sluice_backend::{Backend, StreamState};

use crate::metrics::Metrics;
use dispatch::Dispatch;
use feed::Reading;

/// What names a shared feed: its filters, and its view's key (`None`: an `/events` feed).
type FeedName = (FilterSet, Option<Box<str>>);

type FeedMap = Mutex<HashMap<FeedName, Weak<Feed>>>;

/// The feeds of one hub.
#[derive(Debug)]
pub struct Fanout {
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    /// The encoder every incarnation's is made from (its incarnation is replaced).
    encoding: Encoder,
    ring_size: usize,
    /// Bytes each dispatch's rings may hold together (`fanout.ring_memory`).
    ring_memory: usize,
    /// Turns to read behind a ring (`fanout.max_catch_up_reads`).
    catch_ups: Arc<Semaphore>,
    /// The dispatch of the current incarnation, while any topic set is read. It runs on the
    /// runtime that starts it: the hub's request runtime, where publishes are stored, so a
    /// stored message wakes it on the publisher's thread.
    dispatch: Mutex<Weak<Dispatch>>,
    feeds: Arc<FeedMap>,
    /// The filter the dispatch reads instead of the topic prefix's (a Mercure fan-out reads
    /// the Mercure prefix).
    reads: Option<String>,
    /// Where the dispatch runs when not on the runtime that starts it.
    dispatch_runtime: Option<Handle>,
}

impl Fanout {
    /// A fan-out over `backend`, encoding as `encoding` does (whatever its incarnation), with
    /// the rings' bounds (entries, bytes) and the bound on reads behind them of
    /// `settings`.
    pub fn new(
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        encoding: Encoder,
        settings: &FanoutConfig,
    ) -> Self {
        Self {
            backend,
            metrics,
            encoding,
            ring_size: settings.ring_size,
            ring_memory: settings.ring_memory,
            catch_ups: Arc::new(Semaphore::new(settings.max_catch_up_reads)),
            dispatch: Mutex::default(),
            feeds: Arc::default(),
            reads: None,
            dispatch_runtime: None,
        }
    }

    /// The same fan-out for feeds with a [`View`] over the subjects `filter` matches: its
    /// dispatch reads them alone, and runs on `runtime` (when given). The views select and
    /// encode in the dispatch, so on a runtime of their own they never run on the threads
    /// that deliver other feeds' events.
    pub fn for_views(mut self, filter: String, runtime: Option<Handle>) -> Self {
        self.reads = Some(filter);
        self.dispatch_runtime = runtime;
        self
    }

    /// The encoder for messages of incarnation `incarnation`.
    pub fn encoder(&self, incarnation: u64) -> Encoder {
        Encoder {
            incarnation,
            ..self.encoding.clone()
        }
    }

    /// The shared feed for `filters` in the incarnation of `state`. A new one (there is none
    /// yet, or the existing one belongs to an older incarnation) holds what the dispatch still
    /// has of the set from `from` on.
    pub fn feed(&self, filters: &FilterSet, state: &StreamState, from: u64) -> Arc<Feed> {
        let name: FeedName = (filters.clone(), None);
        if let Some(feed) = self.existing(&name, state) {
            return feed;
        }
        let dispatch = self.dispatch(state);
        let (key, core) = dispatch.attach(filters.clone(), None, from);
        self.install(name, dispatch, key, core)
    }

    /// Like [`Fanout::feed`], for readers who see the entries through `view`: one feed per
    /// distinct filters and view key. A new feed is filled from the dispatch's recent entries
    /// through its view, on the views' own runtime when the fan-out has one.
    pub async fn feed_with_view(
        &self,
        filters: &FilterSet,
        view: Arc<dyn View>,
        state: &StreamState,
        from: u64,
    ) -> Arc<Feed> {
        let name: FeedName = (filters.clone(), Some(view.key()));
        if let Some(feed) = self.existing(&name, state) {
            return feed;
        }
        let dispatch = self.dispatch(state);
        let attach = {
            let (dispatch, filters, view) = (dispatch.clone(), filters.clone(), view.clone());
            move || dispatch.attach(filters, Some(view), from)
        };
        let attached = match &self.dispatch_runtime {
            Some(runtime) => runtime.spawn(async move { attach() }).await.ok(),
            None => None,
        };
        // Without a runtime of its own (or with it gone, the hub stopping), here.
        let (key, core) =
            attached.unwrap_or_else(|| dispatch.attach(filters.clone(), Some(view), from));
        self.install(name, dispatch, key, core)
    }

    /// The running feed named `name` in `state`'s incarnation, if there is one.
    fn existing(&self, name: &FeedName, state: &StreamState) -> Option<Arc<Feed>> {
        let existing = self
            .feeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .and_then(Weak::upgrade);
        // A stale feed is dropped here, outside the lock its drop hook takes.
        existing.filter(|feed| {
            feed.core.encoder().incarnation == state.incarnation && !feed.core.is_closed()
        })
    }

    /// The feed `name` of the topic set `key` just attached to `dispatch`, counted and listed
    /// until it is dropped.
    fn install(
        &self,
        name: FeedName,
        dispatch: Arc<Dispatch>,
        key: dispatch::FeedKey,
        core: Arc<feed::FeedCore>,
    ) -> Arc<Feed> {
        let map = Arc::downgrade(&self.feeds);
        let metrics = self.metrics.clone();
        let on_drop = Box::new(move |name: &FeedName| {
            metrics.active_feeds.dec();
            if let Some(map) = map.upgrade() {
                let mut feeds = map.lock().unwrap_or_else(|e| e.into_inner());
                if feeds.get(name).is_some_and(|w| w.strong_count() == 0) {
                    feeds.remove(name);
                }
            }
        });
        self.metrics.active_feeds.inc();
        let feed = Arc::new(Feed::new(core, dispatch, key, on_drop));
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.insert(name, Arc::downgrade(&feed));
        feed
    }

    /// The running dispatch of `state`'s incarnation, started at its live end when there is
    /// none (nobody reads, or the running one reads another incarnation).
    fn dispatch(&self, state: &StreamState) -> Arc<Dispatch> {
        let mut current = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dispatch) = current.upgrade()
            && dispatch.incarnation() == state.incarnation
            && !dispatch.is_closed()
        {
            return dispatch;
        }
        let reading = Reading::new(
            self.encoder(state.incarnation),
            self.backend.clone(),
            self.metrics.clone(),
            self.catch_ups.clone(),
        )
        .with_view_runtime(self.dispatch_runtime.clone());
        let runtime = self
            .dispatch_runtime
            .clone()
            .unwrap_or_else(Handle::current);
        let dispatch = Arc::new(Dispatch::spawn(
            Arc::new(reading),
            self.wide_filters(),
            state.last_seq.saturating_add(1),
            self.ring_size,
            self.ring_memory,
            &runtime,
        ));
        *current = Arc::downgrade(&dispatch);
        dispatch
    }

    /// What the dispatch reads: the filter the fan-out was told to read, else every subject
    /// a topic can name (the topic prefix's, or all).
    fn wide_filters(&self) -> FilterSet {
        let prefix = &self.encoding.topic_prefix;
        let wide = match &self.reads {
            Some(filter) => filter.clone(),
            None if prefix.is_empty() => ">".to_owned(),
            None => format!("{prefix}.>"),
        };
        // Validated prefixes are literal tokens, so this is a valid filter.
        FilterSet::new([wide]).unwrap_or_default()
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

    /// How many sequences up to `last_seq` (the stream's last) the dispatch has not yet routed
    /// to the feeds: every feed of the node is filled by that one read, so this is each one's
    /// lag. 0 while no feed runs, or when the dispatch is at the end.
    pub fn lag(&self, last_seq: u64) -> u64 {
        let dispatch = self
            .dispatch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .upgrade();
        dispatch
            .filter(|dispatch| !dispatch.is_closed())
            .map_or(0, |dispatch| {
                last_seq
                    .saturating_add(1)
                    .saturating_sub(dispatch.position())
            })
    }

    /// How many feeds are running.
    pub fn feed_count(&self) -> usize {
        let feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.values().filter(|w| w.strong_count() > 0).count()
    }
}
