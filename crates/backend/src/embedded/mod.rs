//! The embedded backend: one stream of sluice's own store, in-process.
//!
//! The stream is looked up by name on every call, so a stream deleted and created again
//! (a new incarnation) is picked up, and its old subscribers end with an error.

pub mod admin;
mod config;
mod metrics;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use sluice_protocol::error::ApiError;
use sluice_protocol::headers::Headers;
use sluice_protocol::subject::FilterSet;
use sluice_store::{
    LossCause, PubAck, RecoveryReport, Store, StoreError, StoreOptions, StoredMessage,
    StreamConfig, StreamHandle, SyncPolicy,
};

use super::error::stream_not_found;
use super::{
    Backend, BackendError, BackendMessage, Delivery, Health, LostRange, MessageStream, PublishAck,
    PublishRequest, PurgeOptions, Recent, RemovedRange, Retained, StreamAdmin, StreamReport,
    StreamState, StreamStatistics, StreamStats, Unavailable, sequential,
};
use sluice_protocol::config_duration;

pub use config::{DEFAULT_STREAM, EmbeddedConfig, StreamDecl};

/// A stream of the embedded store.
#[derive(Debug)]
pub struct EmbeddedBackend {
    /// The store until shutdown; shared with the metrics collector.
    store: Arc<Mutex<Option<Store>>>,
    stream: String,
}

impl EmbeddedBackend {
    /// Opens the store in `embedded.data_dir`, creates or updates every declared stream, and
    /// serves `embedded.stream`. Returns the recovery report of every stream found on disk.
    /// Fails when the store refused a stream whose metadata no file verifies.
    pub async fn open(
        embedded: &EmbeddedConfig,
    ) -> Result<(Self, Vec<RecoveryReport>), BackendError> {
        let options = StoreOptions {
            sync: sync_policy(&embedded.sync),
            flush_interval: embedded.snapshot_interval,
            index_memory: embedded.index_memory,
            ..StoreOptions::default()
        };
        let dir = embedded.data_dir.clone();
        let (store, reports) = tokio::task::spawn_blocking(move || Store::open(&dir, options))
            .await
            .map_err(BackendError::OpenPanicked)?
            .map_err(|source| BackendError::Open {
                path: embedded.data_dir.clone(),
                source,
            })?;
        refuse_damaged_streams(&store)?;
        for decl in &embedded.streams {
            declare(&store, stream_config(decl)).await?;
        }
        Ok((Self::new(store, &embedded.stream), reports))
    }

    /// Serves `stream` of an already open store.
    fn new(store: Store, stream: &str) -> Self {
        Self {
            store: Arc::new(Mutex::new(Some(store))),
            stream: stream.to_owned(),
        }
    }

    /// The store, for administration (and tests that delete or recreate the stream).
    pub fn store(&self) -> Option<Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// While a stream of the store cannot write (a full disk): which, and the latest error.
    /// Publishes to the served stream may land in any stream of the store (its sources' origins).
    fn failing_writes(&self) -> Option<String> {
        let store = self.store()?;
        store.list().into_iter().find_map(|name| {
            let failing = store.stream(&name)?.write_health().failing?;
            Some(format!("writes to stream {name:?} fail: {failing}"))
        })
    }

    /// The stream that stores `subject`: as on JetStream, the one that captures it, so a served
    /// stream that sources others receives the message through its sources.
    fn storing_handle(&self, served: StreamHandle, subject: &str) -> StreamHandle {
        if served.captures(subject) {
            return served;
        }
        self.store()
            .and_then(|store| store.stream_for_subject(subject))
            .unwrap_or(served)
    }

    /// The acknowledgement of a message `handle` stored while the served stream was in
    /// `incarnation`.
    fn ack(&self, handle: &StreamHandle, ack: PubAck, incarnation: u64) -> PublishAck {
        PublishAck {
            seq: ack.seq,
            duplicate: ack.duplicate,
            stream: (handle.name() != self.stream).then(|| handle.name().to_owned()),
            incarnation,
        }
    }

