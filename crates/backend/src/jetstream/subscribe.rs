//! The ordered feed behind [`Backend::subscribe`](crate::Backend::subscribe) and
//! [`Backend::read_range`](crate::Backend::read_range): an ephemeral, unacknowledged
//! pull consumer from a start sequence, recreated from the last delivered sequence + 1 whenever
//! it is lost.
//!
//! A bounded read ends, and lets go of its consumer, once the server has said that nothing
//! below its bound is left: a consumer created with nothing pending, a message sent with
//! nothing pending after it (the count is of the server-side filter, which for in-process
//! filtering is wider than the reader's: nothing pending for it is nothing for the reader),
//! or a message at or above the bound (not delivered). The bound is never above the stream's
//! last sequence + 1 when the read is opened (the trait's contract), so no message can still
//! come below it once the server says none is pending.
//!
//! A consumer passes deleted and purged messages over without a word. Before each message
//! (and before a bounded read ends) the positions the reader skipped are checked against the
//! removals this hub made itself ([`super::removals`]); those its filters match come first, as
//! [`Delivery::Removed`]. A reader waiting at the end of the stream is told once the consumer
//! has nothing left for it (its info says so), up to the stream's last position. No other
//! removal can be known.
//!
//! A consumer counts as lost when the server deletes it (or reaps it), when two idle
//! heartbeats are missed, when its delivery sequence jumps (a message was lost in flight), when
//! a pull fails, and whenever the connection is re-established — messages in flight during a
//! disconnect are gone, so the feed never trusts a consumer that lived through one. Nothing
//! runs in the background once the feed is dropped: the pull task stops with it and the
//! consumer is deleted (bounded by the request timeout).
//!
//! A feed may instead deliver the last message of each subject ([`Deliver::LatestPerSubject`], for
//! [`Backend::read_latest`](crate::Backend::read_latest)): its consumers are created with
//! JetStream's `last_per_subject` policy (with `>` for a plan without a server filter: servers
//! refuse the policy without one), which sends the list of last messages it drew up at its
//! creation, in sequence order, then every message stored since. The consumer's count of pending
//! messages is that list's length at creation and falls to 0 with its last entry (counting messages
//! stored since as well; checked on nats-server 2.9 and 2.15), so such a feed ends as a bounded
//! read does, or once the consumer delivered as many messages as the count it was created with. It
//! tells no removal (what it passes over is intentionally passed over), and a lost consumer is
//! created again the same way, its messages before the next position skipped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, Consumer, DeliverPolicy, pull};
use async_nats::jetstream::stream::ConsumerErrorKind;
use futures::StreamExt;
use sluice_protocol::subject::FilterSet;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Shared;
use super::error::{api_error, bounded, from_nats, is_permanent};
use super::filters::{FilterPlan, ServerVersion};
use super::info::{self, StreamFacts};
use super::publish::from_nats_headers;
use super::removals;
use crate::{
    ApiError, BackendError, BackendMessage, Delivery, MessageStream, RemovedRange, Unavailable,
};

/// How long a consumer may sit idle before the server deletes it, unless the stream sets a
/// shorter limit. Live pulls keep it active, so this only matters once the feed is gone.
const INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);
/// Messages asked for per pull: the most a feed buffers ahead of its reader.
const PULL_BATCH: usize = 512;
/// Bytes asked for per pull, unless the server's largest message needs more: a pull must
/// always fit one message, or the server refuses it and the feed would stall.
const PULL_MAX_BYTES: usize = 4 * 1024 * 1024;
/// How long a lost consumer is retried before the feed ends with an error.
const RECOVERY_WINDOW: Duration = Duration::from_secs(30);
/// The first pause between recovery attempts; it doubles up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between recovery attempts.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// What a feed's consumers deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deliver {
    /// Every message from the feed's next position: subscriptions and bounded reads.
    Range,
    /// The last message of each subject as the consumer finds it at its creation, in sequence
    /// order, then the messages stored since: latest reads.
    LatestPerSubject,
}

