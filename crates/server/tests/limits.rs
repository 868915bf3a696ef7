//! The connection layer's limits, over real loopback sockets against an embedded hub: the
//! request head read timeout (slowloris), the request head size, connections per client
//! address, requests that go on to hyper after the first one, and request bodies (their read
//! timeout and the budget of buffered body bytes).

// The shared scenario list is for the backends' own test files.
#[allow(unused_macros, unused_imports)]
mod common;

use std::time::Duration;

use common::{Embedded, HubFactory, TestHub, expect_event, refused_until_released};
use sluice_server::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any single step may take before the test fails (not a timing assertion: a guard
/// against hanging).
const GUARD: Duration = Duration::from_secs(20);

/// Reads everything the hub sends until it closes the connection.
async fn read_until_closed(socket: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    tokio::time::timeout(GUARD, socket.read_to_end(&mut answer))
        .await
        .expect("the hub closes the connection")
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Reads until `needle` has arrived.
async fn read_until(socket: &mut TcpStream, needle: &str) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains(needle) {
        let n = tokio::time::timeout(GUARD, socket.read(&mut chunk))
            .await
            .expect("more bytes arrive")
            .expect("read");
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// A client that sends its request head one byte at a time, slower than the hub waits for a
/// complete head, is closed and counted as `header_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_head_is_closed_after_header_read_timeout() {
    let mut config = Config::default();
    config.limits.header_read_timeout = Duration::from_secs(1);
    let hub = Embedded.start(config).await;
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    let head = b"GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nX-Pad: ";
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    let closed = tokio::time::timeout(GUARD, async {
        for byte in head.iter().chain(std::iter::repeat(&b'a')) {
            tokio::select! {
                read = socket.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => answer.extend_from_slice(&chunk[..n]),
                },
                _ = pace.tick() => {
                    if socket.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the hub never closed the slow connection");
    let answer = String::from_utf8_lossy(&answer);
    // The answer may be lost to the connection reset of a client that keeps writing.
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    hub.eventually("header_timeout counted", |h| {
        h.metric("sluice_connections_rejected_total{reason=\"header_timeout\"}") == 1
    })
    .await;
    assert_eq!(hub.metric("sluice_active_connections"), 0);
    hub.stop().await;
}

/// A connection that sends nothing at all is closed after the same timeout, silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connection_is_closed_after_header_read_timeout() {
    let mut config = Config::default();
    config.limits.header_read_timeout = Duration::from_secs(1);
    let hub = Embedded.start(config).await;
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    assert_eq!(read_until_closed(&mut socket).await, "");
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"header_timeout\"}"),
        1
    );
    hub.stop().await;
}

/// A request head larger than `limits.max_header_bytes` is answered 431 and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_head_is_431() {
    let mut config = Config::default();
    config.limits.max_header_bytes = 4096;
    let hub = Embedded.start(config).await;
    for path in ["/events?topic=t", "/livez"] {
        let mut socket = TcpStream::connect(hub.addr).await.unwrap();
        let padding = "a".repeat(8192);
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Pad: {padding}\r\n\r\n");
        // The hub may close before reading all of it; that is the point.
        let _ = socket.write_all(head.as_bytes()).await;
        let answer = read_until_closed(&mut socket).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{path}: {answer}");
    }
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"header_too_large\"}"),
        2
    );
    // A head within the limit is served.
    let response = hub.get("/livez").await;
    assert_eq!(response.status, 200);
    hub.stop().await;
}

/// Over `limits.max_connections_per_address`: 429 with Retry-After for a plain request, a 200
/// with only `retry:` for an EventSource; a freed place can be taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_address_limit_refuses_with_429_or_retry() {
    let mut config = Config::default();
    config.limits.max_connections_per_address = 1;
    let hub = Embedded.start(config).await;
    let mut held = hub.subscribe("?topic=t").await;
    expect_event(&mut held, "connected").await.unwrap();

    assert_eq!(
        hub.get("/livez").await.status,
        429,
        "every connection counts"
    );

    refused_until_released(&hub, "max_connections_per_address", 3, held).await;
    hub.stop().await;
}

/// After a first request served by hyper, an event stream on the same kept-alive connection
/// still works, and so do requests on a connection whose first request was not a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_after_a_keep_alive_request() {
    let hub: TestHub = Embedded.start(Config::default()).await;
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    socket
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut socket, "\"ok\"").await;
    socket
        .write_all(b"GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until(&mut socket, "event: connected").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    hub.publish("t", serde_json::json!("after keep-alive"))
        .await;
    read_until(&mut socket, "after keep-alive").await;
    hub.stop().await;
}

