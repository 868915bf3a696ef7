//! What the store benchmarks share.

#![allow(dead_code)] // each bench uses its own part

use std::future::Future;
use std::time::{Duration, Instant};

/// The runtime every bench publishes from: two workers, like the machine.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// 64 concurrent publishers, each making `per_task` calls of `publish_one` and awaiting each
/// before the next; the latency of every call.
pub async fn concurrent_publishers<F, Fut>(per_task: u64, publish_one: F) -> Vec<Duration>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let publish_one = publish_one.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_task as usize);
                for _ in 0..per_task {
                    let t = Instant::now();
                    publish_one().await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}