/// Opens a feed of every message matching `filters` from stream sequence `start`; with `until`,
/// one that ends once every position below `until` is accounted for.
pub(super) async fn subscribe(
    shared: Arc<Shared>,
    filters: &[String],
    start: u64,
    until: Option<u64>,
) -> Result<MessageStream, BackendError> {
    open_feed(shared, filters, start, until, Deliver::Range, false).await
}

/// Opens a feed of what `deliver` says of the messages matching `filters`, from stream sequence
/// `start` (`until` as for [`subscribe`]); with `headers_only`, its messages come without their
/// payload (the server's `Nats-Msg-Size` header says how large it was).
pub(super) async fn open_feed(
    shared: Arc<Shared>,
    filters: &[String],
    start: u64,
    until: Option<u64>,
    deliver: Deliver,
    headers_only: bool,
) -> Result<MessageStream, BackendError> {
    let version = ServerVersion::parse(&shared.client.server_info().version);
    let plan = FilterPlan::new(filters, version)?;
    if let Some(local) = &plan.local {
        tracing::info!(
            server_version = %version,
            filters = %local,
            server_filter = plan.filter_subject,
            "filters cannot be given to this server as they are; filtering in-process"
        );
    }
    let filters = FilterSet::new(filters.iter().cloned())
        .map_err(|err| ApiError::bad_request().described(err.to_string()))?;
    let shared_removals_watch = shared.removals.watch();
    let mut feed = Feed {
        reconnects: shared.reconnects.clone(),
        shared,
        plan,
        filters,
        deliver,
        headers_only,
        incarnation: 0,
        next_seq: start.max(1),
        told_to: start.max(1),
        until,
        drained: false,
        current: None,
        pending: None,
        passed: removals::Passed::new(),
        removals_made: shared_removals_watch,
        removals_untold: false,
        at_end: false,
        finished: false,
    };
    if !feed.covered() {
        feed.current = Some(feed.open(Opening::First).await?);
    }
    Ok(futures::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((item, feed))
    })
    .boxed())
}

/// One subscription's state.
struct Feed {
    shared: Arc<Shared>,
    plan: FilterPlan,
    /// What its consumers deliver.
    deliver: Deliver,
    /// Whether its consumers send headers only.
    headers_only: bool,
    /// The stream incarnation the feed started on (read by the first opening); a recreated
    /// stream ends the feed.
    incarnation: u64,
    /// The next stream sequence wanted: the last delivered + 1.
    next_seq: u64,
    /// The reader's filters (the server's may be wider: [`FilterPlan`]).
    filters: FilterSet,
    /// The next position not given to the reader, nor told of: skipped positions from here on
    /// are checked against the removals this hub made ([`super::removals`]).
    told_to: u64,
    /// A message held back while the removals before it are told.
    pending: Option<BackendMessage>,
    /// Per removal this hub made, the last position the reader passed before it was made.
    passed: removals::Passed,
    /// Changes when this hub made a removal.
    removals_made: watch::Receiver<u64>,
    /// A removal was made since the feed last told what it skipped at the stream's end.
    removals_untold: bool,
    /// The last message taken left nothing pending for the consumer: the feed may be at the
    /// end of the stream.
    at_end: bool,
    /// For a bounded read: the first position it does not cover.
    until: Option<u64>,
    /// For a bounded read: the server said no message matching the consumer's filter follows
    /// the last one it sent (or the consumer's start, for a consumer created with nothing
    /// pending).
    drained: bool,
    reconnects: watch::Receiver<u64>,
    current: Option<LiveConsumer>,
    /// Set once the feed ended: after its final error, or when a bounded read was covered.
    finished: bool,
}

/// Why a consumer is being opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// For a new subscription, from the position the caller planned.
    First,
    /// To replace a lost consumer, from the last delivered sequence + 1.
    Recovery,
}