    /// Stores `group` in `handle` as one batch, appending one answer per message.
    async fn store_group(
        &self,
        handle: &StreamHandle,
        group: Vec<(String, Headers, Bytes)>,
        incarnation: u64,
        answers: &mut Vec<Result<PublishAck, BackendError>>,
    ) {
        let count = group.len();
        match handle.publish_batch(group).await {
            Ok(acks) => answers.extend(acks.into_iter().map(|ack| {
                ack.map(|ack| self.ack(handle, ack, incarnation))
                    .map_err(BackendError::from)
            })),
            // A batch fails as a whole only when the stream is closed: so does each message.
            Err(_) => answers.extend((0..count).map(|_| {
                Err(BackendError::from(StoreError::Closed(
                    handle.name().to_owned(),
                )))
            })),
        }
    }

    /// Stream `name` of the store, for administration.
    fn admin_handle(&self, name: &str) -> Result<StreamHandle, BackendError> {
        let store = self.store().ok_or(Unavailable::StoreClosed)?;
        admin::stream(&store, name)
    }

    /// The subjects the served stream's messages may carry: its own, and when it sources
    /// other streams (`sourcing`), what they bring in.
    fn reachable(&self, own: Vec<String>, sourcing: bool) -> Vec<String> {
        match self.store() {
            Some(store) if sourcing => store.reachable_subjects(&self.stream).unwrap_or(own),
            _ => own,
        }
    }

    fn handle(&self) -> Result<StreamHandle, BackendError> {
        let store = self.store().ok_or(Unavailable::StoreClosed)?;
        store
            .stream(&self.stream)
            .ok_or_else(|| stream_not_found(&self.stream).into())
    }
}

/// Fails when the store left a stream unloaded because none of its metadata files verifies:
/// serving on would hide its messages (a declared one would even be refused creation), so the
/// hub does not start until `sluice stream repair` has rebuilt its metadata.
fn refuse_damaged_streams(store: &Store) -> Result<(), BackendError> {
    match store.refused_streams().into_iter().next() {
        Some(refusal) => Err(BackendError::Store(refusal.into())),
        None => Ok(()),
    }
}

/// The store's sync policy for `embedded.sync` (validated by the configuration).
fn sync_policy(text: &str) -> SyncPolicy {
    match text {
        "always" => SyncPolicy::Always,
        "never" => SyncPolicy::Never,
        other => config_duration::parse(other).map_or(SyncPolicy::Always, SyncPolicy::Interval),
    }
}

/// The store configuration of a declared stream.
pub fn stream_config(decl: &StreamDecl) -> StreamConfig {
    let limit = |value: u64| {
        if value == 0 {
            -1
        } else {
            i64::try_from(value).unwrap_or(i64::MAX)
        }
    };
    StreamConfig {
        max_msgs: limit(decl.max_msgs),
        max_bytes: limit(decl.max_bytes),
        max_age: decl.max_age,
        max_msgs_per_subject: limit(decl.max_msgs_per_subject),
        max_msg_size: if decl.max_msg_size == 0 {
            -1
        } else {
            i32::try_from(decl.max_msg_size).unwrap_or(i32::MAX)
        },
        duplicate_window: decl.duplicate_window,
        allow_msg_ttl: decl.allow_msg_ttl,
        allow_msg_schedules: decl.allow_msg_schedules,
        max_msg_schedules: limit(decl.max_msg_schedules),
        subject_delete_marker_ttl: decl.subject_delete_marker_ttl,
        sources: decl.sources.clone(),
        ..StreamConfig::new(decl.name.clone(), decl.subjects.clone())
    }
}

/// Creates the stream, or brings an existing one to `config`.
async fn declare(store: &Store, config: StreamConfig) -> Result<(), BackendError> {
    let name = config.name.clone();
    let result = match store.stream(&name) {
        Some(existing) if existing.info(None).config == config => return Ok(()),
        Some(_) => store.update_stream(config).await.map(drop),
        None => store.create_stream(config).map(drop),
    };
    result.map_err(|err| match BackendError::from(err) {
        BackendError::Api(mut api) => {
            api.description = format!("stream {name:?}: {}", api.description);
            BackendError::Api(api)
        }
        other => other,
    })
}

