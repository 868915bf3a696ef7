//! The NATS JetStream backend: the hub in front of an existing JetStream stream, through
//! async-nats.
//!
//! Every call to the server is bounded by `request_timeout` (health by one second), errors
//! from the JetStream API keep their status and code, and credentials never reach logs or
//! error messages.

mod admin;
mod advisories;
mod api;
mod config;
mod connect;
mod consumers;
mod error;
mod filters;
mod info;
mod known;
mod latest;
mod markers;
mod publish;
mod recent;
mod removals;
mod stats;
mod subscribe;
mod url_auth;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::connection::State;
use async_trait::async_trait;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use config::{JetStreamConfig, JetStreamConfigError};
pub use connect::SetupError;
pub use filters::ServerVersion;

use info::StreamFacts;
use known::{Known, KnownStream};

use crate::{
    Backend, BackendError, Health, MessageStream, PublishAck, PublishRequest, PurgeOptions, Recent,
    StreamAdmin, StreamReport, StreamState, StreamStatistics, StreamStats, Unavailable,
};

/// The longest a health check may take.
const HEALTH_LIMIT: Duration = Duration::from_millis(900);

/// A hub backend on a NATS JetStream stream that must already exist.
pub struct JetStreamBackend {
    shared: Arc<Shared>,
}

/// What the backend and its feeds share.
struct Shared {
    config: JetStreamConfig,
    client: async_nats::Client,
    context: async_nats::jetstream::Context,
    /// Ticks on every (re)connection; see [`connect::Connection::reconnects`].
    reconnects: watch::Receiver<u64>,
    stats: Stats,
    /// Set by [`Backend::shutdown`]; the connection is draining or closed.
    shut_down: AtomicBool,
    /// The feeds' consumers, deleted by [`Backend::shutdown`].
    consumers: consumers::Consumers,
    /// What is known of the stream between requests.
    known: Arc<KnownStream>,
    /// The removals this hub made on the served stream, told to its feeds' readers.
    removals: removals::HubRemovals,
    /// Keeps `known` up to date with the stream's advisories while the backend lives.
    _advisories: advisories::Watch,
}

impl Shared {
    /// Fails at once while the connection is known to be down or shut down: a request would
    /// only wait for its timeout.
    fn ensure_connected(&self) -> Result<(), BackendError> {
        if self.shut_down.load(Ordering::Relaxed) {
            return Err(Unavailable::ConnectionClosed.into());
        }
        if self.client.connection_state() != State::Connected {
            return Err(Unavailable::NotConnected {
                urls: self.config.redacted_urls(),
            }
            .into());
        }
        Ok(())
    }

    /// How many times the connection was established so far.
    fn connections(&self) -> u64 {
        *self.reconnects.borrow()
    }

    /// Reads the stream's info within `limit`, and remembers it.
    async fn read_stream(&self, limit: Duration) -> Result<StreamFacts, BackendError> {
        self.ensure_connected()?;
        let connections = self.connections();
        let facts = info::fetch(&self.context, &self.config.stream, limit).await?;
        self.known.remember(&facts, connections);
        Ok(facts)
    }

    /// What is known of the stream, read first when nothing (still valid) is.
    async fn known_stream(&self) -> Result<Known, BackendError> {
        if let Some(known) = self.known.get(self.connections()) {
            return Ok(known);
        }
        let facts = self.read_stream(self.config.request_timeout).await?;
        Ok(self
            .known
            .get(self.connections())
            .unwrap_or_else(|| Known::from_facts(&facts)))
    }
}

/// Counters by one label, as `prometheus_client` keeps them.
type Counters =
    prometheus_client::metrics::family::Family<[(&'static str, &'static str); 1], Counter>;

/// Counters of what the backend did behind the hub's back.
#[derive(Debug)]
struct Stats {
    consumers_created: Counter,
    /// Consumers created again after a loss, from the next sequence.
    consumers_recreated: Counter,
    /// By [`subscribe::Loss`] label; every label is present from the start.
    consumers_lost: Counters,
    filtered_out: Counter,
}

impl Default for Stats {
    fn default() -> Self {
        let consumers_lost = Counters::default();
        for loss in subscribe::Loss::ALL {
            // Creating the series is the point: every reason shows, at 0 until it happens.
            let _ = consumers_lost.get_or_create(&[("reason", loss.label())]);
        }
        Self {
            consumers_created: Counter::default(),
            consumers_recreated: Counter::default(),
            consumers_lost,
            filtered_out: Counter::default(),
        }
    }
}

