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
use sluice_server::backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::{NatsServer, SseClient, eventually_async};

/// Hubs over a fresh JetStream stream on a nats-server of their own.
struct JetStream;

impl JetStream {
    /// A hub and the nats-server behind it, for tests that stop or restart the server.
    async fn start_with_server(mut config: Config) -> (TestHub, NatsServer) {
        if config.topic_prefix.is_empty() {
            config.topic_prefix = "app".to_owned();
        }
        let server = NatsServer::start()
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        operator(&server)
            .await
            .create_stream(events_stream(&config.topic_prefix))
            .await
            .expect("stream created");
        let mut jetstream = JetStreamConfig::new(server.url(), "EVENTS");
        jetstream.idle_heartbeat = Duration::from_millis(500);
        config.backend = BackendKind::Jetstream;
        config.jetstream = Some(jetstream.clone());
        let backend = JetStreamBackend::connect(&jetstream)
            .await
            .unwrap_or_else(|err| panic!("backend connects: {err}"));
        (TestHub::start(config, Arc::new(backend)).await, server)
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
    assert!(hub.metric("sluice_jetstream_consumers_lost_total") >= 1);
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
        eventually_async("a consumer per topic set", async || {
            consumer_names(&js).await.len() >= TOPIC_SETS.len()
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
