//! One shared backend subscription for one topic set, filling a ring of encoded frames:
//! [`Source`] → [`Ring`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sluice_protocol::subject::FilterSet;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::encode::Encoder;
use super::ring::{Read, Ring};
use super::source::{Lost, Role, SkipCheck, Source, SourceSpec};
use crate::backend::Backend;
use crate::metrics::Metrics;

/// The state readers share with the feed task.
#[derive(Debug)]
pub struct FeedCore {
    /// The topic set.
    pub filters: FilterSet,
    /// How this feed's (and its readers') frames are encoded.
    pub encoder: Encoder,
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    ring: RwLock<Ring>,
    /// Bumped after every change of the ring, and when the feed closes.
    position: watch::Sender<u64>,
    closed: AtomicBool,
}

impl FeedCore {
    /// What the ring holds at `from`.
    pub fn read(&self, from: u64) -> Read {
        self.ring.read().map_or(Read::Wait, |ring| ring.read(from))
    }

    /// The oldest position the ring still covers.
    pub fn low(&self) -> u64 {
        self.ring.read().map_or(u64::MAX, |ring| ring.low())
    }

    /// A receiver notified whenever the ring changes or the feed closes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.position.subscribe()
    }

    /// True once the feed has ended because the stream was replaced.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// What a source of this feed's topic set reads (the feed's own, or a reader's catching
    /// up behind the ring).
    pub fn source_spec(&self, skip_check: SkipCheck, role: Role) -> SourceSpec {
        SourceSpec {
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
            filters: self.filters.clone(),
            encoder: self.encoder.clone(),
            skip_check,
            role,
        }
    }

    /// Counts a reader's opening its own source to catch up.
    pub fn count_catch_up(&self) {
        self.metrics.catchups.inc();
    }

    /// Changes the ring without waking readers (see [`FeedCore::publish`]).
    fn change(&self, change: impl FnOnce(&mut Ring)) {
        if let Ok(mut ring) = self.ring.write() {
            change(&mut ring);
        }
    }

    /// Wakes every reader waiting for the ring to grow.
    fn publish(&self) {
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

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.position.send_modify(|_| {});
    }
}

/// A running feed; dropping the last handle stops its backend subscription.
pub struct Feed {
    /// The shared state.
    pub core: Arc<FeedCore>,
    task: AbortHandle,
    on_drop: Box<dyn Fn(&FilterSet) + Send + Sync>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
        (self.on_drop)(&self.core.filters);
    }
}

/// Settings of a new feed.
pub struct FeedStart {
    /// The topic set.
    pub filters: FilterSet,
    /// Encoding of this incarnation.
    pub encoder: Encoder,
    /// First sequence the feed reads (the live end at creation).
    pub start: u64,
    /// Ring capacity.
    pub ring_size: usize,
}

impl Feed {
    /// Starts the backend subscription task; `on_drop` runs when the last handle goes.
    pub fn spawn(
        start: FeedStart,
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        on_drop: Box<dyn Fn(&FilterSet) + Send + Sync>,
    ) -> Self {
        let (position, _) = watch::channel(start.start);
        let core = Arc::new(FeedCore {
            filters: start.filters,
            encoder: start.encoder,
            backend,
            metrics,
            ring: RwLock::new(Ring::new(start.ring_size, start.start)),
            position,
            closed: AtomicBool::new(false),
        });
        let task = tokio::spawn(run(core.clone(), start.start)).abort_handle();
        Self {
            core,
            task,
            on_drop,
        }
    }
}

/// Most entries added to the ring before the readers are woken.
const MAX_COALESCED: usize = 256;

/// Backoff between attempts to re-establish a lost backend subscription.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(5))
}

/// Source → ring, forever: when the subscription is lost the feed resumes from the source's
/// position (so nothing is skipped), unless the stream was replaced by a new incarnation, in
/// which case the feed closes and its readers end their streams.
async fn run(core: Arc<FeedCore>, start: u64) {
    let mut next = start;
    let mut failures = 0;
    loop {
        let lost =
            match Source::open(core.source_spec(SkipCheck::InProcess, Role::Feed), next).await {
                Ok(mut source) => {
                    let lost = fill(&core, &mut source, &mut failures).await;
                    next = source.position();
                    lost
                }
                Err(lost) => lost,
            };
        if let Lost::Replaced = lost {
            tracing::info!(filters = %core.filters, "stream was recreated; closing its feed");
            core.close();
            return;
        }
        failures += 1;
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// Moves the source's entries into the ring until the source is lost; says why it was.
async fn fill(core: &FeedCore, source: &mut Source, failures: &mut u32) -> Lost {
    loop {
        let first = match source.next().await {
            Ok(entry) => entry,
            Err(lost) => {
                core.publish();
                return lost;
            }
        };
        *failures = 0;
        // Take every entry that is already there (up to MAX_COALESCED), then wake the readers
        // once: a burst costs one wake-up per reader, not one per message. Nothing is taken
        // from the source beyond the bound, so nothing is dropped.
        core.change(|ring| ring.push(first));
        for _ in 1..MAX_COALESCED {
            match source.ready() {
                Some(entry) => core.change(|ring| ring.push(entry)),
                None => break,
            }
        }
        // Control messages and other topics move the feed's position without an entry.
        core.change(|ring| ring.advance(source.position()));
        core.publish();
        // A source with entries ready never returns Pending; without this the feed would hold
        // its worker and starve the readers it wakes (they sit in the worker's LIFO slot).
        tokio::task::consume_budget().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::testing::{encoder, open_backend, publish};

    /// A burst larger than one wake-up's bound (`MAX_COALESCED`) reaches the ring whole: no
    /// message is lost between two rounds of coalescing.
    #[tokio::test]
    async fn a_burst_longer_than_one_round_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let burst = (MAX_COALESCED * 3 + 7) as u64;
        for _ in 0..burst {
            publish(&*backend, "t").await;
        }
        // The feed starts behind every message, so all of them are ready at once.
        let start = FeedStart {
            filters: FilterSet::new(["t"]).unwrap(),
            encoder: encoder(backend.stream_state().await.unwrap().incarnation),
            start: 1,
            ring_size: 4096,
        };
        let feed = Feed::spawn(start, backend, Arc::new(Metrics::new()), Box::new(|_| {}));
        let mut position = feed.core.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while *position.borrow_and_update() <= burst {
            tokio::time::timeout_at(deadline, position.changed())
                .await
                .expect("the feed reads the burst")
                .unwrap();
        }
        let mut seqs = Vec::new();
        let mut next = 1;
        while let Read::Entry(entry) = feed.core.read(next) {
            seqs.push(entry.seq);
            next = entry.seq + 1;
        }
        assert_eq!(seqs, (1..=burst).collect::<Vec<_>>());
    }
}