/// What happened while waiting for the next message.
enum Step {
    Message(Box<async_nats::jetstream::Message>),
    Lost(Loss, String),
}

/// Why a consumer was found lost: the `reason` label of `sluice_jetstream_consumers_lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loss {
    /// The connection was re-established: the consumer is recreated at once, as messages in
    /// flight were lost with the old connection, without waiting for missed heartbeats.
    Reconnected,
    /// Two idle heartbeats did not come (the server holding it died, or the network).
    HeartbeatsMissed,
    /// The server deleted it (an operator, its inactivity threshold) or ended its delivery.
    Deleted,
    /// Its delivery sequence jumped: a message was lost in flight.
    DeliveryGap,
    /// A pull failed, or a delivery could not be read.
    Failed,
}

impl Loss {
    /// Every reason, for metrics.
    pub const ALL: [Self; 5] = [
        Self::Reconnected,
        Self::HeartbeatsMissed,
        Self::Deleted,
        Self::DeliveryGap,
        Self::Failed,
    ];

    /// The metric and log label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Reconnected => "reconnected",
            Self::HeartbeatsMissed => "heartbeats_missed",
            Self::Deleted => "deleted",
            Self::DeliveryGap => "delivery_gap",
            Self::Failed => "failed",
        }
    }

    fn of(error: &pull::MessagesError) -> Self {
        match error.kind() {
            pull::MessagesErrorKind::MissingHeartbeat => Self::HeartbeatsMissed,
            pull::MessagesErrorKind::ConsumerDeleted => Self::Deleted,
            _ => Self::Failed,
        }
    }
}

impl Feed {
    /// Whether a bounded read has accounted for every position below its bound.
    fn covered(&self) -> bool {
        self.until
            .is_some_and(|until| self.drained || self.next_seq >= until)
    }

    /// The next delivery, recovering from consumer loss; `None` after a final error or once a
    /// bounded read is covered.
    async fn next(&mut self) -> Option<Result<Delivery, BackendError>> {
        if self.finished {
            return None;
        }
        if let Some(message) = self.pending.take() {
            return Some(Ok(self.deliver(message)));
        }
        loop {
            if self.covered() {
                // What this hub removed below the bound, unread, is told before the end.
                if let Some(removed) = self.until.and_then(|until| self.removed_before(until)) {
                    return Some(Ok(Delivery::Removed(removed)));
                }
                // Dropping the consumer deletes it on the server.
                self.current = None;
                self.finished = true;
                return None;
            }
            if self.removals_untold
                && self.at_end
                && let Some(removed) = self.removed_at_end().await
            {
                return Some(Ok(Delivery::Removed(removed)));
            }
            let current = match &mut self.current {
                Some(current) => current,
                None => match self.reopen().await {
                    Ok(opened) => self.current.insert(opened),
                    Err(err) => {
                        self.finished = true;
                        return Some(Err(err));
                    }
                },
            };
            let step = tokio::select! {
                biased;
                changed = self.reconnects.changed() => match changed {
                    Ok(()) => Step::Lost(
                        Loss::Reconnected,
                        "the NATS connection was re-established".to_owned(),
                    ),
                    Err(_) => {
                        self.finished = true;
                        return Some(Err(Unavailable::ConnectionClosed.into()));
                    }
                },
                next = current.messages.next() => match next {
                    Some(Ok(message)) => Step::Message(Box::new(message)),
                    Some(Err(err)) => Step::Lost(Loss::of(&err), format!("the consumer failed: {err}")),
                    None => Step::Lost(Loss::Deleted, "the consumer ended".to_owned()),
                },
                Ok(()) = self.removals_made.changed() => {
                    self.removals_untold = true;
                    self.at_end = true;
                    continue;
                }
            };
            let message = match step {
                Step::Message(message) => message,
                Step::Lost(loss, detail) => {
                    self.lose(loss, &detail);
                    continue;
                }
            };
            match self.accept(&message) {
                Ok(Some(delivered)) => {
                    let passed = self
                        .shared
                        .removals
                        .passed_by(&delivered.subject, delivered.seq);
                    self.passed.extend(passed);
                    match self.removed_before(delivered.seq) {
                        Some(removed) => {
                            self.pending = Some(delivered);
                            return Some(Ok(Delivery::Removed(removed)));
                        }
                        None => return Some(Ok(self.deliver(delivered))),
                    }
                }
                Ok(None) => continue,
                Err((loss, detail)) => self.lose(loss, &detail),
            }
        }
    }

