//! HTTPS and HTTP/2 over real loopback sockets against an embedded hub: TLS listeners beside
//! plain ones, ALPN, event streams multiplexed on one connection, the write-stall rule per
//! stream, the protocol's edge cases (a stream reset mid-event, a window the client keeps
//! shut, streams over the limit, a SETTINGS flood, records and frames arriving a byte at a
//! time), GOAWAY on drain, cleartext HTTP/2 with prior knowledge, and certificates reloaded
//! without dropping connections.
//!
//! Protocol-level cases speak raw frames ([`raw`]) where the `h2` client would hide what is
//! under test (it never exceeds the server's stream limit, and acknowledges SETTINGS itself).

// The shared scenario list is for the backends' own test files.
#[allow(unused_macros, unused_imports)]
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Request, StatusCode};
use bytes::Bytes;
use common::{Embedded, metric_value};
use h2::RecvStream;
use h2::client::SendRequest;
use serde_json::{Value, json};
use sluice_server::config::{Config, TlsConfig};
use sluice_server::tls::{Certificates, TlsError};
use sluice_server::{Hub, Listener};
use sluice_sse::{Frame, Parser};
use sluice_test_support::h2_frames as raw;
use sluice_test_support::{TestCa, http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Longest any single step may take before the test fails (a guard against hanging, not a
/// timing assertion).
const GUARD: Duration = Duration::from_secs(20);

/// A hub with a plain listener and a TLS one, over the embedded store.
struct Served {
    hub: Arc<Hub>,
    plain: SocketAddr,
    tls: SocketAddr,
    ca: TestCa,
    certificates: Arc<Certificates>,
    cert_files: (std::path::PathBuf, std::path::PathBuf),
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Served {
    async fn start(mut config: Config) -> Self {
        let ca = TestCa::new();
        let cert_dir = tempfile::tempdir().expect("tempdir");
        let cert_files = ca.issue("sluice hub").write(cert_dir.path(), "hub");
        config.listen = "127.0.0.1:0".parse().expect("address");
        config.tls = Some(TlsConfig {
            cert_file: cert_files.0.clone(),
            key_file: cert_files.1.clone(),
            listen: Some("127.0.0.1:0".parse().expect("address")),
        });
        config.validate().expect("test config is valid");
        let certificates =
            Certificates::load(config.tls.as_ref().expect("tls")).expect("certificate loads");
        let (backend, data_dir) = Embedded::backend(&mut config).await;
        let plain = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let secure = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (plain_addr, tls_addr) = (plain.local_addr().unwrap(), secure.local_addr().unwrap());
        let hub = Hub::new(config, backend).expect("hub");
        let listeners = vec![
            Listener::plain(plain),
            Listener::tls(secure, certificates.clone()),
        ];
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve_listeners(
            hub.clone(),
            listeners,
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            hub,
            plain: plain_addr,
            tls: tls_addr,
            ca,
            certificates,
            cert_files,
            stop: Some(stop),
            task: Some(task),
            _dirs: vec![cert_dir, data_dir],
        }
    }

    async fn with_h2c(mut config: Config) -> Self {
        config.http2.h2c = true;
        Self::start(config).await
    }

    fn metric(&self, name: &str) -> u64 {
        metric_value(&self.hub.metrics_text(), name)
    }

    /// Publishes on the plain listener; panics unless stored.
    async fn publish(&self, topic: &str, payload: Value) {
        let url = format!("http://{}/publish", self.plain);
        let body = json!({ "topic": topic, "payload": payload });
        let response = http::post_json(&url, &body).await.expect("publish");
        assert_eq!(response.status, 200, "publish: {}", response.text());
    }

    /// An HTTP/2 connection over TLS, negotiated by ALPN.
    async fn h2(&self) -> SendRequest<Bytes> {
        self.h2_with(h2::client::Builder::new()).await
    }

    async fn h2_with(&self, builder: h2::client::Builder) -> SendRequest<Bytes> {
        let tls = self
            .ca
            .connect(self.tls, &[b"h2", b"http/1.1"])
            .await
            .expect("TLS handshake");
        assert_eq!(
            tls.get_ref().1.alpn_protocol(),
            Some(&b"h2"[..]),
            "ALPN chose h2"
        );
        let (client, connection) = builder.handshake(tls).await.expect("HTTP/2 handshake");
        tokio::spawn(connection);
        client
    }

    async fn eventually(&self, what: &str, condition: impl Fn(&Self) -> bool) {
        sluice_test_support::eventually(what, || condition(self)).await;
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(GUARD, task)
                .await
                .expect("server stops")
                .expect("server task")
                .expect("server result");
        }
    }
}

/// Opens `GET path` as an `EventSource` would on `client`; the answer's head and the body.
async fn open(client: &mut SendRequest<Bytes>, path: &str) -> (StatusCode, SseStream) {
    let request = Request::get(format!("https://localhost{path}"))
        .header("accept", "text/event-stream")
        .body(())
        .expect("request");
    let mut ready = client.clone().ready().await.expect("connection ready");
    let (response, send) = ready.send_request(request, true).expect("send");
    let response = tokio::time::timeout(GUARD, response)
        .await
        .expect("answer in time")
        .expect("answer");
    let status = response.status();
    (
        status,
        SseStream {
            body: response.into_body(),
            parser: Parser::new(),
            frames: Vec::new(),
            release: true,
            _send: send,
        },
    )
}

/// One event stream's body, parsed strictly.
struct SseStream {
    body: RecvStream,
    parser: Parser,
    frames: Vec<Frame>,
    /// Whether read data is given back to the flow-control window (a reader that reads).
    release: bool,
    _send: h2::SendStream<Bytes>,
}

impl SseStream {
    /// The next frame with `data` (messages and the hub's own frames; comments skipped).
    async fn next(&mut self) -> Frame {
        loop {
            if let Some(at) = self.frames.iter().position(|f| f.data.is_some()) {
                let frame = self.frames.remove(at);
                self.frames.drain(..at);
                return frame;
            }
            self.frames.clear();
            let data = tokio::time::timeout(GUARD, self.body.data())
                .await
                .expect("a frame in time")
                .expect("the stream is open")
                .expect("data");
            if self.release {
                let _ = self.body.flow_control().release_capacity(data.len());
            }
            self.frames = self.parser.feed(&data).expect("strict SSE");
        }
    }

    /// The next message frame's payload.
    async fn next_payload(&mut self) -> Value {
        loop {
            let frame = self.next().await;
            if frame.event.as_deref() == Some("message") || frame.event.is_none() {
                let data = frame.data.as_deref().unwrap_or_default();
                let data: Value = serde_json::from_str(data).expect("JSON data");
                return data["payload"].clone();
            }
        }
    }

    /// Reads up to and including the `connected` frame.
    async fn connected(&mut self) {
        let frame = self.next().await;
        assert_eq!(frame.event.as_deref(), Some("connected"), "{frame:?}");
    }
}

/// Over TLS, ALPN `h2` gets HTTP/2 and a client offering only `http/1.1` gets HTTP/1.1; the
/// plain listener beside it keeps serving plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_speaks_http2_by_alpn_and_http1_without_it() {
    let served = Served::start(Config::default()).await;

    let mut client = served.h2().await;
    let (status, mut stream) = open(&mut client, "/events?topic=alpn.a").await;
    assert_eq!(status, 200);
    stream.connected().await;
    served.publish("alpn.a", json!(1)).await;
    assert_eq!(stream.next_payload().await, json!(1));

    let tls = served
        .ca
        .connect(served.tls, &[b"http/1.1"])
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut h1, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP/1.1 handshake");
    tokio::spawn(connection);
    let request = Request::get("/livez")
        .header("host", "localhost")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let response = h1.send_request(request).await.expect("HTTP/1.1 answer");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), axum::http::Version::HTTP_11);

    let plain = http::get(&format!("http://{}/livez", served.plain))
        .await
        .expect("plain GET");
    assert_eq!(plain.status, 200);
    served.stop().await;
}

