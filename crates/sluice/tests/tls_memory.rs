//! What an idle event stream over TLS keeps in the hub, bounded so that it cannot drift back
//! unnoticed: the `sluice` binary's resident memory grows by less than 16 KiB per open
//! HTTP/1.1 event stream on a TLS listener (docs/BENCHMARKS.md has the release figures: about
//! 8 KiB, against 2.6 KiB plain; 25 KiB when hyper served these streams, with its buffers).
//!
//! The streams are opened and each waited for until its `connected` frame; the hub's
//! `process_resident_memory_bytes` is read before and after.

use std::net::SocketAddr;

use sluice_test_support::serde_json::json;
use sluice_test_support::{SluiceProcess, TestCa, http, tempfile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Streams opened: enough that the per-stream figure is not the allocator's noise.
const STREAMS: usize = 400;
/// The most resident memory one idle TLS event stream may add, in KiB.
const BOUND_KIB: f64 = 16.0;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_event_stream_over_tls_keeps_less_than_16_kib() {
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
        .wait_for_log(
            "sluice listening on https://",
            std::time::Duration::from_secs(20),
        )
        .await
        .expect("the TLS listener");
    let addr: SocketAddr = line
        .rsplit("https://")
        .next()
        .and_then(|addr| addr.trim().parse().ok())
        .expect("its address");

    // One stream first, so what the first one sets up once is not counted per stream.
    drop(open_stream(&ca, addr).await);
    let before = resident(&hub).await;
    let mut open = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        open.push(open_stream(&ca, addr).await);
    }
    let after = resident(&hub).await;
    let per_stream = (after - before) / STREAMS as f64 / 1024.0;
    assert!(
        per_stream < BOUND_KIB,
        "{per_stream:.2} KiB per idle TLS event stream ({before:.0} → {after:.0} bytes)"
    );
    eprintln!("{per_stream:.2} KiB per idle TLS event stream");
}
