//! `sluice bench` against a real hub over HTTPS: HTTP/2 with event streams multiplexed on
//! shared connections and HTTP/1.1 over TLS both count every event exactly once, and a
//! `--ca-file` that does not sign the hub's certificate, or a hub that does not offer HTTP/2,
//! fails the run with an error that says so.

mod common;

use std::path::PathBuf;

use common::{TestHub, assert_exactly_once, clean_run};
use sluice_bench::{Config, Hub, Protocol};
use sluice_server::Listener;
use sluice_server::config::{Config as HubConfig, TlsConfig};
use sluice_server::tls::Certificates;
use sluice_test_support::{TestCa, tempfile};

/// An embedded hub whose only listener speaks TLS, with a certificate from a test CA.
struct TlsHub {
    hub: TestHub,
    /// The CA's certificate, for `--ca-file`.
    ca_file: PathBuf,
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
        let certificates = Certificates::load(config.tls.as_ref().expect("tls")).expect("loads");
        let hub = TestHub::start(config, dir, |socket| Listener::tls(socket, certificates)).await;
        Self { hub, ca_file }
    }

    /// The short run of [`TestHub::bench`] over TLS, trusting `ca_file`.
    fn bench(&self, protocol: Protocol, streams_per_connection: u64, ca_file: PathBuf) -> Config {
        let url = format!("https://127.0.0.1:{}", self.hub.addr.port());
        Config {
            ca_file: Some(ca_file),
            ..self
                .hub
                .bench(url, Hub::Sluice, protocol, streams_per_connection)
        }
    }

    async fn stop(self) {
        self.hub.stop().await;
    }
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
    let other = hub.hub.dir.path().join("other-ca.pem");
    std::fs::write(&other, TestCa::new().pem()).expect("write the other CA");
    let config = hub.bench(Protocol::Http2, 5, other.clone());
    let err = sluice_bench::run(config).await.expect_err("the run fails");
    let err = format!("{err:#}");
    let hub_addr = hub.hub.addr.to_string();
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
            hub.hub.addr
        )) && err.contains("`--profile http1` benches HTTP/1.1 over TLS"),
        "{err}"
    );
    hub.stop().await;
}