/// Twelve event streams on one HTTP/2 connection (what a browser opens to one origin) each
/// get every message exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_event_streams_on_one_connection_each_get_every_message_in_order() {
    let served = Served::start(Config::default()).await;
    let mut client = served.h2().await;
    let mut streams = Vec::new();
    for _ in 0..12 {
        let (status, mut stream) = open(&mut client, "/events?topic=many.t").await;
        assert_eq!(status, 200);
        stream.connected().await;
        streams.push(stream);
    }
    for n in 0..5 {
        served.publish("many.t", json!(n)).await;
    }
    for stream in &mut streams {
        for n in 0..5 {
            assert_eq!(stream.next_payload().await, json!(n));
        }
    }
    assert_eq!(served.metric("sluice_active_connections"), 12);
    served.stop().await;
}

/// A client that resets its stream in the middle of an event (RST_STREAM while the event's
/// DATA is still coming) ends that stream alone, as `client_closed`; the other stream on the
/// connection gets the whole event and the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_mid_event_ends_alone() {
    let served = Served::start(Config::default()).await;
    let mut client = served.h2().await;
    let (_, mut resetting) = open(&mut client, "/events?topic=reset.t").await;
    let (_, mut other) = open(&mut client, "/events?topic=reset.t").await;
    resetting.connected().await;
    other.connected().await;

    // Larger than a stream's initial window: its DATA arrives in parts.
    let big = "x".repeat(200 * 1024);
    served.publish("reset.t", json!(big)).await;
    let part = tokio::time::timeout(GUARD, resetting.body.data())
        .await
        .expect("part of the event")
        .expect("open")
        .expect("data");
    assert!(part.len() < big.len(), "only part of the event has arrived");
    resetting._send.send_reset(h2::Reason::CANCEL);

    assert_eq!(other.next_payload().await, json!(big));
    served.publish("reset.t", json!("after")).await;
    assert_eq!(other.next_payload().await, json!("after"));
    served
        .eventually("the reset stream ended as client_closed", |s| {
            s.metric("sluice_disconnects_total{reason=\"client_closed\"}") == 1
        })
        .await;
    assert_eq!(served.metric("sluice_active_connections"), 1);
    served.stop().await;
}