impl Stats {
    fn lost(&self, loss: subscribe::Loss) -> u64 {
        self.consumers_lost
            .get_or_create(&[("reason", loss.label())])
            .get()
    }
}

/// A snapshot of the backend's counters, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JetStreamStats {
    /// Consumers created for feeds (first creations and recreations).
    pub consumers_created: u64,
    /// Consumers found lost (deleted, reaped, heartbeats missed, delivery gap, reconnection)
    /// and recreated from the next sequence, all reasons together.
    pub consumers_lost: u64,
    /// Of those, consumers recreated because the connection was re-established.
    pub consumers_lost_on_reconnect: u64,
    /// Messages a feed dropped because the server could not filter them itself (servers
    /// before 2.10 or overlapping filters) and they matched no filter of the subscription.
    pub filtered_out: u64,
}

impl JetStreamBackend {
    /// Validates `config`, connects, and checks that the stream exists.
    ///
    /// # Errors
    /// An invalid configuration, no reachable server ([`BackendError::Unavailable`]), or a
    /// missing stream ([`BackendError::Api`] with status 404, naming the stream and the server).
    pub async fn connect(config: &JetStreamConfig) -> Result<Self, BackendError> {
        config.validate()?;
        let connection = connect::connect(config).await?;
        let context = async_nats::jetstream::ContextBuilder::new()
            .timeout(config.request_timeout)
            .build(connection.client.clone());
        let shown_urls = config.redacted_urls();
        let facts = info::fetch(&context, &config.stream, config.request_timeout)
            .await
            .map_err(|err| match err {
                BackendError::Api(mut api) if api.status == 404 => {
                    api.description = format!(
                        "stream {:?} does not exist on {shown_urls} ({}); create it first",
                        config.stream, api.description
                    );
                    BackendError::Api(api)
                }
                BackendError::Unavailable(reason) => Unavailable::NoJetStream {
                    urls: shown_urls.clone(),
                    source: Box::new(reason),
                }
                .into(),
                other => other,
            })?;
        let version = ServerVersion::parse(&connection.client.server_info().version);
        if version < ServerVersion::MULTI_FILTER_FIXED {
            tracing::warn!(
                server_version = %version,
                "nats-server before {} may skip messages on consumers with several filters, so \
                 subscriptions to several topics filter in-process here (more traffic); upgrade \
                 the server",
                ServerVersion::MULTI_FILTER_FIXED
            );
        }
        tracing::info!(
            urls = shown_urls,
            stream = config.stream,
            server_version = connection.client.server_info().version,
            subjects = ?facts.state.subjects,
            incarnation = format_args!("{:x}", facts.state.incarnation),
            "connected to the JetStream stream"
        );
        let known = Arc::new(KnownStream::default());
        known.remember(&facts, *connection.reconnects.borrow());
        let advisories = advisories::watch(&connection.client, &config.stream, known.clone()).await;
        Ok(Self {
            shared: Arc::new(Shared {
                config: config.clone(),
                client: connection.client,
                context,
                reconnects: connection.reconnects,
                stats: Stats::default(),
                shut_down: AtomicBool::new(false),
                consumers: consumers::Consumers::default(),
                known,
                removals: removals::HubRemovals::default(),
                _advisories: advisories,
            }),
        })
    }

    /// The version of the server the client is connected to now.
    pub fn server_version(&self) -> ServerVersion {
        ServerVersion::parse(&self.shared.client.server_info().version)
    }

    /// The backend's counters so far.
    pub fn stats(&self) -> JetStreamStats {
        let stats = &self.shared.stats;
        JetStreamStats {
            consumers_created: stats.consumers_created.get(),
            consumers_lost: subscribe::Loss::ALL
                .into_iter()
                .map(|loss| stats.lost(loss))
                .sum(),
            consumers_lost_on_reconnect: stats.lost(subscribe::Loss::Reconnected),
            filtered_out: stats.filtered_out.get(),
        }
    }
}

