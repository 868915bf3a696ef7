//! A Mercure subscription over HTTP/1.1 is streamed by the hub's own connection layer, as
//! `GET /events` is (a few KiB per open stream, where hyper kept buffers and a dispatcher for
//! each): over a raw socket, its answer is the connection layer's.

// The shared harnesses; this file runs its own case, on the embedded store alone (the
// connection layer is the same for both backends).
#[allow(unused_macros, unused_imports)]
mod backends;
#[allow(unused_macros, unused_imports)]
mod common;
#[path = "mercure/harness.rs"]
mod harness;

use backends::Kind;
use harness::{Harness, config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes `request` on a fresh connection to the hub and reads until the answer's head and
/// the first bytes of its body `body_start` have arrived; returns the head's header names.
async fn stream_head(hub: &Harness, request: &str, body_start: &[u8]) -> Vec<String> {
    let mut socket = TcpStream::connect(hub.hub().addr).await.expect("connect");
    socket.write_all(request.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    let head_end = loop {
        let mut buf = [0u8; 1024];
        let read = socket.read(&mut buf).await.expect("read");
        assert!(read > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..read]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n")
            && answer[end..]
                .windows(body_start.len())
                .any(|w| w == body_start)
        {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&answer[..head_end]).into_owned();
    let mut lines = head.lines();
    assert_eq!(lines.next(), Some("HTTP/1.1 200 OK"), "{head}");
    lines
        .map(|line| line.split(':').next().unwrap_or("").to_ascii_lowercase())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mercure_subscription_is_streamed_by_the_connection_layer_as_events_are() {
    let hub = Harness::start(Kind::Embedded, config("anonymous = true")).await;
    let events = stream_head(
        &hub,
        "GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
        b"event: connected",
    )
    .await;
    let mercure = stream_head(
        &hub,
        "GET /.well-known/mercure?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
        b":\n\n",
    )
    .await;
    // The connection layer writes a `date` first (RFC 9110 section 6.6.1), then the handler's
    // headers and its own framing; hyper, which writes other answers, puts its `date` last.
    assert_eq!(
        events.first().map(String::as_str),
        Some("date"),
        "{events:?}"
    );
    assert_eq!(
        mercure.first().map(String::as_str),
        Some("date"),
        "{mercure:?}"
    );
    for name in ["content-type", "transfer-encoding", "last-event-id", "link"] {
        assert!(mercure.contains(&name.to_owned()), "{name}: {mercure:?}");
    }
    // A request hyper serves, for contrast: the publish endpoint's refusal.
    let mut socket = TcpStream::connect(hub.hub().addr).await.expect("connect");
    let refused = "POST /.well-known/mercure HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    socket.write_all(refused.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 1024];
        let read = socket.read(&mut buf).await.expect("read");
        assert!(read > 0, "closed");
        answer.extend_from_slice(&buf[..read]);
    }
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.contains("\r\ndate: "), "{answer}");
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    assert!(
        !head.lines().nth(1).unwrap_or("").starts_with("date:"),
        "{answer}"
    );
}
