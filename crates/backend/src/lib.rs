//! The durable stream behind the sluice hub, by role, and its two implementations — sluice's
//! embedded store (the default, [`embedded`]) and a NATS JetStream stream ([`jetstream`]).
//!
//! The hub never talks to a store or to NATS directly. What it needs goes through three
//! traits, one per role, so that both backends behave identically for clients and a caller
//! needs no backend's name:
//! - [`Backend`], the data path: publish, the stream's state, ordered reads and subscriptions;
//! - [`StreamAdmin`], administration: the streams there are, each described, purge, delete;
//! - [`StreamStatistics`], what `GET /metrics` reports: per-stream counts and the backend's
//!   own metrics.
//!
//! [`BackendRoles`] carries one backend in its three roles to the hub:
//!
//! ```no_run
//! # async fn open() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use sluice_backend::BackendRoles;
//! use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig};
//!
//! let config = EmbeddedConfig::default();
//! let (backend, _recovered) = EmbeddedBackend::open(&config).await?;
//! let roles = BackendRoles::from(Arc::new(backend));
//! let state = roles.data.stream_state().await?;
//! println!("{} messages, streams {:?}", state.messages, roles.admin.stream_names().await?);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use sluice_protocol::headers::Headers;

pub mod admin;
pub mod embedded;
mod error;
pub mod jetstream;
mod stats;

pub use admin::{PurgeOptions, StreamReport};
pub use error::{BackendError, Unavailable};
pub use sluice_protocol::error::ApiError;
pub use stats::StreamStats;

/// A message read from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendMessage {
    /// The stream sequence (1-based, strictly increasing within one incarnation).
    pub seq: u64,
    /// The full subject, including any topic prefix.
    pub subject: String,
    /// When the stream stored the message.
    pub time: jiff::Timestamp,
    /// The message's NATS headers (empty when it has none).
    pub headers: Headers,
    /// The message body, as stored.
    pub payload: Bytes,
}

/// What a subscription yields, in sequence order.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// A stored message.
    Message(BackendMessage),
    /// Positions the stream cannot deliver (only the embedded store reports them; JetStream
    /// keeps what it lost to itself, in its stream info).
    Lost(LostRange),
    /// Positions whose messages of the reader's subjects were removed before it read them:
    /// by a delete, a purge of those subjects or the per-subject limit, anywhere in the
    /// stream. The embedded store reports every such removal; on JetStream only those this
    /// hub made through its administration API (see [`Backend::subscribe`]).
    Removed(RemovedRange),
}

impl Delivery {
    /// The message, if this is one.
    pub fn message(self) -> Option<BackendMessage> {
        match self {
            Self::Message(message) => Some(message),
            Self::Lost(_) | Self::Removed(_) => None,
        }
    }
}

/// Positions `first..=last` where messages a reader's filters match were removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedRange {
    /// First position: at most the first removed position of the reader's subjects.
    pub first: u64,
    /// Last position (inclusive). Every position in the range that held a message the
    /// reader's filters match was removed; some may have held other subjects.
    pub last: u64,
    /// The subjects (or subject filters) of the removed messages, matched by the reader's
    /// filters: the readers concerned are those whose filters match one of them. Empty when
    /// they are not known: the removal concerns every reader.
    pub subjects: Vec<String>,
}

/// Positions `first..=last` the stream cannot deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostRange {
    /// First position.
    pub first: u64,
    /// Last position (inclusive).
    pub last: u64,
    /// Damaged records (`true`), or positions unconfirmed after a crash (`false`): the
    /// sequences above the last intact record that may have been handed out.
    pub damaged: bool,
}

/// The stream's state at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamState {
    /// First retained sequence; `last_seq + 1` when the stream holds no messages.
    pub first_seq: u64,
    /// Positions below this one that are gone were removed by a limit or a purge: a reader
    /// that asks for them is told (`expired`). Those from here up to `first_seq` went by
    /// their own TTL (skipped silently) or were removed with their subjects known (a delete,
    /// a purge of some subjects, the per-subject limit: told to the readers of those subjects
    /// as [`Delivery::Removed`]). At most `first_seq`; equal to it where the backend cannot
    /// tell why messages went (NATS JetStream).
    pub expired_below: u64,
    /// Last sequence ever assigned; 0 when nothing was ever stored.
    pub last_seq: u64,
    /// Messages the stream holds now.
    pub messages: u64,
    /// Bytes the stream's messages take, as the backend counts them.
    pub bytes: u64,
    /// Time of the first retained message, if any.
    pub first_time: Option<jiff::Timestamp>,
    /// The stream's incarnation: changes when a stream of the same name is deleted and
    /// created again, so cursors from the old one are detected.
    pub incarnation: u64,
    /// The subjects the stream captures (NATS filters).
    pub subjects: Vec<String>,
}

/// A message to publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublishRequest {
    /// The full subject, including any topic prefix.
    pub subject: String,
    /// Headers such as `Nats-Msg-Id` or `Nats-TTL`.
    pub headers: Headers,
    /// The message body, stored as given.
    pub payload: Bytes,
}

