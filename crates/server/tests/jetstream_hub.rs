//! The hub over NATS JetStream, on real loopback HTTP: every shared scenario, each against its
//! own nats-server with a fresh stream.
//!
//! A JetStream stream cannot capture every subject (that would include the server's own API),
//! so hubs here use the topic prefix `app` and a stream on `app.>` when the scenario sets no
//! prefix of its own; clients see the same topics either way.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream;
use common::{HubFactory, TestHub, expect_event};
use futures::StreamExt;
use serde_json::json;
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::{NatsOptions, NatsServer, SseClient, eventually_async};

/// Hubs over a fresh JetStream stream on a nats-server of their own.
struct JetStream;

impl JetStream {
    /// A hub and the nats-server behind it, for tests that stop or restart the server.
    async fn start_with_server(config: Config) -> (TestHub, NatsServer) {
        Self::start_tuned(config, |_| {}).await
    }

    /// Like [`JetStream::start_with_server`], with the backend's settings adjusted by `tune`.
    async fn start_tuned(
        config: Config,
        tune: impl FnOnce(&mut JetStreamConfig),
    ) -> (TestHub, NatsServer) {
        Self::start_on(NatsOptions::default(), config, tune).await
    }

    /// Like [`JetStream::start_tuned`], on a nats-server started with `options`.
    async fn start_on(
        options: NatsOptions,
        mut config: Config,
        tune: impl FnOnce(&mut JetStreamConfig),
    ) -> (TestHub, NatsServer) {
        if config.topic_prefix.is_empty() {
            config.topic_prefix = "app".to_owned();
        }
        let server = NatsServer::start_with(options)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let stream = events_stream(&config.topic_prefix);
        (Self::hub_on(&server, stream, config, tune).await, server)
    }

    /// A hub with `config` over the stream `EVENTS` created as `stream` on `server`.
    async fn hub_on(
        server: &NatsServer,
        stream: stream::Config,
        mut config: Config,
        tune: impl FnOnce(&mut JetStreamConfig),
    ) -> TestHub {
        operator(server)
            .await
            .create_stream(stream)
            .await
            .expect("stream created");
        let mut jetstream = JetStreamConfig::new(server.url(), "EVENTS");
        jetstream.idle_heartbeat = Duration::from_millis(500);
        tune(&mut jetstream);
        config.backend = BackendKind::Jetstream;
        config.jetstream = Some(jetstream.clone());
        let backend = JetStreamBackend::connect(&jetstream)
            .await
            .unwrap_or_else(|err| panic!("backend connects: {err}"));
        TestHub::start(config, Arc::new(backend)).await
    }
}

/// The stream every hub here reads: `EVENTS`, capturing everything under `prefix`.
fn events_stream(prefix: &str) -> stream::Config {
    stream::Config {
        name: "EVENTS".to_owned(),
        subjects: vec![format!("{prefix}.>")],
        // The embedded store's default stream keeps a two-minute dedupe window too.
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    }
}

/// An operator's JetStream context on `server`.
async fn operator(server: &NatsServer) -> async_nats::jetstream::Context {
    let client = async_nats::connect(server.url())
        .await
        .expect("operator connects");
    async_nats::jetstream::new(client)
}

impl HubFactory for JetStream {
    fn start(&self, config: Config) -> Pin<Box<dyn Future<Output = TestHub> + Send + '_>> {
        Box::pin(async move {
            let (mut hub, server) = Self::start_with_server(config).await;
            hub.keep.push(Box::new(server));
            hub
        })
    }
}

common::every_scenario!(JetStream);

/// Publishes the numbers of `range` on topic `t` through the hub, retrying while the backend
/// reconnects; returns the event ids.
async fn publish_numbered(hub: &TestHub, range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    let mut ids = Vec::new();
    for n in range {
        eventually_async(&format!("publish {n} accepted"), async || {
            let response = hub.publish_raw(json!({ "topic": "t", "payload": n })).await;
            if response.status != 200 {
                return false;
            }
            let ack = response.json().expect("json");
            ids.push(ack["id"].as_str().expect("id").to_owned());
            true
        })
        .await;
    }
    ids
}

