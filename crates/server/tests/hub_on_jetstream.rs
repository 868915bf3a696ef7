//! The hub over NATS JetStream (a real nats-server per test): what happens when the operator
//! deletes or recreates the stream under connected clients. (The shared scenarios run over
//! JetStream in `jetstream_hub.rs`.)

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::{HubFactory, TestHub, scenarios};
use sluice_server::backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::NatsServer;

/// Hubs over a fresh JetStream stream `SLUICE` capturing `app.>`; topics get the prefix `app`.
struct JetStream;

impl HubFactory for JetStream {
    fn start(&self, mut config: Config) -> Pin<Box<dyn Future<Output = TestHub> + Send + '_>> {
        Box::pin(async move {
            let server = NatsServer::start()
                .await
                .unwrap_or_else(|err| panic!("{err}"));
            let client = async_nats::connect(server.url())
                .await
                .expect("operator connects");
            jetstream::new(client)
                .create_stream(stream::Config {
                    name: "SLUICE".to_owned(),
                    subjects: vec!["app.>".to_owned()],
                    allow_message_ttl: true,
                    ..Default::default()
                })
                .await
                .expect("stream created");
            if config.topic_prefix.is_empty() {
                config.topic_prefix = "app".to_owned();
            }
            let mut section = JetStreamConfig::new(server.url(), "SLUICE");
            section.idle_heartbeat = Duration::from_millis(500);
            section.reconnect_wait = Duration::from_millis(50);
            config.backend = BackendKind::Jetstream;
            config.jetstream = Some(section.clone());
            let backend = JetStreamBackend::connect(&section)
                .await
                .unwrap_or_else(|err| panic!("backend connects: {err}"));
            let mut hub = TestHub::start(config, Arc::new(backend)).await;
            hub.keep.push(Box::new(server));
            hub
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_body_is_bounded() {
    scenarios::publish_body_is_bounded(&JetStream).await;
}

/// Starts a hub over JetStream and returns it with an operator's JetStream context.
async fn hub_with_operator() -> (TestHub, jetstream::Context) {
    let hub = JetStream.start(Config::default()).await;
    let server = hub.keep[0]
        .downcast_ref::<NatsServer>()
        .expect("the nats-server");
    let client = async_nats::connect(server.url())
        .await
        .expect("operator connects");
    (hub, jetstream::new(client))
}

fn sluice_stream() -> stream::Config {
    stream::Config {
        name: "SLUICE".to_owned(),
        subjects: vec!["app.>".to_owned()],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_stream_ends_streams_and_resume_reports_incarnation() {
    let (hub, js) = hub_with_operator().await;
    let old = hub.publish("t", serde_json::json!("old")).await;
    let mut client = hub.subscribe("?topic=t").await;
    common::expect_event(&mut client, "connected")
        .await
        .unwrap();
    js.delete_stream("SLUICE").await.expect("deleted");
    js.create_stream(sluice_stream()).await.expect("recreated");
    let rest = client
        .frames_until_end()
        .await
        .expect("the stream ends cleanly");
    assert!(rest.iter().all(|f| !f.dispatches_event()), "{rest:?}");
    let new = hub.publish("t", serde_json::json!("new")).await;
    let mut client = hub
        .subscribe_with(
            "?topic=t",
            &[("last-event-id", old["id"].as_str().unwrap())],
        )
        .await;
    common::expect_event(&mut client, "connected")
        .await
        .unwrap();
    let gap = common::expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(common::data(&gap)["reason"], "incarnation");
    let next = common::expect_event(&mut client, "message").await.unwrap();
    assert_eq!(next.id.as_deref(), new["id"].as_str());
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_with_a_cause_when_the_stream_is_gone() {
    let (hub, js) = hub_with_operator().await;
    assert_eq!(hub.get("/readyz").await.status, 200);
    js.delete_stream("SLUICE").await.expect("deleted");
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