fn convert(delivery: sluice_store::Delivery) -> Delivery {
    match delivery {
        sluice_store::Delivery::Message(message) => Delivery::Message(convert_message(message)),
        sluice_store::Delivery::Lost(lost) => Delivery::Lost(LostRange {
            first: lost.first,
            last: lost.last,
            damaged: lost.cause == LossCause::Damaged,
        }),
        sluice_store::Delivery::Removed(removed) => Delivery::Removed(RemovedRange {
            first: removed.first,
            last: removed.last,
            subjects: removed.subjects,
        }),
    }
}

fn convert_message(message: StoredMessage) -> BackendMessage {
    BackendMessage {
        seq: message.seq,
        subject: message.subject,
        time: message.time,
        headers: message.headers,
        payload: message.payload,
    }
}

#[async_trait]
impl Backend for EmbeddedBackend {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    fn single_node(&self) -> bool {
        true
    }

    async fn publish(&self, request: PublishRequest) -> Result<PublishAck, BackendError> {
        let served = self.handle()?;
        // A handle is one incarnation of the stream: a recreated stream gets a new handle.
        let incarnation = served.retained_from().incarnation;
        let handle = self.storing_handle(served, &request.subject);
        let ack = handle
            .publish(request.subject, request.headers, request.payload)
            .await?;
        Ok(self.ack(&handle, ack, incarnation))
    }

    async fn publish_batch(
        &self,
        requests: Vec<PublishRequest>,
    ) -> Vec<Result<PublishAck, BackendError>> {
        let served = match self.handle() {
            Ok(served) => served,
            // No stream to serve: every request fails as a single publish does.
            Err(_) => return sequential(self, requests).await,
        };
        let incarnation = served.retained_from().incarnation;
        let mut answers = Vec::with_capacity(requests.len());
        // Consecutive requests stored by the same stream go as one batch (one queue entry,
        // one group commit); a change of stream starts the next one, so the order holds.
        let mut group: Vec<(String, Headers, Bytes)> = Vec::with_capacity(requests.len());
        let mut group_handle: Option<StreamHandle> = None;
        for request in requests {
            // The subject of the message before goes to the same stream: no need to ask again.
            let same_subject = group
                .last()
                .is_some_and(|(subject, ..)| *subject == request.subject);
            if !same_subject {
                let handle = self.storing_handle(served.clone(), &request.subject);
                if let Some(current) =
                    group_handle.take_if(|current| current.name() != handle.name())
                {
                    self.store_group(
                        &current,
                        std::mem::take(&mut group),
                        incarnation,
                        &mut answers,
                    )
                    .await;
                }
                group_handle.get_or_insert(handle);
            }
            group.push((request.subject, request.headers, request.payload));
        }
        if let Some(current) = group_handle {
            self.store_group(&current, group, incarnation, &mut answers)
                .await;
        }
        answers
    }

    async fn subjects(&self) -> Result<Vec<String>, BackendError> {
        // Asked on every publish: the configuration's subjects alone, not the whole info.
        let (own, sourcing) = self.handle()?.own_subjects();
        Ok(self.reachable(own, sourcing))
    }

    async fn stream_state(&self) -> Result<StreamState, BackendError> {
        let info = self.handle()?.info(None);
        let sourcing = !info.config.sources.is_empty();
        let subjects = self.reachable(info.config.subjects, sourcing);
        Ok(StreamState {
            first_seq: info.state.first_seq,
            expired_below: info.state.expired_below,
            last_seq: info.state.last_seq,
            messages: info.state.msgs,
            bytes: info.state.bytes,
            first_time: info.state.first_time,
            incarnation: info.incarnation,
            subjects,
        })
    }

