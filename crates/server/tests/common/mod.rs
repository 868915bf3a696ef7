//! A hub served on a real loopback socket inside the test process, over any backend.
//!
//! Scenarios in `scenarios/` only talk HTTP to a [`TestHub`], so every backend runs the same
//! ones: a test file builds a [`HubFactory`] for its backend and calls each scenario.
#![allow(dead_code, missing_docs)]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sluice_backend::BackendRoles;
use sluice_backend::embedded::EmbeddedBackend;
use sluice_server::Hub;
use sluice_server::config::Config;
use sluice_test_support::{HttpResponse, SseClient, http};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Declares one test per shared scenario in [`scenarios`], each run against `$factory` — the
/// one list every backend's test file uses, so no backend can miss a scenario.
macro_rules! every_scenario {
    ($factory:expr) => {
        common::every_scenario!(@tests $factory;
            sse_headers_and_connected_frame,
            multi_topic_stream_in_order,
            last_event_id_header_wins,
            connected_id_resumes_losslessly,
            topic_rules,
            publish_dedupes_by_msg_id,
            publish_errors_carry_code,
            cursor_ahead_reports_gap,
            cursor_from_other_incarnation_reports_gap,
            replay_cap_counts_backlog_only,
            oversized_message_becomes_gap,
            replay_window_skips_old_backlog,
            one_feed_per_topic_set,
            resume_behind_ring_catches_up_then_live,
            filtered_catch_up_skips_other_topics_silently,
            rings_keep_within_their_memory,
            paused_reader_gets_everything,
            steady_slow_reader_is_never_closed,
            stalled_socket_is_closed_as_slow,
            max_connections_refusals,
            probes_and_metrics,
            cors_rules,
            shutdown_drains_streams,
            serves_the_page,
            stream_summary_is_the_streams_state,
            authorization_is_enforced,
            heartbeats_keep_idle_streams_alive,
            hostile_payloads_stay_inside_one_event,
            publish_body_is_bounded,
            batch_publish_answers_each_item_in_order,
            batch_items_are_read_as_single_publishes,
            ndjson_batch_publishes_line_by_line,
            batch_item_outside_the_grant_is_refused_alone,
            batch_publish_is_bounded,
            batches_reach_a_subscriber_exactly_once,
            subject_purge_during_replay_is_told_to_its_readers_only,
            resume_from_a_deleted_id_continues_right_after_it,
            recent_starts_give_their_messages_then_live,
            repair_latest_converges_after_a_lost_position,
            bad_start_values_are_refused_naming_the_parameter,
        );
    };
    (@tests $factory:expr; $($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            common::scenarios::$name(&$factory).await;
        }
    )*};
}
pub(crate) use every_scenario;

/// A running hub.
pub struct TestHub {
    pub hub: Arc<Hub>,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    /// Whatever must live as long as the hub (temporary directories, servers).
    pub keep: Vec<Box<dyn std::any::Any + Send>>,
}

impl TestHub {
    /// Serves `backend` with `config` on 127.0.0.1:0.
    pub async fn start(mut config: Config, backend: impl Into<BackendRoles>) -> Self {
        config.listen = "127.0.0.1:0".parse().expect("address");
        config.validate().expect("test config is valid");
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let hub = Hub::new(config, backend).expect("auth keys load");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve(hub.clone(), listener, async move {
            let _ = stopped.await;
        }));
        Self {
            hub,
            addr,
            stop: Some(stop),
            task: Some(task),
            keep: Vec::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Opens an event stream like an `EventSource`.
    pub async fn subscribe(&self, query: &str) -> SseClient {
        self.subscribe_with(query, &[]).await
    }

    pub async fn subscribe_with(&self, query: &str, headers: &[(&str, &str)]) -> SseClient {
        SseClient::connect_with_headers(&self.url(&format!("/events{query}")), headers)
            .await
            .expect("connect")
    }

    /// Publishes and returns the answer (any status).
    pub async fn publish_raw(&self, body: Value) -> HttpResponse {
        http::post_json(&self.url("/publish"), &body)
            .await
            .expect("publish request")
    }

    /// Publishes `payload` on `topic`; panics unless stored; returns the answer.
    pub async fn publish(&self, topic: &str, payload: Value) -> Value {
        let response = self
            .publish_raw(json!({ "topic": topic, "payload": payload }))
            .await;
        assert_eq!(response.status, 200, "publish failed: {}", response.text());
        response.json().expect("json answer")
    }

    pub async fn get(&self, path: &str) -> HttpResponse {
        http::get(&self.url(path)).await.expect("GET")
    }

    /// An admin request from the hub's own machine (the hub runs with `admin.loopback`);
    /// panics unless it is answered `200`; the answer.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let request = http::request(
            method.parse().expect("a method"),
            &self.url(path),
            &[("content-type", "application/json")],
        )
        .expect("an admin request")
        .body(body.map(|b| b.to_string()).unwrap_or_default().into())
        .expect("a body");
        let answer = http::send(request).await.expect("admin request");
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.text());
        answer.json().expect("a JSON answer")
    }

    /// The name of the stream the hub serves, as the admin API lists it (the only one).
    pub async fn served_stream(&self) -> String {
        let listed = self.admin("GET", "/admin/streams", None).await;
        listed["streams"][0]
            .as_str()
            .expect("a stream is listed")
            .to_owned()
    }

    /// The value of one metric line (exact name with labels), 0 when absent.
    pub fn metric(&self, name: &str) -> u64 {
        metric_value(&self.hub.metrics_text(), name)
    }

    /// Polls `condition` until it holds or 20 s pass.
    pub async fn eventually(&self, what: &str, mut condition: impl FnMut(&Self) -> bool) {
        sluice_test_support::eventually(what, || condition(self)).await;
    }

    /// Shuts down gracefully and waits for the server to return.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("server stops within 20s")
                .expect("server task")
                .expect("server result");
        }
    }
}