    /// What the reader is told of the positions it skips before `before`: the removals this
    /// hub made there that its filters match, if any.
    fn removed_before(&mut self, before: u64) -> Option<RemovedRange> {
        if self.deliver == Deliver::LatestPerSubject {
            return None;
        }
        let upto = before.checked_sub(1)?;
        let removed = self.shared.removals.told(
            self.incarnation,
            &self.filters,
            self.told_to,
            upto,
            &self.passed,
        )?;
        self.told_to = removed.last + 1;
        Some(removed)
    }

    /// What the reader is told of the removals up to the stream's end, once the consumer has
    /// given it every message there is: read the stream's last position first, then the
    /// consumer's info — nothing pending and nothing sent but not taken means no message of the
    /// reader lies between it and that position. Otherwise the feed looks again when a message
    /// leaves nothing pending.
    async fn removed_at_end(&mut self) -> Option<RemovedRange> {
        self.at_end = false;
        if self.deliver == Deliver::LatestPerSubject {
            self.removals_untold = false;
            return None;
        }
        let current = self.current.as_ref()?;
        let (shared, limit) = (&self.shared, self.shared.config.request_timeout);
        let last = shared.read_stream(limit).await.ok()?.state.last_seq;
        let what = "reading a feed's consumer";
        let info = bounded(limit, what, async {
            shared
                .context
                .get_consumer_from_stream::<pull::Config, _, _>(
                    current.name.as_str(),
                    shared.config.stream.as_str(),
                )
                .await
                .map_err(|err| from_nats(what, err))
        })
        .await
        .ok()?;
        let info = info.cached_info();
        if info.num_pending > 0 || info.delivered.consumer_sequence != current.delivered {
            return None;
        }
        self.removals_untold = false;
        self.removed_before(last.checked_add(1)?)
    }

    /// Gives `message` to the reader.
    fn deliver(&mut self, message: BackendMessage) -> Delivery {
        self.told_to = message.seq + 1;
        self.passed.extend(
            self.shared
                .removals
                .exhausted_by(&message.subject, message.seq),
        );
        Delivery::Message(message)
    }

    /// Checks a delivered message against the feed's position: `Ok(Some)` to deliver it,
    /// `Ok(None)` to skip it, `Err` when the consumer lost a message.
    fn accept(
        &mut self,
        message: &async_nats::jetstream::Message,
    ) -> Result<Option<BackendMessage>, (Loss, String)> {
        let latest = self.deliver == Deliver::LatestPerSubject;
        let current = self
            .current
            .as_mut()
            .expect("a message comes from the current consumer");
        let delivery = message
            .info()
            .map_err(|err| (Loss::Failed, format!("unreadable delivery metadata: {err}")))?;
        if delivery.consumer_sequence != current.delivered + 1 {
            return Err((
                Loss::DeliveryGap,
                format!(
                    "delivery sequence jumped from {} to {}",
                    current.delivered, delivery.consumer_sequence
                ),
            ));
        }
        current.delivered = delivery.consumer_sequence;
        // A latest read's consumer has sent its whole list once it sent as many messages.
        let listed = latest && current.delivered >= current.listed;
        if self.until.is_some() && (delivery.pending == 0 || listed) {
            self.drained = true;
        }
        self.at_end = delivery.pending == 0;
        let seq = delivery.stream_sequence;
        if seq < self.next_seq {
            tracing::debug!(
                seq,
                next_seq = self.next_seq,
                "skipping a redelivered message"
            );
            return Ok(None);
        }
        self.next_seq = seq + 1;
        if self.until.is_some_and(|until| seq >= until) {
            // Beyond the bound: the read ends before it.
            return Ok(None);
        }
        if let Some(local) = &self.plan.local
            && !local.matches(message.subject.as_str())
        {
            self.shared.stats.filtered_out.inc();
            return Ok(None);
        }
        Ok(Some(BackendMessage {
            seq,
            subject: message.subject.to_string(),
            // Server times are always within jiff's range.
            time: info::timestamp(delivery.published).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            headers: from_nats_headers(message.headers.as_ref()),
            payload: message.payload.clone(),
        }))
    }

