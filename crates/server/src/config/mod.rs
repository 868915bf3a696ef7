//! The hub's configuration: one struct tree read from a TOML file, overridden by `SLUICE_…`
//! environment variables, overridden by command-line flags, and validated as a whole before any
//! socket opens.
//!
//! Every key is documented in `docs/CONFIGURATION.md`. Unknown keys are errors, and every error
//! names the key and the offending value.

pub(crate) mod error;
mod explain;
mod layers;
pub(crate) mod validate;
pub(crate) mod values;

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::AuthConfig;
use crate::http::mercure::config::MercureContext;
pub use crate::http::mercure::config::{CollectionShape, MercureConfig};
pub use crate::tls::TlsConfig;
pub use sluice_backend::embedded::{DEFAULT_STREAM, EmbeddedConfig, StreamDecl};
use sluice_backend::jetstream::JetStreamConfig;
pub use sluice_core::fanout::FanoutConfig;
pub use sluice_core::frames::Repair;
pub use sluice_core::plan::OnLoss;
use sluice_protocol::config_duration;

pub use error::ConfigError;
pub use layers::{Overrides, load, load_str};

/// Which durable stream the hub serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// sluice's embedded store in `embedded.data_dir` (the default).
    #[default]
    Embedded,
    /// A NATS JetStream stream (the `[jetstream]` section).
    Jetstream,
}

impl<'de> Deserialize<'de> for BackendKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        sluice_protocol::config_choice::choice(
            deserializer,
            &[("embedded", Self::Embedded), ("jetstream", Self::Jetstream)],
        )
    }
}

/// The hub's whole configuration, every section with its defaults; [`load`] builds it from a
/// file, the environment and flags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP server binds, e.g. `127.0.0.1:8080` (port 0 picks a free port). It
    /// speaks TLS when `[tls]` is set without a `tls.listen` of its own.
    #[serde(deserialize_with = "validate::socket_addr")]
    pub listen: SocketAddr,
    /// HTTPS: the certificate, its key and the TLS listener; plain HTTP only when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// HTTP/2: over TLS by ALPN, and in cleartext with prior knowledge when enabled.
    pub http2: Http2Config,
    /// Which durable stream the hub serves: `embedded` (the default) or `jetstream`.
    pub backend: BackendKind,
    /// Tokens prepended to every client topic to form the stream subject (`app` turns topic
    /// `a.b` into subject `app.a.b`); empty for none.
    pub topic_prefix: String,
    /// When set, every SSE response carries `Link: <hub_url>; rel="sluice"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub_url: Option<String>,
    /// How event streams are written: heartbeats, `retry:`, write timeout, event size.
    pub sse: SseConfig,
    /// Connection and request limits.
    pub limits: LimitsConfig,
    /// Resume and replay policy.
    pub replay: ReplayConfig,
    /// Which browser origins may subscribe and publish.
    pub cors: CorsConfig,
    /// The paths of the liveness, readiness and health probes.
    pub probes: ProbesConfig,
    /// The admin API for an operator on the hub's own machine (`[admin]`).
    pub admin: AdminConfig,
    /// The ring of encoded frames shared by the subscribers of one topic set.
    pub fanout: FanoutConfig,
    /// The embedded store: its directory, the served stream, fsync policy, declared streams.
    pub embedded: EmbeddedConfig,
    /// Authorization of subscribers and publishers (docs/AUTH.md); open when absent.
    pub auth: AuthConfig,
    /// The Mercure hub at `/.well-known/mercure` (docs/MERCURE.md); off by default.
    pub mercure: MercureConfig,
    /// The NATS JetStream backend; required when `backend = "jetstream"`.
    #[serde(skip_serializing)]
    pub jetstream: Option<JetStreamConfig>,
}

/// How event streams are written (`[sse]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SseConfig {
    /// Idle interval after which a `: heartbeat` comment is sent.
    #[serde(with = "config_duration")]
    pub heartbeat: Duration,
    /// Reconnection delay suggested to clients with `retry:`.
    #[serde(with = "config_duration")]
    pub retry: Duration,
    /// A connection whose socket accepts nothing for this long is closed (`slow_client`).
    #[serde(with = "config_duration")]
    pub write_timeout: Duration,
    /// Largest encoded event in bytes; a larger message is replaced by a `gap` frame.
    pub max_event_size: usize,
    /// The SSE event type of message frames (`event: message`), what an `EventSource`
    /// listens for with `addEventListener`. The hub's own frames keep theirs (`connected`,
    /// `gap`, `token_expired`).
    pub event_type: String,
    /// What a client whose resume position is lost gets after its `gap` frame (`none`, or
    /// `latest`: the latest retained message of each of its subjects, then live); a
    /// request's `repair=` overrides it.
    pub repair: Repair,
}

/// HTTP/2 (`[http2]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http2Config {
    /// Offer `h2` by ALPN on TLS listeners (a client that does not ask gets HTTP/1.1).
    pub enabled: bool,
    /// Also accept cleartext HTTP/2 with prior knowledge (`h2c`, the connection preface first)
    /// on plain listeners, for proxies that speak HTTP/2 upstream.
    pub h2c: bool,
    /// Most concurrent streams a client may open on one connection (`SETTINGS_MAX_CONCURRENT_STREAMS`);
    /// a stream over it is refused with `RST_STREAM(REFUSED_STREAM)`.
    pub max_concurrent_streams: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Self {
            enabled: true,
            h2c: false,
            max_concurrent_streams: 100,
        }
    }
}