/// The ids of the next `count` message events.
async fn read_ids(client: &mut SseClient, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < count {
        let frame = expect_event(client, "message")
            .await
            .expect("a message event");
        ids.push(frame.id.expect("an id"));
    }
    ids
}

const DEADLINE: Duration = Duration::from_secs(30);

/// Consumers the hub found lost, every reason together.
fn consumers_lost(hub: &TestHub) -> u64 {
    [
        "reconnected",
        "heartbeats_missed",
        "deleted",
        "delivery_gap",
        "failed",
    ]
    .iter()
    .map(|reason| {
        hub.metric(&format!(
            "sluice_jetstream_consumers_lost_total{{reason=\"{reason}\"}}"
        ))
    })
    .sum()
}

/// The names of the consumers on the `EVENTS` stream.
async fn consumer_names(js: &async_nats::jetstream::Context) -> Vec<String> {
    js.get_stream("EVENTS")
        .await
        .expect("the stream exists")
        .consumer_names()
        .map(|name| name.expect("a consumer name"))
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_deleted_under_a_connected_client_loses_nothing() {
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    let mut client = hub.subscribe("?topic=t").await;
    client.set_timeout(DEADLINE);
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    let mut published = publish_numbered(&hub, 1..=3).await;
    let mut received = read_ids(&mut client, 3).await;

    let js = operator(&server).await;
    let names: Vec<String> = js
        .get_stream("EVENTS")
        .await
        .unwrap()
        .consumer_names()
        .map(|name| name.unwrap())
        .collect()
        .await;
    assert!(!names.is_empty(), "the hub reads through a consumer");
    for name in &names {
        js.delete_consumer_from_stream(name, "EVENTS")
            .await
            .unwrap();
    }
    published.extend(publish_numbered(&hub, 4..=6).await);
    received.extend(read_ids(&mut client, 3).await);
    assert_eq!(received, published);
    assert!(consumers_lost(&hub) >= 1);
    assert!(hub.metric("sluice_jetstream_consumers_created_total") >= 2);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_under_a_connected_client_loses_nothing() {
    let (hub, mut server) = JetStream::start_with_server(Config::default()).await;
    let mut client = hub.subscribe("?topic=t").await;
    client.set_timeout(DEADLINE);
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    let mut published = publish_numbered(&hub, 1..=3).await;
    let mut received = read_ids(&mut client, 3).await;

    server.restart().await.unwrap_or_else(|err| panic!("{err}"));
    published.extend(publish_numbered(&hub, 4..=6).await);
    received.extend(read_ids(&mut client, 3).await);
    assert_eq!(received, published);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_the_lost_nats_connection() {
    let (hub, mut server) = JetStream::start_with_server(Config::default()).await;
    assert_eq!(hub.get("/readyz").await.status, 200);
    server.stop().await.expect("server stops");
    eventually_async("/readyz to fail", async || {
        hub.get("/readyz").await.status == 503
    })
    .await;
    let response = hub.get("/readyz").await;
    assert_eq!(response.json().unwrap()["cause"], "backend_disconnected");
    server.restart().await.unwrap_or_else(|err| panic!("{err}"));
    eventually_async("/readyz after the restart", async || {
        hub.get("/readyz").await.status == 200
    })
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_stream_ends_streams_and_resume_reports_incarnation() {
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    let js = operator(&server).await;
    common::recreated_stream_ends_streams_and_resume_reports_incarnation(&hub, async || {
        js.delete_stream("EVENTS").await.expect("deleted");
        js.create_stream(events_stream("app"))
            .await
            .expect("recreated");
    })
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_with_a_cause_when_the_stream_is_gone() {
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    assert_eq!(hub.get("/readyz").await.status, 200);
    operator(&server)
        .await
        .delete_stream("EVENTS")
        .await
        .expect("deleted");
    let response = hub.get("/readyz/").await;
    assert_eq!(response.status, 503);
    let cause = response.json().unwrap()["cause"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        hub.metric(&format!(
            "sluice_readiness_failures_total{{cause=\"{cause}\"}}"
        )),
        1
    );
    let mut client = hub.subscribe("?topic=t").await;
    assert_eq!(client.status(), 200, "an EventSource is told to retry");
    let frames = client.frames_until_end().await.unwrap();
    assert!(frames.len() == 1 && frames[0].retry.is_some(), "{frames:?}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_removed_during_catch_up_are_reported() {
    let (hub, server) = JetStream::start_with_server(common::catch_up_config()).await;
    let js = operator(&server).await;
    common::positions_removed_during_catch_up_are_reported(&hub, async |below| {
        let mut stream = js.get_stream("EVENTS").await.expect("stream");
        stream.purge().sequence(below).await.expect("purged");
        assert_eq!(
            stream.info().await.expect("info").state.first_sequence,
            below
        );
    })
    .await;
    hub.stop().await;
}

/// A clean stop deletes the hub's consumers before it closes the connection, rather than
/// leaving them to the server's inactivity threshold. Several rounds, as a race would leave
/// some behind only now and then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_consumer_on_the_server() {
    const TOPIC_SETS: [&str; 4] = ["?topic=a", "?topic=b", "?topic=c", "?topic=a&topic=b"];
    for round in 1..=5 {
        let (hub, server) = JetStream::start_with_server(Config::default()).await;
        let js = operator(&server).await;
        let mut clients = Vec::new();
        for query in TOPIC_SETS {
            let mut client = hub.subscribe(query).await;
            expect_event(&mut client, "connected")
                .await
                .expect("connected");
            clients.push(client);
        }
        // One consumer serves every topic set of the node.
        eventually_async("the node's consumer", async || {
            !consumer_names(&js).await.is_empty()
        })
        .await;
        hub.stop().await;
        assert_eq!(
            consumer_names(&js).await,
            Vec::<String>::new(),
            "consumers left after stop number {round}"
        );
    }
}

/// A node's consumers on the server do not grow with its topic sets: 1,000 clients, each on a
/// topic of its own, are served by one consumer, and each gets exactly its own messages.
/// Clients that come back with the id of their last event, after the node had stopped reading
/// (nobody listened), read what they missed behind the ring and leave no consumer behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_topic_sets_are_served_by_one_consumer() {
    const USERS: usize = 1000;
    const RETURNING: usize = 100;
    sluice_bench::raise_open_files(2 * USERS as u64 + 256).expect("enough open files");
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    let js = operator(&server).await;
    let mut clients = Vec::new();
    for user in 0..USERS {
        let mut client = hub.subscribe(&format!("?topic=user.{user}")).await;
        expect_event(&mut client, "connected")
            .await
            .expect("connected");
        clients.push(client);
    }
    assert_eq!(
        consumer_names(&js).await.len(),
        1,
        "one consumer for the node"
    );
    let mut last_ids = Vec::new();
    for user in 0..USERS {
        let ack = hub.publish(&format!("user.{user}"), json!(user)).await;
        last_ids.push(ack["id"].as_str().expect("an id").to_owned());
    }
    for (user, client) in clients.iter_mut().enumerate() {
        let frame = expect_event(client, "message").await.expect("its message");
        assert_eq!(frame.id.as_deref(), Some(last_ids[user].as_str()));
    }
    assert_eq!(consumer_names(&js).await.len(), 1, "still one consumer");
    drop(clients);
    eventually_async("no consumer once nobody listens", async || {
        consumer_names(&js).await.is_empty()
    })
    .await;
    let mut missed = Vec::new();
    for user in 0..RETURNING {
        let ack = hub.publish(&format!("user.{user}"), json!(user)).await;
        missed.push(ack["id"].as_str().expect("an id").to_owned());
    }
    let mut returning = Vec::new();
    for (user, last_id) in last_ids.iter().enumerate().take(RETURNING) {
        let query = format!("?topic=user.{user}");
        let mut client = hub
            .subscribe_with(&query, &[("last-event-id", last_id)])
            .await;
        expect_event(&mut client, "connected")
            .await
            .expect("connected");
        returning.push(client);
    }
    for (user, client) in returning.iter_mut().enumerate() {
        let frame = expect_event(client, "message")
            .await
            .expect("what it missed");
        assert_eq!(frame.id.as_deref(), Some(missed[user].as_str()));
    }
    eventually_async("the reads behind the ring are gone", async || {
        consumer_names(&js).await.len() == 1
    })
    .await;
    hub.stop().await;
}

/// Without a topic prefix, topics are whole subjects and the node's one consumer reads every
/// subject (`>`) of a stream that captures only some (here `events.>`): the server accepts it,
/// and each topic set gets its messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_topic_prefix_the_node_reads_the_whole_stream() {
    let server = NatsServer::start()
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let hub = JetStream::hub_on(&server, events_stream("events"), Config::default(), |_| {}).await;
    let js = operator(&server).await;
    let mut a = hub.subscribe("?topic=events.a").await;
    expect_event(&mut a, "connected").await.expect("connected");
    let mut all = hub.subscribe("?topic=events.%3E").await;
    expect_event(&mut all, "connected")
        .await
        .expect("connected");
    let first = hub.publish("events.b", json!(1)).await;
    let second = hub.publish("events.a", json!(2)).await;
    let frame = expect_event(&mut a, "message").await.expect("its message");
    assert_eq!(frame.id.as_deref(), second["id"].as_str());
    for ack in [&first, &second] {
        let frame = expect_event(&mut all, "message")
            .await
            .expect("every message");
        assert_eq!(frame.id.as_deref(), ack["id"].as_str());
    }
    let consumers = consumer_names(&js).await;
    assert_eq!(consumers.len(), 1, "one consumer for the node");
    let info = js
        .get_stream("EVENTS")
        .await
        .expect("stream")
        .consumer_info(&consumers[0])
        .await
        .expect("consumer info");
    assert_eq!(info.config.filter_subject, ">");
    hub.stop().await;
}

/// On a server older than multi-filter consumers (Debian's 2.9), the node's one consumer still
/// serves every topic set, and a client behind its ring with two topics reads them through one
/// common filter, filtered in-process, and then leaves no consumer behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_server_serves_topic_sets_through_one_consumer() {
    let binary = sluice_test_support::debian_nats_server_binary()
        .expect("Debian's nats-server is installed (scripts/test installs it)");
    let (hub, server) =
        JetStream::start_on(NatsOptions::binary(binary), Config::default(), |_| {}).await;
    let js = operator(&server).await;
    let mut both = hub.subscribe("?topic=a&topic=b").await;
    expect_event(&mut both, "connected")
        .await
        .expect("connected");
    let mut other = hub.subscribe("?topic=c").await;
    expect_event(&mut other, "connected")
        .await
        .expect("connected");
    let mut ids = std::collections::HashMap::new();
    for topic in ["a", "c", "b", "x", "a"] {
        let ack = hub.publish(topic, json!(topic)).await;
        ids.entry(topic)
            .or_insert_with(Vec::new)
            .push(ack["id"].as_str().expect("an id").to_owned());
    }
    let expected_both = [&ids["a"][0], &ids["b"][0], &ids["a"][1]];
    for id in expected_both {
        let frame = expect_event(&mut both, "message").await.expect("a or b");
        assert_eq!(frame.id.as_deref(), Some(id.as_str()));
    }
    let frame = expect_event(&mut other, "message").await.expect("c");
    assert_eq!(frame.id.as_deref(), Some(ids["c"][0].as_str()));
    assert_eq!(
        consumer_names(&js).await.len(),
        1,
        "one consumer for the node"
    );
    drop((both, other));
    eventually_async("no consumer once nobody listens", async || {
        consumer_names(&js).await.is_empty()
    })
    .await;
    // Back from before everything: the node reads from the live end, so this is a read behind
    // the ring, through the server's one common filter.
    let mut back = hub.subscribe("?topic=a&topic=b&last-id=0").await;
    expect_event(&mut back, "connected")
        .await
        .expect("connected");
    for id in expected_both {
        let frame = expect_event(&mut back, "message").await.expect("a or b");
        assert_eq!(frame.id.as_deref(), Some(id.as_str()));
    }
    assert_eq!(
        hub.metric("sluice_catchups_total"),
        1,
        "read behind the ring"
    );
    eventually_async("only the node's consumer is left", async || {
        consumer_names(&js).await.len() == 1
    })
    .await;
    hub.stop().await;
}

/// Publishing takes one round trip: after the first publish, none asks for the stream's info
/// (counted by a second client listening to the server's JetStream API subjects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_after_the_first_ask_nothing_but_the_publish() {
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    publish_numbered(&hub, 1..=1).await;
    let listener = async_nats::connect(server.url())
        .await
        .expect("listener connects");
    let mut requests = listener
        .subscribe("$JS.API.STREAM.INFO.EVENTS")
        .await
        .expect("subscribed");
    listener.flush().await.expect("subscription in place");
    publish_numbered(&hub, 2..=21).await;
    // A marker sent by another client after every request of the hub: once the listener has
    // it, it has seen all of them (the server hands a client its messages in order).
    let marker = async_nats::connect(server.url())
        .await
        .expect("marker client connects");
    marker
        .publish("$JS.API.STREAM.INFO.EVENTS", "end-of-count".into())
        .await
        .expect("marker sent");
    marker.flush().await.expect("marker flushed");
    let mut seen = 0;
    loop {
        let request = tokio::time::timeout(DEADLINE, requests.next())
            .await
            .expect("the marker comes through")
            .expect("subscription open");
        if request.payload.as_ref() == b"end-of-count" {
            break;
        }
        seen += 1;
    }
    assert_eq!(
        seen, 0,
        "the hub read the stream's info {seen} times for 20 publishes"
    );
    hub.stop().await;
}

/// The incarnation part of an event id `<seq>-<incarnation>`.
fn epoch(id: &str) -> &str {
    id.split_once('-').map_or("", |(_, epoch)| epoch)
}

/// A hub whose stream held three messages (their ids returned) and was then deleted and created
/// again by an operator (whose context is returned), with no subscriber reading it.
async fn recreated_behind_the_hub() -> (
    TestHub,
    NatsServer,
    async_nats::jetstream::Context,
    Vec<String>,
) {
    let (hub, server) = JetStream::start_with_server(Config::default()).await;
    let old = publish_numbered(&hub, 1..=3).await;
    let js = operator(&server).await;
    js.delete_stream("EVENTS").await.expect("deleted");
    js.create_stream(events_stream("app"))
        .await
        .expect("recreated");
    (hub, server, js, old)
}

/// A stream deleted and created again with no subscriber reading it: the next publish's id
/// carries the new incarnation, the one its message is delivered with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_recreated_behind_the_hub_gives_ids_of_the_new_incarnation() {
    let (hub, _server, _js, old) = recreated_behind_the_hub().await;
    let new = publish_numbered(&hub, 4..=4).await;
    assert_ne!(epoch(&new[0]), epoch(&old[0]), "{old:?} then {new:?}");

    let mut client = hub
        .subscribe_with("?topic=t", &[("last-event-id", old[2].as_str())])
        .await;
    client.set_timeout(DEADLINE);
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    let gap = expect_event(&mut client, "gap").await.expect("a gap");
    assert!(
        gap.data.as_deref().unwrap_or("").contains("incarnation"),
        "{gap:?}"
    );
    let delivered = read_ids(&mut client, 1).await;
    assert_eq!(delivered, new);
    hub.stop().await;
}