/// A stream whose client never reads (its flow-control window stays shut) is closed as
/// `slow_client` once a batch has waited `sse.write_timeout`; a stream of the same topic on
/// the same connection, whose client reads, gets every message and stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_window_stays_shut_is_closed_as_slow_alone() {
    let mut config = Config::default();
    config.sse.write_timeout = Duration::from_secs(1);
    let served = Served::start(config).await;
    // A large connection window: only the silent stream's own window shuts.
    let mut builder = h2::client::Builder::new();
    builder.initial_connection_window_size(64 * 1024 * 1024);
    let mut client = served.h2_with(builder).await;
    let (_, mut silent) = open(&mut client, "/events?topic=shut.t").await;
    let (_, mut reader) = open(&mut client, "/events?topic=shut.t").await;
    silent.release = false;
    silent.connected().await;
    reader.connected().await;

    let payload = "y".repeat(4096);
    let mut sent = 0;
    while served.metric("sluice_disconnects_total{reason=\"slow_client\"}") == 0 {
        assert!(sent < 2000, "the silent stream was never closed as slow");
        served.publish("shut.t", json!([sent, payload])).await;
        assert_eq!(reader.next_payload().await, json!([sent, payload]));
        sent += 1;
    }
    assert_eq!(served.metric("sluice_slow_client_disconnects_total"), 1);
    served.publish("shut.t", json!("still open")).await;
    assert_eq!(reader.next_payload().await, json!("still open"));
    assert_eq!(served.metric("sluice_active_connections"), 1);

    // Once its window opens, the closed stream is reset, not ended as if complete.
    let ended = loop {
        match tokio::time::timeout(GUARD, silent.body.data()).await {
            Ok(Some(Ok(data))) => {
                let _ = silent.body.flow_control().release_capacity(data.len());
            }
            Ok(Some(Err(err))) => break Some(err),
            Ok(None) => break None,
            Err(_) => panic!("the closed stream neither ends nor is reset"),
        }
    };
    assert!(
        ended.as_ref().is_some_and(h2::Error::is_reset),
        "reset, not a clean end: {ended:?}"
    );
    served.stop().await;
}