#[async_trait]
impl Backend for JetStreamBackend {
    fn kind(&self) -> &'static str {
        "jetstream"
    }

    fn single_node(&self) -> bool {
        false
    }

    async fn publish(&self, request: PublishRequest) -> Result<PublishAck, BackendError> {
        publish::publish(&self.shared, request).await
    }

    async fn publish_batch(
        &self,
        requests: Vec<PublishRequest>,
    ) -> Vec<Result<PublishAck, BackendError>> {
        publish::publish_batch(&self.shared, requests).await
    }

    async fn stream_state(&self) -> Result<StreamState, BackendError> {
        let shared = &self.shared;
        let facts = shared.read_stream(shared.config.request_timeout).await?;
        Ok(facts.state)
    }

    async fn subjects(&self) -> Result<Vec<String>, BackendError> {
        Ok(self.shared.known_stream().await?.subjects)
    }

    async fn subscribe(
        &self,
        filters: &[String],
        start: u64,
    ) -> Result<MessageStream, BackendError> {
        subscribe::subscribe(self.shared.clone(), filters, start, None).await
    }

    async fn read_range(
        &self,
        filters: &[String],
        start: u64,
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        subscribe::subscribe(self.shared.clone(), filters, start, Some(until)).await
    }

    async fn read_latest(
        &self,
        filters: &[String],
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        latest::read_latest(self.shared.clone(), filters, until).await
    }

    async fn recent_start(
        &self,
        filters: &[String],
        recent: Recent,
        upto: u64,
    ) -> Result<u64, BackendError> {
        recent::recent_start(&self.shared, filters, recent, upto).await
    }

    async fn health(&self) -> Health {
        let shared = &self.shared;
        if shared.shut_down.load(Ordering::Relaxed) {
            return Health::Unavailable {
                cause: "backend_disconnected",
                detail: "the NATS connection was shut down".to_owned(),
            };
        }
        if shared.client.connection_state() != State::Connected {
            return Health::Unavailable {
                cause: "backend_disconnected",
                detail: format!("not connected to NATS at {}", shared.config.redacted_urls()),
            };
        }
        let limit = shared.config.request_timeout.min(HEALTH_LIMIT);
        match shared.read_stream(limit).await {
            Ok(_) => Health::Ready,
            Err(err) => Health::Unavailable {
                cause: "stream_unavailable",
                detail: format!("stream {:?}: {err}", shared.config.stream),
            },
        }
    }

    async fn shutdown(&self) {
        let shared = &self.shared;
        shared.shut_down.store(true, Ordering::Relaxed);
        let limit = shared.config.request_timeout;
        // Before the connection closes: afterwards nothing could delete them, and the server
        // would keep them until their inactivity threshold.
        let names = shared.consumers.close().await;
        let deletions = names
            .iter()
            .map(|name| subscribe::delete_consumer(shared, name));
        let results = futures::future::join_all(deletions).await;
        let failed = results.iter().filter(|gone| !**gone).count();
        if failed == 0 {
            tracing::info!(deleted = names.len(), "JetStream consumers deleted");
        } else {
            tracing::warn!(
                deleted = names.len() - failed,
                failed,
                "some JetStream consumers could not be deleted; the server reaps them"
            );
        }
        match tokio::time::timeout(limit, shared.client.drain()).await {
            Ok(Ok(())) => tracing::info!("NATS connection drained"),
            Ok(Err(err)) => tracing::warn!(%err, "draining the NATS connection failed"),
            Err(_) => tracing::warn!(?limit, "draining the NATS connection timed out"),
        }
    }
}

#[async_trait]
impl StreamAdmin for JetStreamBackend {
    async fn stream_names(&self) -> Result<Vec<String>, BackendError> {
        admin::stream_names(&self.shared).await
    }

    async fn stream_report(&self, name: &str) -> Result<StreamReport, BackendError> {
        admin::stream_report(&self.shared, name).await
    }

    async fn purge_stream(&self, name: &str, purge: PurgeOptions) -> Result<u64, BackendError> {
        admin::purge(&self.shared, name, purge).await
    }

    async fn delete_message(&self, name: &str, seq: u64) -> Result<(), BackendError> {
        admin::delete(&self.shared, name, seq).await
    }
}

#[async_trait]
impl StreamStatistics for JetStreamBackend {
    async fn stream_stats(&self) -> Result<Vec<StreamStats>, BackendError> {
        Ok(vec![stats::served_stream(&self.shared).await?])
    }

    fn register_metrics(&self, registry: &mut Registry) {
        let stats = &self.shared.stats;
        let js = registry.sub_registry_with_prefix("sluice_jetstream");
        js.register(
            "consumers_created",
            "Consumers created for feeds, recreations included",
            stats.consumers_created.clone(),
        );
        js.register(
            "consumer_recreations",
            "Consumers created again after a loss, from the next sequence",
            stats.consumers_recreated.clone(),
        );
        js.register(
            "consumers_lost",
            "Consumers found lost and recreated from the next sequence, by reason",
            stats.consumers_lost.clone(),
        );
        js.register(
            "messages_filtered_out",
            "Messages dropped in the hub because the server could not filter them",
            stats.filtered_out.clone(),
        );
    }
}
