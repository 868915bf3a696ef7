//! What a backend call can fail with, by cause, and the three kinds the hub tells apart: the
//! stream's refusal (a JetStream API error), the backend out of reach for now, and anything
//! else.

use std::error::Error as StdError;
use std::path::PathBuf;
use std::time::Duration;

use sluice_protocol::error::ApiError;
use sluice_store::StoreError;

use super::jetstream::{JetStreamConfigError, SetupError};

/// An error from a backend.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The stream refused the request with a JetStream API error (the embedded store uses the
    /// same codes), e.g. 400 / 10071 wrong last sequence.
    #[error("{} (status {}, code {})", .0.description, .0.status, .0.code)]
    Api(ApiError),
    /// The backend cannot be reached or did not answer in time; the request may succeed later.
    #[error("backend unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// The embedded store could not write its files — a full disk, an exhausted quota, another
    /// I/O error. Nothing of the request was stored and the stream stays open: the same request
    /// may succeed once the storage takes writes again.
    #[error("nothing was stored: {0}")]
    Storage(StoreError),
    /// The embedded store failed: I/O, a damaged record, a refused stream name.
    #[error(transparent)]
    Store(StoreError),
    /// The embedded store's data directory could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The data directory, `embedded.data_dir`.
        path: PathBuf,
        /// Why the store refused to open.
        source: StoreError,
    },
    /// Opening the embedded store panicked on its blocking thread.
    #[error("opening the store panicked: {0}")]
    OpenPanicked(#[source] tokio::task::JoinError),
    /// The `[jetstream]` configuration is invalid.
    #[error(transparent)]
    Config(#[from] JetStreamConfigError),
    /// The NATS connection cannot be set up as configured (credentials, nkey seed, TLS).
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The stream was deleted and created again under a subscription, which therefore ends.
    #[error("stream {stream:?} was deleted and created again (incarnation {was:x}, now {now:x})")]
    Recreated {
        /// The stream the subscription read.
        stream: String,
        /// The incarnation the subscription started in.
        was: u64,
        /// The stream's incarnation now.
        now: u64,
    },
    /// Messages a subscription had not read yet were removed while it was recovering; it ends,
    /// so that its reader, resuming from where it stopped, reports the loss.
    #[error("stream {stream:?} dropped sequences {first} to {last} while the feed was recovering")]
    Dropped {
        /// The stream the subscription read.
        stream: String,
        /// The first sequence lost.
        first: u64,
        /// The last sequence lost.
        last: u64,
    },
}

/// Why a backend cannot serve a request now.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// The embedded store was shut down.
    #[error("the store is closed")]
    StoreClosed,
    /// The embedded stream was closed (or could not undo a failed write); reopening the store
    /// brings it back.
    #[error("stream {0:?} is closed")]
    StreamClosed(String),
    /// A request got no answer within its time limit: a stream electing a leader answers
    /// nothing for a while.
    #[error(
        "{what}: no answer within {}; the stream is temporarily unavailable (a leader election \
         or an overloaded server), retry later",
        sluice_protocol::config_duration::format(*.limit)
    )]
    Timeout {
        /// The request, e.g. `reading stream "EVENTS"`.
        what: String,
        /// The limit it ran under.
        limit: Duration,
    },
    /// A request to the NATS server failed without an answer from JetStream.
    #[error("{what}: {source}")]
    Request {
        /// The request, e.g. `reading stream "EVENTS"`.
        what: String,
        /// The client library's error.
        source: Box<dyn StdError + Send + Sync>,
    },
    /// No server of `jetstream.urls` accepted a connection within the connect timeout.
    #[error("cannot connect to NATS at {urls}: no connection within {}", sluice_protocol::config_duration::format(*.limit))]
    ConnectTimeout {
        /// The servers tried, passwords redacted.
        urls: String,
        /// How long connecting was tried.
        limit: Duration,
    },
    /// Connecting to the servers failed.
    #[error("cannot connect to NATS at {urls}: {reason}")]
    Connect {
        /// The servers tried, passwords redacted.
        urls: String,
        /// The client library's message with every configured secret replaced: it may quote
        /// the address it tried, credentials included, so it is kept only as scrubbed text.
        reason: String,
    },
    /// No stream answered for the subject published to: the stream is electing a leader, or
    /// it was deleted.
    #[error(
        "{what}: no stream answered for this subject; the stream is temporarily unavailable \
         (a leader election, or it was deleted), retry later"
    )]
    NoStream {
        /// The request, e.g. `publishing to "orders.new"`.
        what: String,
    },
    /// The NATS connection is closed for good.
    #[error("the NATS connection is closed")]
    ConnectionClosed,
    /// The NATS connection is down (the client is reconnecting): answered at once instead of
    /// waiting for a request timeout.
    #[error("not connected to NATS at {urls} (reconnecting); retry later")]
    NotConnected {
        /// The servers, passwords redacted.
        urls: String,
    },
    /// The stream could not be read right after connecting; the server may lack JetStream.
    #[error("{source} (NATS at {urls}; is JetStream enabled?)")]
    NoJetStream {
        /// The servers connected to, passwords redacted.
        urls: String,
        /// Why reading the stream failed.
        source: Box<Unavailable>,
    },
}

