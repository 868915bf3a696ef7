//! Active subscriptions as one node keeps them: its [`Announcer`] and the [`Table`] it folds
//! the stream's subscription events into, read by one task per node ([`Presence::follow`]).
//!
//! The task reads `<prefix>.s.>` (subscription events and lease renewals, nothing else): first
//! everything retained up to the stream's last position, then live. Every node that owns a
//! listed subscription is given a fresh lease when it is first read, renewed by each event or
//! renewal of its own, and taken for dead once `mercure.subscriptions_lease` passes without
//! one: its subscriptions are dropped and their ends published. On the embedded store the
//! process is the only node, so once the history is read every other node's subscriptions
//! (a previous process's, killed before it could end them) are ended at once. An end of one
//! of this node's own subscriptions that it still serves was published by a node that took it
//! for dead: the announcer announces that subscription again.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sluice_mercure::Scheme;
use sluice_mercure::subscription::Subscription;
use tokio::sync::watch;

use super::active::{Started, Table};
use super::announce::{Announcer, HEADER_NODE, Lease, ended_start};
use sluice_backend::{Backend, BackendMessage};
use sluice_core::fanout::{Encoder, Lost, Role, Routed, Source, SourceSpec, record};
use sluice_core::metrics::Metrics;
use sluice_protocol::subject::{FilterSet, SubjectError};

/// How long to wait before reading again after the backend failed.
const RETRY: Duration = Duration::from_secs(1);

/// One node's active subscriptions.
#[derive(Debug)]
pub struct Presence {
    scheme: Arc<Scheme>,
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    announcer: Arc<Announcer>,
    table: Mutex<Table>,
    lease: Duration,
    /// `<prefix>.s.>`: the subscription events and lease renewals.
    events: FilterSet,
}

impl Presence {
    /// The active subscriptions of a node over `backend`, leases of `lease`; an error when the
    /// scheme's prefix makes no filter.
    pub fn new(
        scheme: Arc<Scheme>,
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        lease: Duration,
    ) -> Result<Self, SubjectError> {
        let events = FilterSet::new([scheme.subscription_events_filter()])?;
        let announcer = Arc::new(Announcer::new(
            scheme.clone(),
            backend.clone(),
            metrics.clone(),
        ));
        let table = Mutex::new(Table::new(announcer.node().to_owned()));
        Ok(Self {
            scheme,
            backend,
            metrics,
            announcer,
            table,
            lease,
            events,
        })
    }

    /// This node's announcer.
    pub fn announcer(&self) -> &Arc<Announcer> {
        &self.announcer
    }

    /// The table, to read from.
    pub fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding it leaves a table that is still consistent enough to list.
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Reads the stream's subscription events into the table, renews this node's lease and
    /// ends silent nodes' subscriptions, until `shutdown` turns true.
    pub async fn follow(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut history_read = false;
        loop {
            tokio::select! {
                ended = self.follow_once(&mut history_read) => match ended {
                    // Logged and counted where it failed.
                    Lost::Failed | Lost::Replaced => self.announcer.lost_the_stream(),
                    Lost::Ended => tracing::info!("Mercure active subscriptions: the feed ended; reading again"),
                },
                _ = shutdown.wait_for(|down| *down) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                _ = shutdown.wait_for(|down| *down) => return,
            }
        }
    }

