//! This node's side of active subscriptions: it names subscribers, publishes the events of its
//! subscriptions (one private update per selector when a subscription starts, and again when
//! it ends, however it ends), renews its lease while it serves any, and publishes the ends of
//! the subscriptions of nodes found dead.
//!
//! Messages, all in the served stream under `mercure.subject_prefix`:
//!
//! - a subscription event is the update [`Subscription::to_update`] makes, stored as any
//!   update (`<prefix>.s.<hash>._`), with `Mercure-Node: <node>` naming the node serving the
//!   subscription; an end also carries `Nats-Msg-Id: mercure-end:<hash>`, so that the ends
//!   several nodes publish for a dead node's subscription are stored once (within the
//!   stream's duplicate window);
//! - a lease renewal is an empty message on `<prefix>.s.lease.<node>`, not an update (no
//!   subscriber receives it).

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sluice_mercure::subscription::Subscription;
use sluice_mercure::{Grants, Scheme, SelectorSet};
use sluice_protocol::headers::{Headers, NATS_MSG_ID};
use tokio::sync::{Notify, oneshot};

use super::active::Listed;
use crate::backend::{Backend, PublishRequest};
use crate::fanout::record;
use crate::metrics::Metrics;
use crate::session::ConnectionGuard;

/// The header naming the node that serves a subscription.
pub const HEADER_NODE: &str = "Mercure-Node";

/// What an end's `Nats-Msg-Id` starts with.
const END_MSG_ID_PREFIX: &str = "mercure-end:";

/// The most events stored in one batch.
const BATCH: usize = 256;

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
    /// Subscriptions this node serves now.
    serving: AtomicUsize,
    /// Event publications under way (waited for on shutdown).
    pending: AtomicUsize,
    idle: Notify,
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
            serving: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
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
    /// payload the grants give that selector, and its end once the guard is dropped, however
    /// the stream ends.
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
                let text = selector.as_str();
                Subscription::new(text, &subscriber, true, grants.payload_for(text).cloned())
            })
            .collect();
        let (tell, ended) = oneshot::channel();
        guard.on_end(tell);
        self.serving.fetch_add(1, Ordering::AcqRel);
        self.pending.fetch_add(1, Ordering::AcqRel);
        let announcer = self.clone();
        tokio::spawn(async move {
            announcer.publish_events(&docs, &announcer.node).await;
            let reason = ended.await.unwrap_or("not_streamed");
            announcer.serving.fetch_sub(1, Ordering::AcqRel);
            let ends: Vec<Subscription> = docs
                .into_iter()
                .map(|doc| Subscription {
                    active: false,
                    ..doc
                })
                .collect();
            tracing::debug!(subscriber, reason, "Mercure subscription ends");
            announcer.publish_events(&ends, &announcer.node).await;
            if announcer.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                announcer.idle.notify_waiters();
            }
        });
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
            .map(|Listed { node, doc }| {
                let end = Subscription {
                    active: false,
                    ..doc
                };
                self.event(&end, &node)
            })
            .collect();
        self.publish(requests).await;
    }

    /// Publishes one event per document, for subscriptions served by `node`.
    async fn publish_events(&self, docs: &[Subscription], node: &str) {
        let requests = docs.iter().map(|doc| self.event(doc, node)).collect();
        self.publish(requests).await;
    }

    /// Stores `requests`, logging and counting those the stream refuses.
    async fn publish(&self, mut requests: Vec<PublishRequest>) {
        while !requests.is_empty() {
            let rest = requests.split_off(requests.len().min(BATCH));
            for answer in self.backend.publish_batch(requests).await {
                if let Err(err) = answer {
                    record(&self.metrics, &err, "Mercure subscription event not stored");
                }
            }
            requests = rest;
        }
    }

    /// The message storing `doc`'s event.
    fn event(&self, doc: &Subscription, node: &str) -> PublishRequest {
        let stored = self.scheme.encode(&doc.to_update());
        let mut headers = Headers::new();
        for (name, value) in stored.headers {
            headers.append(name, value);
        }
        headers.append(HEADER_NODE, node);
        if !doc.active {
            // The subject's topic hash names the subscription.
            let hash = stored.subject.split('.').rev().nth(1).unwrap_or_default();
            headers.append(NATS_MSG_ID, format!("{END_MSG_ID_PREFIX}{hash}"));
        }
        PublishRequest {
            subject: stored.subject,
            headers,
            payload: Bytes::from(stored.payload),
        }
    }

    /// Renews this node's lease if it serves any subscription (a node serving none needs
    /// none: nothing of it is listed).
    pub async fn renew_lease(&self) {
        if self.serving.load(Ordering::Acquire) == 0 {
            return;
        }
        let request = PublishRequest {
            subject: self.lease_subject(&self.node),
            headers: Headers::new(),
            payload: Bytes::new(),
        };
        if let Err(err) = self.backend.publish(request).await {
            record(&self.metrics, &err, "Mercure hub node lease not renewed");
        }
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
