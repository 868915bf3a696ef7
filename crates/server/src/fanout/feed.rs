//! One shared backend subscription for one topic set, filling a ring of encoded frames.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use sluice_protocol::subject::FilterSet;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::encode::Encoder;
use super::ring::{Entry, Read, Ring};
use crate::backend::{Backend, BackendError, BackendMessage, MessageStream};
use crate::metrics::Metrics;

/// The state readers share with the feed task.
#[derive(Debug)]
pub struct FeedCore {
    /// The topic set.
    pub filters: FilterSet,
    /// How this feed's (and its readers') frames are encoded.
    pub encoder: Encoder,
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

    /// Adds a message to the ring without waking readers (see [`FeedCore::publish`]).
    fn accept(&self, message: &BackendMessage) {
        match self.encoder.entry(message) {
            Some(entry) => self.change(|ring| ring.push(entry)),
            None => self.change(|ring| ring.advance(message.seq + 1)),
        }
    }

    /// Adds an entry and wakes the readers.
    fn push(&self, entry: Entry) {
        self.change(|ring| ring.push(entry));
        self.publish();
    }

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
            ring: RwLock::new(Ring::new(start.ring_size, start.start)),
            position,
            closed: AtomicBool::new(false),
        });
        let task = tokio::spawn(run(core.clone(), backend, metrics, start.start)).abort_handle();
        Self {
            core,
            task,
            on_drop,
        }
    }
}

/// Most messages added to the ring before the readers are woken.
const MAX_COALESCED: usize = 256;

/// Backoff between attempts to re-establish a lost backend subscription.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(5))
}

/// Why a subscription in a given incarnation could not be made.
#[derive(Debug)]
pub enum Lost {
    /// The stream is now another incarnation (deleted and created again).
    Replaced,
    /// The backend failed; trying again later may work.
    Failed(BackendError),
}

/// Subscribes from `start` only if the stream is still incarnation `epoch`. The epoch is
/// checked before and after subscribing, so a subscription made while the stream is being
/// recreated never silently continues in the new incarnation with positions of the old one.
///
/// When `start` is below the first retained sequence, the positions in between are gone; the
/// subscription reports them in [`Subscription::lost`] so the reader can say so instead of
/// silently skipping them.
pub async fn subscribe_in_epoch(
    backend: &dyn Backend,
    filters: &[String],
    start: u64,
    epoch: u64,
) -> Result<Subscription, Lost> {
    let check = || async {
        match backend.stream_state().await {
            Ok(state) if state.epoch == epoch => Ok(state.first_seq),
            Ok(_) => Err(Lost::Replaced),
            Err(err) => Err(Lost::Failed(err)),
        }
    };
    check().await?;
    let stream = backend
        .subscribe(filters, start)
        .await
        .map_err(Lost::Failed)?;
    let first = check().await?;
    let lost = (start < first).then(|| (start, first - 1));
    Ok(Subscription { stream, lost })
}

/// A read of the stream skipped positions `from..=to`: those that hold other topics or were
/// deleted on purpose, and those removed from the stream's front (limits, age, purge) before the
/// read reached them, which readers must be told of. Front removal only ever raises the first
/// retained sequence, so every skipped position below it now may have held a message the reader
/// never got: that range is returned (positions, not messages — some may hold other topics).
/// Asks the backend only when it cannot answer in-process ([`Backend::retained_from`]).
pub async fn removed_from_front(
    backend: &dyn Backend,
    epoch: u64,
    from: u64,
    to: u64,
) -> Result<Option<(u64, u64)>, Lost> {
    let retained = match backend.retained_from() {
        Some(known) => known,
        None => {
            let state = backend.stream_state().await.map_err(Lost::Failed)?;
            (state.first_seq, state.epoch)
        }
    };
    below_first(retained, epoch, from, to)
}

/// The part of the skipped `from..=to` below the first retained sequence, given the stream's
/// `(first retained sequence, epoch)`; an error when the stream is no longer incarnation `epoch`.
fn below_first(
    (first, now): (u64, u64),
    epoch: u64,
    from: u64,
    to: u64,
) -> Result<Option<(u64, u64)>, Lost> {
    if now != epoch {
        return Err(Lost::Replaced);
    }
    Ok((first > from).then(|| (from, to.min(first - 1))))
}

/// A backend subscription in a known incarnation.
pub struct Subscription {
    /// The messages.
    pub stream: MessageStream,
    /// Positions `from..=to` no longer retained when the subscription began.
    pub lost: Option<(u64, u64)>,
}

