//! This node's side of active subscriptions: it names subscribers, publishes the events of its
//! subscriptions (one private update per selector when a subscription starts, and again when
//! it ends, however it ends), renews its lease while it serves any, and publishes the ends of
//! the subscriptions of nodes found dead.
//!
//! Messages, all in the served stream under `mercure.subject_prefix`:
//!
//! - a subscription event is the update [`Subscription::to_update`] makes, stored as any
//!   update (`<prefix>.s.<hash>._`), with `Mercure-Node: <node>` naming the node serving the
//!   subscription; an end also carries `Nats-Msg-Id: mercure-end:<hash>:<start seq>` naming
//!   the start it ends, so that the ends several nodes publish for a dead node's subscription
//!   are stored once (within the stream's duplicate window) while a later start of the same
//!   subscription can still be ended;
//! - a lease renewal is an empty message on `<prefix>.s.lease.<node>`, not an update (no
//!   subscriber receives it).
//!
//! A node cut off from the stream for longer than the lease is taken for dead by the others,
//! which end its subscriptions although it still serves them. When it reads such an end (one
//! naming a start of a subscription it still serves: its own ends are published only once a
//! subscription stopped being served), it announces that subscription's starts again
//! ([`Announcer::ended_elsewhere`]). Each end names one start, and only an end of the current
//! starts does this, so it happens once per time the node is taken for dead.
//!
//! Events the stream cannot take now (the backend unreachable, the storage full) are retried
//! in order, 0.1 s doubling to 5 s apart, until stored: a start or an end is never dropped
//! for an outage, so the ends other nodes decide on while the stream is out of reach are
//! stored once it is back, and read by the node they name, which announces those
//! subscriptions again. A node that cannot reach the stream takes nobody for dead meanwhile
//! ([`Lease`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use sluice_mercure::subscription::{Selection, Subscription};
use sluice_mercure::{Grants, Scheme, SelectorSet};
use sluice_protocol::headers::{Headers, NATS_MSG_ID};
use tokio::sync::{Notify, oneshot};

use super::active::Listed;
use sluice_backend::{Backend, BackendError, PublishRequest};
use sluice_core::fanout::record;
use sluice_core::metrics::Metrics;
use sluice_core::session::ConnectionGuard;

/// The header naming the node that serves a subscription.
pub const HEADER_NODE: &str = "Mercure-Node";

/// What an end's `Nats-Msg-Id` starts with.
const END_MSG_ID_PREFIX: &str = "mercure-end:";

/// The most events stored in one batch.
const BATCH: usize = 256;

/// The first wait before an event the stream could not take is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries of an event.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The subject token of lease renewals, under `<prefix>.s`.
const LEASE_TOKEN: &str = "lease";

/// Publishes this node's subscription events and leases.
#[derive(Debug)]
pub struct Announcer {
    node: String,
    scheme: Arc<Scheme>,
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    random: RandomState,
    made: AtomicU64,
    /// Subscriptions this node serves now, by subscriber id.
    serving: Mutex<HashMap<String, Served>>,
    /// Event publications under way (waited for on shutdown).
    pending: AtomicUsize,
    idle: Notify,
    /// Set while lease renewals fail: this node cannot reach the stream.
    cut_off: AtomicBool,
}

/// A subscription this node serves: where its starts were stored, and how to have them
/// announced again.
#[derive(Debug, Default)]
struct Served {
    /// The stream position of each selector's start (`None` where it is not known).
    starts: Vec<Option<u64>>,
    /// Set when another node ended one of these starts; cleared once they are announced again.
    ended_elsewhere: bool,
    wake: Arc<Notify>,
}

/// The `Nats-Msg-Id` of the end of the start stored at `start` on the subject whose topic
/// hash is `hash`.
fn end_msg_id(hash: &str, start: Option<u64>) -> String {
    match start {
        Some(seq) => format!("{END_MSG_ID_PREFIX}{hash}:{seq}"),
        None => format!("{END_MSG_ID_PREFIX}{hash}"),
    }
}