/// A cleartext HTTP/2 connection with prior knowledge, its SETTINGS sent.
async fn h2c(served: &Served) -> TcpStream {
    let mut socket = TcpStream::connect(served.plain).await.expect("connect");
    socket.write_all(raw::PREFACE).await.unwrap();
    socket
        .write_all(&raw::frame(raw::SETTINGS, 0, 0, &[]))
        .await
        .unwrap();
    socket
}

/// Reads frames until `until` returns true for one, acknowledging the hub's SETTINGS on the
/// way; panics when the connection ends first.
async fn read_until(
    socket: &mut TcpStream,
    mut until: impl FnMut(&raw::Frame) -> bool,
) -> raw::Frame {
    loop {
        let frame = tokio::time::timeout(GUARD, raw::read(socket))
            .await
            .expect("a frame in time")
            .expect("the connection is open");
        if frame.kind == raw::SETTINGS && frame.flags & raw::ACK == 0 {
            let ack = raw::frame(raw::SETTINGS, raw::ACK, 0, &[]);
            socket.write_all(&ack).await.expect("acknowledge SETTINGS");
        }
        if until(&frame) {
            return frame;
        }
    }
}

/// Without `http2.h2c` the plain listener answers the HTTP/2 preface as the malformed
/// HTTP/1.1 request it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http2_preface_is_a_bad_request_without_h2c() {
    let served = Served::start(Config::default()).await;
    let mut socket = h2c(&served).await;
    let mut answer = Vec::new();
    tokio::time::timeout(GUARD, socket.read_to_end(&mut answer))
        .await
        .expect("closed in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    served.stop().await;
}

/// A rapid-reset flood (streams opened and reset before the hub takes them, CVE-2023-44487)
/// ends its connection with GOAWAY(ENHANCE_YOUR_CALM), counted by that code: the metric, not
/// a log line per connection, is where such a flood shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rapid_reset_flood_ends_with_enhance_your_calm_and_is_counted() {
    let served = Served::with_h2c(Config::default()).await;
    let mut socket = h2c(&served).await;
    // The hub may close before it has read it all.
    let _ = socket
        .write_all(&raw::rapid_reset(500, "/events?topic=flood"))
        .await;
    // Read only: the hub may have closed its side already, so nothing is written back.
    let goaway = loop {
        let frame = tokio::time::timeout(GUARD, raw::read(&mut socket))
            .await
            .expect("a frame in time")
            .expect("a GOAWAY before the connection ends");
        if frame.kind == raw::GOAWAY {
            break frame;
        }
    };
    let code = u32::from_be_bytes(goaway.payload[4..8].try_into().unwrap());
    assert_eq!(code, raw::ENHANCE_YOUR_CALM);
    served
        .eventually("the connection counted by its code", |s| {
            s.metric("sluice_http2_connection_errors_total{reason=\"enhance_your_calm\"}") == 1
        })
        .await;
    served.stop().await;
}

/// A stream beyond `http2.max_concurrent_streams` is refused with RST_STREAM(REFUSED_STREAM)
/// (RFC 9113 §5.1.2) while the open ones go on delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_the_concurrent_limit_is_refused_and_the_others_go_on() {
    let mut config = Config::default();
    config.http2.max_concurrent_streams = 2;
    let served = Served::with_h2c(config).await;
    let mut socket = h2c(&served).await;
    for stream in [1, 3, 5] {
        socket
            .write_all(&raw::get(stream, "/events?topic=limit.t"))
            .await
            .unwrap();
    }
    let refused = read_until(&mut socket, |f| f.kind == raw::RST_STREAM).await;
    assert_eq!(refused.stream, 5);
    assert_eq!(
        u32::from_be_bytes(refused.payload[..4].try_into().unwrap()),
        raw::REFUSED_STREAM
    );
    served
        .eventually("both open streams counted", |s| {
            s.metric("sluice_active_connections") == 2
        })
        .await;
    served.publish("limit.t", json!("to both")).await;
    let mut got = std::collections::BTreeSet::new();
    while got.len() < 2 {
        let frame = read_until(&mut socket, |f| f.kind == raw::DATA).await;
        if String::from_utf8_lossy(&frame.payload).contains("to both") {
            got.insert(frame.stream);
        }
    }
    assert_eq!(got, [1, 3].into());
    drop(socket);
    served.stop().await;
}

