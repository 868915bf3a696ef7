//! `sluice bench --target mercure` against a real hub with `[mercure]` on: subscribers on
//! `GET /.well-known/mercure?topic=…` over HTTP/1.1 and over HTTP/2 each get every update of
//! their topic exactly once, published as forms with a publisher's token made from the key;
//! a key that is not the hub's, or a hub without Mercure, fails the run before any client
//! connects, saying why and never showing the key.

// Shared with the TLS tests, which also read the hub's directory.
#[allow(dead_code)]
mod common;

use common::{TestHub, clean_run};
use serde_json::Value;
use sluice_bench::{Config, Hub, Protocol, PublisherKey};
use sluice_server::Listener;
use sluice_test_support::tempfile;

/// The hub's `mercure.publisher_jwt_key`.
const PUBLISHER_KEY: &str = "bench-publisher-secret-0123456789abcdef";

/// An embedded hub on plain HTTP (and h2c), Mercure on or off; its subscribers need no token
/// (`anonymous`), as the bench's carry none.
struct MercureHub(TestHub);

impl MercureHub {
    async fn start(mercure: bool) -> Self {
        let text = format!(
            "topic_prefix = \"app\"\n[http2]\nh2c = true\n[mercure]\nenabled = {mercure}\n\
             anonymous = true\npublisher_jwt_key = \"{PUBLISHER_KEY}\"\n"
        );
        let env = Vec::<(String, String)>::new();
        let (config, _) =
            sluice_server::config::load_str(&text, "bench test", env, &Default::default())
                .expect("the hub's configuration");
        let dir = tempfile::tempdir().expect("tempdir");
        Self(TestHub::start(config, dir, Listener::plain).await)
    }

    /// The short run of [`TestHub::bench`] with Mercure subscribers, publishing with `key`.
    fn bench(&self, protocol: Protocol, streams_per_connection: u64, key: &str) -> Config {
        let url = format!("http://127.0.0.1:{}", self.0.addr.port());
        Config {
            mercure_publisher_key: Some(PublisherKey::new(key)),
            ..self
                .0
                .bench(url, Hub::Mercure, protocol, streams_per_connection)
        }
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// Asserts that the run was against Mercure and every one of the 12 clients got every
/// acknowledged update of its topic once.
fn assert_exactly_once(report: &Value) {
    assert_eq!(report["load"]["hub"], "mercure", "{report:#}");
    common::assert_exactly_once(report);
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
        &format!("the hub at {} answered POST", hub.0.addr),
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
