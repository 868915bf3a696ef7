//! Backend-independent scenarios: each starts its own hub from a factory, talks HTTP only,
//! and asserts one rule. Every backend's test file runs all of them.

use std::time::{Duration, SystemTime};

use serde_json::json;
use sluice_server::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{HubFactory, TestHub, data, expect_event, refused_until_released};

mod recent;
pub use recent::*;
use sluice_test_support::wall_clock_passes;

fn config() -> Config {
    Config::default()
}

/// SSE headers, a `retry:` hint, and the `connected` frame with the position before the first
/// message this stream will deliver.
pub async fn sse_headers_and_connected_frame(f: &dyn HubFactory) {
    let mut config = config();
    config.hub_url = Some("https://hub.example.com/events".into());
    let hub = f.start(config).await;
    let first = hub.publish("a.b", json!(1)).await;
    let mut client = hub.subscribe("?topic=a.b&topic=c.*").await;
    assert_eq!(client.status(), 200);
    assert_eq!(client.header("content-type"), Some("text/event-stream"));
    assert_eq!(client.header("cache-control"), Some("no-cache"));
    assert_eq!(client.header("x-accel-buffering"), Some("no"));
    assert_eq!(
        client.header("link"),
        Some("<https://hub.example.com/events>; rel=\"sluice\"")
    );
    let retry = client.next_frame().await.expect("retry frame");
    assert_eq!(retry.retry, Some(2000));
    let connected = expect_event(&mut client, "connected")
        .await
        .expect("connected");
    assert_eq!(
        connected.id.as_deref(),
        first["id"].as_str(),
        "id = last stored position"
    );
    assert_eq!(data(&connected), json!({ "topics": ["a.b", "c.*"] }));
    hub.stop().await;
}

/// A multi-topic subscription is one ordered stream; JSON payloads stay JSON, text is a
/// string, and the topic is given without the prefix.
pub async fn multi_topic_stream_in_order(f: &dyn HubFactory) {
    let mut config = config();
    config.topic_prefix = "app".into();
    let hub = f.start(config).await;
    let mut client = hub.subscribe("?topic=orders.*&topic=users.%3E").await;
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    let mut ids = Vec::new();
    for (topic, payload) in [
        ("orders.1", json!({"n": 1})),
        ("other.x", json!("not subscribed")),
        ("users.a.b", json!("plain text\nwith a newline")),
        ("orders.2", json!([1, 2])),
    ] {
        ids.push(hub.publish(topic, payload).await["id"].clone());
    }
    let first = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(first.id.as_deref(), ids[0].as_str());
    let first = data(&first);
    assert_eq!(
        (first["topic"].clone(), first["payload"].clone()),
        (json!("orders.1"), json!({"n": 1}))
    );
    first["time"]
        .as_str()
        .expect("time")
        .parse::<jiff::Timestamp>()
        .expect("RFC 3339 time");
    let second = data(&expect_event(&mut client, "message").await.unwrap());
    assert_eq!(second["topic"], "users.a.b");
    assert_eq!(second["payload"], "plain text\nwith a newline");
    let third = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(third.id.as_deref(), ids[3].as_str());
    hub.stop().await;
}

/// A valid `Last-Event-ID` header wins over `?last-id=`; an invalid header is ignored; an
/// invalid query is a 400.
pub async fn last_event_id_header_wins(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let ids: Vec<String> = published_ids(&hub, 3).await;
    let mut client = hub
        .subscribe_with(
            &format!("?topic=t&last-id={}", "0"),
            &[("last-event-id", &ids[1])],
        )
        .await;
    let connected = expect_event(&mut client, "connected").await.unwrap();
    assert_eq!(connected.id.as_deref(), Some(ids[1].as_str()));
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(
        next.id.as_deref(),
        Some(ids[2].as_str()),
        "resumed after the header's id"
    );

    let mut client = hub
        .subscribe_with(
            &format!("?topic=t&last-id={}", ids[0]),
            &[("last-event-id", "garbage")],
        )
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(
        next.id.as_deref(),
        Some(ids[1].as_str()),
        "invalid header ignored, query used"
    );

    let response = hub.get("/events?topic=t&last-id=nope").await;
    assert_eq!(response.status, 400);
    assert!(response.text().contains("nope"), "{}", response.text());
    hub.stop().await;
}

