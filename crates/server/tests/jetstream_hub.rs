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
use common::{HubFactory, TestHub, scenarios};
use sluice_server::backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::NatsServer;

/// Hubs over a fresh JetStream stream on a nats-server of their own.
struct JetStream;

impl JetStream {
    async fn start_hub(mut config: Config) -> TestHub {
        if config.topic_prefix.is_empty() {
            config.topic_prefix = "app".to_owned();
        }
        let server = NatsServer::start()
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let client = async_nats::connect(server.url())
            .await
            .expect("operator connects");
        async_nats::jetstream::new(client)
            .create_stream(stream::Config {
                name: "EVENTS".to_owned(),
                subjects: vec![format!("{}.>", config.topic_prefix)],
                // The embedded store's default stream keeps a two-minute dedupe window too.
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .expect("stream created");
        let mut jetstream = JetStreamConfig::new(server.url(), "EVENTS");
        jetstream.idle_heartbeat = Duration::from_millis(500);
        config.backend = BackendKind::Jetstream;
        config.jetstream = Some(jetstream.clone());
        let backend = JetStreamBackend::connect(&jetstream)
            .await
            .unwrap_or_else(|err| panic!("backend connects: {err}"));
        let mut hub = TestHub::start(config, Arc::new(backend)).await;
        hub.keep.push(Box::new(server));
        hub
    }
}

impl HubFactory for JetStream {
    fn start(&self, config: Config) -> Pin<Box<dyn Future<Output = TestHub> + Send + '_>> {
        Box::pin(Self::start_hub(config))
    }
}

macro_rules! scenario {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            scenarios::$name(&JetStream).await;
        }
    )*};
}

scenario!(
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
    paused_reader_gets_everything,
    stalled_socket_is_closed_as_slow,
    max_connections_refusals,
    probes_and_metrics,
    cors_rules,
    shutdown_drains_streams,
    serves_the_page,
    authorization_is_enforced,
    heartbeats_keep_idle_streams_alive,
    hostile_payloads_stay_inside_one_event,
);
