//! [`StreamHandle`]: the public face of one stream.

use std::future::Future;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::config::StreamConfig;
use crate::error::{Result, StoreError};
use crate::proto::{FilterSet, Headers};
use crate::rules::Publish;
use crate::state::PendingRead;
use crate::types::{
    PubAck, PurgeRequest, Retained, StoredMessage, StreamInfo, WriteHealth, WriteStats,
};
use crate::writer::{self, Op, Shared};

/// A handle to one stream; cheap to clone, usable from any thread or runtime.
#[derive(Clone)]
pub struct StreamHandle {
    pub(crate) shared: Arc<Shared>,
    pub(crate) ops: Sender<Op>,
    pub(crate) writer: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for StreamHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHandle")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl StreamHandle {
    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub(crate) fn request<T: Send + 'static>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Op,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let sent = self.submit(make(tx));
        let name = self.shared.name.clone();
        async move {
            if !sent {
                return Err(StoreError::Closed(name));
            }
            rx.await.unwrap_or(Err(StoreError::Closed(name)))
        }
    }

    /// Hands `op` to the writer: a publish is applied at once on this thread when the
    /// writer's turn is free and no fsync is waited for, anything else is queued for the
    /// writer thread. Either way after everything queued before it. False when the stream's
    /// writer has stopped.
    fn submit(&self, op: Op) -> bool {
        let publish = matches!(op, Op::Publish(..) | Op::PublishBatch(..));
        if let Some(mut turn) = publish.then(|| self.shared.try_turn()).flatten() {
            writer::apply_now(&self.shared, &mut turn, op);
            return true;
        }
        let queued = self.ops.send(op).is_ok();
        self.shared.queued_one();
        queued
    }

    /// Publishes a message. The future resolves once the message is durable under the store's
    /// sync policy (with `always`, after the fsync that covers it). The request is queued
    /// when this is called, so the order of calls is the order of sequences.
    pub fn publish(
        &self,
        subject: impl Into<String>,
        headers: Headers,
        payload: impl Into<Bytes>,
    ) -> impl Future<Output = Result<PubAck>> + Send + 'static {
        self.publish_as(subject.into(), headers, payload.into(), false)
    }

    /// Publishes several messages in order as one request (one queue entry, one answer): the
    /// cheapest way to append many messages. Each message gets its own result.
    pub fn publish_batch(
        &self,
        messages: Vec<(String, Headers, Bytes)>,
    ) -> impl Future<Output = Result<Vec<Result<PubAck>>>> + Send + 'static {
        let batch = messages
            .into_iter()
            .map(|(subject, headers, payload)| Publish {
                subject,
                headers,
                payload,
                internal: false,
            })
            .collect();
        self.publish_many(batch)
    }

    /// Publishes on sluice's own behalf (sourcing, schedules): may carry `Nats-Stream-Source`
    /// and need not match the stream's subjects; every other rule applies.
    pub fn publish_internal(
        &self,
        subject: impl Into<String>,
        headers: Headers,
        payload: impl Into<Bytes>,
    ) -> impl Future<Output = Result<PubAck>> + Send + 'static {
        self.publish_as(subject.into(), headers, payload.into(), true)
    }

    fn publish_as(
        &self,
        subject: String,
        headers: Headers,
        payload: Bytes,
        internal: bool,
    ) -> impl Future<Output = Result<PubAck>> + Send + 'static {
        let p = Publish {
            subject,
            headers,
            payload,
            internal,
        };
        self.request(move |tx| Op::Publish(p, tx))
    }

    /// The message at `seq`, if it exists.
    pub fn get(&self, seq: u64) -> Result<Option<StoredMessage>> {
        let pending = self.shared.lock().prepare(seq)?;
        pending.map(PendingRead::finish).transpose()
    }

    /// The last message on a literal subject.
    pub fn last_for_subject(&self, subject: &str) -> Result<Option<StoredMessage>> {
        let pending = {
            let mut st = self.shared.lock();
            let visible = st.visible;
            match st.table.last_for_subject(subject, visible)? {
                Some(seq) => st.prepare(seq)?,
                None => None,
            }
        };
        pending.map(PendingRead::finish).transpose()
    }

    /// The source index: source index name (`<origin> <filter or '>'> <dest or '>'>`) → last
    /// origin sequence stored and the origin's ident.
    pub fn source_positions(
        &self,
    ) -> std::collections::BTreeMap<String, crate::sources::SourcePosition> {
        self.shared.lock().sources.positions().clone()
    }

    /// Visits stored sourced messages (those carrying `Nats-Stream-Source`), newest first, until
    /// `visit` returns false: the backward scan for sources the index does not resolve. Only
    /// records flagged as sourced are read; other messages cost an in-memory check each.
    pub fn scan_sourced_back(&self, mut visit: impl FnMut(&StoredMessage) -> bool) -> Result<()> {
        let (mut seq, first) = {
            let st = self.shared.lock();
            (st.visible, st.table.first_seq())
        };
        while seq >= first && seq > 0 {
            // The lock is taken per step so a long scan never holds up the writer.
            let pending = {
                let mut st = self.shared.lock();
                let sourced = st
                    .table
                    .get(seq)?
                    .is_some_and(|m| m.flags & crate::record::flags::SOURCED != 0);
                if sourced { st.prepare(seq)? } else { None }
            };
            if let Some(p) = pending
                && !visit(&p.finish()?)
            {
                break;
            }
            seq -= 1;
        }
        Ok(())
    }

    /// Whether any block still holds a message that was stored with `Nats-Stream-Source`.
    pub(crate) fn holds_sourced_messages(&self) -> bool {
        let st = self.shared.lock();
        st.table.count() > 0
            && st
                .table
                .blocks()
                .any(|(_, b)| b.stats.sourced > 0 && b.stats.msgs > 0)
    }

    /// How the stream's writes are going: whether they fail now (a full disk, say) and how many
    /// failed since open. Cheap: no I/O.
    pub fn write_health(&self) -> WriteHealth {
        self.shared.lock().health.report()
    }

    /// The stream's write-path counters (batches, fsyncs, messages stored). Cheap: no I/O,
    /// unlike [`StreamHandle::info`].
    pub fn write_stats(&self) -> WriteStats {
        self.shared.lock().stats
    }

    /// Whether the stream was closed or deleted.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// The first live sequence stored at or after `ts_ns` (`last_seq + 1` when none).
    pub(crate) fn first_seq_at_or_after(&self, ts_ns: i64) -> Result<u64> {
        self.shared.lock().table.first_at_or_after(ts_ns)
    }

    /// Blocks read from their files since the stream was opened: a stream opened from
    /// index.db reads none until a query needs one, then only the blocks it needs.
    pub fn blocks_loaded(&self) -> u64 {
        self.shared.lock().table.blocks_loaded()
    }

    /// Messages whose entries the table holds in memory now: those of the blocks it has read
    /// or written and not let go of (`StoreOptions::index_memory` bounds them).
    pub fn index_messages(&self) -> u64 {
        self.shared.lock().table.messages_in_memory()
    }

    /// Stores messages in order as one writer request (each answered on its own).
    pub(crate) fn publish_many(
        &self,
        batch: Vec<Publish>,
    ) -> impl Future<Output = Result<Vec<Result<PubAck>>>> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let sent = self.submit(Op::PublishBatch(batch, tx));
        let name = self.shared.name.clone();
        async move {
            if !sent {
                return Err(StoreError::Closed(name));
            }
            rx.await.map_err(|_| StoreError::Closed(name))
        }
    }

    /// What each source of this stream is doing: how its position was found on start (index,
    /// backward scan or start rule), where it is, and its counters. Empty without sources.
    pub fn source_status(&self) -> Vec<crate::types::SourceStatus> {
        let map = self
            .shared
            .sourcing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    pub(crate) fn set_source_status(
        &self,
        statuses: std::collections::BTreeMap<String, crate::types::SourceStatus>,
    ) {
        *self
            .shared
            .sourcing
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = statuses;
    }

    pub(crate) fn update_source_status(
        &self,
        index_name: &str,
        f: impl FnOnce(&mut crate::types::SourceStatus),
    ) {
        let mut map = self
            .shared
            .sourcing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get_mut(index_name) {
            f(s);
        }
    }

    /// Deletes one message; `Ok(false)` when it did not exist.
    pub fn delete_msg(&self, seq: u64) -> impl Future<Output = Result<bool>> + Send + 'static {
        self.request(move |tx| Op::Delete(seq, tx))
    }

    /// Purges messages; resolves to how many were removed.
    pub fn purge(
        &self,
        request: PurgeRequest,
    ) -> impl Future<Output = Result<u64>> + Send + 'static {
        self.request(move |tx| Op::Purge(request, tx))
    }

    /// Writes index.db and the sidecar files now (they are also written periodically and on close).
    pub fn flush(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.request(Op::Flush)
    }

    /// The stream's configuration and state; per-subject counts for subjects matching
    /// `subjects` when given.
    pub fn info(&self, subjects: Option<&FilterSet>) -> StreamInfo {
        self.shared.lock().info(subjects)
    }

    /// The first retained sequence (the last + 1 when the stream is empty) and the stream's
    /// incarnation — what a reader whose read skipped positions checks — without building
    /// [`StreamHandle::info`] (no configuration copied, no block read).
    pub fn retained_from(&self) -> Retained {
        let st = self.shared.lock();
        let first_seq = st.visible_range().0;
        Retained {
            first_seq,
            expired_below: st.table.expired_below.min(first_seq),
            incarnation: st.incarnation,
        }
    }

    /// The stream's configuration (no state: nothing is read).
    pub fn config(&self) -> StreamConfig {
        self.shared.lock().config.clone()
    }

    /// The stream's incarnation (changes when it is deleted and recreated).
    pub(crate) fn incarnation(&self) -> u64 {
        self.shared.lock().incarnation
    }

    /// The configured subjects, and whether the stream sources others (its messages may then
    /// carry more: [`crate::Store::reachable_subjects`]), without building
    /// [`StreamHandle::info`].
    pub fn own_subjects(&self) -> (Vec<String>, bool) {
        let st = self.shared.lock();
        (st.config.subjects.clone(), !st.config.sources.is_empty())
    }

    /// Whether `subject` belongs to this stream (a client publish of it would be accepted).
    pub fn captures(&self, subject: &str) -> bool {
        self.shared.lock().config.captures(subject)
    }

    /// Stops the writer after it drained its queue; `persist` writes index.db and sidecars.
    pub(crate) fn stop(&self, persist: bool) {
        // Joining (not a channel wait) so this also works on an async runtime thread.
        self.shared.request_stop(persist);
        if let Some(t) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        self.shared.lock().closed = true;
        self.shared.visible.send_modify(|_| {});
    }
}
