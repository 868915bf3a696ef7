//! Hubs for the admin, schedule and marker tests, on either backend, with the stream settings
//! a test needs, and tokens for `[auth.admin]` and `[auth.publish]`.
#![allow(dead_code, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream;
use serde_json::{Value, json};
use sluice_backend::embedded::StreamDecl;
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::{HttpResponse, NatsOptions, NatsServer, http};

use crate::common::{Embedded, TestHub};

/// The HMAC secret of every token here.
pub const SECRET: &str = "admin-tests-secret-0123456789abcdef";

/// Which backend a hub runs on.
#[derive(Debug, Clone)]
pub enum Kind {
    /// sluice's embedded store, serving its `sluice` stream capturing every subject.
    Embedded,
    /// A JetStream stream `EVENTS` on `app.>` (topic prefix `app`), on a nats-server of its own
    /// started from this binary.
    JetStream(PathBuf),
}

impl Kind {
    /// JetStream on the nats-server the tests use by default (2.15).
    pub fn jetstream() -> Self {
        Self::JetStream(sluice_test_support::nats_server_binary())
    }

    /// JetStream on Debian's nats-server 2.9, which knows neither schedules nor markers.
    pub fn old_jetstream() -> Self {
        Self::JetStream(
            sluice_test_support::debian_nats_server_binary()
                .expect("Debian's nats-server is installed (scripts/test installs it)"),
        )
    }
}

/// The stream settings a test needs; the rest are the backend's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    pub allow_msg_schedules: bool,
    pub max_age: Duration,
    pub subject_delete_marker_ttl: Duration,
    /// Messages kept per subject (0: no limit).
    pub max_msgs_per_subject: u64,
}

/// A hub and what its stream is called.
pub struct Served {
    pub hub: TestHub,
    /// The served stream's name.
    pub stream: &'static str,
    prefix: &'static str,
}

impl Served {
    /// `hub` over the embedded store, serving `stream` without a topic prefix.
    pub fn embedded(hub: TestHub, stream: &'static str) -> Self {
        Self {
            hub,
            stream,
            prefix: "",
        }
    }

    /// The stream subject of `topic`.
    pub fn subject(&self, topic: &str) -> String {
        if self.prefix.is_empty() {
            topic.to_owned()
        } else {
            format!("{}.{topic}", self.prefix)
        }
    }

    /// `method path` on the admin API with `token` (if any) and `body` (if any).
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> HttpResponse {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(bearer) = &bearer {
            headers.push(("authorization", bearer));
        }
        let request = http::request(method.parse().unwrap(), &self.hub.url(path), &headers)
            .unwrap()
            .body(body.map(|b| b.to_string()).unwrap_or_default().into())
            .unwrap();
        http::send(request).await.expect("admin request")
    }

    /// The served stream described by the admin API (with an admin token).
    pub async fn info(&self) -> Value {
        let path = format!("/admin/streams/{}", self.stream);
        let answer = self.admin("GET", &path, Some(&admin_token()), None).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json().unwrap()
    }
}

/// Starts a hub with `config` on `kind`, its stream set up with `settings`.
pub async fn start(kind: &Kind, mut config: Config, settings: Settings) -> Served {
    match kind {
        Kind::Embedded => {
            config.embedded.streams = vec![StreamDecl {
                allow_msg_schedules: settings.allow_msg_schedules,
                max_age: settings.max_age,
                subject_delete_marker_ttl: settings.subject_delete_marker_ttl,
                max_msgs_per_subject: settings.max_msgs_per_subject,
                ..StreamDecl::default_stream()
            }];
            let (hub, _) = Embedded::start_with_store(config).await;
            Served::embedded(hub, "sluice")
        }
        Kind::JetStream(binary) => {
            config.topic_prefix = "app".to_owned();
            let server = NatsServer::start_with(NatsOptions::binary(binary))
                .await
                .unwrap_or_else(|err| panic!("{err}"));
            let client = async_nats::connect(server.url()).await.expect("connect");
            let marker_ttl = settings.subject_delete_marker_ttl;
            async_nats::jetstream::new(client)
                .create_stream(stream::Config {
                    name: "EVENTS".to_owned(),
                    subjects: vec!["app.>".to_owned()],
                    // The embedded store's default; JetStream wants it within `max_age`.
                    duplicate_window: if settings.max_age.is_zero() {
                        Duration::from_secs(120)
                    } else {
                        settings.max_age
                    },
                    max_age: settings.max_age,
                    allow_message_ttl: settings.allow_msg_schedules || !marker_ttl.is_zero(),
                    allow_message_schedules: settings.allow_msg_schedules,
                    subject_delete_marker_ttl: (!marker_ttl.is_zero()).then_some(marker_ttl),
                    max_messages_per_subject: match settings.max_msgs_per_subject {
                        0 => -1,
                        limit => i64::try_from(limit).expect("a small limit"),
                    },
                    ..Default::default()
                })
                .await
                .expect("stream created");
            let jetstream = JetStreamConfig::new(server.url(), "EVENTS");
            config.backend = BackendKind::Jetstream;
            config.jetstream = Some(jetstream.clone());
            let backend = JetStreamBackend::connect(&jetstream)
                .await
                .unwrap_or_else(|err| panic!("backend connects: {err}"));
            let mut hub = TestHub::start(config, Arc::new(backend)).await;
            hub.keep.push(Box::new(server));
            Served {
                hub,
                stream: "EVENTS",
                prefix: "app",
            }
        }
    }
}

/// A configuration with the admin API on, and publishing open or, with `publish_auth`,
/// checked against tokens too.
pub fn admin_config(publish_auth: bool) -> Config {
    let direction = format!(
        "algorithms = [\"HS256\"]\nkeys = [{{ type = \"hmac\", secret = \"{SECRET}\" }}]\n"
    );
    let mut text = format!("[auth.admin]\n{direction}");
    if publish_auth {
        text.push_str(&format!("[auth.publish]\n{direction}"));
    }
    sluice_server::config::load_str(&text, "admin test", Vec::new(), &Default::default())
        .expect("admin config")
        .0
}

/// A token signed with `secret` carrying `sluice` as its claim, valid for ten minutes.
pub fn token_signed(secret: &str, sluice: Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({ "sub": "operator", "exp": now + 600, "sluice": sluice });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// A token with the admin grant.
pub fn admin_token() -> String {
    token_signed(SECRET, json!({ "admin": true }))
}

/// One test per backend for each scenario named: `scenario(kind: Kind)` at the caller, run as
/// `embedded::scenario` and `jetstream::scenario`.
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Embedded).await;
                }
            )*
        }
        mod jetstream {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::jetstream()).await;
                }
            )*
        }
    };
}

pub(crate) use on_both_backends;