/// A client that sends thousands of SETTINGS frames gets each acknowledged in turn (RFC 9113
/// §6.5.3) as it reads them, and the hub meanwhile serves every other connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_flood_is_acknowledged_in_turn_without_stalling_others() {
    const FLOOD: usize = 10_000;
    let served = Served::with_h2c(Config::default()).await;
    let mut client = served.h2().await;
    let (_, mut stream) = open(&mut client, "/events?topic=flood.t").await;
    stream.connected().await;

    let socket = h2c(&served).await;
    let (mut reader, mut writer) = socket.into_split();
    // SETTINGS_ENABLE_PUSH = 0, again and again; nothing is read until the flood is out.
    let one = raw::frame(raw::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0]);
    let flood = tokio::spawn(async move {
        for _ in 0..FLOOD {
            if writer.write_all(&one).await.is_err() {
                return false;
            }
        }
        true
    });
    served.publish("flood.t", json!("meanwhile")).await;
    assert_eq!(stream.next_payload().await, json!("meanwhile"));

    let mut acks = 0;
    while acks < FLOOD + 1 {
        let frame = tokio::time::timeout(GUARD, raw::read(&mut reader))
            .await
            .expect("a frame in time")
            .expect("the flooding connection stays open");
        assert_ne!(frame.kind, raw::GOAWAY, "{frame:?}");
        if frame.kind == raw::SETTINGS && frame.flags & raw::ACK != 0 {
            acks += 1;
        }
    }
    assert!(flood.await.unwrap(), "the whole flood was written");
    served.stop().await;
}

/// On drain the hub sends GOAWAY, ends every HTTP/2 event stream (END_STREAM, counted as
/// `shutdown`) and closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_sends_goaway_and_ends_http2_streams() {
    let served = Served::with_h2c(Config::default()).await;
    let mut socket = h2c(&served).await;
    socket
        .write_all(&raw::get(1, "/events?topic=drain.t"))
        .await
        .unwrap();
    read_until(&mut socket, |f| {
        f.kind == raw::DATA && String::from_utf8_lossy(&f.payload).contains("connected")
    })
    .await;
    let hub = served.hub.clone();
    let stopping = tokio::spawn(served.stop());
    let mut goaway = false;
    let mut ended = false;
    while let Ok(Some(frame)) = tokio::time::timeout(GUARD, raw::read(&mut socket)).await {
        if frame.kind == raw::PING && frame.flags & raw::ACK == 0 {
            // A graceful GOAWAY is confirmed by a PING round trip (RFC 9113 §6.8).
            let pong = raw::frame(raw::PING, raw::ACK, 0, &frame.payload);
            socket.write_all(&pong).await.expect("answer the PING");
        }
        goaway |= frame.kind == raw::GOAWAY;
        ended |= frame.stream == 1 && frame.flags & raw::END_STREAM != 0;
    }
    assert!(goaway, "GOAWAY sent");
    assert!(ended, "the event stream ended cleanly");
    stopping.await.unwrap();
    assert_eq!(
        metric_value(
            &hub.metrics_text(),
            "sluice_disconnects_total{reason=\"shutdown\"}"
        ),
        1
    );
}

/// A new certificate written over the files is presented to new connections, while a stream
/// opened before goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_certificate_is_presented_to_new_connections_and_old_ones_go_on() {
    let served = Served::start(Config::default()).await;
    let mut client = served.h2().await;
    let (_, mut stream) = open(&mut client, "/events?topic=reload.t").await;
    stream.connected().await;
    let watcher = served
        .certificates
        .reload_on_change(Duration::from_millis(20));

    let next = served.ca.issue("sluice hub renewed");
    let dir = served.cert_files.0.parent().unwrap().to_owned();
    let (cert, key) = next.write(&dir, "next");
    // The key first, then the chain: each renamed into place.
    std::fs::rename(&key, &served.cert_files.1).unwrap();
    std::fs::rename(&cert, &served.cert_files.0).unwrap();
    let ca = &served.ca;
    let tls_addr = served.tls;
    let renewed = leaf_der(&next.chain_pem);
    sluice_test_support::eventually_async(
        "new connections get the renewed certificate",
        async || {
            let tls = ca.connect(tls_addr, &[b"h2"]).await.expect("handshake");
            let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
            presented == renewed
        },
    )
    .await;
    watcher.abort();

    served.publish("reload.t", json!("after the reload")).await;
    assert_eq!(stream.next_payload().await, json!("after the reload"));
    served.stop().await;
}