/// A batch published after the stream was deleted and created again behind the hub: every
/// item's id carries the new incarnation — also those whose sequence is above the highest one
/// known of the old stream — and they are delivered with those ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_to_a_stream_recreated_behind_the_hub_gives_ids_of_the_new_incarnation() {
    let (hub, _server, js, old) = recreated_behind_the_hub().await;
    // Stored by another client, so the new stream surely takes publishes; the hub's batch then
    // gets sequences 2 to 6: the first two at or below the old last sequence, the rest above.
    js.publish("app.t", "0".into())
        .await
        .expect("sent")
        .await
        .expect("stored");
    let items: Vec<_> = (4..=8)
        .map(|n| json!({ "topic": "t", "payload": n }))
        .collect();
    let answers = hub.publish_raw(json!(items)).await.json().expect("json");
    let new: Vec<String> = (0..5)
        .map(|i| answers[i]["id"].as_str().expect("stored").to_owned())
        .collect();
    for id in &new {
        assert_ne!(epoch(id), epoch(&old[0]), "{old:?} then {new:?}");
    }
    let seqs: Vec<u64> = (0..5)
        .map(|i| answers[i]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3, 4, 5, 6], "{answers}");
    let mut client = hub.subscribe("?topic=t&last-id=0").await;
    client.set_timeout(DEADLINE);
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    assert_eq!(read_ids(&mut client, 6).await[1..], new);
    hub.stop().await;
}

