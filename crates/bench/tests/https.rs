//! `sluice bench` against a real hub over HTTPS: HTTP/2 with event streams multiplexed on
//! shared connections and HTTP/1.1 over TLS both count every event exactly once, and a
//! `--ca-file` that does not sign the hub's certificate, or a hub that does not offer HTTP/2,
//! fails the run with an error that says so.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_bench::{Config, Hub, Protocol};
use sluice_server::backend::embedded::EmbeddedBackend;
use sluice_server::config::{Config as HubConfig, TlsConfig};
use sluice_server::tls::Certificates;
use sluice_server::{Hub as SluiceHub, Listener};
use sluice_test_support::{TestCa, tempfile};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// An embedded hub whose only listener speaks TLS, with a certificate from a test CA.
struct TlsHub {
    addr: SocketAddr,
    /// The CA's certificate, for `--ca-file`.
    ca_file: PathBuf,
    dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TlsHub {
    async fn start(http2: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = TestCa::new();
        let (cert_file, key_file) = ca.issue("sluice hub").write(dir.path(), "hub");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("write the CA");
        let mut config = HubConfig {
            listen: "127.0.0.1:0".parse().expect("address"),
            tls: Some(TlsConfig {
                cert_file,
                key_file,
                listen: None,
            }),
            ..HubConfig::default()
        };
        config.http2.enabled = http2;
        config.embedded.data_dir = dir.path().join("data");
        config.embedded.sync = "never".into();
        config.validate().expect("test config is valid");
        let certificates = Certificates::load(config.tls.as_ref().expect("tls")).expect("loads");
        let (backend, _) = EmbeddedBackend::open(&config.embedded)
            .await
            .expect("open store");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let hub = SluiceHub::new(config, Arc::new(backend)).expect("hub");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve_listeners(
            hub,
            vec![Listener::tls(listener, certificates)],
            async move {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            ca_file,
            dir,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A short run of `clients` clients on two topics against this hub, trusting `ca_file`.
    fn bench(&self, protocol: Protocol, streams_per_connection: u64, ca_file: PathBuf) -> Config {
        Config {
            url: format!("https://127.0.0.1:{}", self.addr.port()),
            ca_file: Some(ca_file),
            protocol,
            streams_per_connection,
            hub: Hub::Sluice,
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

/// Asserts that every one of the 12 clients got every acknowledged message of its topic once.
fn assert_exactly_once(report: &Value) {
    let delivery = &report["delivery"];
    let published = report["publish"]["published"].as_u64().expect("published");
    assert_eq!(published, 40, "{report:#}");
    // 12 clients over 2 topics: each message reaches 6 of them.
    assert_eq!(delivery["expected"], published * 6, "{report:#}");
    assert_eq!(delivery["received"], delivery["expected"], "{report:#}");
    assert_eq!(delivery["clients_exactly_once"], 12, "{report:#}");
    for count in ["missing", "out_of_order", "foreign", "gaps", "disconnects"] {
        assert_eq!(delivery[count], 0, "{count}: {report:#}");
    }
    assert_eq!(delivery["protocol_errors"], 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_sharing_connections_get_every_event_exactly_once() {
    let hub = TlsHub::start(true).await;
    let config = hub.bench(Protocol::Http2, 5, hub.ca_file.clone());
    let report = clean_run(config).await;
    assert_exactly_once(&report);
    assert_eq!(report["load"]["protocol"], "h2", "{report:#}");
    // 12 streams, 5 to a connection.
    assert_eq!(report["load"]["connections"], 3, "{report:#}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_over_tls_gets_every_event_exactly_once() {
    let hub = TlsHub::start(true).await;
    let config = hub.bench(Protocol::Http1, 1, hub.ca_file.clone());
    let report = clean_run(config).await;
    assert_exactly_once(&report);
    assert_eq!(report["load"]["protocol"], "http/1.1", "{report:#}");
    assert_eq!(report["load"]["connections"], 12, "{report:#}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_did_not_sign_the_hub_fails_naming_the_file_and_the_hub() {
    let hub = TlsHub::start(true).await;
    let other = hub.dir.path().join("other-ca.pem");
    std::fs::write(&other, TestCa::new().pem()).expect("write the other CA");
    let config = hub.bench(Protocol::Http2, 5, other.clone());
    let err = sluice_bench::run(config).await.expect_err("the run fails");
    let err = format!("{err:#}");
    let hub_addr = hub.addr.to_string();
    for part in [
        "no hub answers at",
        &format!("TLS handshake with {hub_addr}"),
        &format!("trusting --ca-file {}", other.display()),
        "invalid peer certificate",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_http2_of_a_hub_that_does_not_offer_it_fails_with_the_reason() {
    let hub = TlsHub::start(false).await;
    let config = hub.bench(Protocol::Http2, 5, hub.ca_file.clone());
    let err = sluice_bench::run(config).await.expect_err("the run fails");
    let err = format!("{err:#}");
    assert!(
        err.contains(&format!(
            "the hub at {} did not accept HTTP/2 by ALPN",
            hub.addr
        )),
        "{err}"
    );
    hub.stop().await;
}