/// Publishes `count` messages to topic `t` and returns their event ids.
async fn published_ids(hub: &TestHub, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        ids.push(
            hub.publish("t", json!(n)).await["id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    ids
}

/// Reconnecting with the `connected` frame's id loses nothing published in between.
pub async fn connected_id_resumes_losslessly(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    hub.publish("t", json!("before")).await;
    let mut client = hub.subscribe("?topic=t").await;
    let connected = expect_event(&mut client, "connected").await.unwrap();
    drop(client);
    let missed = hub.publish("t", json!("while away")).await;
    let id = connected.id.expect("connected id");
    let mut client = hub
        .subscribe_with("?topic=t", &[("last-event-id", &id)])
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let message = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(message.id.as_deref(), missed["id"].as_str());
    assert_eq!(data(&message)["payload"], "while away");
    hub.stop().await;
}

/// Topics are validated, counted and checked against the stream.
pub async fn topic_rules(f: &dyn HubFactory) {
    let mut config = config();
    config.limits.max_topics_per_subscription = 2;
    let hub = f.start(config).await;
    for query in [
        "",
        "?topic=a..b",
        "?topic=a&topic=b&topic=c",
        "?topic=%3E.a",
        "?topic=a%0Ab",
    ] {
        let response = hub.get(&format!("/events{query}")).await;
        assert_eq!(response.status, 400, "{query}: {}", response.text());
        let body = response.json().expect("json error");
        assert_eq!(body["code"], 400);
        assert!(body["description"].as_str().is_some_and(|d| !d.is_empty()));
    }
    let mut client = hub.subscribe("/a/b").await;
    let connected = expect_event(&mut client, "connected").await.unwrap();
    assert_eq!(data(&connected)["topics"], json!(["a.b"]));
    let mut client = hub.subscribe("?topic=a.*&topic=%3E").await;
    expect_event(&mut client, "connected")
        .await
        .expect("wildcards allowed");
    hub.stop().await;
}

/// `msg_id` deduplicates; the answer says so and repeats the original sequence.
pub async fn publish_dedupes_by_msg_id(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let body = json!({ "topic": "t", "payload": "x", "msg_id": "order-1" });
    let first = hub.publish_raw(body.clone()).await.json().unwrap();
    let again = hub.publish_raw(body).await.json().unwrap();
    assert_eq!(first["duplicate"], false);
    assert_eq!(again["duplicate"], true);
    assert_eq!(first["seq"], again["seq"]);
    assert_eq!(first["id"], again["id"]);
    hub.stop().await;
}

/// A stream error comes back with its status, code and description; a bad body is a 400.
pub async fn publish_errors_carry_code(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    hub.publish("t", json!(1)).await;
    let response = hub
        .publish_raw(json!({ "topic": "t", "payload": 2, "headers": { "Nats-Expected-Last-Sequence": "99" } }))
        .await;
    assert_eq!(response.status, 400, "{}", response.text());
    assert_eq!(response.json().unwrap()["code"], 10071);
    let forged = hub
        .publish_raw(
            json!({ "topic": "t", "payload": 1, "headers": { "nats-stream-source": "x" } }),
        )
        .await;
    assert_eq!(forged.status, 400);
    assert_eq!(forged.json().unwrap()["code"], 10227);
    for bad in [
        json!({ "topic": "a.*", "payload": 1 }),
        json!({ "payload": 1 }),
        json!({ "topic": "t", "payload": 1, "extra": true }),
        json!({ "topic": "t", "payload": 1, "headers": { "Nats-Rollup": "all" } }),
        json!({ "topic": "t", "payload": 1, "ttl": "-1s" }),
    ] {
        let response = hub.publish_raw(bad.clone()).await;
        assert_eq!(response.status, 400, "{bad}: {}", response.text());
        assert!(response.json().unwrap()["description"].is_string());
    }
    hub.stop().await;
}

/// A cursor ahead of the stream gets an `ahead` gap, then the earliest retained messages.
pub async fn cursor_ahead_reports_gap(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let first = hub.publish("t", json!(1)).await;
    let incarnation = first["id"]
        .as_str()
        .unwrap()
        .split('-')
        .nth(1)
        .unwrap()
        .to_owned();
    let mut client = hub
        .subscribe_with(
            "?topic=t",
            &[("last-event-id", &format!("500-{incarnation}"))],
        )
        .await;
    let connected = expect_event(&mut client, "connected").await.unwrap();
    assert_eq!(
        connected.id.as_deref(),
        Some(format!("0-{incarnation}").as_str())
    );
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(data(&gap)["reason"], "ahead");
    assert_eq!(data(&gap)["cursor"], format!("500-{incarnation}"));
    let message = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(message.id.as_deref(), first["id"].as_str());
    assert_eq!(
        hub.metric("sluice_replay_fallbacks_total{reason=\"ahead\"}"),
        1
    );
    hub.stop().await;
}

/// A cursor from another incarnation gets an `incarnation` gap.
pub async fn cursor_from_other_incarnation_reports_gap(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let first = hub.publish("t", json!(1)).await;
    let mut client = hub
        .subscribe_with("?topic=t", &[("last-event-id", "1-abcdef")])
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(data(&gap)["reason"], "incarnation");
    let message = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(
        message.id.as_deref(),
        first["id"].as_str(),
        "continues from the earliest"
    );
    hub.stop().await;
}

/// `replay.max_messages` counts only the backlog that existed at plan time: the stream closes
/// after that many, live messages never count.
pub async fn replay_cap_counts_backlog_only(f: &dyn HubFactory) {
    let mut config = config();
    config.replay.max_messages = 2;
    let hub = f.start(config).await;
    let ids = published_ids(&hub, 4).await;
    let mut client = hub.subscribe("?topic=t&last-id=0").await;
    expect_event(&mut client, "connected").await.unwrap();
    let frames = client.frames_until_end().await.expect("stream ends");
    let got: Vec<_> = frames
        .iter()
        .filter(|f| f.event_type() == "message")
        .filter_map(|f| f.id.clone())
        .collect();
    assert_eq!(
        got,
        ids[..2],
        "two backlog messages, then the stream closes"
    );
    assert_eq!(
        hub.metric("sluice_disconnects_total{reason=\"replay_cap_reached\"}"),
        1
    );

    // Live messages are not capped.
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let live = published_ids(&hub, 3).await;
    for id in live {
        assert_eq!(
            expect_event(&mut client, "message").await.unwrap().id,
            Some(id)
        );
    }
    hub.stop().await;
}

/// A message larger than `sse.max_event_size` becomes a `too_large` gap and is counted.
pub async fn oversized_message_becomes_gap(f: &dyn HubFactory) {
    let mut config = config();
    config.sse.max_event_size = 512;
    let hub = f.start(config).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let big = hub.publish("t", json!("x".repeat(1000))).await;
    let small = hub.publish("t", json!("ok")).await;
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(gap.id.as_deref(), big["id"].as_str());
    let gap = data(&gap);
    assert_eq!(
        (
            gap["reason"].clone(),
            gap["from"].clone(),
            gap["to"].clone()
        ),
        (json!("too_large"), big["seq"].clone(), big["seq"].clone())
    );
    assert_eq!(gap["topic"], "t");
    assert_eq!(
        expect_event(&mut client, "message")
            .await
            .unwrap()
            .id
            .as_deref(),
        small["id"].as_str()
    );
    assert_eq!(
        hub.metric("sluice_messages_dropped_total{reason=\"too_large\"}"),
        1
    );
    hub.stop().await;
}

/// Backlog older than `replay.window` is skipped with one `replay_window` gap; newer backlog
/// and live messages are delivered.
pub async fn replay_window_skips_old_backlog(f: &dyn HubFactory) {
    let mut config = config();
    config.replay.window = Some(Duration::from_secs(1));
    let hub = f.start(config).await;
    let old = published_ids(&hub, 2).await;
    // The two messages must be older than the window when the subscription is planned.
    wall_clock_passes(SystemTime::now() + Duration::from_millis(1100)).await;
    let fresh = hub.publish("t", json!("fresh")).await;
    let mut client = hub.subscribe("?topic=t&last-id=0").await;
    expect_event(&mut client, "connected").await.unwrap();
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(gap.id.as_deref(), Some(old[1].as_str()));
    assert_eq!(data(&gap)["reason"], "replay_window");
    assert_eq!(data(&gap)["from"], 1);
    assert_eq!(data(&gap)["to"], 2);
    assert_eq!(
        expect_event(&mut client, "message")
            .await
            .unwrap()
            .id
            .as_deref(),
        fresh["id"].as_str()
    );
    assert_eq!(
        hub.metric("sluice_messages_dropped_total{reason=\"replay_window\"}"),
        2
    );
    hub.stop().await;
}

/// Clients with the same topic set share one backend feed; another set gets its own.
pub async fn one_feed_per_topic_set(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut clients = Vec::new();
    for query in [
        "?topic=a&topic=b",
        "?topic=b&topic=a",
        "?topic=a&topic=b&topic=a",
    ] {
        let mut client = hub.subscribe(query).await;
        expect_event(&mut client, "connected").await.unwrap();
        clients.push(client);
    }
    assert_eq!(hub.hub.feed_count(), 1);
    let mut other = hub.subscribe("?topic=c").await;
    expect_event(&mut other, "connected").await.unwrap();
    assert_eq!(hub.hub.feed_count(), 2);
    let sent = hub.publish("b", json!("shared")).await;
    for client in &mut clients {
        assert_eq!(
            expect_event(client, "message").await.unwrap().id.as_deref(),
            sent["id"].as_str()
        );
    }
    hub.stop().await;
}

/// A client resuming far behind the in-memory ring reads from the stream, then rejoins the
/// live feed: every message once, in order, no gap.
pub async fn resume_behind_ring_catches_up_then_live(f: &dyn HubFactory) {
    let mut config = config();
    config.fanout.ring_size = 16;
    let hub = f.start(config).await;
    let mut live = hub.subscribe("?topic=t").await;
    expect_event(&mut live, "connected").await.unwrap();
    let mut expected = published_ids(&hub, 60).await;
    let mut client = hub.subscribe("?topic=t&last-id=0").await;
    expect_event(&mut client, "connected").await.unwrap();
    for id in &expected {
        let frame = client.next_event().await.unwrap();
        assert_eq!(
            (frame.event_type(), frame.id.as_deref()),
            ("message", Some(id.as_str()))
        );
    }
    assert!(
        hub.metric("sluice_catchups_total") >= 1,
        "caught up from the stream"
    );
    expected = published_ids(&hub, 3).await;
    for id in &expected {
        assert_eq!(
            expect_event(&mut client, "message")
                .await
                .unwrap()
                .id
                .as_deref(),
            Some(id.as_str())
        );
    }
    hub.stop().await;
}

/// A client catching up on one topic of a stream that holds others skips their positions
/// without a `gap` frame: only positions removed from the stream are reported as lost.
pub async fn filtered_catch_up_skips_other_topics_silently(f: &dyn HubFactory) {
    let mut config = config();
    config.fanout.ring_size = 16;
    let hub = f.start(config).await;
    let mut live = hub.subscribe("?topic=a").await;
    expect_event(&mut live, "connected").await.unwrap();
    let mut expected = Vec::new();
    for n in 0..60 {
        hub.publish("b", json!(n)).await;
        let ack = hub.publish("a", json!(n)).await;
        expected.push(ack["id"].as_str().expect("id").to_owned());
    }
    let mut client = hub.subscribe("?topic=a&last-id=0").await;
    expect_event(&mut client, "connected").await.unwrap();
    for id in &expected {
        let frame = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(frame.id.as_deref(), Some(id.as_str()));
    }
    assert!(
        hub.metric("sluice_catchups_total") >= 1,
        "caught up from the stream"
    );
    assert_eq!(hub.metric("sluice_gaps_total{reason=\"expired\"}"), 0);
    hub.stop().await;
}

/// The rings of many busy topic sets together hold no more than `fanout.ring_memory`
/// (`sluice_fanout_ring_bytes` says what they hold); live clients get every message, and a
/// client resuming from the start reads from the stream what the rings let go.
pub async fn rings_keep_within_their_memory(f: &dyn HubFactory) {
    const TOPICS: usize = 40;
    const ROUNDS: usize = 10;
    let budget = 16 << 20;
    let mut config = config();
    config.fanout.ring_memory = budget;
    let hub = f.start(config).await;
    let mut clients = Vec::new();
    for topic in 0..TOPICS {
        let mut client = hub.subscribe(&format!("?topic=user.{topic}")).await;
        expect_event(&mut client, "connected").await.unwrap();
        clients.push(client);
    }
    // 400 events of 64 KB: unbounded, the rings would hold twice 26 MB (each frame is in its
    // topic set's ring and in the dispatch's).
    let payload = "x".repeat(64_000);
    let mut ids = vec![Vec::new(); TOPICS];
    for _ in 0..ROUNDS {
        for (topic, ids) in ids.iter_mut().enumerate() {
            let ack = hub.publish(&format!("user.{topic}"), json!(payload)).await;
            ids.push(ack["id"].as_str().expect("id").to_owned());
        }
    }
    for (client, ids) in clients.iter_mut().zip(&ids) {
        for id in ids {
            let event = expect_event(client, "message").await.unwrap();
            assert_eq!(event.id.as_deref(), Some(id.as_str()));
        }
    }
    let held = hub.metric("sluice_fanout_ring_bytes");
    assert!(
        held > 0 && held <= budget as u64,
        "the rings hold {held} bytes; the budget is {budget}"
    );
    let mut resumed = hub.subscribe("?topic=user.0&last-id=0").await;
    expect_event(&mut resumed, "connected").await.unwrap();
    for id in &ids[0] {
        let event = expect_event(&mut resumed, "message").await.unwrap();
        assert_eq!(event.id.as_deref(), Some(id.as_str()));
    }
    assert!(
        hub.metric("sluice_catchups_total") >= 1,
        "the first events of user.0 were read from the stream"
    );
    hub.stop().await;
}

/// A client that stops reading while far more than the ring is published is served from the
/// stream when it reads again: all messages, in order, no gap, no disconnect.
pub async fn paused_reader_gets_everything(f: &dyn HubFactory) {
    let mut config = config();
    config.fanout.ring_size = 16;
    // The client reads nothing until all 400 publishes are answered; a stream that takes no
    // byte for `write_timeout` is rightly closed as stalled, and on a loaded machine the
    // publishes (to JetStream, say) can take longer than a minute.
    config.sse.write_timeout = Duration::from_secs(3600);
    config.sse.max_event_size = 256 * 1024;
    let hub = f.start(config).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let payload = "p".repeat(64 * 1024);
    let mut ids = Vec::new();
    // ~25 MiB: more than socket buffers and the ring can hold for a reader that is not reading.
    for _ in 0..400 {
        ids.push(
            hub.publish("t", json!(payload)).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    for id in &ids {
        let frame = client.next_event().await.unwrap();
        assert_eq!(
            (frame.event_type(), frame.id.as_deref()),
            ("message", Some(id.as_str()))
        );
    }
    assert!(
        hub.metric("sluice_catchups_total") >= 1,
        "the paused reader fell behind the ring"
    );
    assert_eq!(hub.metric("sluice_slow_client_disconnects_total"), 0);
    hub.stop().await;
}

/// A client that keeps reading, however slowly, is never closed: here it reads 4 KiB every
/// 40 ms (100 KiB/s) while ~5 MiB are published for it, and for 8 s after, then reads the rest
/// at full speed. Linux reports the hub's socket writable only once a third of its send buffer
/// (grown to 4 MiB by then) has drained, which at this pace takes longer than `write_timeout`;
/// the socket takes bytes all along, so the client is merely behind, and gets every message.
pub async fn steady_slow_reader_is_never_closed(f: &dyn HubFactory) {
    steady_slow_reader_gets_everything(f, false).await;
}

/// [`steady_slow_reader_is_never_closed`] with the event stream as the second request of its
/// connection when `reused` (hyper serves it then, not the connection layer).
pub async fn steady_slow_reader_gets_everything(f: &dyn HubFactory, reused: bool) {
    const MESSAGES: usize = 2_500;
    let mut config = config();
    config.fanout.ring_size = 16;
    config.sse.write_timeout = Duration::from_secs(3);
    let hub = f.start(config).await;
    let mut socket = tokio::net::TcpStream::connect(hub.addr).await.unwrap();
    if reused {
        socket
            .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"\"ok\"}") {
            let mut byte = [0u8; 1];
            assert_eq!(socket.read(&mut byte).await.unwrap(), 1, "{answer:?}");
            answer.push(byte[0]);
        }
    }
    socket
        .write_all(b"GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    // The stream starts at the live end when it is opened: what is published before the
    // `connected` frame is not the client's.
    read_through_connected_frame(&mut socket).await;
    // Published while the client reads: a client that read nothing meanwhile would overrun its
    // receive buffer, and the kernel's retransmission backoff would stall the connection itself.
    let published = std::sync::atomic::AtomicBool::new(false);
    let publish = async {
        // ~5 MiB: more than the hub's send buffer holds, however far Linux grows it.
        let payload = "s".repeat(2 * 1024);
        for _ in 0..MESSAGES {
            hub.publish("t", json!(payload)).await;
        }
        published.store(true, std::sync::atomic::Ordering::Release);
    };
    let read = read_slowly_then_fast(&hub, &mut socket, MESSAGES, &published);
    tokio::join!(publish, read);
    assert_eq!(hub.metric("sluice_slow_client_disconnects_total"), 0);
    hub.stop().await;
}

/// Reads the response head and the `connected` frame from the raw event stream on `socket`,
/// byte by byte, so nothing after them is taken.
async fn read_through_connected_frame(socket: &mut tokio::net::TcpStream) {
    const FRAME_END: &[u8] = b"\n\n";
    let mut read = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let frame = read
            .windows(b"event: connected\n".len())
            .position(|w| w == b"event: connected\n");
        if frame.is_some_and(|at| read[at..].ends_with(FRAME_END)) {
            return;
        }
        let n = socket.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "closed before the connected frame: {read:?}");
        read.push(byte[0]);
    }
}

/// Reads `messages` message events from the raw event stream on `socket`: 4 KiB every 40 ms
/// until `published` is set and 200 reads (8 s) after, then at full speed. Fails when the
/// stream closes or 30 s pass without a message.
async fn read_slowly_then_fast(
    hub: &TestHub,
    socket: &mut tokio::net::TcpStream,
    messages: usize,
    published: &std::sync::atomic::AtomicBool,
) {
    const SLOW_READS_AFTER_PUBLISHING: usize = 200;
    const MESSAGE: &[u8] = b"event: message\n";
    let (mut tail, mut received, mut bytes, mut slow_reads_left) =
        (Vec::new(), 0, 0, SLOW_READS_AFTER_PUBLISHING);
    let mut buf = vec![0u8; 4096];
    // The pace of the reader is the behaviour under test.
    let mut pace = tokio::time::interval(Duration::from_millis(40));
    let mut progress = tokio::time::Instant::now();
    while received < messages {
        if slow_reads_left > 0 {
            pace.tick().await;
            if published.load(std::sync::atomic::Ordering::Acquire) {
                slow_reads_left -= 1;
            }
        }
        let silence = progress + Duration::from_secs(30);
        let n = match tokio::time::timeout_at(silence, socket.read(&mut buf)).await {
            Ok(read) => read.unwrap(),
            Err(_) => 0,
        };
        if n == 0 {
            panic!(
                "closed, or no message for 30 s, after {received} messages, {bytes} bytes: {:?}",
                delivery_counters(hub)
            );
        }
        bytes += n;
        // Count in what arrived, after the end of what came before (a line may be split).
        tail.extend_from_slice(&buf[..n]);
        let arrived = count(&tail, MESSAGE);
        if arrived > 0 {
            progress = tokio::time::Instant::now();
        }
        received += arrived;
        tail.drain(..tail.len().saturating_sub(MESSAGE.len() - 1));
    }
}

/// The hub's disconnect, gap, catch-up and JetStream counters, for failure messages.
fn delivery_counters(hub: &TestHub) -> Vec<String> {
    let names = [
        "sluice_disconnects",
        "sluice_gaps",
        "sluice_catchups",
        "sluice_jetstream",
    ];
    hub.hub
        .metrics_text()
        .lines()
        .filter(|l| !l.starts_with('#') && names.iter().any(|name| l.starts_with(name)))
        .map(str::to_owned)
        .collect()
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// A socket that accepts nothing for `write_timeout` is closed and counted as slow.
pub async fn stalled_socket_is_closed_as_slow(f: &dyn HubFactory) {
    let mut config = config();
    config.sse.write_timeout = Duration::from_secs(1);
    config.sse.max_event_size = 256 * 1024;
    let hub = f.start(config).await;
    let mut socket = tokio::net::TcpStream::connect(hub.addr).await.unwrap();
    socket
        .write_all(b"GET /events?topic=t HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 64];
    let n = socket.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));
    // ~19 MiB in one burst: more than the socket buffers of a client that reads nothing.
    let payload = "s".repeat(64 * 1024);
    for _ in 0..300 {
        hub.publish("t", json!(payload)).await;
    }
    hub.eventually("slow_client disconnect logged", |h| {
        h.metric("sluice_disconnects_total{reason=\"slow_client\"}") == 1
    })
    .await;
    drop(socket);
    hub.stop().await;
}

/// Over `max_connections`: 429 with Retry-After, but an EventSource gets 200 and only `retry:`.
pub async fn max_connections_refusals(f: &dyn HubFactory) {
    let mut config = config();
    config.limits.max_connections = 1;
    let hub = f.start(config).await;
    let mut held = hub.subscribe("?topic=t").await;
    expect_event(&mut held, "connected").await.unwrap();
    refused_until_released(&hub, "max_connections", 2, held).await;
    hub.stop().await;
}

/// Probes answer with and without a trailing slash; metrics are exposed.
pub async fn probes_and_metrics(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    for path in [
        "/livez",
        "/livez/",
        "/readyz",
        "/readyz/",
        "/healthz",
        "/healthz/",
    ] {
        let response = hub.get(path).await;
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(response.json().unwrap()["status"], "ok");
    }
    hub.publish("t", json!(1)).await;
    let response = hub.get("/metrics").await;
    assert_eq!(response.status, 200);
    for name in [
        "sluice_active_connections",
        "sluice_messages_delivered",
        "sluice_publishes",
    ] {
        assert!(response.text().contains(name), "{name}");
    }
    let response = http_request(&hub, "DELETE", "/events?topic=t").await;
    assert_eq!(response.status, 405);
    hub.stop().await;
}

async fn http_request(
    hub: &TestHub,
    method: &str,
    path: &str,
) -> sluice_test_support::HttpResponse {
    let request = sluice_test_support::http::request(method.parse().unwrap(), &hub.url(path), &[])
        .unwrap()
        .body(Default::default())
        .unwrap();
    sluice_test_support::http::send(request).await.unwrap()
}

/// CORS: listed origins are echoed with credentials, `*` admits any origin without them,
/// preflights are answered, and `Vary: Origin` is set.
pub async fn cors_rules(f: &dyn HubFactory) {
    let mut config = config();
    config.cors.allowed_origins = vec!["https://app.example.com".into(), "*".into()];
    let hub = f.start(config).await;
    let listed = hub
        .subscribe_with("?topic=t", &[("origin", "https://app.example.com")])
        .await;
    assert_eq!(
        listed.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(
        listed.header("access-control-allow-credentials"),
        Some("true")
    );
    assert!(
        listed.headers().get_all("vary").iter().any(|v| v
            .to_str()
            .unwrap()
            .to_lowercase()
            .contains("origin"))
    );
    let other = hub
        .subscribe_with("?topic=t", &[("origin", "https://other.example")])
        .await;
    assert_eq!(
        other.header("access-control-allow-origin"),
        Some("https://other.example")
    );
    assert_eq!(other.header("access-control-allow-credentials"), None);
    let request = sluice_test_support::http::request(
        "OPTIONS".parse().unwrap(),
        &hub.url("/events?topic=t"),
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "GET"),
            ("access-control-request-headers", "last-event-id"),
        ],
    )
    .unwrap()
    .body(Default::default())
    .unwrap();
    let preflight = sluice_test_support::http::send(request).await.unwrap();
    assert!(preflight.status.is_success(), "{}", preflight.status);
    assert!(
        preflight
            .header("access-control-allow-headers")
            .is_some_and(|h| h.contains("last-event-id"))
    );
    hub.stop().await;
}

/// Shutdown ends open streams cleanly and the server returns.
pub async fn shutdown_drains_streams(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let stopping = tokio::spawn(hub.stop());
    let rest = client.frames_until_end().await.expect("clean end");
    assert!(rest.iter().all(|f| !f.dispatches_event()), "{rest:?}");
    stopping.await.unwrap();
}

/// `GET /` serves the built-in page.
pub async fn serves_the_page(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let page = hub.get("/?topic=a").await;
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .is_some_and(|c| c.starts_with("text/html"))
    );
    let text = page.text();
    assert!(text.contains("from \"/sluice.js\"") && text.contains("window.sluiceEvents"));
    assert!(!text.contains("src=\"http"), "no external assets");
    let library = hub.get("/sluice.js").await;
    assert_eq!(
        library.status, 200,
        "the library the page imports is served"
    );
    hub.stop().await;
}

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-secret";

