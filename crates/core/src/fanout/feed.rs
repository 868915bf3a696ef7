//! One topic set's share of the dispatch: the ring of its encoded frames, and the wake-up its
//! readers wait on. A feed has no backend subscription of its own; the dispatch fills its ring
//! with exactly the messages its filters match.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use sluice_protocol::subject::FilterSet;
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use bytes::Bytes;

use super::FeedName;
use super::encode::Encoder;
use super::ring::Routed;
use super::ring::{Entry, Read, Ring};
use super::source::{Lost, Role, SourceSpec};
use super::view::View;
use crate::event_id::EventId;
use crate::frames::{self, Gap};
use crate::metrics::Metrics;
use sluice_backend::Backend;

/// What every feed of one dispatch shares: how to read the stream behind its ring.
#[derive(Debug)]
pub struct Reading {
    /// How the stream's messages are encoded (in the dispatch's incarnation).
    pub encoder: Encoder,
    pub(super) backend: Arc<dyn Backend>,
    pub(super) metrics: Arc<Metrics>,
    /// Reads behind a ring running at once, on the whole hub: each is a backend subscription
    /// (on JetStream, a consumer on the server).
    catch_ups: Arc<Semaphore>,
    /// Where the feeds' views run, when not on the thread that happens to need an entry.
    view_runtime: Option<Handle>,
}

impl Reading {
    /// Shared reading state for `encoder`'s incarnation.
    pub(super) fn new(
        encoder: Encoder,
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        catch_ups: Arc<Semaphore>,
    ) -> Self {
        Self {
            encoder,
            backend,
            metrics,
            catch_ups,
            view_runtime: None,
        }
    }

    /// The same, running every view on `runtime`: the dispatch's, and a reader's catching up.
    pub(super) fn with_view_runtime(mut self, runtime: Option<Handle>) -> Self {
        self.view_runtime = runtime;
        self
    }

    /// What a source of `filters` reads: the dispatch's, or a reader's catching up.
    pub(super) fn source_spec(
        &self,
        filters: &FilterSet,
        role: Role,
        until: Option<u64>,
    ) -> SourceSpec {
        SourceSpec {
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
            filters: filters.clone(),
            encoder: self.encoder.clone(),
            role,
            until,
        }
    }
}

/// The state a topic set's readers share with the dispatch.
#[derive(Debug)]
pub struct FeedCore {
    /// The topic set.
    pub filters: FilterSet,
    /// How its readers see the entries; `None`: as `/events` frames.
    view: Option<Arc<dyn View>>,
    reading: Arc<Reading>,
    ring: RwLock<Ring>,
    /// Bumped after every change of the ring, and when the feed closes.
    position: watch::Sender<u64>,
    closed: AtomicBool,
}

impl FeedCore {
    /// An empty feed whose ring begins at `start`.
    pub(super) fn new(
        filters: FilterSet,
        view: Option<Arc<dyn View>>,
        reading: Arc<Reading>,
        ring_size: usize,
        start: u64,
    ) -> Self {
        Self {
            filters,
            view,
            reading,
            ring: RwLock::new(Ring::new(ring_size, start)),
            position: watch::Sender::new(start),
            closed: AtomicBool::new(false),
        }
    }

    /// How this feed's frames are encoded.
    pub fn encoder(&self) -> &Encoder {
        &self.reading.encoder
    }

    /// The entry this feed's readers get for `routed` (one its filters match), or `None` when
    /// its view leaves it out.
    pub(super) fn admit(&self, routed: &Routed) -> Option<Entry> {
        match &self.view {
            None => Some(routed.entry.clone()),
            Some(view) => view.entry(routed),
        }
    }

    /// Whether this feed's view runs on a runtime of its own: a reader catching up then hands
    /// each entry over with [`FeedCore::admit_where_views_run`] instead of running the view
    /// where it is.
    pub(super) fn views_run_elsewhere(&self) -> bool {
        self.view.is_some() && self.reading.view_runtime.is_some()
    }

