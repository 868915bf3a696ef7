//! What the fan-out's tests share: a real embedded store in a temporary directory, and the
//! same store behind the manners of a network backend ([`Remote`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use sluice_protocol::headers::Headers;

use super::Encoder;
use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig};
use sluice_backend::{
    Backend, BackendError, Health, MessageStream, PublishAck, PublishRequest, Recent, StreamState,
};

/// The default embedded stream in `dir`, unsynced (the tests never crash the process).
pub(crate) async fn open_backend(dir: &Path) -> Arc<EmbeddedBackend> {
    let config = EmbeddedConfig {
        data_dir: dir.to_owned(),
        sync: "never".into(),
        ..EmbeddedConfig::default()
    };
    Arc::new(EmbeddedBackend::open(&config).await.unwrap().0)
}

/// Publishes a small message to `subject`; returns its sequence.
pub(crate) async fn publish(backend: &dyn Backend, subject: &str) -> u64 {
    let request = PublishRequest {
        subject: subject.into(),
        headers: Headers::new(),
        payload: Bytes::from_static(b"1"),
    };
    backend.publish(request).await.unwrap().seq
}

/// The encoder of incarnation `incarnation`: no topic prefix, 1 MiB frames.
pub(crate) fn encoder(incarnation: u64) -> Encoder {
    Encoder {
        incarnation,
        topic_prefix: String::new(),
        max_event_size: 1 << 20,
        event_type: "message".into(),
        view_prefix: None,
    }
}

/// The real embedded backend, but as a network backend behaves: every call and every message
/// first returns `Pending` once (so a reader's `next()` can be dropped while opening, reading,
/// or checking skipped positions), nothing is known in-process (`retained_from` is `None`), and
/// every request for the stream's state is counted.
pub(super) struct Remote {
    inner: Arc<EmbeddedBackend>,
    /// Calls of [`Backend::stream_state`] so far: the round trips a network backend would make.
    pub state_reads: AtomicUsize,
}

impl Remote {
    pub(super) fn new(inner: Arc<EmbeddedBackend>) -> Self {
        Self {
            inner,
            state_reads: AtomicUsize::new(0),
        }
    }

    /// The round trips for the stream's state so far.
    pub(super) fn state_reads(&self) -> usize {
        self.state_reads.load(Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl Backend for Remote {
    fn kind(&self) -> &'static str {
        "remote"
    }
    fn single_node(&self) -> bool {
        false
    }
    async fn publish(&self, request: PublishRequest) -> Result<PublishAck, BackendError> {
        self.inner.publish(request).await
    }
    async fn stream_state(&self) -> Result<StreamState, BackendError> {
        self.state_reads.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
        self.inner.stream_state().await
    }
    async fn subscribe(
        &self,
        filters: &[String],
        start: u64,
    ) -> Result<MessageStream, BackendError> {
        tokio::task::yield_now().await;
        Ok(yield_each(self.inner.subscribe(filters, start).await?))
    }
    async fn read_range(
        &self,
        filters: &[String],
        start: u64,
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        tokio::task::yield_now().await;
        Ok(yield_each(
            self.inner.read_range(filters, start, until).await?,
        ))
    }
    async fn read_latest(
        &self,
        filters: &[String],
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        tokio::task::yield_now().await;
        Ok(yield_each(self.inner.read_latest(filters, until).await?))
    }
    async fn recent_start(
        &self,
        filters: &[String],
        recent: Recent,
        upto: u64,
    ) -> Result<u64, BackendError> {
        tokio::task::yield_now().await;
        self.inner.recent_start(filters, recent, upto).await
    }
    async fn health(&self) -> Health {
        self.inner.health().await
    }
    async fn shutdown(&self) {
        self.inner.shutdown().await
    }
}

/// `stream`, returning `Pending` once before every item.
fn yield_each(stream: MessageStream) -> MessageStream {
    stream
        .then(|item| async {
            tokio::task::yield_now().await;
            item
        })
        .boxed()
}
