//! Store benchmarks: append throughput (sync never; sync always with 64 concurrent publishers),
//! filtered replay of a sparse subject from a deep stream (time to first message, msgs/s), and open time
//! with index.db and with a forced rebuild.
//!
//! `cargo bench -p sluice-store --bench store`; set `SLUICE_BENCH_DEPTH` (default 1,000,000)
//! for the deep stream. A summary with p99 ack latencies is printed before criterion runs.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{concurrent_publishers, rt};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, Store, StoreOptions, StreamConfig, StreamHandle, SyncPolicy,
};

const PAYLOAD: [u8; 128] = [b'x'; 128];

fn depth() -> u64 {
    std::env::var("SLUICE_BENCH_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn open(dir: &Path, sync: SyncPolicy) -> (Store, StreamHandle) {
    let (store, _) = Store::open(
        dir,
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let s = match store.stream("B") {
        Some(s) => s,
        None => store
            .create_stream(StreamConfig::new("B", ["b.>"]))
            .unwrap(),
    };
    (store, s)
}

/// Publishes `n` messages with up to `in_flight` acks outstanding; returns the ack latencies.
async fn pipelined(s: &StreamHandle, n: u64, in_flight: usize) -> Vec<Duration> {
    let mut pending = futures::stream::FuturesOrdered::new();
    let mut lat = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        let f = s.publish("b.x", Headers::new(), &PAYLOAD[..]);
        pending.push_back(async move { f.await.map(|_| t.elapsed()) });
        if pending.len() >= in_flight {
            lat.push(pending.next().await.unwrap().unwrap());
        }
    }
    while let Some(r) = pending.next().await {
        lat.push(r.unwrap());
    }
    lat
}

/// Publishes `n` messages as `publish_batch` calls of `size`, two batches in flight.
async fn batched(s: &StreamHandle, n: u64, size: u64) {
    let mut pending = futures::stream::FuturesOrdered::new();
    let payload = bytes::Bytes::from_static(&PAYLOAD);
    for _ in 0..n / size {
        let batch = (0..size)
            .map(|_| ("b.x".to_string(), Headers::new(), payload.clone()))
            .collect();
        pending.push_back(s.publish_batch(batch));
        if pending.len() >= 2 {
            pending.next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = pending.next().await {
        r.unwrap();
    }
}

/// 64 publishers, each awaiting its ack before the next publish.
async fn concurrent(s: &StreamHandle, per_task: u64) -> Vec<Duration> {
    let s = s.clone();
    concurrent_publishers(per_task, move || {
        let s = s.clone();
        async move {
            s.publish("b.x", Headers::new(), &PAYLOAD[..])
                .await
                .unwrap();
        }
    })
    .await
}

fn p99(mut lat: Vec<Duration>) -> Duration {
    lat.sort_unstable();
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

fn summary() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path(), SyncPolicy::Never);
    let n = 1_000_000;
    let t = Instant::now();
    let lat = rt.block_on(pipelined(&s, n, 1000));
    let el = t.elapsed();
    eprintln!(
        "append 128 B, sync never, 1000 in flight: {:.0} msgs/s, p99 ack {:?}",
        n as f64 / el.as_secs_f64(),
        p99(lat)
    );
    store.close();

    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path(), SyncPolicy::Never);
    let t = Instant::now();
    rt.block_on(batched(&s, n, 1000));
    let el = t.elapsed();
    eprintln!(
        "append 128 B, sync never, batches of 1000: {:.0} msgs/s",
        n as f64 / el.as_secs_f64()
    );
    store.close();

    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path(), SyncPolicy::Always);
    let n = 200_000;
    let t = Instant::now();
    let lat = rt.block_on(pipelined(&s, n, 1000));
    let el = t.elapsed();
    let fsyncs = s.info(None).stats.fsyncs;
    eprintln!(
        "append 128 B, sync always, 1000 in flight: {:.0} msgs/s, p99 ack {:?}, {n} msgs in {fsyncs} fsyncs",
        n as f64 / el.as_secs_f64(),
        p99(lat)
    );
    store.close();

    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path(), SyncPolicy::Always);
    let per_task = 2_000;
    let t = Instant::now();
    let lat = rt.block_on(concurrent(&s, per_task));
    let el = t.elapsed();
    let fsyncs = s.info(None).stats.fsyncs;
    eprintln!(
        "append 128 B, sync always, 64 publishers: {:.0} msgs/s, p99 ack {:?}, {} msgs in {} fsyncs",
        (64 * per_task) as f64 / el.as_secs_f64(),
        p99(lat),
        64 * per_task,
        fsyncs
    );
    store.close();
}