/// The start an end's `Nats-Msg-Id` names, if it names one.
pub fn ended_start(headers: &Headers) -> Option<u64> {
    let id = headers.get(NATS_MSG_ID)?.strip_prefix(END_MSG_ID_PREFIX)?;
    id.rsplit_once(':')?.1.parse().ok()
}

/// 32 lower-case hex digits drawn from `random`'s keys (which the process seeds from the
/// operating system) and `n`.
fn random_hex(random: &RandomState, n: u64) -> String {
    let high = random.hash_one((n, 0u8));
    let low = random.hash_one((n, 1u8));
    format!("{high:016x}{low:016x}")
}

impl Announcer {
    /// The announcer of a node with a fresh identifier.
    pub fn new(scheme: Arc<Scheme>, backend: Arc<dyn Backend>, metrics: Arc<Metrics>) -> Self {
        let random = RandomState::new();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let node = random_hex(&random, now ^ u64::from(std::process::id()));
        Self {
            node,
            scheme,
            backend,
            metrics,
            random,
            made: AtomicU64::new(0),
            serving: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            cut_off: AtomicBool::new(false),
        }
    }

    /// This node's identifier (32 hex digits, new each time the process starts).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// A new subscriber identifier: `urn:uuid:` and a version 4 UUID, unique per subscription.
    pub fn subscriber_id(&self) -> String {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let hex = random_hex(&self.random, n);
        // Version 4, variant 10xx.
        let variant = ["8", "9", "a", "b"][usize::from(hex.as_bytes()[16] % 4)];
        format!(
            "urn:uuid:{}-{}-4{}-{variant}{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..32]
        )
    }