    fn lose(&mut self, loss: Loss, detail: &str) {
        let consumer = self.current.take().map(|current| current.name.clone());
        if self.shared.shut_down.load(Ordering::Relaxed) {
            // Shutting down deletes the consumers and drains the connection: no loss.
            tracing::debug!(consumer, detail, "JetStream consumer ended by the shutdown");
            return;
        }
        let reason = loss.label();
        self.shared
            .stats
            .consumers_lost
            .get_or_create(&[("reason", reason)])
            .inc();
        tracing::warn!(
            stream = self.shared.config.stream,
            consumer,
            next_seq = self.next_seq,
            reason,
            detail,
            "JetStream consumer lost; recreating it from the next sequence"
        );
    }

    /// Opens a new consumer, retrying transient failures for [`RECOVERY_WINDOW`].
    async fn reopen(&mut self) -> Result<LiveConsumer, BackendError> {
        let deadline = Instant::now() + RECOVERY_WINDOW;
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match self.open(Opening::Recovery).await {
                Ok(opened) => return Ok(opened),
                Err(err) if is_permanent(&err) || Instant::now() + pause > deadline => {
                    tracing::error!(
                        stream = self.shared.config.stream,
                        next_seq = self.next_seq,
                        error = %err,
                        "cannot recreate the JetStream consumer; ending the feed"
                    );
                    return Err(err);
                }
                Err(err) => {
                    tracing::warn!(
                        stream = self.shared.config.stream,
                        next_seq = self.next_seq,
                        error = %err,
                        retry_in = ?pause,
                        "cannot recreate the JetStream consumer yet"
                    );
                    // A reconnection ends the pause: the consumer is recreated at once.
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        changed = self.reconnects.changed() => {
                            if changed.is_err() {
                                return Err(Unavailable::ConnectionClosed.into());
                            }
                        }
                    }
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
            }
        }
    }

    /// What the stream must be for a consumer to open on it: on the first opening, one that
    /// holds the feed's subjects (and the feed starts there); on a recovery, the same
    /// incarnation with nothing of the feed's next positions gone.
    fn check_opening(
        &mut self,
        opening: Opening,
        state: &crate::StreamState,
    ) -> Result<(), BackendError> {
        match opening {
            Opening::First => {
                if let Some(filter) = self.plan.outside(&state.subjects) {
                    return Err(ApiError::consumer_filter_not_subset(
                        filter,
                        &self.shared.config.stream,
                        &state.subjects,
                    )
                    .into());
                }
                self.incarnation = state.incarnation;
                // The server starts at the first retained message anyway (the positions before
                // it are told as expired by the reader of this feed).
                self.next_seq = self.next_seq.max(state.first_seq);
                self.told_to = self.next_seq;
            }
            Opening::Recovery if state.incarnation != self.incarnation => {
                return Err(BackendError::Recreated {
                    stream: self.shared.config.stream.clone(),
                    was: self.incarnation,
                    now: state.incarnation,
                });
            }
            // The caller planned the first position; a gap that opened while recovering must
            // not pass unnoticed: the feed ends and the caller, resuming from `next_seq`,
            // sees and reports the loss. A latest read passes over what went.
            Opening::Recovery
                if self.deliver == Deliver::Range && state.first_seq > self.next_seq =>
            {
                return Err(BackendError::Dropped {
                    stream: self.shared.config.stream.clone(),
                    first: self.next_seq,
                    last: state.first_seq - 1,
                });
            }
            Opening::Recovery => {}
        }
        Ok(())
    }

    /// Creates a consumer delivering from `next_seq` and starts pulling.
    async fn open(&mut self, opening: Opening) -> Result<LiveConsumer, BackendError> {
        let shared = self.shared.clone();
        let (stream, limit) = (&shared.config.stream, shared.config.request_timeout);
        // Whatever happened to the connection so far is covered by the new consumer.
        self.reconnects.borrow_and_update();
        let facts = shared.read_stream(limit).await?;
        self.check_opening(opening, &facts.state)?;
        let config = self.consumer_config(&facts);
        let what = format!("creating a consumer on stream {stream:?}");
        // IMPORTANT: in a task of its own, so that a feed dropped while the request is on its
        // way (a stream ending at shutdown) cannot leave a consumer on the server that is not
        // registered: shutting down waits for the task and then deletes it.
        let consumer = tokio::spawn(create_registered(shared.clone(), config, what.clone()))
            .await
            .map_err(|_| BackendError::from(Unavailable::ConnectionClosed))??;
        let name = consumer.cached_info().name.clone();
        let listed = consumer.cached_info().num_pending;
        if self.until.is_some() && listed == 0 {
            self.drained = true;
        }
        let cleanup = ConsumerCleanup {
            shared: shared.clone(),
            name: name.clone(),
        };
        let messages = bounded(limit, &what, async {
            consumer
                .stream()
                .max_messages_per_batch(PULL_BATCH)
                .max_bytes_per_batch(
                    PULL_MAX_BYTES.max(shared.client.server_info().max_payload.saturating_mul(2)),
                )
                .heartbeat(shared.config.idle_heartbeat)
                .messages()
                .await
                .map_err(|err| from_nats(&what, err))
        })
        .await?;
        shared.stats.consumers_created.inc();
        if opening == Opening::Recovery {
            shared.stats.consumers_recreated.inc();
        }
        tracing::debug!(
            stream,
            consumer = name,
            next_seq = self.next_seq,
            "JetStream consumer created"
        );
        Ok(LiveConsumer {
            messages,
            name,
            delivered: 0,
            listed,
            _cleanup: cleanup,
        })
    }

    /// The configuration of the feed's next consumer, on a stream described by `facts`.
    fn consumer_config(&self, facts: &StreamFacts) -> pull::Config {
        let (deliver_policy, filter_subject) = match self.deliver {
            Deliver::Range => (
                match self.next_seq {
                    0 | 1 => DeliverPolicy::All,
                    start_sequence => DeliverPolicy::ByStartSequence { start_sequence },
                },
                self.plan.filter_subject.clone(),
            ),
            // The server refuses `last_per_subject` without a filter (2.9 and 2.15 alike).
            Deliver::LatestPerSubject
                if self.plan.filter_subject.is_empty() && self.plan.filter_subjects.is_empty() =>
            {
                (DeliverPolicy::LastPerSubject, ">".to_owned())
            }
            Deliver::LatestPerSubject => (
                DeliverPolicy::LastPerSubject,
                self.plan.filter_subject.clone(),
            ),
        };
        pull::Config {
            description: Some(
                match self.deliver {
                    Deliver::Range => "sluice feed",
                    Deliver::LatestPerSubject => "sluice latest read",
                }
                .to_owned(),
            ),
            deliver_policy,
            filter_subject,
            filter_subjects: self.plan.filter_subjects.clone(),
            headers_only: self.headers_only,
            ..short_lived_config(facts)
        }
    }
}