    fn retained_from(&self) -> Option<Retained> {
        // A stream that is gone is the feed's to find out by its subscription ending.
        let retained = self.handle().ok()?.retained_from();
        Some(Retained {
            first_seq: retained.first_seq,
            expired_below: retained.expired_below,
            incarnation: retained.incarnation,
        })
    }

    async fn subscribe(
        &self,
        filters: &[String],
        start: u64,
    ) -> Result<MessageStream, BackendError> {
        self.read_range(filters, start, u64::MAX).await
    }

    async fn read_range(
        &self,
        filters: &[String],
        start: u64,
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        let filters = FilterSet::new(filters.iter().cloned())
            .map_err(|err| ApiError::bad_request().described(err.to_string()))?;
        let stream = self.handle()?.read_range(start, until, filters);
        Ok(stream
            .map(|item| item.map(convert).map_err(BackendError::from))
            .boxed())
    }

    async fn read_latest(
        &self,
        filters: &[String],
        until: u64,
    ) -> Result<MessageStream, BackendError> {
        let filters = FilterSet::new(filters.iter().cloned())
            .map_err(|err| ApiError::bad_request().described(err.to_string()))?;
        let read = self.handle()?.read_latest(until, filters);
        let read = read.map(|item| item.map(convert).map_err(BackendError::from));
        Ok(futures::stream::iter(read).boxed())
    }

    async fn recent_start(
        &self,
        filters: &[String],
        recent: Recent,
        upto: u64,
    ) -> Result<u64, BackendError> {
        let filters = FilterSet::new(filters.iter().cloned())
            .map_err(|err| ApiError::bad_request().described(err.to_string()))?;
        let handle = self.handle()?;
        let start = match recent {
            Recent::Last(n) => handle.last_n_start(&filters, n, upto)?,
            Recent::Since(time) => handle.first_stored_since(time)?,
        };
        Ok(start.min(upto.saturating_add(1)))
    }

    async fn health(&self) -> Health {
        match self.handle() {
            Ok(_) => match self.failing_writes() {
                Some(detail) => Health::Unavailable {
                    cause: "storage",
                    detail,
                },
                None => Health::Ready,
            },
            Err(BackendError::Unavailable(reason)) => Health::Unavailable {
                cause: "backend_closed",
                detail: reason.to_string(),
            },
            Err(err) => Health::Unavailable {
                cause: "stream_unavailable",
                detail: err.to_string(),
            },
        }
    }

    async fn shutdown(&self) {
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(store) = store {
            // Closing joins the writer threads after they wrote index.db and the sidecars.
            let closed = tokio::task::spawn_blocking(move || store.close());
            if tokio::time::timeout(Duration::from_secs(30), closed)
                .await
                .is_err()
            {
                tracing::warn!("the store did not close within 30s");
            }
        }
    }
}

#[async_trait]
impl StreamAdmin for EmbeddedBackend {
    async fn stream_names(&self) -> Result<Vec<String>, BackendError> {
        let store = self.store().ok_or(Unavailable::StoreClosed)?;
        let mut names = store.list();
        names.sort();
        Ok(names)
    }

    async fn stream_report(&self, name: &str) -> Result<StreamReport, BackendError> {
        Ok(admin::report(&self.admin_handle(name)?))
    }

    async fn purge_stream(&self, name: &str, purge: PurgeOptions) -> Result<u64, BackendError> {
        admin::purge(&self.admin_handle(name)?, purge).await
    }

    async fn delete_message(&self, name: &str, seq: u64) -> Result<(), BackendError> {
        admin::delete(&self.admin_handle(name)?, seq).await
    }
}

#[async_trait]
impl StreamStatistics for EmbeddedBackend {
    async fn stream_stats(&self) -> Result<Vec<StreamStats>, BackendError> {
        let store = self.store().ok_or(Unavailable::StoreClosed)?;
        Ok(metrics::stream_stats(&store, &self.stream))
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register_collector(Box::new(metrics::StoreMetrics {
            store: self.store.clone(),
            stream: self.stream.clone(),
        }));
    }
}