fn token(exp_in_secs: u64, subscribe: &[&str], publish: &[&str]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "sub": "tester",
        "exp": now + exp_in_secs,
        "sluice": { "subscribe": subscribe, "publish": publish },
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn auth_config() -> Config {
    let text = format!(
        "[auth.subscribe]\nalgorithms = [\"HS256\"]\nleeway = 0\nkeys = [{{ type = \"hmac\", secret = \"{SECRET}\" }}]\n\
         [auth.publish]\nalgorithms = [\"HS256\"]\nkeys = [{{ type = \"hmac\", secret = \"{SECRET}\" }}]\n"
    );
    sluice_server::config::load_str(&text, "auth test", Vec::new(), &Default::default())
        .expect("auth config")
        .0
}

/// Subscribers and publishers are checked before any backend work: 401 without a valid
/// token, 403 for a topic outside the grant; a stream ends when its token expires, telling
/// the client with a `token_expired` frame.
pub async fn authorization_is_enforced(f: &dyn HubFactory) {
    let hub = f.start(auth_config()).await;
    let response = hub.get("/events?topic=orders.eu").await;
    assert_eq!(response.status, 401);
    assert!(
        response
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer"))
    );
    let bearer = format!("Bearer {}", token(600, &["orders.>"], &["orders.>"]));
    let forbidden = hub
        .subscribe_with("?topic=users.1", &[("authorization", &bearer)])
        .await;
    assert_eq!(forbidden.status(), 403);
    let mut allowed = hub
        .subscribe_with("?topic=orders.eu", &[("authorization", &bearer)])
        .await;
    expect_event(&mut allowed, "connected")
        .await
        .expect("granted");

    let publish = |topic: &str, auth: Option<&str>| {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(auth) = auth {
            headers.push(("authorization", auth));
        }
        let request = sluice_test_support::http::request(
            "POST".parse().unwrap(),
            &hub.url("/publish"),
            &headers,
        )
        .unwrap()
        .body(json!({ "topic": topic, "payload": 1 }).to_string().into())
        .unwrap();
        sluice_test_support::http::send(request)
    };
    assert_eq!(publish("orders.eu", None).await.unwrap().status, 401);
    assert_eq!(publish("users.1", Some(&bearer)).await.unwrap().status, 403);
    let stored = publish("orders.eu", Some(&bearer)).await.unwrap();
    assert_eq!(stored.status, 200, "{}", stored.text());
    let message = expect_event(&mut allowed, "message").await.unwrap();
    assert_eq!(message.id.as_deref(), stored.json().unwrap()["id"].as_str());

    let short = format!("Bearer {}", token(1, &["orders.>"], &[]));
    let mut expiring = hub
        .subscribe_with("?topic=orders.eu", &[("authorization", &short)])
        .await;
    expect_event(&mut expiring, "connected").await.unwrap();
    let rest = expiring.frames_until_end().await.expect("ends at expiry");
    let last = rest
        .iter()
        .rev()
        .find(|f| f.dispatches_event())
        .expect("a final event");
    assert_eq!(last.event_type(), "token_expired");
    assert_eq!(
        hub.metric("sluice_disconnects_total{reason=\"token_expired\"}"),
        1
    );
    hub.stop().await;
}

/// `GET /stream` answers the stream's first and last sequence, what it holds and the event
/// streams open now; with subscriber authorization on, only to a token that may subscribe to
/// every topic (`>`), as a subscription to `>` would be.
pub async fn stream_summary_is_the_streams_state(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let empty = hub.get("/stream").await;
    assert_eq!(empty.status, 200, "{}", empty.text());
    let empty = empty.json().unwrap();
    let counts = |s: &serde_json::Value| {
        ["first_seq", "last_seq", "messages"].map(|key| s[key].as_u64().unwrap())
    };
    assert_eq!(counts(&empty), [1, 0, 0], "{empty}");
    assert_eq!(empty["bytes"], 0, "{empty}");
    let mut client = hub.subscribe("?topic=summary.a").await;
    expect_event(&mut client, "connected").await.unwrap();
    let first = hub.publish("summary.a", json!({"n": 1})).await;
    hub.publish("summary.b", json!(2)).await;
    let summary = hub.get("/stream").await.json().unwrap();
    let seq = first["seq"].as_u64().unwrap();
    assert_eq!(counts(&summary), [seq, seq + 1, 2], "{summary}");
    assert!(summary["bytes"].as_u64() > Some(0), "{summary}");
    assert_eq!(summary["subscribers"], 1, "{summary}");
    let incarnation = first["id"].as_str().unwrap().split_once('-').unwrap().1;
    assert_eq!(summary["incarnation"], incarnation, "{summary}");
    assert!(summary["first_time"].is_string(), "{summary}");
    assert!(
        summary["subjects"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    );
    hub.stop().await;

    let hub = f.start(auth_config()).await;
    assert_eq!(hub.get("/stream").await.status, 401);
    let get = |token: String| {
        let request = sluice_test_support::http::request(
            "GET".parse().unwrap(),
            &hub.url("/stream"),
            &[("authorization", &format!("Bearer {token}"))],
        )
        .unwrap()
        .body(Default::default())
        .unwrap();
        sluice_test_support::http::send(request)
    };
    let partial = get(token(600, &["orders.>"], &[])).await.unwrap();
    assert_eq!(partial.status, 403, "{}", partial.text());
    let everything = get(token(600, &[">"], &[])).await.unwrap();
    assert_eq!(everything.status, 200, "{}", everything.text());
    assert_eq!(everything.json().unwrap()["last_seq"], 0);
    for reason in ["missing_token", "forbidden_topic"] {
        let metric = format!("sluice_connections_rejected_total{{reason=\"{reason}\"}}");
        assert_eq!(hub.metric(&metric), 1, "{metric}");
    }
    hub.stop().await;
}

/// Idle streams get `: heartbeat <time>` comments every `sse.heartbeat`.
pub async fn heartbeats_keep_idle_streams_alive(f: &dyn HubFactory) {
    let mut config = config();
    config.sse.heartbeat = Duration::from_millis(200);
    let hub = f.start(config).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    for _ in 0..2 {
        let frame = client.next_frame().await.unwrap();
        assert!(!frame.dispatches_event());
        let comment = frame.comment.expect("a comment frame");
        let time = comment
            .strip_prefix("heartbeat ")
            .expect("heartbeat comment");
        time.parse::<jiff::Timestamp>().expect("RFC 3339 time");
    }
    hub.stop().await;
}

/// No payload can break the SSE framing: line breaks and fake fields stay inside one event.
pub async fn hostile_payloads_stay_inside_one_event(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let hostile = "a\n\nevent: evil\r\ndata: {\"x\":1}\rid: 999\n\n";
    let sent = hub.publish("t", json!(hostile)).await;
    let raw = hub.publish("t", json!({ "k": "v\n\ndata: x" })).await;
    let first = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(first.id.as_deref(), sent["id"].as_str());
    assert_eq!(data(&first)["payload"], hostile);
    let second = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(second.id.as_deref(), raw["id"].as_str());
    assert_eq!(data(&second)["payload"], json!({ "k": "v\n\ndata: x" }));
    let response = hub.get("/events?topic=a%0Aevent:%20x").await;
    assert_eq!(response.status, 400, "a topic cannot carry a line break");
    hub.stop().await;
}

/// A publish body over `limits.max_publish_body` is refused with 413 and nothing is stored.
pub async fn publish_body_is_bounded(f: &dyn HubFactory) {
    let mut config = config();
    config.limits.max_publish_body = 1024;
    let hub = f.start(config).await;
    let response = hub
        .publish_raw(json!({ "topic": "t", "payload": "x".repeat(2000) }))
        .await;
    assert_eq!(response.status, 413);
    let stored = hub.publish("t", json!("small")).await;
    assert_eq!(stored["seq"], 1, "the oversized body stored nothing");
    hub.stop().await;
}

/// Posts `body` to `/publish` as `content_type`, with an `authorization` header if given.
async fn post_publish(
    hub: &TestHub,
    content_type: &str,
    body: String,
    auth: Option<&str>,
) -> sluice_test_support::HttpResponse {
    let mut headers = vec![("content-type", content_type)];
    if let Some(auth) = auth {
        headers.push(("authorization", auth));
    }
    let request =
        sluice_test_support::http::request("POST".parse().unwrap(), &hub.url("/publish"), &headers)
            .unwrap()
            .body(body.into())
            .unwrap();
    sluice_test_support::http::send(request)
        .await
        .expect("publish request")
}

/// Posts a JSON array batch; panics unless it is answered `200` with one element per item.
async fn publish_batch(hub: &TestHub, items: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let response = post_publish(hub, "application/json", json!(items).to_string(), None).await;
    assert_eq!(response.status, 200, "batch refused: {}", response.text());
    let answers = response.json().expect("json answer");
    let answers = answers.as_array().expect("an array answer").clone();
    assert_eq!(
        answers.len(),
        items.len(),
        "one answer per item: {answers:?}"
    );
    answers
}

/// Reads `count` message events from `client`, then checks a marker published after them
/// comes next (nothing delivered twice); returns their ids and payloads.
async fn read_messages(
    hub: &TestHub,
    client: &mut sluice_test_support::SseClient,
    count: usize,
) -> Vec<(String, serde_json::Value)> {
    let mut seen = Vec::new();
    for _ in 0..count {
        let event = expect_event(client, "message").await.expect("a message");
        seen.push((
            event.id.clone().expect("id"),
            data(&event)["payload"].clone(),
        ));
    }
    let marker = hub.publish("t", json!("marker")).await;
    let next = expect_event(client, "message").await.expect("the marker");
    assert_eq!(
        next.id.as_deref(),
        marker["id"].as_str(),
        "nothing more came before the marker"
    );
    seen
}

/// A JSON array is a batch: each item is answered in order, the good ones stored (and
/// delivered in that order with the ids the answer gave), each bad one refused alone with
/// its code — a malformed item, a reserved header, the stream's refusal. `msg_id` dedupes
/// within one batch and across batches. Counted per message.
pub async fn batch_publish_answers_each_item_in_order(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let answers = publish_batch(
        &hub,
        &[
            json!({ "topic": "t", "payload": "first" }),
            json!({ "topic": "t" }),
            json!({ "topic": "t", "payload": {"n": 2}, "msg_id": "m1" }),
            json!({ "topic": "t", "payload": 3, "headers": { "Nats-Rollup": "all" } }),
            json!({ "topic": "t", "payload": 4, "headers": { "Nats-Expected-Last-Sequence": "999" } }),
            json!({ "topic": "t", "payload": "again", "msg_id": "m1" }),
            json!({ "topic": "t", "payload": "last" }),
        ],
    )
    .await;
    let stored = [&answers[0], &answers[2], &answers[6]];
    for (answer, seq) in stored.iter().zip(1..) {
        assert_eq!(answer["seq"], seq, "{answers:?}");
        assert_eq!(answer["duplicate"], false, "{answers:?}");
        assert!(answer["id"].is_string(), "{answers:?}");
    }
    assert_eq!(answers[1]["code"], 400, "a malformed item: {answers:?}");
    assert!(
        answers[1]["description"]
            .as_str()
            .unwrap()
            .contains("payload")
    );
    assert_eq!(answers[3]["code"], 400, "a reserved header: {answers:?}");
    assert_eq!(
        answers[4]["code"], 10071,
        "the stream's refusal: {answers:?}"
    );
    assert_eq!(answers[5]["duplicate"], true, "deduped within the batch");
    assert_eq!(
        (&answers[5]["seq"], &answers[5]["id"]),
        (&answers[2]["seq"], &answers[2]["id"])
    );

    let seen = read_messages(&hub, &mut client, 3).await;
    let ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    let answered: Vec<&str> = stored.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(ids, answered, "delivered in order with the answered ids");
    let payloads: Vec<&serde_json::Value> = seen.iter().map(|(_, payload)| payload).collect();
    assert_eq!(
        payloads,
        [&json!("first"), &json!({"n": 2}), &json!("last")]
    );

    let again = publish_batch(
        &hub,
        &[
            json!({ "topic": "t", "payload": "dup", "msg_id": "m1" }),
            json!({ "topic": "t", "payload": "new", "msg_id": "m2" }),
        ],
    )
    .await;
    assert_eq!(again[0]["duplicate"], true, "deduped across batches");
    assert_eq!(again[0]["id"], answers[2]["id"]);
    assert_eq!(
        (&again[1]["duplicate"], &again[1]["seq"]),
        (&json!(false), &json!(5))
    );
    assert_eq!(hub.metric("sluice_publishes_total{result=\"stored\"}"), 5);
    assert_eq!(
        hub.metric("sluice_publishes_total{result=\"duplicate\"}"),
        2
    );
    assert_eq!(hub.metric("sluice_publishes_total{result=\"rejected\"}"), 3);
    assert_eq!(
        hub.metric("sluice_publish_refusals_total{reason=\"invalid_message\"}"),
        2
    );
    assert_eq!(
        hub.metric("sluice_publish_refusals_total{reason=\"stream_refused\"}"),
        1
    );
    hub.stop().await;
}

/// Items of a batch are read from the request body as a single publish is: a topic written
/// with escapes, a text payload with and without escapes, and a JSON payload with spaces in it
/// are stored and delivered as the same items published one at a time.
pub async fn batch_items_are_read_as_single_publishes(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let items = [
        r#"{"topic":"t","payload":"plain"}"#,
        r#"{"topic":"\u0074","payload":"esc\"aped\n\u00e9"}"#,
        r#"{ "topic" : "t" , "payload" : { "a" : [1, 2] } }"#,
    ];
    for item in items {
        let single = post_publish(&hub, "application/json", item.to_owned(), None).await;
        assert_eq!(single.status, 200, "{item}: {}", single.text());
    }
    let batch = post_publish(
        &hub,
        "application/json",
        format!("[{}]", items.join(",")),
        None,
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.text());
    let answers = batch.json().expect("json answer");
    let seqs: Vec<&serde_json::Value> = answers
        .as_array()
        .expect("an array")
        .iter()
        .map(|answer| &answer["seq"])
        .collect();
    assert_eq!(seqs, [&json!(4), &json!(5), &json!(6)], "{answers}");
    let seen = read_messages(&hub, &mut client, 6).await;
    let payloads: Vec<&serde_json::Value> = seen.iter().map(|(_, payload)| payload).collect();
    let expected = [
        json!("plain"),
        json!("esc\"aped\n\u{e9}"),
        json!({"a": [1, 2]}),
    ];
    assert_eq!(
        payloads[..3],
        expected.iter().collect::<Vec<_>>()[..],
        "single"
    );
    assert_eq!(
        payloads[3..],
        expected.iter().collect::<Vec<_>>()[..],
        "batch"
    );
    hub.stop().await;
}

/// An `application/x-ndjson` body is a batch of one object per non-empty line, answered as
/// a JSON array batch is; a line that is not a JSON object refuses the whole body and
/// stores nothing.
pub async fn ndjson_batch_publishes_line_by_line(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let refused = post_publish(
        &hub,
        "application/x-ndjson",
        "{\"topic\":\"t\",\"payload\":1}\nnot json\n".to_owned(),
        None,
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("line 2"), "{}", refused.text());
    let body = "{\"topic\":\"t\",\"payload\":\"one\"}\r\n\n\
                {\"topic\":\"t\",\"payload\":2,\"unknown\":true}\n\
                {\"topic\":\"t\",\"payload\":\"three\",\"msg_id\":\"x\"}\n\
                {\"topic\":\"t\",\"payload\":\"four\",\"msg_id\":\"x\"}\n";
    let response = post_publish(&hub, "application/x-ndjson", body.to_owned(), None).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let answers = response.json().unwrap();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(
        (&answers[0]["seq"], &answers[2]["seq"]),
        (&json!(1), &json!(2)),
        "nothing of the refused body was stored"
    );
    assert_eq!(answers[1]["code"], 400, "{answers:?}");
    assert!(
        answers[1]["description"]
            .as_str()
            .unwrap()
            .contains("unknown")
    );
    assert_eq!(
        (&answers[3]["duplicate"], &answers[3]["id"]),
        (&json!(true), &answers[2]["id"])
    );
    let seen = read_messages(&hub, &mut client, 2).await;
    assert_eq!(seen[0].0, answers[0]["id"].as_str().unwrap());
    assert_eq!(
        seen[1],
        (
            answers[2]["id"].as_str().unwrap().to_owned(),
            json!("three")
        )
    );
    hub.stop().await;
}

/// The token of a batch is checked once (none: `401` for the whole body); an item whose topic
/// is outside the grant is refused alone with a `403` code, the others are stored.
pub async fn batch_item_outside_the_grant_is_refused_alone(f: &dyn HubFactory) {
    let hub = f.start(auth_config()).await;
    let items = json!([
        { "topic": "orders.eu", "payload": 1 },
        { "topic": "users.1", "payload": 2 },
        { "topic": "orders.us", "payload": 3 },
    ])
    .to_string();
    let anonymous = post_publish(&hub, "application/json", items.clone(), None).await;
    assert_eq!(anonymous.status, 401);
    let bearer = format!("Bearer {}", token(600, &["orders.>"], &["orders.>"]));
    let mut client = hub
        .subscribe_with("?topic=orders.*", &[("authorization", &bearer)])
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let response = post_publish(&hub, "application/json", items, Some(&bearer)).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let answers = response.json().unwrap();
    assert_eq!(answers[0]["seq"], 1, "{answers}");
    assert_eq!(answers[1]["code"], 403, "{answers}");
    assert_eq!(answers[2]["seq"], 2, "{answers}");
    for answer in [&answers[0], &answers[2]] {
        let event = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(event.id.as_deref(), answer["id"].as_str());
    }
    assert_eq!(
        hub.metric("sluice_publishes_total{result=\"unauthorized\"}"),
        2
    );
    assert_eq!(
        hub.metric("sluice_publish_refusals_total{reason=\"forbidden_topic\"}"),
        1
    );
    hub.stop().await;
}

/// A batch holds 1 to `limits.max_publish_batch` items within `limits.max_publish_body`
/// bytes: more items is a `413` naming the limit, an empty or malformed batch a `400`, a
/// larger body a `413`; none of them stores anything.
pub async fn batch_publish_is_bounded(f: &dyn HubFactory) {
    let mut config = config();
    config.limits.max_publish_batch = 3;
    config.limits.max_publish_body = 1024;
    let hub = f.start(config).await;
    let item = json!({ "topic": "t", "payload": "x" });
    let post = |body: String| post_publish(&hub, "application/json", body, None);
    let too_many = post(json!([item, item, item, item]).to_string()).await;
    assert_eq!(too_many.status, 413, "{}", too_many.text());
    assert!(
        too_many.text().contains("limits.max_publish_batch"),
        "{}",
        too_many.text()
    );
    for body in ["[]", "[1, 2]", "[{\"topic\": \"t\"", "[[{}]]"] {
        let refused = post(body.to_owned()).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.text());
        assert_eq!(refused.json().unwrap()["code"], 400, "{body}");
    }
    let big = json!({ "topic": "t", "payload": "x".repeat(600) });
    assert_eq!(post(json!([big, big]).to_string()).await.status, 413);
    assert_eq!(
        hub.metric("sluice_publish_refusals_total{reason=\"batch_too_large\"}"),
        1
    );
    assert_eq!(
        hub.metric("sluice_publish_refusals_total{reason=\"invalid_batch\"}"),
        4
    );
    let answers = publish_batch(&hub, &[item.clone(), item.clone(), item]).await;
    assert_eq!(
        answers[0]["seq"], 1,
        "nothing was stored by the refused bodies"
    );
    hub.stop().await;
}

/// Batches posted at once over several connections reach a subscriber whole: every message
/// exactly once, in sequence order, with the ids their answers gave.
pub async fn batches_reach_a_subscriber_exactly_once(f: &dyn HubFactory) {
    let hub = f.start(config()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let batch = |n: usize| {
        let items: Vec<_> = (0..100)
            .map(|i| json!({ "topic": "t", "payload": n * 100 + i }))
            .collect();
        let hub = &hub;
        async move { publish_batch(hub, &items).await }
    };
    let (a, b, c, d) = tokio::join!(batch(0), batch(1), batch(2), batch(3));
    let mut answered: Vec<(u64, String)> = [a, b, c, d]
        .iter()
        .flatten()
        .map(|answer| {
            (
                answer["seq"].as_u64().unwrap(),
                answer["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    answered.sort();
    let seqs: Vec<u64> = answered.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(
        seqs,
        (1..=400).collect::<Vec<_>>(),
        "every message stored once"
    );
    let seen = read_messages(&hub, &mut client, 400).await;
    let seen_ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    let answered_ids: Vec<&str> = answered.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(
        seen_ids, answered_ids,
        "each delivered once, in sequence order"
    );
    hub.stop().await;
}

/// The configuration of the removal scenarios: the admin API for an operator on the hub's own
/// machine, topics under a prefix (a JetStream stream cannot capture every subject), a small
/// ring (readers of the past read it from the stream), and room for large events.
fn removal_config() -> Config {
    let mut config = Config {
        topic_prefix: "app".into(),
        ..Config::default()
    };
    config.admin.loopback = true;
    config.fanout.ring_size = 16;
    config.sse.write_timeout = Duration::from_secs(60);
    config.sse.max_event_size = 256 * 1024;
    config
}

/// The stream sequence of an event id (`<seq>-<incarnation>`).
fn seq_of(id: Option<&str>) -> u64 {
    id.and_then(|id| id.split('-').next())
        .and_then(|seq| seq.parse().ok())
        .unwrap_or_else(|| panic!("an event id: {id:?}"))
}

/// What a reader was given: its messages' positions, its `removed` gaps' ranges and its
/// `expired` ones' (positions below the stream's first, told to every reader), in order.
#[derive(Debug, Default)]
struct Given {
    messages: Vec<u64>,
    gaps: Vec<(u64, u64)>,
    expired: Vec<(u64, u64)>,
}

impl Given {
    /// Whether position `seq` was delivered or told of.
    fn accounts_for(&self, seq: u64) -> bool {
        self.messages.contains(&seq)
            || (self.gaps.iter().chain(&self.expired)).any(|(a, b)| (*a..=*b).contains(&seq))
    }
}

/// Reads `client`'s events until every position of `wanted` is accounted for: each message
/// once and in order, each gap after what came before it.
async fn read_until_accounted(
    client: &mut sluice_test_support::SseClient,
    wanted: &std::collections::BTreeSet<u64>,
) -> Given {
    let mut given = Given::default();
    let mut after = 0;
    while !wanted.iter().all(|seq| given.accounts_for(*seq)) {
        let frame = client.next_event().await.expect("the stream goes on");
        match frame.event_type() {
            "message" => {
                let seq = seq_of(frame.id.as_deref());
                assert!(seq > after, "message {seq} after {after}: in order, once");
                assert!(wanted.contains(&seq), "message {seq} is not of this reader");
                given.messages.push(seq);
                after = seq;
            }
            "gap" => {
                let gap = data(&frame);
                let (from, to) = (gap["from"].as_u64().unwrap(), gap["to"].as_u64().unwrap());
                assert!(after < from && from <= to, "gap {gap} after {after}");
                assert_eq!(
                    seq_of(frame.id.as_deref()),
                    to,
                    "a gap's id is its last position"
                );
                match gap["reason"].as_str() {
                    Some("removed") => given.gaps.push((from, to)),
                    Some("expired") => given.expired.push((from, to)),
                    _ => panic!("unexpected gap {gap}"),
                }
                after = to;
            }
            other => panic!("unexpected {other} event: {frame:?}"),
        }
    }
    given
}

/// Readers replaying the past from the stream when an operator purges one topic through the
/// hub: a reader of that topic is told of the purged messages it had not read yet with
/// `removed` gaps, a reader of another topic gets all of its messages and no gap, a reader of
/// both gets every message of the other topic once and gaps for the purged ones. No gap holds
/// nothing of its reader's: every one covers a purged message of its topics.
pub async fn subject_purge_during_replay_is_told_to_its_readers_only(f: &dyn HubFactory) {
    const MESSAGES: u64 = 320;
    let hub = f.start(removal_config()).await;
    // 40 MiB: far more than the socket buffers (and a JetStream consumer's prefetch) hold
    // while the readers read nothing, so each reads most of its topics from the stream after
    // the purge.
    let payload = "p".repeat(128 * 1024);
    let mut topic_of = std::collections::BTreeMap::new();
    for n in 0..MESSAGES {
        let topic = if n % 2 == 0 { "a" } else { "b" };
        let ack = hub.publish(topic, json!(payload)).await;
        topic_of.insert(ack["seq"].as_u64().expect("a sequence"), topic);
    }
    let mut readers = Vec::new();
    for query in ["?topic=a", "?topic=b", "?topic=a&topic=b"] {
        let mut client = hub.subscribe(&format!("{query}&last-id=0")).await;
        client.set_timeout(Duration::from_secs(60));
        expect_event(&mut client, "connected").await.unwrap();
        readers.push((query, client));
    }
    let stream = hub.served_stream().await;
    let purged = hub
        .admin(
            "POST",
            &format!("/admin/streams/{stream}/purge"),
            Some(json!({ "subject": "app.a" })),
        )
        .await;
    assert_eq!(purged["purged"], MESSAGES / 2);
    for (query, mut client) in readers {
        let wanted: std::collections::BTreeSet<u64> = topic_of
            .iter()
            .filter(|(_, topic)| query.contains(&format!("topic={topic}")))
            .map(|(seq, _)| *seq)
            .collect();
        let given = read_until_accounted(&mut client, &wanted).await;
        for seq in &wanted {
            let purged = topic_of[seq] == "a";
            assert!(
                purged || given.messages.contains(seq),
                "{query}: message {seq} of b not delivered"
            );
        }
        for (from, to) in &given.gaps {
            assert!(
                (*from..=*to).any(|seq| topic_of.get(&seq) == Some(&"a") && wanted.contains(&seq)),
                "{query}: gap {from}..={to} holds no purged message of its reader"
            );
        }
        // The purge moved the stream's first message to the first of b: a reader that had
        // not passed the positions before it may be told of them as expired, as of any
        // retention.
        let first_kept = topic_of
            .iter()
            .find(|(_, t)| **t == "b")
            .map(|(seq, _)| *seq);
        for (from, to) in &given.expired {
            assert!(
                Some(*to) < first_kept,
                "{query}: expired {from}..={to} lies before the first message kept"
            );
        }
        match query {
            "?topic=b" => assert!(given.gaps.is_empty(), "no noise for b: {given:?}"),
            _ => assert!(
                !given.gaps.is_empty(),
                "{query}: the purge reached unread positions, so a gap was told: {given:?}"
            ),
        }
    }
    assert!(hub.metric("sluice_gaps_total{reason=\"removed\"}") >= 2);
    hub.stop().await;
}

/// A client resuming from an id whose message was deleted since (through the hub) continues
/// right after it, told of the deleted messages of its topic after it with a `removed` gap,
/// and of nothing else; a reader of another topic is told of nothing.
pub async fn resume_from_a_deleted_id_continues_right_after_it(f: &dyn HubFactory) {
    let hub = f.start(removal_config()).await;
    let mut ids = Vec::new();
    // a: 1, 2, 4, 6, 8, 10; b: 3, 5, 7, 9.
    for topic in ["a", "a", "b", "a", "b", "a", "b", "a", "b", "a"] {
        let ack = hub.publish(topic, json!(topic)).await;
        ids.push(ack["id"].as_str().expect("an id").to_owned());
    }
    let stream = hub.served_stream().await;
    for seq in [4, 6, 5] {
        let path = format!("/admin/streams/{stream}/messages/{seq}");
        assert_eq!(hub.admin("DELETE", &path, None).await["deleted"], seq);
    }
    let resume = |topic: &'static str, after: usize| {
        let hub = &hub;
        let id = ids[after - 1].clone();
        async move {
            let mut client = hub
                .subscribe_with(&format!("?topic={topic}"), &[("last-event-id", &id)])
                .await;
            let connected = expect_event(&mut client, "connected").await.unwrap();
            assert_eq!(
                connected.id.as_deref(),
                Some(id.as_str()),
                "resumed right after it"
            );
            client
        }
    };
    // Its last event was 4, deleted since: 6 is told (from 5 or 6: position 5 held a b), then
    // 8 and 10.
    let mut client = resume("a", 4).await;
    let gap = expect_event(&mut client, "gap").await.unwrap();
    let data = data(&gap);
    assert_eq!(data["reason"], "removed", "{data}");
    assert!([5, 6].contains(&data["from"].as_u64().unwrap()), "{data}");
    assert_eq!(data["to"], 6, "{data}");
    for seq in [8, 10] {
        let message = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(message.id.as_deref(), Some(ids[seq - 1].as_str()));
    }
    // A reader of b from the same id: 5 told, then 7 and 9.
    let mut client = resume("b", 4).await;
    let gap = super::data(&expect_event(&mut client, "gap").await.unwrap());
    assert_eq!(
        (gap["from"].clone(), gap["to"].clone()),
        (json!(5), json!(5))
    );
    for seq in [7, 9] {
        let message = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(message.id.as_deref(), Some(ids[seq - 1].as_str()));
    }
    // From 6 (deleted too), nothing of a was deleted after it: 8 comes first.
    let mut client = resume("a", 6).await;
    let message = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(message.id.as_deref(), Some(ids[7].as_str()));
    // A reader of a topic nothing was deleted of is told nothing: its next event is its own.
    let mut client = resume("c", 4).await;
    let c = hub.publish("c", json!("c")).await;
    let message = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(message.id.as_deref(), c["id"].as_str());
    assert_eq!(hub.metric("sluice_gaps_total{reason=\"removed\"}"), 2);
    hub.stop().await;
}