fn append(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("append_128B");
    g.sample_size(10);
    let dir = tempfile::tempdir().unwrap();
    let (_store, s) = open(dir.path(), SyncPolicy::Never);
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("sync_never_1000_in_flight", |b| {
        b.iter(|| rt.block_on(pipelined(&s, 100_000, 1000)))
    });
    g.bench_function("sync_never_batches_of_1000", |b| {
        b.iter(|| rt.block_on(batched(&s, 100_000, 1000)))
    });
    let dir = tempfile::tempdir().unwrap();
    let (_store2, s2) = open(dir.path(), SyncPolicy::Always);
    g.throughput(Throughput::Elements(64 * 200));
    g.bench_function("sync_always_64_publishers", |b| {
        b.iter(|| rt.block_on(concurrent(&s2, 200)))
    });
    g.finish();
}

/// A deep stream with one `b.rare` message every 100,000 and one at the very end.
fn deep(dir: &Path, rt: &tokio::runtime::Runtime) {
    let (store, s) = open(dir, SyncPolicy::Never);
    rt.block_on(async {
        let mut pending = futures::stream::FuturesUnordered::new();
        for i in 0..depth() {
            let subject = if i % 100_000 == 99_999 {
                "b.rare"
            } else {
                "b.common"
            };
            pending.push(s.publish(subject, Headers::new(), &PAYLOAD[..]));
            if pending.len() >= 1000 {
                pending.next().await.unwrap().unwrap();
            }
        }
        while let Some(r) = pending.next().await {
            r.unwrap();
        }
    });
    store.close();
}

fn replay_and_open(c: &mut Criterion) {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    deep(dir.path(), &rt);
    let mut g = c.benchmark_group(format!("deep_{}", depth()));
    g.sample_size(10);
    {
        let (_store, s) = open(dir.path(), SyncPolicy::Never);
        let rare = FilterSet::new(["b.rare"]).unwrap();
        let from = depth() / 2;
        g.bench_function("filtered_replay_time_to_first", |b| {
            b.iter(|| {
                rt.block_on(async {
                    let mut sub = Box::pin(
                        s.subscribe(from, rare.clone())
                            .map(|d| d.map(|d| d.message().expect("nothing lost"))),
                    );
                    sub.next().await.unwrap().unwrap().seq
                })
            })
        });
        // Replay rates: every sparse message from the start (each one an index lookup, the
        // common messages in between never read), and 100,000 messages of the dense subject.
        let sparse = depth() / 100_000;
        let replays = [
            ("filtered_replay_sparse_all", rare, sparse),
            (
                "filtered_replay_dense_100k",
                FilterSet::new(["b.common"]).unwrap(),
                100_000,
            ),
        ];
        for (name, filter, count) in replays {
            g.throughput(Throughput::Elements(count));
            g.bench_function(name, |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let sub = s
                            .subscribe(1, filter.clone())
                            .map(|d| d.map(|d| d.message().expect("nothing lost")))
                            .take(count as usize);
                        sub.fold(0u64, |n, m| async move { n + u64::from(m.is_ok()) })
                            .await
                    })
                })
            });
        }
    }
    g.bench_function("open_with_index", |b| {
        b.iter(|| {
            let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
            store.close();
        })
    });
    g.bench_function("open_forced_rebuild", |b| {
        b.iter(|| {
            let _ = std::fs::remove_file(dir.path().join("streams/B/msgs/index.db"));
            let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
            store.close();
        })
    });
    g.finish();
}

fn all(c: &mut Criterion) {
    summary();
    append(c);
    replay_and_open(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
