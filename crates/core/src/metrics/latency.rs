//! A latency histogram cheap enough for the delivery path: every event stream observes each
//! frame it writes, from many threads at once.
//!
//! prometheus-client's `Histogram` takes one mutex per observation, which every stream thread
//! would contend for. Here each thread adds to a shard of its own (cache-line aligned, plain
//! relaxed atomic adds: a bucket and the sum), and the shards are added up only when the
//! metrics are scraped. No exemplars. The count is the sum of the buckets, so a scrape never
//! shows a count that disagrees with them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upper bounds of the buckets in seconds, from 100 µs (a publish with `sync = never`, a
/// delivery from the ring) to a minute (a reader that catches up from the stream); `+Inf`
/// follows.
pub const BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// [`BUCKETS`] in nanoseconds, what observations are compared with.
const BOUNDS_NS: [u64; 18] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
];

/// Shards per histogram: threads beyond this many share them (round robin).
const SHARDS: usize = 8;

/// One thread's share of the counts, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of the observations in nanoseconds.
    sum_ns: AtomicU64,
}

/// A histogram of durations in seconds with fixed buckets (`BUCKETS`); clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    shards: Arc<[Shard; SHARDS]>,
}

impl Latency {
    /// Records one duration.
    pub fn observe(&self, elapsed: Duration) {
        self.observe_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Records one duration given in nanoseconds.
    pub fn observe_nanos(&self, nanos: u64) {
        let bucket = BOUNDS_NS.partition_point(|bound| *bound < nanos);
        let shard = &self.shards[shard_index()];
        shard.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        shard.sum_ns.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far per bucket (not cumulative, `+Inf` last), and their sum in
    /// nanoseconds.
    fn totals(&self) -> ([u64; BUCKETS.len() + 1], u64) {
        let mut buckets = [0u64; BUCKETS.len() + 1];
        let mut sum_ns = 0u64;
        for shard in self.shards.iter() {
            for (total, count) in buckets.iter_mut().zip(&shard.buckets) {
                *total += count.load(Ordering::Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(shard.sum_ns.load(Ordering::Relaxed));
        }
        (buckets, sum_ns)
    }
}

/// The calling thread's shard: threads are given one in turn on their first observation.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    INDEX.with(|index| *index)
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (counts, sum_ns) = self.totals();
        let buckets: Vec<(f64, u64)> = BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(counts)
            .collect();
        let count = counts.iter().sum();
        // Nanoseconds to seconds: an f64 is exact enough for a sum of latencies.
        let sum = sum_ns as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_in_nanoseconds_are_the_buckets() {
        for (seconds, nanos) in BUCKETS.iter().zip(BOUNDS_NS) {
            assert_eq!((seconds * 1e9).round() as u64, nanos, "{seconds}");
        }
    }

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them_from_any_thread() {
        let latency = Latency::default();
        latency.observe(Duration::from_micros(100));
        latency.observe(Duration::from_micros(101));
        let clone = latency.clone();
        std::thread::spawn(move || clone.observe(Duration::from_secs(3600)))
            .join()
            .unwrap();
        let (buckets, sum_ns) = latency.totals();
        assert_eq!(buckets[0], 1, "at the bound: le is inclusive");
        assert_eq!(buckets[1], 1);
        assert_eq!(buckets[BUCKETS.len()], 1, "beyond the last bound: +Inf");
        assert_eq!(buckets.iter().sum::<u64>(), 3);
        assert_eq!(sum_ns, 201_000 + 3_600_000_000_000);
    }
}