/// Reads the backend into the ring forever; when the subscription is lost it resumes from
/// the last sequence seen (so nothing is skipped), unless the stream was replaced by a new
/// incarnation, in which case the feed closes and its readers end their streams.
async fn run(core: Arc<FeedCore>, backend: Arc<dyn Backend>, metrics: Arc<Metrics>, start: u64) {
    let filters = core.filters.as_slice().to_vec();
    let mut next = start;
    let mut failures = 0;
    loop {
        match subscribe_in_epoch(&*backend, &filters, next, core.encoder.epoch).await {
            Ok(Subscription { mut stream, lost }) => {
                if let Some((from, to)) = lost {
                    tracing::warn!(filters = %core.filters, from, to, "feed resumed after positions expired");
                    core.push(core.encoder.lost(from, to));
                    next = next.max(to + 1);
                }
                'read: while let Some(first) = stream.next().await {
                    // Take every message that is already there (up to MAX_COALESCED), then
                    // wake the readers once: a burst costs one wake-up per reader, not one
                    // per message. No message is taken from the stream beyond the bound, so
                    // none is dropped.
                    let mut item = Some(first);
                    let mut taken = 0;
                    while let Some(current) = item.take() {
                        match current {
                            Ok(message) => {
                                failures = 0;
                                // Only where asking is free: a live feed of one topic skips
                                // at almost every message.
                                let retained = backend.retained_from();
                                if let Some(retained) = retained.filter(|_| message.seq > next) {
                                    let epoch = core.encoder.epoch;
                                    match below_first(retained, epoch, next, message.seq - 1) {
                                        Ok(None) => {}
                                        Ok(Some((from, to))) => {
                                            tracing::warn!(filters = %core.filters, from, to, "positions removed before the feed read them");
                                            core.change(|ring| {
                                                ring.push(core.encoder.lost(from, to))
                                            });
                                        }
                                        Err(_) => {
                                            core.close();
                                            return;
                                        }
                                    }
                                }
                                next = next.max(message.seq + 1);
                                core.accept(&message);
                            }
                            Err(err) => {
                                core.publish();
                                record(&metrics, &err, "feed lost");
                                break 'read;
                            }
                        }
                        taken += 1;
                        if taken == MAX_COALESCED {
                            break;
                        }
                        match stream.next().now_or_never() {
                            Some(Some(more)) => item = Some(more),
                            Some(None) => {
                                core.publish();
                                break 'read;
                            }
                            None => {}
                        }
                    }
                    core.publish();
                    // A stream with messages ready never returns Pending; without this the
                    // feed would hold its worker and starve the readers it wakes (they sit in
                    // the worker's LIFO slot).
                    tokio::task::consume_budget().await;
                }
            }
            Err(Lost::Replaced) => {
                tracing::info!(filters = %core.filters, "stream was recreated; closing its feed");
                core.close();
                return;
            }
            Err(Lost::Failed(err)) => record(&metrics, &err, "feed subscribe failed"),
        }
        failures += 1;
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// Logs and counts a backend error by kind.
pub fn record(metrics: &Metrics, err: &BackendError, what: &str) {
    let kind = err.kind();
    tracing::warn!(error = %err, kind, "{what}");
    Metrics::count(&metrics.backend_errors, "kind", kind);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::PublishRequest;
    use crate::backend::embedded::EmbeddedBackend;
    use crate::config::Config;
    use bytes::Bytes;
    use sluice_protocol::headers::Headers;

    /// A burst larger than one wake-up's bound (`MAX_COALESCED`) reaches the ring whole: no
    /// message is lost between two rounds of coalescing.
    #[tokio::test]
    async fn a_burst_longer_than_one_round_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.embedded.data_dir = dir.path().to_owned();
        config.embedded.sync = "never".into();
        let (backend, _) = EmbeddedBackend::open(&config).await.unwrap();
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let burst = (MAX_COALESCED * 3 + 7) as u64;
        for n in 0..burst {
            let request = PublishRequest {
                subject: "t".into(),
                headers: Headers::new(),
                payload: Bytes::from(n.to_string()),
            };
            backend.publish(request).await.unwrap();
        }
        // The feed starts behind every message, so all of them are ready at once.
        let start = FeedStart {
            filters: FilterSet::new(["t"]).unwrap(),
            encoder: Encoder {
                epoch: backend.stream_state().await.unwrap().epoch,
                topic_prefix: String::new(),
                max_event_size: 1 << 20,
            },
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
