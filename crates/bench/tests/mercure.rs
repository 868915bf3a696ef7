//! `sluice bench --target mercure` against a real hub with `[mercure]` on: subscribers on
//! `GET /.well-known/mercure?topic=…` over HTTP/1.1 and over HTTP/2 each get every update of
//! their topic exactly once, published as forms with a publisher's token made from the key;
//! a key that is not the hub's, or a hub without Mercure, fails the run before any client
//! connects, saying why and never showing the key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_bench::{Config, Hub, Protocol, PublisherKey};
use sluice_server::backend::embedded::EmbeddedBackend;
use sluice_server::{Hub as SluiceHub, Listener};
use sluice_test_support::tempfile;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The hub's `mercure.publisher_jwt_key`.
const PUBLISHER_KEY: &str = "bench-publisher-secret-0123456789abcdef";

/// An embedded hub on plain HTTP (and h2c), Mercure on or off; its subscribers need no token
/// (`anonymous`), as the bench's carry none.
struct MercureHub {
    addr: SocketAddr,
    dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MercureHub {
    async fn start(mercure: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "topic_prefix = \"app\"\n[http2]\nh2c = true\n[mercure]\nenabled = {mercure}\n\
             anonymous = true\npublisher_jwt_key = \"{PUBLISHER_KEY}\"\n"
        );
        let env = Vec::<(String, String)>::new();
        let (mut config, _) =
            sluice_server::config::load_str(&text, "bench test", env, &Default::default())
                .expect("the hub's configuration");
        config.embedded.data_dir = dir.path().join("data");
        config.embedded.sync = "never".into();
        config.validate().expect("test config is valid");
        let (backend, _) = EmbeddedBackend::open(&config.embedded)
            .await
            .expect("open store");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let hub = SluiceHub::new(config, Arc::new(backend)).expect("hub");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve_listeners(
            hub,
            vec![Listener::plain(listener)],
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A short run of 12 Mercure subscribers on two topics, publishing with `key`.
    fn bench(&self, protocol: Protocol, streams_per_connection: u64, key: &str) -> Config {
        Config {
            url: format!("http://127.0.0.1:{}", self.addr.port()),
            ca_file: None,
            protocol,
            streams_per_connection,
            hub: Hub::Mercure,
            clients: 12,
            rate: 40.0,
            duration: Duration::from_secs(1),
            topics: 2,
            payload_bytes: 100,
            server_pid: None,
            connect_rate: 1000,
            publishers: 2,
            source_addresses: 1,
            topic_prefix: "bench".to_owned(),
            mercure_publisher_key: Some(PublisherKey::new(key)),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let stopped = tokio::time::timeout(Duration::from_secs(20), task).await;
            stopped
                .expect("the hub stops")
                .expect("hub task")
                .expect("hub");
        }
        drop(self.dir);
    }
}

/// Runs `config` and returns its report as JSON, failing the test unless the run was clean.
async fn clean_run(config: Config) -> Value {
    let report = sluice_bench::run(config).await.expect("the run completes");
    let json = serde_json::to_value(&report).expect("report as JSON");
    assert!(report.is_ok(), "{}\n{json:#}", report.to_text());
    json
}

/// Asserts that every one of the 12 clients got every acknowledged update of its topic once.
fn assert_exactly_once(report: &Value) {
    assert_eq!(report["load"]["hub"], "mercure", "{report:#}");
    let delivery = &report["delivery"];
    let published = report["publish"]["published"].as_u64().expect("published");
    assert_eq!(published, 40, "{report:#}");
    // 12 clients over 2 topics: each update reaches 6 of them.
    assert_eq!(delivery["expected"], published * 6, "{report:#}");
    assert_eq!(delivery["received"], delivery["expected"], "{report:#}");
    assert_eq!(delivery["clients_exactly_once"], 12, "{report:#}");
    for count in [
        "missing",
        "out_of_order",
        "foreign",
        "gaps",
        "disconnects",
        "protocol_errors",
    ] {
        assert_eq!(delivery[count], 0, "{count}: {report:#}");
    }
    assert_eq!(report["connect"]["errors"], 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercure_subscribers_each_get_every_update_exactly_once() {
    let hub = MercureHub::start(true).await;
    let report = clean_run(hub.bench(Protocol::Http1, 1, PUBLISHER_KEY)).await;
    assert_exactly_once(&report);
    assert_eq!(report["load"]["connections"], 12, "{report:#}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercure_subscribers_sharing_http2_connections_each_get_every_update_exactly_once() {
    let hub = MercureHub::start(true).await;
    let report = clean_run(hub.bench(Protocol::Http2, 5, PUBLISHER_KEY)).await;
    assert_exactly_once(&report);
    assert_eq!(report["load"]["connections"], 3, "{report:#}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_key_that_is_not_the_hubs_fails_the_run_without_showing_it() {
    let hub = MercureHub::start(true).await;
    let wrong = "not-the-hubs-key-0123456789abcdef";
    let err = sluice_bench::run(hub.bench(Protocol::Http1, 1, wrong))
        .await
        .expect_err("the run fails");
    let err = format!("{err:#}");
    for part in [
        &format!("the hub at {} answered POST", hub.addr),
        "/.well-known/mercure with 401 Unauthorized",
        "is --mercure-publisher-key the hub's mercure.publisher_jwt_key",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    assert!(!err.contains(wrong), "{err}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_without_mercure_fails_the_run_saying_so() {
    let hub = MercureHub::start(false).await;
    let err = sluice_bench::run(hub.bench(Protocol::Http1, 1, PUBLISHER_KEY))
        .await
        .expect_err("the run fails");
    let err = format!("{err:#}");
    assert!(
        err.contains("with 404 Not Found (is the hub's [mercure] enabled?)"),
        "{err}"
    );
    assert!(!err.contains(PUBLISHER_KEY), "{err}");
    hub.stop().await;
}
