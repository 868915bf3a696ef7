//! The `sluice` binary's resident memory per TLS connection and stream. Three bounds run in the
//! suite, each where the figure stands so that it can only go down: an idle HTTP/1.1 event
//! stream over TLS (< 9 KiB), an idle HTTP/2 stream sharing its connection (< 5 KiB) and an
//! idle browser tab, a TLS + HTTP/2 connection with one stream (< 13 KiB). The rest is a
//! measurement for docs/BENCHMARKS.md, run by hand on a release build (it asserts nothing
//! about numbers): the resident memory per idle TLS connection and per idle HTTP/2 event
//! stream, and TLS handshakes per second.
//!
//! ```text
//! SLUICE_H2_CONNECTIONS=100 SLUICE_H2_STREAMS=100 \
//!   cargo test --release -p sluice --test http2_memory -- --ignored --nocapture
//! SLUICE_H2_CONNECTIONS=1000 SLUICE_H2_STREAMS=1 \
//!   cargo test --release -p sluice --test http2_memory -- --ignored --nocapture
//! ```

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_test_support::serde_json::json;
use sluice_test_support::{SluiceProcess, TestCa, env_or, http, tempfile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

async fn resident(hub: &SluiceProcess) -> f64 {
    let text = http::get(&hub.url("/metrics"))
        .await
        .expect("metrics")
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("process_resident_memory_bytes")
}

/// Waits until the hub's resident memory stops growing (two equal reads a second apart). No
/// event announces that the allocator has settled, so this by-hand measurement polls; the
/// suite's bounds below read memory only after the event they wait for.
async fn settled(hub: &SluiceProcess) -> f64 {
    let mut last = resident(hub).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = resident(hub).await;
        if (now - last).abs() < 64.0 * 1024.0 {
            return now;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement, run by hand on a release build (docs/BENCHMARKS.md)"]
async fn memory_per_idle_http2_stream_and_tls_connection() {
    let connections = env_or("SLUICE_H2_CONNECTIONS", 100);
    let streams = env_or("SLUICE_H2_STREAMS", 100);
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let (cert, key) = ca.issue("sluice hub").write(dir.path(), "hub");
    let config = dir.path().join("sluice.toml");
    let text = format!(
        "[tls]\ncert_file = {}\nkey_file = {}\nlisten = \"127.0.0.1:0\"\n[http2]\nmax_concurrent_streams = {}\n",
        json!(cert.display().to_string()),
        json!(key.display().to_string()),
        streams.max(100)
    );
    std::fs::write(&config, text).unwrap();
    let data = dir.path().join("data").display().to_string();
    let config = config.display().to_string();
    let mut hub = SluiceProcess::start(BIN, ["serve", "--config", &config, "--data-dir", &data])
        .await
        .expect("hub starts");
    let line = hub
        .wait_for_log("sluice listening on https://", Duration::from_secs(20))
        .await
        .unwrap();
    let tls_addr: std::net::SocketAddr = line
        .rsplit("https://")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let before = settled(&hub).await;
    let mut clients = Vec::new();
    for _ in 0..connections {
        let tls = ca.connect(tls_addr, &[b"h2"]).await.expect("handshake");
        let (client, connection) = h2::client::handshake(tls).await.expect("h2");
        tokio::spawn(connection);
        clients.push(client);
    }
    let idle = settled(&hub).await;
    let mut bodies = Vec::new();
    for client in &clients {
        for _ in 0..streams {
            let request = hyper::Request::get("https://localhost/events?topic=memory.t")
                .header("accept", "text/event-stream")
                .body(())
                .unwrap();
            let mut ready = client.clone().ready().await.unwrap();
            let (response, send) = ready.send_request(request, true).unwrap();
            bodies.push((response, send));
        }
    }
    let mut open = Vec::new();
    for (response, send) in bodies {
        let mut body = response.await.expect("answer").into_body();
        let first: Bytes = body.data().await.expect("data").expect("connected");
        assert!(String::from_utf8_lossy(&first).contains("connected"));
        open.push((body, send));
    }
    let streaming = settled(&hub).await;
    let kib = |bytes: f64| bytes / 1024.0;
    println!(
        "{connections} TLS+h2 connections: {:.1} KiB each; {} streams: {:.2} KiB each (RSS {:.0} → {:.0} → {:.0} MiB)",
        kib((idle - before) / connections as f64),
        connections * streams,
        kib((streaming - idle) / (connections * streams) as f64),
        before / 1048576.0,
        idle / 1048576.0,
        streaming / 1048576.0
    );

    // Handshakes per second: 8 clients in a loop for 5 s, each a fresh connection.
    let deadline = Instant::now() + Duration::from_secs(5);
    let ca = std::sync::Arc::new(ca);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let ca = ca.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                ca.connect(tls_addr, &[b"h2"]).await.expect("handshake");
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    println!(
        "TLS handshakes: {:.0}/s (TLS 1.3, ECDSA P-256, 8 clients)",
        total as f64 / 5.0
    );
    drop(open);
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}

/// Streams the TLS memory bound opens: enough that the per-stream figure is not the
/// allocator's noise.
const TLS_STREAMS: usize = 400;
/// The most resident memory one idle HTTP/1.1 event stream over TLS may add, in KiB.
const TLS_BOUND_KIB: f64 = 9.0;

/// Opens an HTTP/1.1 event stream over TLS and reads until its `connected` frame.
async fn open_stream(
    ca: &TestCa,
    addr: SocketAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut tls = ca.connect(addr, &[b"http/1.1"]).await.expect("handshake");
    tls.write_all(
        b"GET /events?topic=memory.t HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n",
    )
    .await
    .expect("request");
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("event: connected") {
        let n = tls.read(&mut buf).await.expect("the stream");
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        seen.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    tls
}

/// A hub with a TLS listener beside its plain one, in a directory of its own.
struct TlsHub {
    hub: SluiceProcess,
    /// The TLS listener's address.
    addr: SocketAddr,
    /// The authority that issued the hub's certificate.
    ca: TestCa,
    // Last: the hub stops before its directory goes.
    _dir: tempfile::TempDir,
}

async fn tls_hub() -> TlsHub {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    let (cert, key) = ca.issue("sluice hub").write(dir.path(), "hub");
    let settings = format!(
        "[tls]\ncert_file = {}\nkey_file = {}\nlisten = \"127.0.0.1:0\"\n",
        json!(cert.display().to_string()),
        json!(key.display().to_string()),
    );
    let mut hub = SluiceProcess::serve(BIN, dir.path(), Some(&settings))
        .await
        .expect("sluice serve starts");
    let line = hub
        .wait_for_log("sluice listening on https://", Duration::from_secs(20))
        .await
        .expect("the TLS listener");
    let addr: SocketAddr = line
        .rsplit("https://")
        .next()
        .and_then(|addr| addr.trim().parse().ok())
        .expect("its address");
    TlsHub {
        hub,
        addr,
        ca,
        _dir: dir,
    }
}

/// Asserts that `kib` per `what` stays below `bound`, and prints it.
fn assert_below(kib: f64, bound: f64, what: &str) {
    assert!(kib < bound, "{kib:.2} KiB per {what}, the bound is {bound}");
    eprintln!("{kib:.2} KiB per {what}");
}

/// The hub's resident memory per thing `open` opens and keeps open, in KiB, over
/// `TLS_STREAMS` of them: one is opened and closed first, so what the first one sets up once
/// is not counted per thing.
async fn kib_per_open<T>(hub: &SluiceProcess, mut open: impl AsyncFnMut() -> T) -> f64 {
    drop(open().await);
    let before = resident(hub).await;
    let mut kept = Vec::with_capacity(TLS_STREAMS);
    for _ in 0..TLS_STREAMS {
        kept.push(open().await);
    }
    let after = resident(hub).await;
    (after - before) / TLS_STREAMS as f64 / 1024.0
}

/// What an idle HTTP/1.1 event stream over TLS keeps, bounded in the suite so that it cannot
/// drift back unnoticed (docs/BENCHMARKS.md has the release figures: about 5.8 KiB, against
/// 3 KiB plain; 10.3 KiB while rustls kept its 4 KiB read buffer through idle time, 25 KiB
/// when hyper served these streams, with its buffers). Each stream is waited for until its
/// `connected` frame; the hub's resident memory is read before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_event_stream_over_tls_keeps_less_than_9_kib() {
    let TlsHub { hub, addr, ca, .. } = &tls_hub().await;
    let per_stream = kib_per_open(hub, async || open_stream(ca, *addr).await).await;
    assert_below(per_stream, TLS_BOUND_KIB, "idle TLS event stream");
}

/// The most resident memory one idle browser tab — a TLS + HTTP/2 connection with one event
/// stream — may add, in KiB: about 10.8 KiB in a release build (docs/BENCHMARKS.md, "At a
/// glance"). It was 36 KiB while h2 kept its write and read buffers (24 KiB) and rustls its
/// read buffer (4 KiB) through idle time, and the connection's task kept rustls's state three
/// times over; any one of them back crosses this bound.
const TAB_BOUND_KIB: f64 = 13.0;

/// An HTTP/2 connection over TLS with one event stream open, read up to its `connected`
/// frame: what a browser tab holds.
async fn open_tab(ca: &TestCa, addr: SocketAddr) -> impl Sized {
    let client = open_h2_connection(ca, addr).await;
    let stream = open_h2_stream(&client).await;
    (client, stream)
}

/// An HTTP/2 connection over TLS, its settings exchanged.
async fn open_h2_connection(ca: &TestCa, addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tls = ca.connect(addr, &[b"h2"]).await.expect("handshake");
    let (client, connection) = h2::client::handshake(tls).await.expect("h2");
    tokio::spawn(connection);
    client
}

/// An event stream opened on `client`, read up to its `connected` frame.
async fn open_h2_stream(client: &h2::client::SendRequest<Bytes>) -> impl Sized + use<> {
    let request = hyper::Request::get("https://localhost/events?topic=memory.t")
        .header("accept", "text/event-stream")
        .body(())
        .expect("request");
    let mut ready = client.clone().ready().await.expect("ready");
    let (response, send) = ready.send_request(request, true).expect("send");
    let mut body = response.await.expect("answer").into_body();
    let first: Bytes = body.data().await.expect("data").expect("connected");
    assert!(String::from_utf8_lossy(&first).contains("connected"));
    (body, send)
}

/// The most resident memory one idle HTTP/2 event stream may add beside others on its
/// connection, in KiB: where it stands (about 3.5 KiB in a release build at 100 streams per
/// connection, docs/BENCHMARKS.md "HTTPS and HTTP/2"; the target is 8).
const SHARED_STREAM_BOUND_KIB: f64 = 5.0;
/// Connections the streams are spread over: 81 streams each at most, within the hub's
/// default `http2.max_concurrent_streams` (100).
const SHARED_CONNECTIONS: usize = 5;

/// What an idle HTTP/2 event stream keeps when it shares its TLS connection with others, bounded
/// in the suite: the connections are open (one stream each) before the count starts, so only
/// the streams are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_stream_sharing_its_connection_keeps_less_than_5_kib() {
    let TlsHub { hub, addr, ca, .. } = &tls_hub().await;
    let mut connections = Vec::new();
    for _ in 0..SHARED_CONNECTIONS {
        let client = open_h2_connection(ca, *addr).await;
        let first = open_h2_stream(&client).await;
        connections.push((client, first));
    }

    let mut next = 0;
    let per_stream = kib_per_open(hub, async || {
        next += 1;
        open_h2_stream(&connections[next % SHARED_CONNECTIONS].0).await
    })
    .await;
    assert_below(
        per_stream,
        SHARED_STREAM_BOUND_KIB,
        "idle HTTP/2 stream sharing its connection",
    );
}

/// What an idle TLS + HTTP/2 connection with one event stream keeps, bounded in the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_browser_tab_over_tls_and_http2_keeps_less_than_13_kib() {
    let TlsHub { hub, addr, ca, .. } = &tls_hub().await;
    let per_tab = kib_per_open(hub, async || open_tab(ca, *addr).await).await;
    assert_below(
        per_tab,
        TAB_BOUND_KIB,
        "idle TLS + HTTP/2 connection with one stream",
    );
}