/// Connection and request limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Most concurrent event streams; 0 means unlimited.
    pub max_connections: usize,
    /// Most topics in one subscription.
    pub max_topics_per_subscription: usize,
    /// Largest `POST /publish` body in bytes.
    pub max_publish_body: usize,
    /// Most messages in one batch `POST /publish` (a JSON array or NDJSON body).
    pub max_publish_batch: usize,
    /// Most open connections from one client IP address; 0 means unlimited.
    pub max_connections_per_address: usize,
    /// A connection that has not sent a complete request head within this time is closed
    /// (slowloris).
    #[serde(with = "config_duration")]
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers) in bytes; larger is a `431`.
    pub max_header_bytes: usize,
    /// A request body must arrive whole within this time after its head, or the connection
    /// is closed with a `408` (slow or endless bodies).
    #[serde(with = "config_duration")]
    pub body_read_timeout: Duration,
}

/// Resume and replay policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayConfig {
    /// Most backlog messages one connection replays before it is closed with
    /// `replay_cap_reached` (the client resumes by `Last-Event-ID`); 0 means no cap.
    pub max_messages: u64,
    /// When set, backlog older than this is skipped (and reported with a `gap` frame).
    #[serde(
        with = "config_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub window: Option<Duration>,
    /// Where to continue when the requested position is lost: `earliest` or `live`.
    pub on_loss: OnLoss,
}

/// Which browser origins may call the hub (`[cors]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins allowed to subscribe and publish from a browser: exact origins such as
    /// `https://app.example.com` (which also get credentials), or `*` for any origin (without
    /// credentials). Empty: no CORS headers.
    pub allowed_origins: Vec<String>,
    /// Request headers a browser may send (`Access-Control-Allow-Headers` of a preflight).
    pub allowed_headers: Vec<String>,
    /// Methods a browser may use (`Access-Control-Allow-Methods` of a preflight).
    pub allowed_methods: Vec<String>,
}

impl Default for CorsConfig {
    fn default() -> Self {
        Self {
            allowed_origins: Vec::new(),
            allowed_headers: [
                "cache-control",
                "content-type",
                "authorization",
                "last-event-id",
            ]
            .map(String::from)
            .to_vec(),
            allowed_methods: ["GET", "POST", "OPTIONS"].map(String::from).to_vec(),
        }
    }
}

/// The admin API for a local operator (`[admin]`); `[auth.admin]` opens it to tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Answer admin requests made on this machine without a token: from a loopback address,
    /// to a loopback host name, not forwarded by a proxy, not sent by another site's page.
    pub loopback: bool,
}

/// Where the probes answer (`[probes]`); each also answers with a trailing slash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbesConfig {
    /// The liveness probe: the process is up.
    pub live_path: String,
    /// The readiness probe: the backend and the stream can serve.
    pub ready_path: String,
    /// The health summary (readiness with details).
    pub health_path: String,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        Self {
            live_path: "/livez".into(),
            ready_path: "/readyz".into(),
            health_path: "/healthz".into(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls: None,
            http2: Http2Config::default(),
            backend: BackendKind::Embedded,
            topic_prefix: String::new(),
            hub_url: None,
            sse: SseConfig::default(),
            limits: LimitsConfig::default(),
            replay: ReplayConfig::default(),
            cors: CorsConfig::default(),
            probes: ProbesConfig::default(),
            admin: AdminConfig::default(),
            fanout: FanoutConfig::default(),
            embedded: EmbeddedConfig::default(),
            auth: AuthConfig::default(),
            mercure: MercureConfig::default(),
            jetstream: None,
        }
    }
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(15),
            retry: Duration::from_secs(2),
            write_timeout: Duration::from_secs(10),
            max_event_size: 1024 * 1024,
            event_type: "message".into(),
            repair: Repair::None,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 0,
            max_topics_per_subscription: 32,
            max_publish_body: 1024 * 1024 + 64 * 1024,
            max_publish_batch: 1000,
            max_connections_per_address: 0,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            body_read_timeout: Duration::from_secs(10),
        }
    }
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            max_messages: 0,
            window: None,
            on_loss: OnLoss::Earliest,
        }
    }
}

impl Config {
    /// Checks every value; the error names the key and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::config(self)
    }

    /// The subject for a client topic: the topic with [`Config::topic_prefix`] prepended.
    pub(crate) fn subject_for(&self, topic: &str) -> String {
        if self.topic_prefix.is_empty() {
            topic.to_owned()
        } else {
            format!("{}.{topic}", self.topic_prefix)
        }
    }

    /// The declaration of the served embedded stream.
    pub(crate) fn served_stream(&self) -> Option<&StreamDecl> {
        self.embedded
            .streams
            .iter()
            .find(|s| s.name == self.embedded.stream)
    }
}

#[cfg(test)]
mod tests;
