//! What the bench's tests share: an embedded hub served on one listener of the test's choice,
//! the small run every test makes against it, and the checks of a clean, exactly-once run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_backend::embedded::EmbeddedBackend;
use sluice_bench::{Config, Hub, Protocol};
use sluice_server::config::Config as HubConfig;
use sluice_server::{Hub as SluiceHub, Listener};
use sluice_test_support::tempfile;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A hub on the embedded store in `dir`, served until [`TestHub::stop`].
pub struct TestHub {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestHub {
    /// Serves `config` (its store in `dir`, `sync = never`) on a fresh 127.0.0.1 port, the
    /// listener made by `listener` from the bound socket.
    pub async fn start(
        mut config: HubConfig,
        dir: tempfile::TempDir,
        listener: impl FnOnce(TcpListener) -> Listener,
    ) -> Self {
        config.embedded.data_dir = dir.path().join("data");
        config.embedded.sync = "never".into();
        config.validate().expect("test config is valid");
        let (backend, _) = EmbeddedBackend::open(&config.embedded)
            .await
            .expect("open store");
        let socket = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("address");
        let hub = SluiceHub::new(config, Arc::new(backend)).expect("hub");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve_listeners(
            hub,
            vec![listener(socket)],
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

    /// A short run against `url` (this hub): 12 clients on two topics, 40 messages over 1 s
    /// from 2 publishers, as `hub` speaks.
    pub fn bench(&self, url: String, hub: Hub, protocol: Protocol, streams: u64) -> Config {
        Config {
            url,
            ca_file: None,
            protocol,
            streams_per_connection: streams,
            hub,
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
            mercure_publisher_key: None,
            from: None,
        }
    }

    pub async fn stop(mut self) {
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
    }
}

/// Runs `config` and returns its report as JSON, failing the test unless the run was clean.
pub async fn clean_run(config: Config) -> Value {
    let report = sluice_bench::run(config).await.expect("the run completes");
    let json = serde_json::to_value(&report).expect("report as JSON");
    assert!(report.is_ok(), "{}\n{json:#}", report.to_text());
    json
}

/// Asserts that every one of the 12 clients of [`TestHub::bench`] got every acknowledged
/// message of its topic once, with nothing missing, late, foreign or broken.
pub fn assert_exactly_once(report: &Value) {
    let delivery = &report["delivery"];
    let published = report["publish"]["published"].as_u64().expect("published");
    assert_eq!(published, 40, "{report:#}");
    // 12 clients over 2 topics: each message reaches 6 of them.
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