/// What every consumer sluice creates has in common: unacknowledged, in memory, one replica,
/// deleted by the server once idle for [`INACTIVE_THRESHOLD`] (or the stream's shorter limit)
/// should sluice fail to delete it.
pub(super) fn short_lived_config(facts: &StreamFacts) -> pull::Config {
    pull::Config {
        ack_policy: AckPolicy::None,
        inactive_threshold: facts
            .inactive_threshold_limit
            .map_or(INACTIVE_THRESHOLD, |limit| limit.min(INACTIVE_THRESHOLD)),
        num_replicas: 1,
        memory_storage: true,
        ..Default::default()
    }
}

/// A consumer made for one question (a count, a first position), deleted when dropped.
pub(super) struct Probe {
    /// The consumer, as its creation answered.
    pub consumer: Consumer<pull::Config>,
    _cleanup: ConsumerCleanup,
}

/// Creates a [`Probe`] with `config`; `what` names the request in errors.
pub(super) async fn probe(
    shared: &Arc<Shared>,
    config: pull::Config,
    what: String,
) -> Result<Probe, BackendError> {
    // In a task of its own, as in `Feed::open`: a dropped caller leaves no unregistered consumer.
    let consumer = tokio::spawn(create_registered(shared.clone(), config, what))
        .await
        .map_err(|_| BackendError::from(Unavailable::ConnectionClosed))??;
    let cleanup = ConsumerCleanup {
        shared: shared.clone(),
        name: consumer.cached_info().name.clone(),
    };
    Ok(Probe {
        consumer,
        _cleanup: cleanup,
    })
}