impl Unavailable {
    /// Why, as a log and metric label: `disconnected`, `timeout`, `stream_unavailable`,
    /// `request_failed`, `connect_failed` or `closed`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::StoreClosed | Self::StreamClosed(_) => "closed",
            Self::NotConnected { .. } | Self::ConnectionClosed => "disconnected",
            Self::Timeout { .. } => "timeout",
            Self::NoStream { .. } => "stream_unavailable",
            Self::Request { .. } => "request_failed",
            Self::ConnectTimeout { .. } | Self::Connect { .. } | Self::NoJetStream { .. } => {
                "connect_failed"
            }
        }
    }
}

impl BackendError {
    /// The kind as the `sluice_backend_errors_total{kind}` label: `api`, `unavailable`,
    /// `storage` or `other`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Api(_) => "api",
            Self::Unavailable(_) => "unavailable",
            Self::Storage(_) => "storage",
            Self::Store(_)
            | Self::Open { .. }
            | Self::OpenPanicked(_)
            | Self::Config(_)
            | Self::Setup(_)
            | Self::Recreated { .. }
            | Self::Dropped { .. } => "other",
        }
    }
}

/// A backend error as an answer: the stream's refusal as it is; the backend out of reach as
/// `503`, storage that cannot be written (a full disk) as `507 Insufficient Storage`, anything
/// else as `500`, described by the error's message.
impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        let status = match err {
            BackendError::Api(api) => return api,
            BackendError::Unavailable(_) => 503,
            BackendError::Storage(_) => 507,
            _ => 500,
        };
        ApiError::new(status, u32::from(status), err.to_string())
    }
}

impl From<ApiError> for BackendError {
    fn from(err: ApiError) -> Self {
        Self::Api(err)
    }
}

/// A store error as the backend reports it: the store's own API errors as they are, a missing
/// stream as JetStream's 404/10059, invalid subjects or configurations as 400/10003, a closed
/// stream as unavailable, a failed write as a storage failure.
impl From<StoreError> for BackendError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Api(api) => Self::Api(api),
            StoreError::StreamNotFound(name) => Self::Api(stream_not_found(&name)),
            StoreError::InvalidSubject(reason) | StoreError::InvalidConfig(reason) => {
                Self::Api(ApiError::bad_request().described(reason))
            }
            StoreError::Closed(name) => Self::Unavailable(Unavailable::StreamClosed(name)),
            err @ (StoreError::WriteFailed { .. }
            | StoreError::SyncFailed { .. }
            | StoreError::Fenced { .. }) => Self::Storage(err),
            other => Self::Store(other),
        }
    }
}

/// 404/10059 naming the stream.
pub(crate) fn stream_not_found(stream: &str) -> ApiError {
    ApiError::stream_not_found().described(format!("stream {stream:?} not found"))
}
