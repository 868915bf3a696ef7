//! Counters and latency histograms shared by every client and publisher of one run.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Histogram shards per core: clients record into `client % shards`, so they rarely wait on a
/// lock, and the few shards stay in the cache (a record into a cold histogram is a cache miss,
/// which with many shards cost more than all the parsing of the event).
const SHARDS_PER_CORE: usize = 2;
/// Largest latency a histogram holds, in microseconds (one hour); larger values saturate.
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram in microseconds with three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("constant bounds are valid")
}

/// How many latency histograms the clients share.
fn shards() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) * SHARDS_PER_CORE
}

/// Adds 1 to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Everything the clients and publishers report while the run goes on.
#[derive(Debug)]
pub struct Stats {
    /// The run's clock: publishers stamp messages with microseconds since `start`, receivers
    /// subtract that from their own reading of the same clock.
    start: Instant,
    /// Clients whose `connected` frame arrived before publishing began.
    pub connected: AtomicU64,
    /// Clients that could not subscribe (TCP, HTTP status, timeout, or connected too late).
    pub connect_errors: AtomicU64,
    /// Publishes refused, failed or timed out.
    pub publish_errors: AtomicU64,
    /// Streams that ended before the run did.
    pub disconnects: AtomicU64,
    /// Streams that broke the SSE framing or sent a frame out of place.
    pub protocol_errors: AtomicU64,
    /// `gap` frames received.
    pub gaps: AtomicU64,
    /// Messages of this run received, each exactly counted once per client.
    pub received: AtomicU64,
    /// Messages whose sequence was not above the previous one on the same stream.
    pub out_of_order: AtomicU64,
    /// `message` frames that were not this run's messages for the client's topic.
    pub foreign: AtomicU64,
    /// Retained messages a client's start option (`--from`) replayed before the run's own.
    pub replayed: AtomicU64,
    /// When the last message of this run arrived, in microseconds since `start`.
    last_receive_us: AtomicU64,
    /// The first error of each kind, for the report.
    first_errors: Mutex<Vec<(&'static str, String)>>,
    latency: Box<[Mutex<Histogram<u64>>]>,
    /// Successful publishes per topic index.
    published: Box<[AtomicU64]>,
    /// Participating (connected in time) clients per topic index.
    subscribers: Box<[AtomicU64]>,
}

impl Stats {
    /// Fresh counters for `topics` topics.
    pub fn new(topics: usize) -> Self {
        let counters = || (0..topics).map(|_| AtomicU64::new(0)).collect();
        Self {
            start: Instant::now(),
            connected: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            publish_errors: AtomicU64::new(0),
            disconnects: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            received: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            last_receive_us: AtomicU64::new(0),
            first_errors: Mutex::new(Vec::new()),
            latency: (0..shards()).map(|_| Mutex::new(new_histogram())).collect(),
            published: counters(),
            subscribers: counters(),
        }
    }

    /// Microseconds since the run's start.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Counts one error of `kind` on `counter`, keeping the first message of each kind.
    pub fn error(&self, counter: &AtomicU64, kind: &'static str, message: impl FnOnce() -> String) {
        bump(counter);
        let mut first = self.first_errors.lock().unwrap_or_else(|e| e.into_inner());
        if !first.iter().any(|(k, _)| *k == kind) {
            first.push((kind, message()));
        }
    }

    /// The first error message of each kind seen, as `kind: message`.
    pub fn first_errors(&self) -> Vec<String> {
        let first = self.first_errors.lock().unwrap_or_else(|e| e.into_inner());
        first
            .iter()
            .map(|(kind, message)| format!("{kind}: {message}"))
            .collect()
    }

    /// Records the latencies (microseconds) of messages client `client` just received.
    pub fn record_latencies(&self, client: usize, latencies: &[u64]) {
        if latencies.is_empty() {
            return;
        }
        let received = latencies.len() as u64;
        self.received.fetch_add(received, Ordering::Relaxed);
        self.last_receive_us
            .fetch_max(self.now_us(), Ordering::Relaxed);
        let shard = &self.latency[client % self.latency.len()];
        let mut histogram = shard.lock().unwrap_or_else(|e| e.into_inner());
        for &micros in latencies {
            histogram.saturating_record(micros.max(1));
        }
    }

    /// All latencies recorded so far, merged.
    pub fn latency(&self) -> Histogram<u64> {
        let mut merged = new_histogram();
        for shard in &self.latency {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            // Same bounds everywhere; values beyond them were saturated when recorded.
            let _ = merged.add(&*shard);
        }
        merged
    }

    /// How long after the start the last message arrived.
    pub fn last_receive(&self) -> Duration {
        Duration::from_micros(self.last_receive_us.load(Ordering::Relaxed))
    }

    /// Counts a successful publish on topic `topic`.
    pub fn published(&self, topic: usize) {
        bump(&self.published[topic]);
    }

    /// Successful publishes on topic `topic` so far.
    pub fn published_on(&self, topic: usize) -> u64 {
        self.published[topic].load(Ordering::Relaxed)
    }

    /// Counts a client on topic `topic` that takes part in the run.
    pub fn subscribed(&self, topic: usize) {
        bump(&self.subscribers[topic]);
        bump(&self.connected);
    }

    /// Successful publishes over all topics.
    pub fn published_total(&self) -> u64 {
        self.published
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// Messages the participating clients should receive: each publish once per subscriber of
    /// its topic.
    pub fn expected(&self) -> u64 {
        self.published
            .iter()
            .zip(self.subscribers.iter())
            .map(|(published, subscribers)| {
                published.load(Ordering::Relaxed) * subscribers.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_is_publishes_times_subscribers_per_topic() {
        let stats = Stats::new(2);
        stats.subscribed(0);
        stats.subscribed(0);
        stats.subscribed(1);
        for _ in 0..3 {
            stats.published(0);
        }
        stats.published(1);
        assert_eq!(stats.expected(), 3 * 2 + 1);
        assert_eq!(stats.published_total(), 4);
        assert_eq!(Stats::get(&stats.connected), 3);
    }

    #[test]
    fn latencies_from_all_shards_merge() {
        let stats = Stats::new(1);
        stats.record_latencies(0, &[100, 200]);
        stats.record_latencies(1, &[300]);
        stats.record_latencies(2, &[0]);
        let merged = stats.latency();
        assert_eq!(merged.len(), 4);
        assert_eq!(merged.max(), 300);
        assert_eq!(merged.min(), 1);
        assert_eq!(Stats::get(&stats.received), 4);
    }

    #[test]
    fn keeps_the_first_error_of_each_kind() {
        let stats = Stats::new(1);
        stats.error(&stats.connect_errors, "connect", || "first".into());
        stats.error(&stats.connect_errors, "connect", || "second".into());
        stats.error(&stats.disconnects, "disconnect", || "gone".into());
        assert_eq!(Stats::get(&stats.connect_errors), 2);
        assert_eq!(stats.first_errors(), ["connect: first", "disconnect: gone"]);
    }
}