/// Creates a consumer on the served stream with `config` and registers it, unless the backend
/// is shutting down.
async fn create_registered(
    shared: Arc<Shared>,
    config: pull::Config,
    what: String,
) -> Result<Consumer<pull::Config>, BackendError> {
    let (stream, limit) = (&shared.config.stream, shared.config.request_timeout);
    let permission = shared
        .consumers
        .creating()
        .await
        .ok_or(Unavailable::ConnectionClosed)?;
    let consumer = bounded(limit, &what, async {
        shared
            .context
            .create_consumer_on_stream(config, stream)
            .await
            .map_err(|err| match err.kind() {
                ConsumerErrorKind::JetStream(api) => api_error(&api).into(),
                _ => from_nats(&what, err),
            })
    })
    .await?;
    shared
        .consumers
        .register(&permission, &consumer.cached_info().name);
    Ok(consumer)
}

/// A consumer the feed is reading.
struct LiveConsumer {
    /// The pull loop; dropping it stops its task and its subscription.
    messages: pull::Stream,
    name: String,
    /// The last delivery (consumer) sequence seen; deliveries must follow without a gap.
    delivered: u64,
    /// The messages pending when it was created: for a latest read, its list's length.
    listed: u64,
    _cleanup: ConsumerCleanup,
}

/// Deletes the server-side consumer when the feed lets go of it.
struct ConsumerCleanup {
    shared: Arc<Shared>,
    name: String,
}

impl Drop for ConsumerCleanup {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left: shutting down deletes it, as it is still registered.
            return;
        };
        let (shared, name) = (self.shared.clone(), std::mem::take(&mut self.name));
        runtime.spawn(async move {
            if !delete_consumer(&shared, &name).await {
                tracing::debug!(
                    stream = shared.config.stream,
                    consumer = name,
                    "consumer not deleted; shutting down or the server reaps it"
                );
            }
        });
    }
}

/// Deletes a feed's consumer, within the request timeout; true when it is gone (also when it
/// was already), and then it is forgotten.
pub(super) async fn delete_consumer(shared: &Shared, name: &str) -> bool {
    let (stream, limit) = (&shared.config.stream, shared.config.request_timeout);
    let deleted = tokio::time::timeout(
        limit,
        shared.context.delete_consumer_from_stream(name, stream),
    )
    .await;
    let gone = match deleted {
        Ok(Ok(_)) => true,
        Ok(Err(err)) => match err.kind() {
            ConsumerErrorKind::JetStream(api) => api.code() == 404,
            _ => false,
        },
        Err(_) => false,
    };
    if gone {
        shared.consumers.forget(name);
    }
    gone
}