/// The stream's acknowledgement of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAck {
    /// The sequence the message was stored at (the original one for a duplicate).
    pub seq: u64,
    /// True when the message was a duplicate within the dedupe window and was not stored again.
    pub duplicate: bool,
    /// The stream that stored it, when that is not the served stream: the message reaches the
    /// served stream through its sources, at a sequence not known yet, and `seq` is the
    /// storing stream's.
    pub stream: Option<String>,
    /// The served stream's incarnation the sequence belongs to (the event id's epoch);
    /// meaningless when `stream` is set.
    pub incarnation: u64,
}

/// Whether the backend can serve requests now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Connected and the stream exists.
    Ready,
    /// Not ready; `cause` is a short metric label such as `backend_disconnected` or
    /// `stream_unavailable`.
    Unavailable {
        /// Metric label naming why.
        cause: &'static str,
        /// Human-readable detail for logs.
        detail: String,
    },
}

/// Where a stream's retained messages begin, in which incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The first retained sequence; the last + 1 when the stream holds no messages.
    pub first_seq: u64,
    /// As [`StreamState::expired_below`].
    pub expired_below: u64,
    /// The stream's incarnation.
    pub incarnation: u64,
}

/// Which recent messages of a reader's subjects it starts with (see
/// [`Backend::recent_start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recent {
    /// The last `n` messages.
    Last(u64),
    /// The messages stored at or after this time.
    Since(jiff::Timestamp),
}

/// An ordered, back-pressured sequence of messages and lost positions.
pub type MessageStream = BoxStream<'static, Result<Delivery, BackendError>>;

impl std::fmt::Debug for dyn Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backend({})", self.kind())
    }
}

/// Publishes `requests` one after the other through `backend`: the default
/// [`Backend::publish_batch`].
async fn sequential<B: Backend + ?Sized>(
    backend: &B,
    requests: Vec<PublishRequest>,
) -> Vec<Result<PublishAck, BackendError>> {
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        answers.push(backend.publish(request).await);
    }
    answers
}