    /// [`FeedCore::admit`], run on the views' runtime when they have one. Should that runtime
    /// be gone (the hub is stopping), the entry is admitted here rather than lost.
    pub(super) async fn admit_where_views_run(self: &Arc<Self>, routed: Routed) -> Option<Entry> {
        let Some(runtime) = self
            .reading
            .view_runtime
            .as_ref()
            .filter(|_| self.view.is_some())
        else {
            return self.admit(&routed);
        };
        let core = self.clone();
        let kept = routed.clone();
        match runtime.spawn(async move { core.admit(&routed) }).await {
            Ok(entry) => entry,
            Err(_) => self.admit(&kept),
        }
    }

    /// The frame for a gap a session finds itself, as this feed's readers read frames.
    pub fn gap_frame(&self, id: EventId, gap: &Gap) -> Bytes {
        match &self.view {
            None => frames::gap(id, gap),
            Some(view) => view.gap(id, gap),
        }
    }

    /// The feed's name in the fan-out: its filters and its view's key.
    pub(super) fn name(&self) -> FeedName {
        let view = self.view.as_ref().map(|view| view.key());
        (self.filters.clone(), view)
    }

    /// What the ring holds at `from`.
    pub fn read(&self, from: u64) -> Read {
        self.ring.read().map_or(Read::Wait, |ring| ring.read(from))
    }

    /// The oldest position the ring still covers.
    pub fn low(&self) -> u64 {
        self.ring.read().map_or(u64::MAX, |ring| ring.low())
    }

    /// How many readers follow the feed.
    pub fn readers(&self) -> usize {
        self.position.receiver_count()
    }

    /// A receiver notified whenever the ring changes or the feed closes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.position.subscribe()
    }

    /// True once the feed has ended because the stream was replaced.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// What a reader catching up behind the ring reads: this topic set, up to where the ring
    /// begins now.
    pub(super) fn catch_up_spec(&self) -> SourceSpec {
        self.reading
            .source_spec(&self.filters, Role::CatchUp, Some(self.low()))
    }

    /// What a reader's state read (the latest message of each subject below `until`)
    /// reads.
    pub(super) fn state_spec(&self, until: u64) -> SourceSpec {
        self.reading
            .source_spec(&self.filters, Role::State, Some(until))
    }

    /// Waits for a turn to read behind the ring (see [`Reading::catch_ups`]) and counts it.
    pub(super) async fn catch_up_turn(&self) -> Result<OwnedSemaphorePermit, Lost> {
        let permit = self.reading.catch_ups.clone().acquire_owned().await;
        self.reading.metrics.catchups.inc();
        // Never closed: the fan-out owns it for the hub's life.
        permit.map_err(|_| Lost::Failed)
    }

    /// Adds an entry to the ring without waking readers (see [`FeedCore::publish`]), unless
    /// the ring already covers its position; how much the ring's bytes changed.
    pub(super) fn push(&self, entry: Entry) -> isize {
        self.ring.write().map_or(0, |mut ring| ring.push(entry))
    }

    /// What the ring's entries weigh together.
    pub(super) fn ring_bytes(&self) -> usize {
        self.ring.read().map_or(0, |ring| ring.bytes())
    }

    /// The position of the ring's oldest entry, if it holds any.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.ring.read().ok()?.oldest()
    }

    /// Drops the ring's oldest entry: its readers behind it read the stream instead. The
    /// bytes freed, and the position of the entry that is now the oldest.
    pub(super) fn evict_oldest(&self) -> (usize, Option<u64>) {
        self.ring.write().map_or((0, None), |mut ring| {
            let freed = ring.evict_oldest();
            (freed, ring.oldest())
        })
    }

    /// Wakes every reader waiting for the ring to grow.
    pub(super) fn publish(&self) {
        if let Ok(ring) = self.ring.read() {
            let high = ring.high();
            drop(ring);
            self.position.send_replace(high);
        }
    }

    /// Wakes every reader without a change (they look at the hub's shutdown flag).
    pub fn wake(&self) {
        self.position.send_modify(|_| {});
    }

    /// Ends the feed: the stream was replaced. Its readers end their streams.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.position.send_modify(|_| {});
    }
}