    /// Announces a new subscription to `set` by a holder of `grants`, whose stream holds
    /// `guard`: its start now, one event per selector under a new subscriber id with the
    /// payload the grants give that selector (each in the shape of its selector's protocol),
    /// again whenever another node ends it while it is served, and its end once the guard is
    /// dropped, however the stream ends.
    pub fn announce(
        self: &Arc<Self>,
        set: &SelectorSet,
        grants: &Grants,
        guard: &mut ConnectionGuard,
    ) {
        let subscriber = self.subscriber_id();
        let docs: Vec<Subscription> = set
            .selectors()
            .iter()
            .map(|selector| {
                let payload = grants.payload_for(selector.as_str()).cloned();
                Subscription::new(Selection::of(selector), &subscriber, true, payload)
            })
            .collect();
        let (tell, ended) = oneshot::channel();
        guard.on_end(tell);
        let wake = self.serve(&subscriber);
        self.pending.fetch_add(1, Ordering::AcqRel);
        let announcer = self.clone();
        tokio::spawn(async move {
            let starts = announcer.publish_events(&docs, &announcer.node).await;
            announcer.started(&subscriber, starts);
            let mut ended = ended;
            let reason = loop {
                tokio::select! {
                    reason = &mut ended => break reason.unwrap_or("not_streamed"),
                    () = wake.notified() => announcer.announce_again(&subscriber, &docs).await,
                }
            };
            let starts = announcer.stop_serving(&subscriber);
            tracing::debug!(subscriber, reason, "Mercure subscription ends");
            let requests = docs
                .iter()
                .zip(starts.into_iter().chain(std::iter::repeat(None)))
                .map(|(doc, start)| announcer.event(&doc.ended(), &announcer.node, start))
                .collect();
            announcer.publish(requests).await;
            if announcer.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                announcer.idle.notify_waiters();
            }
        });
    }

    /// The subscriptions served, to read or change.
    fn served(&self) -> MutexGuard<'_, HashMap<String, Served>> {
        // Every change leaves the map consistent: a panic elsewhere leaves it usable.
        self.serving
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// `subscriber`'s subscription is served from now on; returns what wakes it to be
    /// announced again.
    fn serve(&self, subscriber: &str) -> Arc<Notify> {
        let served = Served::default();
        let wake = served.wake.clone();
        self.served().insert(subscriber.to_owned(), served);
        wake
    }

    /// `subscriber`'s starts were stored at `starts`.
    fn started(&self, subscriber: &str, starts: Vec<Option<u64>>) {
        if let Some(served) = self.served().get_mut(subscriber) {
            served.starts = starts;
            served.ended_elsewhere = false;
        }
    }

    /// `subscriber`'s subscription is no longer served; returns where its starts were stored.
    fn stop_serving(&self, subscriber: &str) -> Vec<Option<u64>> {
        self.served()
            .remove(subscriber)
            .map(|served| served.starts)
            .unwrap_or_default()
    }

    /// Another node published an end of the start stored at `start` of `subscriber`'s
    /// subscription: if this node still serves it and that is one of its current starts, the
    /// subscription is announced again (once, however many of its ends are read). True when
    /// it will be.
    pub fn ended_elsewhere(&self, subscriber: &str, start: u64) -> bool {
        let mut served = self.served();
        let Some(served) = served.get_mut(subscriber) else {
            return false;
        };
        if served.ended_elsewhere || !served.starts.contains(&Some(start)) {
            return false;
        }
        served.ended_elsewhere = true;
        served.wake.notify_one();
        true
    }

    /// Publishes `subscriber`'s starts `docs` again, after another node ended them.
    async fn announce_again(&self, subscriber: &str, docs: &[Subscription]) {
        Metrics::count(
            &self.metrics.mercure_reannounced,
            "reason",
            "ended_elsewhere",
        );
        tracing::info!(
            subscriber,
            selectors = docs.len(),
            "Mercure subscription ended by another hub node while served here: announced again"
        );
        let starts = self.publish_events(docs, &self.node).await;
        self.started(subscriber, starts);
    }

    /// Publishes the ends of `listed`, subscriptions of nodes found dead.
    pub async fn publish_ends(&self, listed: Vec<Listed>) {
        if listed.is_empty() {
            return;
        }
        tracing::info!(
            subscriptions = listed.len(),
            "Mercure subscriptions of silent hub nodes ended"
        );
        let requests: Vec<PublishRequest> = listed
            .into_iter()
            .map(|Listed { node, doc, start }| self.event(&doc.ended(), &node, Some(start)))
            .collect();
        self.publish(requests).await;
    }

    /// Publishes the starts `docs` of subscriptions served by `node`; returns each one's
    /// stream position, where known.
    async fn publish_events(&self, docs: &[Subscription], node: &str) -> Vec<Option<u64>> {
        let requests = docs.iter().map(|doc| self.event(doc, node, None)).collect();
        self.publish(requests).await
    }

    /// Stores `requests` in order, trying again those the stream cannot take now (see the
    /// module's documentation) and logging and counting those it refuses; returns each one's
    /// position in the served stream, where known (not for one stored by another stream or
    /// refused).
    async fn publish(&self, mut requests: Vec<PublishRequest>) -> Vec<Option<u64>> {
        let mut positions = Vec::with_capacity(requests.len());
        let mut wait = RETRY_FIRST;
        while !requests.is_empty() {
            let rest = requests.split_off(requests.len().min(BATCH));
            let batch = requests.clone();
            let mut answers = self.backend.publish_batch(requests).await.into_iter();
            let mut retry = Vec::new();
            for (request, answer) in batch.into_iter().zip(answers.by_ref()) {
                if !retry.is_empty() {
                    // Kept in order behind the first one to try again.
                    retry.push(request);
                    continue;
                }
                match answer {
                    Ok(ack) if ack.stream.is_none() => positions.push(Some(ack.seq)),
                    Ok(_) => positions.push(None),
                    Err(err) if is_transient(&err) => {
                        record(
                            &self.metrics,
                            &err,
                            "Mercure subscription event not stored yet; trying again",
                        );
                        retry.push(request);
                    }
                    Err(err) => {
                        record(
                            &self.metrics,
                            &err,
                            "Mercure subscription event refused by the stream",
                        );
                        positions.push(None);
                    }
                }
            }
            requests = if retry.is_empty() {
                wait = RETRY_FIRST;
                rest
            } else {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
                retry.extend(rest);
                retry
            };
        }
        positions
    }

    /// The message storing `doc`'s event; an end names the start it ends, stored at `start`.
    fn event(&self, doc: &Subscription, node: &str, start: Option<u64>) -> PublishRequest {
        let stored = self.scheme.encode(&doc.to_update());
        let mut headers = Headers::new();
        for (name, value) in stored.headers {
            headers.append(name, value);
        }
        headers.append(HEADER_NODE, node);
        if !doc.active {
            // The subject's topic hash names the subscription.
            let hash = stored.subject.split('.').rev().nth(1).unwrap_or_default();
            headers.append(NATS_MSG_ID, end_msg_id(hash, start));
        }
        PublishRequest {
            subject: stored.subject,
            headers,
            payload: Bytes::from(stored.payload),
        }
    }

    /// Renews this node's lease if it serves any subscription (a node serving none needs
    /// none: nothing of it is listed), and says whether this node reaches the stream.
    pub async fn renew_lease(&self) -> Lease {
        if self.served().is_empty() {
            // Called from the live read of the stream: reading works again.
            return if self.cut_off.swap(false, Ordering::AcqRel) {
                Lease::Reconnected
            } else {
                Lease::NotNeeded
            };
        }
        let request = PublishRequest {
            subject: self.lease_subject(&self.node),
            headers: Headers::new(),
            payload: Bytes::new(),
        };
        match self.backend.publish(request).await {
            Ok(_) if self.cut_off.swap(false, Ordering::AcqRel) => Lease::Reconnected,
            Ok(_) => Lease::Renewed,
            Err(err) => {
                record(&self.metrics, &err, "Mercure hub node lease not renewed");
                self.cut_off.store(true, Ordering::Release);
                Lease::Failed
            }
        }
    }

    /// This node lost its read of the stream: until a lease renewal goes through it counts as
    /// cut off (see [`Announcer::renew_lease`]).
    pub fn lost_the_stream(&self) {
        self.cut_off.store(true, Ordering::Release);
    }

    /// The subject of `node`'s lease renewals.
    fn lease_subject(&self, node: &str) -> String {
        format!("{}.s.{LEASE_TOKEN}.{node}", self.scheme.prefix())
    }

    /// The node a lease renewal on `subject` renews, if it is one.
    pub fn lease_node<'s>(&self, subject: &'s str) -> Option<&'s str> {
        let rest = subject.strip_prefix(self.scheme.prefix())?;
        rest.strip_prefix(".s.")?
            .strip_prefix(LEASE_TOKEN)?
            .strip_prefix('.')
    }

    /// Waits, for at most `limit`, until every subscription's end is published.
    pub async fn drain(&self, limit: Duration) {
        let wait = async {
            loop {
                let idle = self.idle.notified();
                if self.pending.load(Ordering::Acquire) == 0 {
                    return;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            tracing::warn!(
                pending = self.pending.load(Ordering::Acquire),
                "Mercure subscription ends not all published before shutdown"
            );
        }
    }
}

/// What renewing the lease found: whether this node can tell a silent node from its own
/// isolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Renewed.
    Renewed,
    /// Renewed after renewals failed: this node was cut off from the stream until now.
    Reconnected,
    /// Not renewed: the stream is out of reach (or refused it).
    Failed,
    /// This node serves no subscription, so it holds no lease.
    NotNeeded,
}

/// Whether the stream may take what it could not now: it was out of reach, or its storage
/// full. Anything else (a refusal of the stream's) is answered the same way every time.
fn is_transient(err: &BackendError) -> bool {
    matches!(err, BackendError::Unavailable(_) | BackendError::Storage(_))
}