    /// Reads from the table's position on, with the fan-out's [`Source`] (every position
    /// accounted for, pinned to one incarnation): first up to the stream's last position, then
    /// live. Returns why it stopped.
    async fn follow_once(&self, history_read: &mut bool) -> Lost {
        let state = match self.backend.stream_state().await {
            Ok(state) => state,
            Err(err) => {
                record(
                    &self.metrics,
                    &err,
                    "Mercure active subscriptions: reading the stream's state failed",
                );
                return Lost::Failed;
            }
        };
        let incarnation = state.incarnation;
        let start = {
            let mut table = self.table();
            table.advance(0, incarnation);
            (table.position().0 + 1).max(state.first_seq)
        };
        let until = state.last_seq.saturating_add(1);
        let mut history =
            match Source::open(self.source_spec(incarnation, Some(until)), start).await {
                Ok(history) => history,
                Err(lost) => return lost,
            };
        loop {
            match history.next().await {
                Ok(Some(routed)) => self.take(&routed, incarnation),
                Ok(None) => break,
                Err(lost) => return lost,
            }
        }
        self.table().advance(state.last_seq, incarnation);
        if !*history_read {
            *history_read = true;
            // A stream this process alone serves: whatever other node the history lists died
            // without ending its subscriptions.
            if self.backend.single_node() {
                let gone = self.table().expire(Instant::now(), None);
                self.announcer.publish_ends(gone).await;
            }
        }
        let mut live = match Source::open(self.source_spec(incarnation, None), until).await {
            Ok(live) => live,
            Err(lost) => return lost,
        };
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                routed = live.next() => match routed {
                    Ok(Some(routed)) => self.take(&routed, incarnation),
                    Ok(None) => return Lost::Ended,
                    Err(lost) => return lost,
                },
                _ = tick.tick() => match self.announcer.renew_lease().await {
                    // Cut off, this node cannot tell a silent node from its own deafness.
                    Lease::Failed => {}
                    // Nothing of the others could be read while cut off: they get a full lease
                    // from now on before they are taken for dead.
                    Lease::Reconnected => self.table().renew_all(Instant::now()),
                    Lease::Renewed | Lease::NotNeeded => {
                        let gone = self.table().expire(Instant::now(), Some(self.lease));
                        self.announcer.publish_ends(gone).await;
                    }
                },
            }
        }
    }

    /// What the follower reads: `<prefix>.s.>` of `incarnation`, whole messages (the prefix is
    /// the encoder's view prefix, so nothing is encoded), up to `until` when bounded.
    fn source_spec(&self, incarnation: u64, until: Option<u64>) -> SourceSpec {
        SourceSpec {
            backend: self.backend.clone(),
            metrics: self.metrics.clone(),
            filters: self.events.clone(),
            encoder: Encoder {
                incarnation,
                topic_prefix: String::new(),
                max_event_size: usize::MAX,
                event_type: String::new(),
                view_prefix: Some(self.scheme.prefix().to_owned()),
            },
            role: Role::Follower,
            until,
        }
    }

    /// Folds one entry in: a message is applied, a lost range stepped over.
    fn take(&self, routed: &Routed, incarnation: u64) {
        if let Some(message) = &routed.message {
            self.apply(message);
        }
        self.table().advance(routed.entry.seq, incarnation);
    }

    /// Counts a message of `<prefix>.s.>` the table did not take in.
    fn skipped(&self, reason: &'static str) {
        Metrics::count(&self.metrics.mercure_events_skipped, "reason", reason);
    }

    /// One message of `<prefix>.s.>`: a lease renewal, or a subscription event.
    fn apply(&self, message: &BackendMessage) {
        let now = Instant::now();
        if let Some(node) = self.announcer.lease_node(&message.subject) {
            self.table().renew(node, now);
            return;
        }
        let headers = message.headers.iter();
        let doc = self
            .scheme
            .decode(&message.subject, headers, &message.payload)
            .map_err(|err| err.to_string())
            .and_then(|update| {
                Subscription::from_document(&update.data).map_err(|err| err.to_string())
            });
        let (doc, node) = match (doc, message.headers.get(HEADER_NODE)) {
            (Ok(doc), Some(node)) => (doc, node),
            (Err(err), _) => {
                self.skipped("undecodable");
                tracing::warn!(
                    seq = message.seq,
                    error = err,
                    reason = "undecodable",
                    "not a subscription event; not listed"
                );
                return;
            }
            (Ok(_), None) => {
                self.skipped("no_node");
                tracing::warn!(
                    seq = message.seq,
                    reason = "no_node",
                    "a subscription event without {HEADER_NODE}; not listed"
                );
                return;
            }
        };
        if doc.active {
            self.start(node, doc, message.seq, now);
        } else {
            self.end(node, &doc, ended_start(&message.headers), now);
        }
    }

    /// A start event at `seq` of `node`'s subscription `doc`.
    fn start(&self, node: &str, doc: Subscription, seq: u64, now: Instant) {
        let subscriber = doc.subscriber.clone();
        if self.table().start(node, doc, seq, now) == Started::Full {
            self.skipped("table_full");
            tracing::warn!(
                subscriber,
                reason = "table_full",
                max = super::active::MAX_LISTED,
                "Mercure active subscriptions table full: subscription not listed"
            );
        }
    }

    /// An end event of `node`'s subscription `doc`, of the start at `ends` when it names one.
    fn end(&self, node: &str, doc: &Subscription, ends: Option<u64>, now: Instant) {
        self.table().end(node, &doc.id(), ends, now);
        if let Some(start) = ends.filter(|_| node == self.announcer.node()) {
            self.announcer.ended_elsewhere(&doc.subscriber, start);
        }
    }
}