pub fn metric_value(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0, |v| v as u64)
}

/// Starts hubs for scenarios.
pub trait HubFactory: Sync {
    /// A hub over a fresh, empty stream capturing every subject, configured by `config`.
    fn start(&self, config: Config) -> Pin<Box<dyn Future<Output = TestHub> + Send + '_>>;
}

/// Hubs over the embedded store in a temporary directory.
pub struct Embedded;

impl Embedded {
    /// Opens the embedded backend for `config` in a new temporary directory.
    pub async fn backend(config: &mut Config) -> (Arc<EmbeddedBackend>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        config.embedded.data_dir = dir.path().to_owned();
        config.embedded.sync = "never".into();
        let (backend, _) = EmbeddedBackend::open(&config.embedded)
            .await
            .expect("open store");
        (Arc::new(backend), dir)
    }

    /// A hub plus its concrete backend, for tests that manipulate the store.
    pub async fn start_with_store(mut config: Config) -> (TestHub, Arc<EmbeddedBackend>) {
        let (backend, dir) = Self::backend(&mut config).await;
        let mut hub = TestHub::start(config, backend.clone()).await;
        hub.keep.push(Box::new(dir));
        (hub, backend)
    }
}

impl HubFactory for Embedded {
    fn start(&self, config: Config) -> Pin<Box<dyn Future<Output = TestHub> + Send + '_>> {
        Box::pin(async move { Self::start_with_store(config).await.0 })
    }
}

/// The JSON data of a frame.
pub fn data(frame: &sluice_test_support::Frame) -> Value {
    serde_json::from_str(frame.data.as_deref().unwrap_or("null")).expect("JSON data")
}

/// Reads events until one of type `event` arrives; fails on anything else dispatched.
pub async fn expect_event(
    client: &mut SseClient,
    event: &str,
) -> anyhow::Result<sluice_test_support::Frame> {
    let frame = client.next_event().await.context("next event")?;
    if frame.event_type() != event {
        bail!("expected a {event} event, got {frame:?}");
    }
    Ok(frame)
}
pub mod scenarios;

/// A subscription refused for `reason` (a connection limit): a plain request gets 429 with
/// `Retry-After`, an `EventSource` a 200 with only a `retry:` hint, and the refusals for
/// `reason` now number `refusals`. Once `held` (the streams holding the places) is dropped, a
/// new stream connects.
pub async fn refused_until_released<T>(hub: &TestHub, reason: &str, refusals: u64, held: T) {
    let response = hub.get("/events?topic=t").await;
    assert_eq!(response.status, 429);
    assert!(
        response
            .header("retry-after")
            .is_some_and(|v| v.parse::<u64>().is_ok())
    );
    let mut refused = hub.subscribe("?topic=t").await;
    assert_eq!(refused.status(), 200);
    let frames = refused.frames_until_end().await.unwrap();
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].retry.is_some_and(|ms| ms >= 2000) && frames[0].data.is_none());
    assert_eq!(
        hub.metric(&format!(
            "sluice_connections_rejected_total{{reason=\"{reason}\"}}"
        )),
        refusals
    );
    drop(held);
    hub.eventually("the places were released", |h| {
        h.metric("sluice_active_connections") == 0
    })
    .await;
    let mut again = hub.subscribe("?topic=t").await;
    expect_event(&mut again, "connected")
        .await
        .expect("a place is free again");
}