/// The first certificate of a PEM chain, as DER.
fn leaf_der(chain_pem: &str) -> Vec<u8> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

/// A client that does not speak TLS to the TLS listener is closed and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handshake_is_closed_and_counted() {
    let served = Served::start(Config::default()).await;
    let mut socket = TcpStream::connect(served.tls).await.unwrap();
    socket
        .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(GUARD, socket.read_to_end(&mut answer)).await;
    assert!(!String::from_utf8_lossy(&answer).contains("200"));
    served
        .eventually("the handshake failure is counted", |s| {
            s.metric("sluice_connections_rejected_total{reason=\"tls_handshake\"}") == 1
        })
        .await;
    served.stop().await;
}

/// Every unusable certificate or key is refused at load, naming the file.
#[test]
fn unusable_certificates_and_keys_are_refused_naming_the_file() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.issue("one").write(dir.path(), "one");
    let (_, other_key) = ca.issue("two").write(dir.path(), "two");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    let load = |cert: &std::path::Path, key: &std::path::Path| {
        Certificates::load(&TlsConfig {
            cert_file: cert.to_owned(),
            key_file: key.to_owned(),
            listen: None,
        })
        .map(|_| ())
    };
    assert_eq!(load(&cert, &key), Ok(()));
    let err = load(&missing, &key).unwrap_err();
    assert!(
        matches!(&err, TlsError::Cert { path, .. } if *path == missing),
        "{err}"
    );
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let err = load(&garbage, &key).unwrap_err();
    assert!(
        matches!(&err, TlsError::Cert { path, .. } if *path == garbage),
        "{err}"
    );
    let err = load(&cert, &garbage).unwrap_err();
    assert!(
        matches!(&err, TlsError::Key { path, .. } if *path == garbage),
        "{err}"
    );
    let err = load(&cert, &missing).unwrap_err();
    assert!(
        matches!(&err, TlsError::Key { path, .. } if *path == missing),
        "{err}"
    );
    let err = load(&cert, &other_key).unwrap_err();
    assert!(matches!(err, TlsError::Mismatch { .. }), "{err}");
    assert!(err.to_string().contains("two.key"), "{err}");
}

/// Over `limits.max_connections_per_address`, a TLS connection's requests are refused as a
/// plain one's are (`429` with `Retry-After`), counted, and the connection within the limit
/// goes on, publishes over HTTP/2 included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_over_the_per_address_limit_is_refused() {
    let mut config = Config::default();
    config.limits.max_connections_per_address = 1;
    let served = Served::start(config).await;
    let mut first = served.h2().await;
    let (status, mut stream) = open(&mut first, "/events?topic=limit.a").await;
    assert_eq!(status, 200);
    stream.connected().await;

    let second = served.h2().await;
    let request = Request::get("https://localhost/livez").body(()).unwrap();
    let mut ready = second.clone().ready().await.expect("ready");
    let (response, _) = ready.send_request(request, true).expect("send");
    let response = tokio::time::timeout(GUARD, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(
        served.metric("sluice_connections_rejected_total{reason=\"max_connections_per_address\"}"),
        1
    );

    // Every place is taken: the publish goes over the connection within the limit.
    let publish = Request::post("https://localhost/publish")
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let mut ready = first.clone().ready().await.expect("ready");
    let (response, mut body) = ready.send_request(publish, false).expect("send");
    let message = json!({ "topic": "limit.a", "payload": "within" });
    body.send_data(Bytes::from(message.to_string()), true)
        .expect("body");
    let response = tokio::time::timeout(GUARD, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(stream.next_payload().await, json!("within"));
    served.stop().await;
}

/// A client that speaks only TLS 1.2 is served too, over HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_1_2_client_is_served() {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let served = Served::start(Config::default()).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(served.ca.pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(served.tls).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS 1.2 handshake");
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    let (client, connection) = h2::client::handshake(tls).await.expect("HTTP/2");
    tokio::spawn(connection);
    let request = Request::get("https://localhost/livez").body(()).unwrap();
    let mut ready = client.ready().await.expect("ready");
    let (response, _) = ready.send_request(request, true).expect("send");
    let response = tokio::time::timeout(GUARD, response)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    served.stop().await;
}

