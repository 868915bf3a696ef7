//! The hub over the embedded store, on real loopback HTTP: every shared scenario, plus the
//! rules that need to manipulate the store directly.

mod common;

use common::{Embedded, data, expect_event};
use serde_json::json;
use sluice_backend::embedded::stream_config;
use sluice_backend::{Backend, PublishRequest};
use sluice_protocol::headers::{Headers, NATS_MARKER_REASON};
use sluice_server::config::{Config, StreamDecl};
use sluice_store::PurgeRequest;

common::every_scenario!(Embedded);

fn narrow_stream_config() -> Config {
    let mut config = Config::default();
    let mut decl = StreamDecl::default_stream();
    decl.subjects = vec!["orders.>".into()];
    config.embedded.streams = vec![decl];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_outside_the_stream_are_rejected() {
    let (hub, _) = Embedded::start_with_store(narrow_stream_config()).await;
    for query in ["?topic=users.1", "?topic=%3E", "?topic=orders"] {
        let response = hub.get(&format!("/events{query}")).await;
        assert_eq!(response.status, 400, "{query}");
        assert!(
            response.text().contains("outside the stream"),
            "{}",
            response.text()
        );
    }
    let response = hub
        .publish_raw(json!({ "topic": "users.1", "payload": 1 }))
        .await;
    assert_eq!(response.status, 400);
    let mut client = hub.subscribe("?topic=orders.*").await;
    expect_event(&mut client, "connected").await.unwrap();
    hub.stop().await;
}

/// A marker another client stored (here one saying `Remove`) is told like one the stream left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_delete_marker_is_told_as_deleted() {
    let (hub, backend) = Embedded::start_with_store(Config::default()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let mut headers = Headers::new();
    headers.insert(NATS_MARKER_REASON, "Remove");
    backend
        .publish(PublishRequest {
            subject: "t".into(),
            headers,
            payload: Default::default(),
        })
        .await
        .expect("marker stored");
    let after = hub.publish("t", json!("real")).await;
    let deleted = expect_event(&mut client, "deleted").await.unwrap();
    assert_eq!(data(&deleted)["reason"], "remove");
    let next = client.next_event().await.unwrap();
    assert_eq!(
        (next.event_type(), next.id.as_deref()),
        ("message", after["id"].as_str())
    );
    assert_eq!(hub.metric("sluice_gaps_total{reason=\"too_large\"}"), 0);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purged_position_reports_expired_range() {
    let (hub, backend) = Embedded::start_with_store(Config::default()).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(
            hub.publish("t", json!(n)).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let stream = backend.store().unwrap().stream("sluice").unwrap();
    stream
        .purge(PurgeRequest {
            up_to_seq: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = stream.info(None).state.first_seq;
    assert!(
        (3..=5).contains(&first),
        "purged some but not all: first = {first}"
    );
    let position = |seq: u64| ids[usize::try_from(seq).unwrap() - 1].clone();
    let mut client = hub
        .subscribe_with("?topic=t", &[("last-event-id", &ids[0])])
        .await;
    let connected = expect_event(&mut client, "connected").await.unwrap();
    assert_eq!(
        connected.id,
        Some(position(first - 1)),
        "position before the first retained"
    );
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(data(&gap)["reason"], "expired");
    assert_eq!(
        (data(&gap)["from"].clone(), data(&gap)["to"].clone()),
        (json!(2), json!(first - 1))
    );
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(next.id, Some(position(first)));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_stream_ends_streams_and_resume_reports_incarnation() {
    let (hub, backend) = Embedded::start_with_store(Config::default()).await;
    common::recreated_stream_ends_streams_and_resume_reports_incarnation(&hub, async || {
        let store = backend.store().unwrap();
        store.delete_stream("sluice").unwrap();
        store
            .create_stream(stream_config(&StreamDecl::default_stream()))
            .unwrap();
    })
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_with_cause_when_the_stream_is_gone() {
    let (hub, backend) = Embedded::start_with_store(Config::default()).await;
    backend.store().unwrap().delete_stream("sluice").unwrap();
    for path in ["/readyz", "/healthz/"] {
        let response = hub.get(path).await;
        assert_eq!(response.status, 503, "{path}");
        assert_eq!(response.json().unwrap()["cause"], "stream_unavailable");
    }
    assert_eq!(
        hub.metric("sluice_readiness_failures_total{cause=\"stream_unavailable\"}"),
        2
    );
    assert_eq!(hub.get("/livez").await.status, 200);
    let response = hub.get("/events?topic=t").await;
    assert_eq!(response.status, 503);
    let mut client = hub.subscribe("?topic=t").await;
    assert_eq!(
        client.status(),
        200,
        "an EventSource is told to retry, not refused"
    );
    let frames = client.frames_until_end().await.unwrap();
    assert!(frames.len() == 1 && frames[0].retry.is_some());
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_topic_prefix_applies_to_publish_and_subscribe() {
    let config = Config {
        topic_prefix: "app".into(),
        ..Config::default()
    };
    let (hub, backend) = Embedded::start_with_store(config).await;
    hub.publish("a.b", json!(1)).await;
    let stream = backend.store().unwrap().stream("sluice").unwrap();
    assert_eq!(stream.get(1).unwrap().unwrap().subject, "app.a.b");
    hub.stop().await;
}

/// The served stream `ALL`, sourcing `ORDERS` (`orders.>`) and `CHAT` (`chat.>`).
fn aggregate_config() -> Config {
    let mut config = Config::default();
    let decl = |name: &str, subjects: &[&str]| StreamDecl {
        name: name.into(),
        subjects: subjects.iter().map(|s| (*s).into()).collect(),
        ..StreamDecl::default_stream()
    };
    let mut all = decl("ALL", &[]);
    for origin in ["ORDERS", "CHAT"] {
        all.sources.push(sluice_store::SourceConfig {
            name: origin.into(),
            opt_start_seq: None,
            opt_start_time: None,
            filter_subject: None,
            subject_transforms: vec![],
        });
    }
    config.embedded.streams = vec![
        decl("ORDERS", &["orders.>"]),
        decl("CHAT", &["chat.>"]),
        all,
    ];
    config.embedded.stream = "ALL".into();
    config
}

/// A served stream that sources two others: publishes land in the stream that captures their
/// topic, and a subscriber of both gets one ordered stream with one cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_stream_serves_its_sources_in_one_order() {
    let config = aggregate_config();
    let (hub, backend) = Embedded::start_with_store(config).await;
    let mut client = hub.subscribe("?topic=orders.*&topic=chat.*").await;
    expect_event(&mut client, "connected").await.unwrap();
    let outside = hub.get("/events?topic=users.1").await;
    assert_eq!(outside.status, 400, "{}", outside.text());

    let sent = [("orders.1", 1), ("chat.room", 2), ("orders.2", 3)];
    for (topic, n) in sent {
        let answer = hub.publish(topic, json!(n)).await;
        // The origin stored it; its place in ALL is set when the source copies it.
        let origin = if topic.starts_with("orders") {
            "ORDERS"
        } else {
            "CHAT"
        };
        assert_eq!(answer["stream"], origin, "{answer}");
        assert!(answer.get("id").is_none(), "{answer}");
        // Wait for each to be sourced so the aggregate's order is the publish order.
        let frame = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(data(&frame)["topic"], topic);
        assert_eq!(data(&frame)["payload"], n);
    }
    let store = backend.store().unwrap();
    let origin = |name: &str| store.stream(name).unwrap().info(None).state.msgs;
    assert_eq!((origin("ORDERS"), origin("CHAT"), origin("ALL")), (2, 1, 3));
    hub.stop().await;
}

/// A batch whose topics other streams capture: each item is stored by the stream that
/// captures it, in order, and answered with that stream's name and sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lands_in_the_streams_that_capture_its_topics() {
    let (hub, backend) = Embedded::start_with_store(aggregate_config()).await;
    let items = json!([
        { "topic": "orders.1", "payload": 1 },
        { "topic": "orders.2", "payload": 2 },
        { "topic": "chat.room", "payload": 3 },
        { "topic": "users.1", "payload": 4 },
        { "topic": "orders.3", "payload": 5 },
    ]);
    let answers = hub.publish_raw(items).await.json().unwrap();
    let stored: Vec<(&str, u64)> = [0, 1, 2, 4]
        .iter()
        .map(|&i| {
            let answer = &answers[i];
            assert!(answer.get("id").is_none(), "{answer}");
            (
                answer["stream"].as_str().unwrap(),
                answer["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        stored,
        [("ORDERS", 1), ("ORDERS", 2), ("CHAT", 1), ("ORDERS", 3)]
    );
    assert_eq!(answers[3]["code"], 400, "outside every stream: {answers}");
    let store = backend.store().unwrap();
    let orders = store.stream("ORDERS").unwrap();
    let payloads: Vec<_> = (1..=3)
        .map(|seq| orders.get(seq).unwrap().unwrap().payload)
        .collect();
    assert_eq!(payloads, ["1", "2", "5"]);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_removed_during_catch_up_are_reported() {
    let (hub, backend) = Embedded::start_with_store(common::catch_up_config()).await;
    common::positions_removed_during_catch_up_are_reported(&hub, async |below| {
        let stream = backend.store().unwrap().stream("sluice").unwrap();
        stream
            .purge(PurgeRequest {
                up_to_seq: Some(below),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(stream.info(None).state.first_seq, below);
    })
    .await;
    hub.stop().await;
}

/// The shared feed reads the stream after a write batch is stored; when the stream's limits
/// removed part of that batch before the feed read it, connected clients get an `expired` gap
/// for those positions, then the messages still retained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_removed_before_the_feed_read_them_are_reported() {
    let mut config = Config::default();
    config.embedded.streams = vec![StreamDecl {
        max_msgs: 10,
        ..StreamDecl::default_stream()
    }];
    let (hub, backend) = Embedded::start_with_store(config).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let stream = backend.store().unwrap().stream("sluice").unwrap();
    let burst = (0..100)
        .map(|n| ("t".to_owned(), Headers::new(), format!("{n}").into()))
        .collect();
    let acks = stream.publish_batch(burst).await.unwrap();
    assert!(acks.iter().all(Result::is_ok));
    assert_eq!(
        stream.info(None).state.first_seq,
        91,
        "one batch, limits applied"
    );
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(data(&gap)["reason"], "expired");
    assert_eq!(
        (data(&gap)["from"].clone(), data(&gap)["to"].clone()),
        (json!(1), json!(90))
    );
    for n in 91..=100 {
        let message = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(data(&message)["payload"], json!(n - 1), "message {n}");
    }
    assert_eq!(hub.metric("sluice_gaps_total{reason=\"expired\"}"), 1);
    hub.stop().await;
}

/// A stream none of whose metadata files verifies keeps the hub from starting, declared or
/// not: serving on would hide its messages (docs/OPERATIONS.md, "Damaged stream metadata").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_undeclared_stream_keeps_the_backend_from_opening() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = sluice_store::Store::open(dir.path(), Default::default()).unwrap();
    store
        .create_stream(sluice_store::StreamConfig::new("OTHER", ["other.>"]))
        .unwrap();
    store.close();
    let stream_dir = dir.path().join("streams/OTHER");
    std::fs::remove_file(stream_dir.join("meta.inf")).unwrap();
    std::fs::remove_file(stream_dir.join("meta.bak")).unwrap();
    let mut config = Config::default();
    config.embedded.data_dir = dir.path().to_owned();
    let err = sluice_backend::embedded::EmbeddedBackend::open(&config.embedded)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("meta.inf is missing") && err.contains("sluice stream repair OTHER"),
        "{err}"
    );
    assert!(
        !dir.path().join("streams/sluice").exists(),
        "nothing served"
    );
    assert!(stream_dir.join("meta.sum").exists(), "files left in place");
}

/// The stall rule for event streams hyper serves (the second request on a connection) is the
/// connection layer's: a client that keeps reading is never closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_slow_reader_on_a_reused_connection_is_never_closed() {
    common::scenarios::steady_slow_reader_gets_everything(&Embedded, true).await;
}

/// A message removed by its own TTL is never a gap, at the head of the stream as anywhere: a
/// client resuming from before it gets the next message and no `gap`. A position a purge
/// removed is still told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_gone_by_its_own_ttl_at_the_head_is_not_a_gap() {
    let (hub, backend) = Embedded::start_with_store(Config::default()).await;
    let stream = backend.store().unwrap().stream("sluice").unwrap();
    let mut before = hub.subscribe("?topic=t").await;
    let from_start = expect_event(&mut before, "connected")
        .await
        .unwrap()
        .id
        .unwrap();
    drop(before);
    let short = hub
        .publish_raw(json!({ "topic": "t", "payload": "short", "ttl": "1s" }))
        .await;
    assert_eq!(short.status, 200, "{}", short.text());
    let kept = hub.publish("t", json!("kept")).await;
    sluice_test_support::eventually("the TTL removed the first message", || {
        stream.get(1).unwrap().is_none()
    })
    .await;
    let resume = [("last-event-id", from_start.as_str())];
    let mut client = hub.subscribe_with("?topic=t", &resume).await;
    expect_event(&mut client, "connected").await.unwrap();
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(next.id.as_deref(), kept["id"].as_str());
    assert_eq!(hub.metric("sluice_gaps_total{reason=\"expired\"}"), 0);

    let last = hub.publish("t", json!("last")).await;
    let purge = PurgeRequest {
        up_to_seq: Some(3),
        ..Default::default()
    };
    assert_eq!(stream.purge(purge).await.unwrap(), 1);
    let mut client = hub.subscribe_with("?topic=t", &resume).await;
    expect_event(&mut client, "connected").await.unwrap();
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(
        (data(&gap)["reason"].clone(), data(&gap)["to"].clone()),
        (json!("expired"), json!(2))
    );
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(next.id.as_deref(), last["id"].as_str());
    hub.stop().await;
}

/// The store keeps the index entries of at most `embedded.index_memory` of messages in memory
/// (1 MiB: about 8,700) beyond the block being written and the one sealed last
/// (`sluice_store_index_messages` says how many): 30,000 messages of 1,000 bytes fill three
/// blocks of about 8,100 and part of a fourth; the first two let go of their entries, and a
/// client reading from the start still gets every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_its_index_within_its_memory() {
    const MESSAGES: u64 = 30_000;
    let mut config = Config::default();
    config.embedded.sync = "never".into();
    config.embedded.index_memory = 1 << 20;
    let (hub, backend) = Embedded::start_with_store(config).await;
    let stream = backend.store().unwrap().stream("sluice").unwrap();
    let payload = |n: u64| format!("{n:01000}");
    for first in (0..MESSAGES).step_by(1000) {
        let batch = (first..first + 1000)
            .map(|n| ("t".to_owned(), Headers::new(), payload(n).into()))
            .collect();
        let acks = stream.publish_batch(batch).await.unwrap();
        assert!(acks.iter().all(Result::is_ok));
    }
    let in_memory = hub.metric("sluice_store_index_messages");
    assert!(
        in_memory > 0 && in_memory < 16_300,
        "{in_memory} messages indexed in memory: more than the last two blocks"
    );
    let mut client = hub.subscribe("?topic=t&from=earliest").await;
    expect_event(&mut client, "connected").await.unwrap();
    for n in 0..MESSAGES {
        let message = expect_event(&mut client, "message").await.unwrap();
        assert_eq!(data(&message)["payload"], json!(payload(n)), "message {n}");
    }
    hub.stop().await;
}