/// A durable, sequenced stream of messages.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Short name for logs and metrics: `embedded` or `jetstream`.
    fn kind(&self) -> &'static str;

    /// Stores one message and returns its sequence once it is durable under the backend's
    /// policy.
    async fn publish(&self, request: PublishRequest) -> Result<PublishAck, BackendError>;

    /// Stores several messages as [`Backend::publish`] stores each, and answers for every one.
    ///
    /// The contract: exactly one answer per request, in request order; the messages a stream
    /// stores get its sequences in request order (a later request never lands before an
    /// earlier one of the same stream); a refused request does not stop the ones after it.
    /// Each request is judged by the same rules as a single publish (dedupe, expected-sequence
    /// preconditions, TTLs). By default the requests are published one after the other;
    /// backends override it to store them in one round (one group commit, one pipeline).
    async fn publish_batch(
        &self,
        requests: Vec<PublishRequest>,
    ) -> Vec<Result<PublishAck, BackendError>> {
        sequential(self, requests).await
    }

    /// The stream's current state.
    async fn stream_state(&self) -> Result<StreamState, BackendError>;

    /// The subjects the stream captures, as the backend knows them: a publish checks its
    /// subject against them. JetStream answers from what it knows of the stream without a
    /// request (refreshed when the stream changes); by default, [`Backend::stream_state`].
    async fn subjects(&self) -> Result<Vec<String>, BackendError> {
        Ok(self.stream_state().await?.subjects)
    }

    /// What the stream retains, when the backend knows it in-process, without a request (the
    /// embedded store); `None` otherwise. Readers whose subscription skipped positions check
    /// them against it (see `fanout::Source`): the shared feed only where this answers, readers
    /// catching up always.
    fn retained_from(&self) -> Option<Retained> {
        None
    }

    /// Every message with `seq >= start` whose subject matches any of `filters`, in sequence
    /// order: first what is stored, then live messages as they arrive, with no gap and no
    /// duplicate between the two. Positions the stream knows it cannot deliver come as
    /// [`Delivery::Lost`] in their place, and messages of `filters` removed before the read
    /// reached them (a delete, a purge of their subjects, the per-subject limit) as
    /// [`Delivery::Removed`]: every such removal on the embedded store; on JetStream, whose
    /// consumers pass deleted messages over without a word, only those this hub made itself
    /// through [`StreamAdmin`] while it ran. Reading is paced by the consumer: nothing is
    /// buffered beyond a small bound. The stream ends with an error when the feed is lost and
    /// cannot be recovered; the caller resumes from the last sequence it saw.
    async fn subscribe(
        &self,
        filters: &[String],
        start: u64,
    ) -> Result<MessageStream, BackendError>;

    /// Every message with `start <= seq < until` whose subject matches any of `filters`, in
    /// sequence order, as [`Backend::subscribe`] gives them (lost positions included), after
    /// which the stream ends (`None`) as soon as every position below `until` is accounted
    /// for — without waiting for a later message. A delivery at or above `until` may still
    /// come before the end; readers ignore it.
    ///
    /// A position is accounted for once it was delivered (a message or within a
    /// [`Delivery::Lost`] or [`Delivery::Removed`] range), or once the backend knows that no message matching `filters`
    /// stands there: the embedded store from its index, JetStream from the consumer's count of
    /// matching messages still pending after the last one it sent. When `until <= start` the
    /// stream ends at once. Like `subscribe`, the stream ends with an error instead when the
    /// feed is lost and cannot be recovered or the stream was replaced; the caller resumes from
    /// the last sequence it saw.
    ///
    /// `until` is bounded by what the caller has already read from the stream (a reader
    /// catching up with the shared feed reads up to the feed's first position), so every
    /// position below it was assigned before the read is opened: the stream's last sequence is
    /// already at least `until - 1`. That is why the read may end as soon as the backend finds
    /// nothing more matching: no later append can land below `until`. A caller that asks for
    /// positions not assigned yet is not promised them (JetStream may end before they are).
    async fn read_range(
        &self,
        filters: &[String],
        start: u64,
        until: u64,
    ) -> Result<MessageStream, BackendError>;

    /// The latest message of each subject `filters` match among the positions below `until`,
    /// in sequence order, after which the stream ends: the stream read as a key-value view.
    /// Positions the stream knows it cannot deliver below `until` come as [`Delivery::Lost`]
    /// in their place (a damaged record may have held a subject's latest message); nothing
    /// else is told of the positions passed over, which hold older messages or other
    /// subjects. A message removed while the read goes on is passed over: it is no longer
    /// anyone's latest state. As [`Backend::read_range`], `until` is at most the stream's last
    /// sequence + 1 when the read is opened, and the stream ends with an error when the feed is
    /// lost and cannot be recovered or the stream was replaced.
    ///
    /// The embedded store answers from its per-subject index (a lookup per literal filter, a
    /// pass over the subject names for a wildcard), reading no message outside the state;
    /// JetStream with a short-lived consumer delivering the last message per subject.
    async fn read_latest(
        &self,
        filters: &[String],
        until: u64,
    ) -> Result<MessageStream, BackendError>;

    /// Where the `recent` messages of `filters` begin among the positions up to `upto` (at
    /// most the stream's last sequence): the first position from which reading `filters` up
    /// to `upto` gives exactly those messages — for [`Recent::Last`], the first of the `n`
    /// most recent matching messages (the first matching one when fewer match); for
    /// [`Recent::Since`], the first message stored at or after the time. `upto + 1` when
    /// there is none.
    async fn recent_start(
        &self,
        filters: &[String],
        recent: Recent,
        upto: u64,
    ) -> Result<u64, BackendError>;

    /// True when this process is the only hub node that serves the stream (the embedded
    /// store): no other node publishes to it or holds subscriptions on it.
    fn single_node(&self) -> bool;

    /// Whether the backend is ready; must answer within one second.
    async fn health(&self) -> Health;

    /// Flushes and releases resources; called once on shutdown.
    async fn shutdown(&self);
}

/// Administration of the streams a backend holds: every stream of the embedded store, every
/// stream of the JetStream account — not only the served one.
#[async_trait]
pub trait StreamAdmin: Send + Sync + 'static {
    /// The names of the streams this backend can administer, sorted.
    async fn stream_names(&self) -> Result<Vec<String>, BackendError>;

    /// Stream `name` described (404/10059 when there is none).
    async fn stream_report(&self, name: &str) -> Result<StreamReport, BackendError>;

    /// Removes the messages of stream `name` that `purge` selects; answers how many went.
    async fn purge_stream(&self, name: &str, purge: PurgeOptions) -> Result<u64, BackendError>;

    /// Deletes message `seq` of stream `name` (404/10037 when there is none).
    async fn delete_message(&self, name: &str, seq: u64) -> Result<(), BackendError>;
}

/// What a backend tells `GET /metrics`, never asked on the paths of publishes or deliveries.
#[async_trait]
pub trait StreamStatistics: Send + Sync + 'static {
    /// The counts and positions of every stream the backend can tell about, the served one
    /// marked: read by each scrape of `/metrics` (bounded by one second there).
    async fn stream_stats(&self) -> Result<Vec<StreamStats>, BackendError>;

    /// Registers the backend's own metrics; called once when the hub is built.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry);
}

/// One backend in its three roles, as the hub holds it.
#[derive(Clone)]
pub struct BackendRoles {
    /// The data path.
    pub data: Arc<dyn Backend>,
    /// Administration.
    pub admin: Arc<dyn StreamAdmin>,
    /// Statistics.
    pub statistics: Arc<dyn StreamStatistics>,
}

impl std::fmt::Debug for BackendRoles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BackendRoles").field(&self.data).finish()
    }
}

impl<B: Backend + StreamAdmin + StreamStatistics> From<Arc<B>> for BackendRoles {
    fn from(backend: Arc<B>) -> Self {
        Self {
            data: backend.clone(),
            admin: backend.clone(),
            statistics: backend,
        }
    }
}