/// With `http2.enabled = false` a TLS listener offers only HTTP/1.1 by ALPN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_http2_a_tls_listener_offers_only_http1() {
    let mut config = Config::default();
    config.http2.enabled = false;
    let served = Served::start(config).await;
    let tls = served
        .ca
        .connect(served.tls, &[b"h2", b"http/1.1"])
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    drop(tls);
    served.stop().await;
}

/// Connects over TLS with `config` (its session store is the client's memory of the hub),
/// asks `GET /livez` over HTTP/1.1 and reads the answer to its end, so the session tickets the
/// hub sends after the handshake are taken in. How the handshake went.
async fn handshake_and_ask(
    served: &Served,
    config: Arc<rustls::ClientConfig>,
) -> rustls::HandshakeKind {
    let tcp = TcpStream::connect(served.tls).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .expect("handshake");
    let kind = tls
        .get_ref()
        .1
        .handshake_kind()
        .expect("a completed handshake");
    tls.write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(GUARD, tls.read_to_end(&mut answer))
        .await
        .expect("the answer");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    kind
}

/// A client that comes back resumes its TLS session (no certificate signature, no new key
/// exchange's cost for the hub), however many other clients connected meanwhile: the hub
/// hands out stateless tickets instead of remembering sessions (a memory of 256 would have
/// forgotten this one). Both kinds are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_client_resumes_its_tls_session_after_many_others() {
    let served = Served::start(Config::default()).await;
    let returning = served.ca.client_config(&[b"http/1.1"]);
    assert_eq!(
        handshake_and_ask(&served, returning.clone()).await,
        rustls::HandshakeKind::Full
    );
    for _ in 0..300 {
        let other = served.ca.client_config(&[b"http/1.1"]);
        handshake_and_ask(&served, other).await;
    }
    assert_eq!(
        handshake_and_ask(&served, returning).await,
        rustls::HandshakeKind::Resumed
    );
    let metrics = http::get(&format!("http://{}/metrics", served.plain))
        .await
        .expect("metrics")
        .text();
    assert_eq!(
        metric_value(&metrics, "sluice_tls_handshakes_total{kind=\"resumed\"}"),
        1,
        "{metrics}"
    );
    assert_eq!(
        metric_value(&metrics, "sluice_tls_handshakes_total{kind=\"full\"}"),
        301
    );
    served.stop().await;
}

/// Opens `GET /events?topic=<topic>` over TLS and HTTP/1.1 (what the connection layer writes
/// itself, as on a plain listener) and reads up to its `connected` frame; the bytes read.
async fn tls_event_stream(
    served: &Served,
    topic: &str,
) -> (tokio_rustls::client::TlsStream<TcpStream>, String) {
    let mut tls = served
        .ca
        .connect(served.tls, &[b"http/1.1"])
        .await
        .expect("handshake");
    let request = format!(
        "GET /events?topic={topic} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.expect("request");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: connected") {
        let n = tokio::time::timeout(GUARD, tls.read(&mut buf))
            .await
            .expect("the stream")
            .expect("read");
        assert!(n > 0, "ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    (tls, String::from_utf8_lossy(&seen).into_owned())
}

/// Over TLS an HTTP/1.1 event stream is chunked as on a plain listener; a client that stops
/// reading is closed as `slow_client` once a write has waited `sse.write_timeout` (rustls
/// holding records changes nothing), while a reader on the same topic gets every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_stream_over_tls_whose_client_stops_reading_is_closed_as_slow() {
    let mut config = Config::default();
    config.sse.write_timeout = Duration::from_secs(1);
    let served = Served::start(config).await;
    let (_silent, head) = tls_event_stream(&served, "tls.slow").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    let (mut reader, _) = tls_event_stream(&served, "tls.slow").await;

    let payload = "z".repeat(16 * 1024);
    let mut sent = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while served.metric("sluice_disconnects_total{reason=\"slow_client\"}") == 0 {
        assert!(sent < 5000, "the silent client was never closed as slow");
        served.publish("tls.slow", json!([sent, payload])).await;
        // The reader keeps up: read until this message's number has arrived.
        let marker = format!("[{sent},").into_bytes();
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = tokio::time::timeout(GUARD, reader.read(&mut buf))
                .await
                .expect("the reader's stream")
                .expect("read");
            assert!(n > 0, "the reader's stream ended");
            tail.extend_from_slice(&buf[..n]);
            if tail.windows(marker.len()).any(|w| w == marker.as_slice()) {
                break;
            }
            // Keep only what the marker could start in.
            tail.drain(..tail.len().saturating_sub(marker.len()));
        }
        sent += 1;
    }
    assert_eq!(served.metric("sluice_slow_client_disconnects_total"), 1);
    assert_eq!(
        served.metric("sluice_active_connections"),
        1,
        "the reader stays"
    );
    served.stop().await;
}