/// With the NATS connection down, publishes and subscriptions are refused at once, saying so,
/// with `Retry-After`: the request timeout (a minute here) is not waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_answered_at_once_with_retry_after() {
    let (hub, mut server) = JetStream::start_tuned(Config::default(), |jetstream| {
        jetstream.request_timeout = Duration::from_secs(60);
        jetstream.reconnect_wait = Duration::from_secs(60);
    })
    .await;
    publish_numbered(&hub, 1..=1).await;
    server.stop().await.expect("server stops");
    eventually_async("the hub to see the connection lost", async || {
        let response = hub.get("/readyz").await;
        response.status == 503 && response.json().expect("json")["cause"] == "backend_disconnected"
    })
    .await;

    // Well under the request timeout: only an answer given at once arrives in time.
    let soon = Duration::from_secs(20);
    let published =
        tokio::time::timeout(soon, hub.publish_raw(json!({"topic": "t", "payload": 2})))
            .await
            .expect("the publish is answered before its request timeout");
    assert_not_connected(&published);
    assert_eq!(
        hub.metric("sluice_publishes_total{result=\"unavailable\"}"),
        1
    );

    let refused = tokio::time::timeout(soon, hub.get("/events?topic=t"))
        .await
        .expect("the subscription is answered at once");
    assert_not_connected(&refused);
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"backend_unavailable\"}"),
        1
    );
    hub.stop().await;
}