/// A raw event stream ends with the chunked terminator when the hub shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_stream_is_chunked_and_ends_cleanly_on_shutdown() {
    let hub = Embedded.start(Config::default()).await;
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    socket
        .write_all(b"GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until(&mut socket, "event: connected").await;
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{answer}"
    );
    let stop = tokio::spawn(hub.stop());
    let rest = read_until_closed(&mut socket).await;
    assert!(rest.ends_with("0\r\n\r\n"), "{rest:?}");
    stop.await.unwrap();
}

/// A config whose request bodies must arrive within one second.
fn body_timeout_config() -> Config {
    let mut config = Config::default();
    config.limits.body_read_timeout = Duration::from_secs(1);
    config
}

/// The head of a `POST /publish` with `framing` (a `Content-Length` or `Transfer-Encoding`).
fn publish_head(framing: &str) -> String {
    format!(
        "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    )
}

/// Sends `head`, then `piece` every 100 ms — more often than the body read timeout, so only a
/// bound on the whole body closes it — until the hub closes the connection; returns what the
/// hub answered.
async fn trickle_until_closed(hub: &TestHub, head: &str, piece: &[u8]) -> String {
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    let closed = tokio::time::timeout(GUARD, async {
        loop {
            tokio::select! {
                read = socket.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => answer.extend_from_slice(&chunk[..n]),
                },
                _ = pace.tick() => {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the hub never closed the slow body");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Waits until `body_timeout` has been counted once, as a refused publish, and checks that
/// nothing was stored.
async fn assert_one_body_timeout(hub: TestHub) {
    hub.eventually("body_timeout counted", |h| {
        h.metric("sluice_connections_rejected_total{reason=\"body_timeout\"}") == 1
    })
    .await;
    assert_eq!(hub.metric("sluice_publishes_total{result=\"rejected\"}"), 1);
    assert_eq!(hub.metric("sluice_request_body_bytes"), 0);
    let stored = hub.publish("t", serde_json::json!("after")).await;
    assert_eq!(stored["seq"], 1, "the slow body stored nothing");
    hub.stop().await;
}

/// A body that trickles in a byte at a time is closed once `limits.body_read_timeout` has
/// passed since its head, however steadily the bytes come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_is_closed_after_body_read_timeout() {
    let hub = Embedded.start(body_timeout_config()).await;
    let answer = trickle_until_closed(&hub, &publish_head("Content-Length: 100000"), b" ").await;
    // The answer may be lost to the connection reset of a client that keeps writing.
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert_one_body_timeout(hub).await;
}

/// A chunked body that never ends is closed the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_chunked_body_is_closed_after_body_read_timeout() {
    let hub = Embedded.start(body_timeout_config()).await;
    let head = publish_head("Transfer-Encoding: chunked");
    let answer = trickle_until_closed(&hub, &head, b"1\r\n \r\n").await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    assert_one_body_timeout(hub).await;
}

/// A body that stops arriving is answered 408 with the JSON error, and the connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_and_closed() {
    let hub = Embedded.start(body_timeout_config()).await;
    let mut socket = TcpStream::connect(hub.addr).await.unwrap();
    let request = publish_head("Content-Length: 100") + r#"{"topic":"t","#;
    socket.write_all(request.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut socket).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON error");
    assert_eq!(body["code"], 408, "{body}");
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("13 bytes received"),
        "{body}"
    );
    assert_one_body_timeout(hub).await;
}

/// While slow bodies hold the whole budget of buffered body bytes (16 × max_publish_body), a
/// new body is refused at once with 503 and Retry-After; once one of them goes, its share is
/// free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_body_budget_refuses_new_bodies_with_503() {
    let mut config = Config::default();
    config.limits.max_publish_body = 1024;
    // The held bodies must not time out while the test runs.
    config.limits.body_read_timeout = Duration::from_secs(600);
    let hub = Embedded.start(config).await;
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut socket = TcpStream::connect(hub.addr).await.unwrap();
        let head = publish_head("Content-Length: 1024");
        socket.write_all(head.as_bytes()).await.unwrap();
        held.push(socket);
    }
    hub.eventually("the budget is full", |h| {
        h.metric("sluice_request_body_bytes") == 16 * 1024
    })
    .await;

    let response = hub
        .publish_raw(serde_json::json!({ "topic": "t", "payload": 1 }))
        .await;
    assert_eq!(response.status, 503, "{}", response.text());
    assert_eq!(response.header("retry-after"), Some("1"));
    assert_eq!(response.json().unwrap()["code"], 503);
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"body_budget\"}"),
        1
    );

    // A client that gives up frees its share.
    held.pop();
    hub.eventually("one share is free", |h| {
        h.metric("sluice_request_body_bytes") == 15 * 1024
    })
    .await;
    let stored = hub.publish("t", serde_json::json!("fits again")).await;
    assert_eq!(stored["seq"], 1);
    drop(held);
    hub.eventually("every share is free", |h| {
        h.metric("sluice_request_body_bytes") == 0
    })
    .await;
    hub.stop().await;
}
