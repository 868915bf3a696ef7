//! A hub with `[mercure]` on, on either backend, that can be restarted over the same stream;
//! tokens, publishing and subscribing as Mercure clients do.
#![allow(dead_code)]

use std::sync::Arc;

use async_nats::jetstream::stream;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};
use sluice_backend::embedded::EmbeddedBackend;
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::{HttpResponse, NatsOptions, NatsServer, SseClient, http, tempfile};

use crate::backends::Kind;
use crate::common::TestHub;

/// The publishers' and subscribers' HMAC secrets.
pub const PUBLISHER_KEY: &str = "mercure-publisher-secret-0123456789abcdef";
pub const SUBSCRIBER_KEY: &str = "mercure-subscriber-secret-0123456789abcdef";

/// The hub's path.
pub const HUB: &str = "/.well-known/mercure";

/// A `[mercure]` configuration (plus `extra` TOML lines in the section).
pub fn config(extra: &str) -> Config {
    let text = format!(
        "topic_prefix = \"app\"\n[mercure]\nenabled = true\npublisher_jwt_key = \"{PUBLISHER_KEY}\"\n\
         subscriber_jwt_key = \"{SUBSCRIBER_KEY}\"\n{extra}\n"
    );
    sluice_server::config::load_str(&text, "mercure test", Vec::new(), &Default::default())
        .expect("mercure config")
        .0
}

/// A token signed with `key` whose `mercure` claim is `claim`.
pub fn token(key: &str, claim: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "mercure": claim }),
        &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// A publisher's token for every topic.
pub fn publisher() -> String {
    token(PUBLISHER_KEY, json!({ "publish": ["*"] }))
}

/// A subscriber's token receiving the private updates `subscribe` selects.
pub fn subscriber(subscribe: &[&str]) -> String {
    token(SUBSCRIBER_KEY, json!({ "subscribe": subscribe }))
}

/// `pairs` as a form or query.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, NON_ALPHANUMERIC)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A hub node with `config` on the JetStream stream `jetstream` names.
pub async fn start_node(config: Config, jetstream: JetStreamConfig) -> TestHub {
    let backend = JetStreamBackend::connect(&jetstream)
        .await
        .unwrap_or_else(|err| panic!("backend connects: {err}"));
    TestHub::start(config, Arc::new(backend)).await
}

/// A hub serving Mercure, and what it needs to be started again over the same stream.
pub struct Harness {
    kind: Kind,
    config: Config,
    hub: Option<TestHub>,
    dir: Option<tempfile::TempDir>,
    server: Option<NatsServer>,
}

impl Harness {
    /// A hub with `config` on `kind`: the embedded store's default stream (every subject), or a
    /// JetStream stream `EVENTS` on `app.>` and `mercure.>`.
    pub async fn start(kind: Kind, config: Config) -> Self {
        let mut harness = Self {
            kind,
            config,
            hub: None,
            dir: None,
            server: None,
        };
        match &harness.kind {
            Kind::Embedded => harness.dir = Some(tempfile::tempdir().unwrap()),
            Kind::JetStream(binary) => {
                let server = NatsServer::start_with(NatsOptions::binary(binary))
                    .await
                    .unwrap_or_else(|err| panic!("{err}"));
                let client = async_nats::connect(server.url()).await.expect("connect");
                async_nats::jetstream::new(client)
                    .create_stream(stream::Config {
                        name: "EVENTS".to_owned(),
                        subjects: vec!["app.>".to_owned(), "mercure.>".to_owned()],
                        duplicate_window: std::time::Duration::from_secs(120),
                        ..Default::default()
                    })
                    .await
                    .expect("stream created");
                harness.server = Some(server);
            }
        }
        harness.open().await;
        harness
    }

    async fn open(&mut self) {
        let mut config = self.config.clone();
        let hub = match &self.kind {
            Kind::Embedded => {
                config.embedded.data_dir = self.dir.as_ref().unwrap().path().to_owned();
                config.embedded.sync = "never".into();
                let (backend, _) = EmbeddedBackend::open(&config.embedded)
                    .await
                    .expect("open store");
                TestHub::start(config, Arc::new(backend)).await
            }
            Kind::JetStream(_) => {
                let url = self.server.as_ref().unwrap().url();
                let jetstream = JetStreamConfig::new(url, "EVENTS");
                config.backend = BackendKind::Jetstream;
                config.jetstream = Some(jetstream.clone());
                let backend = JetStreamBackend::connect(&jetstream)
                    .await
                    .unwrap_or_else(|err| panic!("backend connects: {err}"));
                TestHub::start(config, Arc::new(backend)).await
            }
        };
        self.hub = Some(hub);
    }

    /// Stops the hub and starts a new one over the same stream.
    pub async fn restart(&mut self) {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
        self.open().await;
    }

    /// The nats-server of a JetStream harness, to stop and start it again.
    pub fn nats(&mut self) -> &mut NatsServer {
        self.server.as_mut().expect("a JetStream harness")
    }

    /// The configuration of another hub node on the same JetStream stream, and its
    /// `[jetstream]` section.
    pub fn node_config(&self) -> (Config, JetStreamConfig) {
        let server = self.server.as_ref().expect("a JetStream harness");
        let jetstream = JetStreamConfig::new(server.url(), "EVENTS");
        let mut config = self.config.clone();
        config.backend = BackendKind::Jetstream;
        config.jetstream = Some(jetstream.clone());
        (config, jetstream)
    }

    /// Another hub node on the same JetStream stream, with the same configuration.
    pub async fn another_node(&self) -> TestHub {
        let (config, jetstream) = self.node_config();
        start_node(config, jetstream).await
    }

    /// The running hub.
    pub fn hub(&self) -> &TestHub {
        self.hub.as_ref().expect("running")
    }

    /// Posts `body` (a form) to the hub with `token`, if any.
    pub async fn post(&self, body: &str, token: Option<&str>) -> HttpResponse {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        let request = http::request("POST".parse().unwrap(), &self.hub().url(HUB), &headers)
            .unwrap()
            .body(body.to_owned().into())
            .unwrap();
        http::send(request).await.expect("publish request")
    }

    /// Publishes `pairs` as the all-topics publisher; panics unless stored; returns the id.
    pub async fn publish(&self, pairs: &[(&str, &str)]) -> String {
        let answer = self.post(&form(pairs), Some(&publisher())).await;
        assert_eq!(answer.status, 200, "publish: {}", answer.text());
        assert_eq!(
            answer.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        answer.text()
    }

    /// Subscribes with `query` (already encoded) and `headers`.
    pub async fn subscribe(&self, query: &str, headers: &[(&str, &str)]) -> SseClient {
        let url = self.hub().url(&format!("{HUB}?{query}"));
        SseClient::connect_with_headers(&url, headers)
            .await
            .expect("connect")
    }

    /// Subscribes and waits for the opening frame: the subscription is in place once it came.
    pub async fn subscribed(&self, query: &str, headers: &[(&str, &str)]) -> SseClient {
        let mut client = self.subscribe(query, headers).await;
        assert_eq!(client.status(), 200, "subscribe {query}");
        client.next_frame().await.expect("the opening frame");
        client
    }
}