/// A stream deleted and created again under a connected client (`recreate` does it on the
/// backend): the client's stream ends without another event; resuming with an id of the old
/// incarnation gives an `incarnation` gap, then the new stream's messages.
pub async fn recreated_stream_ends_streams_and_resume_reports_incarnation(
    hub: &TestHub,
    recreate: impl AsyncFnOnce(),
) {
    let old = hub.publish("t", json!("old")).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    recreate().await;
    let rest = client
        .frames_until_end()
        .await
        .expect("the stream ends cleanly");
    assert!(rest.iter().all(|f| !f.dispatches_event()), "{rest:?}");
    let new = hub.publish("t", json!("new")).await;
    let mut client = hub
        .subscribe_with(
            "?topic=t",
            &[("last-event-id", old["id"].as_str().unwrap())],
        )
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let gap = expect_event(&mut client, "gap").await.unwrap();
    assert_eq!(data(&gap)["reason"], "incarnation");
    let next = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(next.id.as_deref(), new["id"].as_str());
    assert_ne!(old["id"], new["id"]);
}

/// The configuration for [`positions_removed_during_catch_up_are_reported`]: a small ring, so
/// a reader that pauses is served from the stream, and room for large events.
pub fn catch_up_config() -> Config {
    let mut config = Config::default();
    config.fanout.ring_size = 16;
    config.sse.write_timeout = Duration::from_secs(60);
    config.sse.max_event_size = 256 * 1024;
    config
}

/// A reader behind the ring is catching up from the stream when the stream's front is removed
/// (`purge_before(seq)` removes every message below `seq` on the backend). The client is told
/// of every position it did not get in a `gap` frame before the next message: what it
/// receives covers every position exactly once, in order.
pub async fn positions_removed_during_catch_up_are_reported(
    hub: &TestHub,
    purge_before: impl AsyncFnOnce(u64),
) {
    const MESSAGES: u64 = 200;
    const PURGED_BELOW: u64 = 190;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let mut watcher = hub.subscribe("?topic=t").await;
    expect_event(&mut watcher, "connected").await.unwrap();
    // Neither reads while the messages are published: their receive buffers overflow, and on
    // a loaded machine the kernel's retransmission backoff can hold a connection still for
    // longer than the default wait for a frame.
    for reader in [&mut client, &mut watcher] {
        reader.set_timeout(Duration::from_secs(60));
    }
    // 25 MiB: far more than the socket buffers and the ring hold while the client reads
    // nothing, so the session ends up reading from the stream.
    let payload = "p".repeat(128 * 1024);
    let mut seq_of = std::collections::HashMap::new();
    for _ in 0..MESSAGES {
        let ack = hub.publish("t", json!(payload)).await;
        let id = ack["id"].as_str().expect("an id").to_owned();
        seq_of.insert(id, ack["seq"].as_u64().expect("a sequence"));
    }
    // A reader that keeps up: once it has every message, so has the shared feed, and the
    // removal below concerns only the paused client's own read of the stream.
    for _ in 0..MESSAGES {
        expect_event(&mut watcher, "message").await.unwrap();
    }
    // Read until the session has begun catching up from the stream, then pause again: its
    // catch-up read stops well below PURGED_BELOW (the socket buffers hold ~80 events).
    let mut delivered = Vec::new();
    while hub.metric("sluice_catchups_total") == 0 {
        let frame = expect_event(&mut client, "message").await.unwrap();
        delivered.push(seq_of[frame.id.as_deref().unwrap()]);
    }
    purge_before(PURGED_BELOW).await;
    let mut gaps = Vec::new();
    let mut next = 1;
    for seq in &delivered {
        assert_eq!(*seq, next, "in order before the purge");
        next += 1;
    }
    while next <= MESSAGES {
        let frame = client.next_event().await.expect("the stream goes on");
        match frame.event_type() {
            "message" => {
                let seq = seq_of[frame.id.as_deref().unwrap()];
                assert_eq!(seq, next, "no position skipped without a gap frame");
                next += 1;
            }
            "gap" => {
                let gap = data(&frame);
                assert_eq!(gap["reason"], "expired", "{gap}");
                assert_eq!(gap["from"], json!(next), "{gap}");
                let to = gap["to"].as_u64().expect("to");
                assert!(
                    to < PURGED_BELOW,
                    "only removed positions are reported: {gap}"
                );
                gaps.push((next, to));
                next = to + 1;
            }
            other => panic!("unexpected {other} event: {frame:?}"),
        }
    }
    // The removal reached the reader's position, so a gap was reported: up to the purge, or
    // up to where the ring begins when the ring still holds some of the removed messages
    // (those are delivered from memory).
    assert!(
        !gaps.is_empty(),
        "the removal reached the reader's position, so a gap was reported"
    );
    assert_eq!(
        hub.metric("sluice_gaps_total{reason=\"expired\"}"),
        gaps.len() as u64
    );
}