/// `response` is a `503` with `Retry-After` saying the NATS connection is down.
fn assert_not_connected(response: &sluice_test_support::HttpResponse) {
    assert_eq!(response.status, 503, "{}", response.text());
    assert!(response.header("retry-after").is_some(), "{response:?}");
    let description = response.json().expect("json")["description"].to_string();
    assert!(
        description.contains("not connected to NATS"),
        "{description}"
    );
}

/// The server killed and started again (same port, same store) under a connected subscriber:
/// the hub recreates the consumer as soon as it is connected again (counted with reason
/// `reconnected`), and the subscriber gets every message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nats_server_is_read_again_as_soon_as_it_is_back() {
    let (hub, mut server) = JetStream::start_tuned(Config::default(), |jetstream| {
        jetstream.reconnect_wait = Duration::from_millis(50);
        // Missed heartbeats must not be what notices the loss.
        jetstream.idle_heartbeat = Duration::from_secs(60);
    })
    .await;
    let mut client = hub.subscribe("?topic=t").await;
    client.set_timeout(DEADLINE);
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    let mut published = publish_numbered(&hub, 1..=3).await;
    let mut received = read_ids(&mut client, 3).await;

    server.kill().expect("server killed");
    server.restart().await.unwrap_or_else(|err| panic!("{err}"));
    published.extend(publish_numbered(&hub, 4..=6).await);
    received.extend(read_ids(&mut client, 3).await);
    assert_eq!(received, published);
    assert!(
        hub.metric("sluice_jetstream_consumers_lost_total{reason=\"reconnected\"}") >= 1,
        "{}",
        hub.hub.metrics_text()
    );
    assert_eq!(
        hub.metric("sluice_jetstream_consumers_lost_total{reason=\"heartbeats_missed\"}"),
        0
    );
    hub.stop().await;
}