/// On drain an HTTP/1.1 event stream over TLS ends cleanly: the last chunk, then TLS's
/// close_notify, so the client reads a clean end, not a truncation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_ends_an_http1_stream_over_tls_with_the_last_chunk_and_close_notify() {
    let served = Served::start(Config::default()).await;
    let (mut tls, _) = tls_event_stream(&served, "tls.drain").await;
    let hub = served.hub.clone();
    let stopping = tokio::spawn(served.stop());
    let mut rest = Vec::new();
    // A read that ends without close_notify fails (UnexpectedEof); a clean end is Ok.
    tokio::time::timeout(GUARD, tls.read_to_end(&mut rest))
        .await
        .expect("the stream ends")
        .expect("with close_notify");
    assert!(
        rest.ends_with(b"0\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    stopping.await.unwrap();
    assert_eq!(
        metric_value(
            &hub.metrics_text(),
            "sluice_disconnects_total{reason=\"shutdown\"}"
        ),
        1
    );
}

/// A TCP stream that sends at most one byte per write (Nagle off), so that every TLS record
/// and HTTP/2 frame written over it reaches the hub in pieces.
struct OneByteWrites(TcpStream);

impl tokio::io::AsyncRead for OneByteWrites {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for OneByteWrites {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let first = &buf[..buf.len().min(1)];
        std::pin::Pin::new(&mut self.0).poll_write(cx, first)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The hub's TLS and HTTP/2 read buffers are taken when bytes come and given back when none
/// are left (vendor/README.md): a connection whose every record and frame arrives a byte at a
/// time, with idle moments between requests, still makes whole requests — an event stream,
/// and publishes larger than any first buffer (40 KiB, several DATA frames and TLS records)
/// on the same connection, each delivered whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_frames_arriving_a_byte_at_a_time_make_whole_requests() {
    let served = Served::start(Config::default()).await;
    let tcp = TcpStream::connect(served.tls).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let connector = tokio_rustls::TlsConnector::from(served.ca.client_config(&[b"h2"]));
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("server name");
    let tls = connector
        .connect(name, OneByteWrites(tcp))
        .await
        .expect("TLS handshake");
    let (mut client, connection) = h2::client::handshake(tls).await.expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let (status, mut stream) = open(&mut client, "/events?topic=trickle.t").await;
    assert_eq!(status, 200);
    stream.connected().await;

    for n in 0..2 {
        let payload = format!("{n}{}", "x".repeat(40 * 1024));
        let publish = Request::post("https://localhost/publish")
            .header("content-type", "application/json")
            .body(())
            .expect("request");
        let mut ready = client.clone().ready().await.expect("ready");
        let (response, mut body) = ready.send_request(publish, false).expect("send");
        let message = json!({ "topic": "trickle.t", "payload": payload });
        body.send_data(Bytes::from(message.to_string()), true)
            .expect("body");
        let response = tokio::time::timeout(GUARD, response)
            .await
            .expect("answer in time")
            .expect("answer");
        assert_eq!(response.status(), 200);
        assert_eq!(stream.next_payload().await, json!(payload));
    }
    served.stop().await;
}
