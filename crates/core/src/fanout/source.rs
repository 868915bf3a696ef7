//! A backend subscription turned into entries: the one place where stream messages become
//! what readers are given.
//!
//! Both readers of the stream use it: the dispatch (which routes the entries of every topic to
//! the rings of the topic sets they match) and a cursor that fell behind its ring (which hands
//! its topic set's entries straight to its session, up to where the ring begins).

use std::pin::Pin;
use std::sync::Arc;

use futures::stream::Peekable;
use futures::{FutureExt, StreamExt};
use sluice_protocol::subject::FilterSet;

use super::encode::Encoder;
use super::ring::{Audience, Entry, Routed};
use crate::frames::GapReason;
use crate::metrics::Metrics;
use sluice_backend::{Backend, BackendError, Delivery, MessageStream, Retained};

/// Why a source could not go on.
#[derive(Debug)]
pub enum Lost {
    /// The stream is now another incarnation (deleted and created again).
    Replaced,
    /// The backend failed (already logged and counted); trying again later may work.
    Failed,
    /// The backend ended the subscription.
    Ended,
}

/// Who reads a source; names the source in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The dispatch: every topic of the stream, for every topic set.
    Dispatch,
    /// A reader catching up behind the ring.
    CatchUp,
    /// A follower of the hub's own bookkeeping subjects (Mercure's active subscriptions): its
    /// skipped positions are not checked against what the stream retains (no round trip per
    /// message on JetStream, where most positions are other subjects').
    Follower,
    /// A reader's state: the latest message of each subject of its topic set below its bound
    /// ([`Backend::read_latest`]). The positions passed over hold older messages or other
    /// subjects, so they are not checked either; what the stream cannot deliver still comes
    /// as `Lost` entries.
    State,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Self::Dispatch => "dispatch",
            Self::CatchUp => "catch-up",
            Self::Follower => "follower",
            Self::State => "state",
        }
    }
}

/// What a source reads and for whom.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// The backend.
    pub backend: Arc<dyn Backend>,
    /// Metrics, for the errors a source records.
    pub metrics: Arc<Metrics>,
    /// The topic set.
    pub filters: FilterSet,
    /// How entries are encoded; its incarnation is the one the source is pinned to.
    pub encoder: Encoder,
    /// Who reads it.
    pub role: Role,
    /// Where a bounded read ends: once every position below it is accounted for. `None` reads
    /// on, live, for ever.
    pub until: Option<u64>,
}

/// One backend subscription pinned to one stream incarnation, yielding [`Entry`]s (with their
/// subjects: [`Routed`]) in stream order from a start position, up to a bound if it has one.
///
/// # Contract
///
/// - Every position from the start onward is accounted for exactly once, in order: a message of
///   the topic set arrives as its entry (a message, or a `too_large` placeholder), a position
///   removed from the stream before it could be read arrives inside a `Lost` entry, and only
///   control messages, other topics and deliberate deletes are passed over in silence. Skipped
///   positions are checked against what the stream retains (in-process where the backend knows
///   it, else a round trip) except for [`Role::Follower`], which reads bookkeeping and steps
///   over what it cannot read without asking.
/// - [`Source::position`] is the next position not yet accounted for.
/// - A bounded source ([`SourceSpec::until`]) yields nothing at or above its bound and says it
///   is done (`Ok(None)`) once every position below the bound is accounted for, the skipped
///   ones at the end included; it never waits for a later message to find that out.
/// - Subscribing, and every later read, fail with [`Lost::Replaced`] once the stream is another
///   incarnation: positions of one incarnation are never read in another.
/// - Backend errors are logged and counted here; the caller only decides what comes next.
/// - [`Source::next`] is cancel-safe: a message is taken from the subscription only in the
///   step that returns its entry, so dropping the future loses nothing.
pub struct Source {
    spec: SourceSpec,
    stream: Peekable<MessageStream>,
    next: u64,
    /// Positions already gone when the subscription began, reported first.
    lost_at_start: Option<Routed>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("filters", &self.spec.filters)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// Subscribes from `start`, only if the stream is still the encoder's incarnation. The
    /// incarnation is checked before and after subscribing, so a subscription made while the
    /// stream is being recreated never silently continues in the new incarnation with positions
    /// of the old one. Positions a limit or a purge removed from below the first retained
    /// sequence are reported first, as one `Lost` entry.
    pub async fn open(spec: SourceSpec, start: u64) -> Result<Self, Lost> {
        let subscribed = subscribe_in_incarnation(&spec, start).await;
        let (stream, lost) = subscribed.map_err(|err| spec.failed(err, "subscribe failed"))?;
        let mut next = start;
        let lost_at_start = lost.map(|(from, to)| {
            tracing::warn!(filters = %spec.filters, from, to, role = spec.role.label(), "subscription began after positions expired");
            next = to + 1;
            to_everyone(spec.encoder.lost(from, to, GapReason::Expired))
        });
        Ok(Self {
            spec,
            stream: stream.peekable(),
            next,
            lost_at_start,
        })
    }

    /// The next position not yet accounted for.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The next entry, waiting for the backend if need be (cancel-safe); `None` once a bounded
    /// source is done.
    pub async fn next(&mut self) -> Result<Option<Routed>, Lost> {
        loop {
            if let Some(lost) = self.lost_at_start.take() {
                return Ok(Some(lost));
            }
            let seq = match Pin::new(&mut self.stream).peek().await {
                Some(Ok(delivery)) => first_position(delivery, self.next),
                Some(Err(_)) => return Err(self.take_error()),
                None if self.spec.until.is_some() => return self.reach_bound().await,
                None => return Err(Lost::Ended),
            };
            if self.spec.until.is_some_and(|until| seq >= until) {
                return self.reach_bound().await;
            }
            let retained = self.spec.retained_before(self.next, seq).await?;
            if let Some(entry) = self.take(seq, retained)? {
                return Ok(Some(entry));
            }
        }
    }

    /// The next entry if it is at hand without waiting, not even for a round trip to the
    /// backend. Anything else (nothing ready, an error, the end) is left for [`Source::next`].
    pub fn ready(&mut self) -> Option<Routed> {
        loop {
            if let Some(lost) = self.lost_at_start.take() {
                return Some(lost);
            }
            let seq = match Pin::new(&mut self.stream).peek().now_or_never()? {
                Some(Ok(delivery)) => first_position(delivery, self.next),
                Some(Err(_)) | None => return None,
            };
            if self.spec.until.is_some_and(|until| seq >= until) {
                return None;
            }
            let retained = self.spec.retained_in_process(self.next, seq).ok()?;
            match self.take(seq, retained) {
                Ok(Some(entry)) => return Some(entry),
                Ok(None) => {}
                Err(_) => return None,
            }
        }
    }

    /// The end of a bounded read: the positions from here to the bound held nothing for this
    /// source, unless they were removed from the stream's front before it got there (then one
    /// more `Lost` entry says so).
    async fn reach_bound(&mut self) -> Result<Option<Routed>, Lost> {
        let until = self.spec.until.unwrap_or(self.next);
        if self.next >= until {
            return Ok(None);
        }
        let removed = match self.spec.retained_before(self.next, until).await? {
            Some(retained) => removed_from_front(
                retained,
                self.spec.encoder.incarnation,
                self.next,
                until - 1,
            )?,
            None => None,
        };
        let from = std::mem::replace(&mut self.next, until);
        Ok(removed.map(|(_, to)| self.removed(from, to)))
    }

    /// The `Lost` entry for positions `from..=to` removed from the stream's front unread.
    fn removed(&self, from: u64, to: u64) -> Routed {
        tracing::warn!(filters = %self.spec.filters, from, to, role = self.spec.role.label(), "positions removed before they were read");
        to_everyone(self.spec.encoder.lost(from, to, GapReason::Expired))
    }

    /// Accounts for the peeked delivery starting at `seq`: the entry for it, or for the
    /// skipped positions before it that `retained` shows were removed from the stream's front
    /// (the delivery then stays peeked, for the next call). `None` for a delivery that yields
    /// no entry (a control message, or one already accounted for).
    fn take(&mut self, seq: u64, retained: Option<Retained>) -> Result<Option<Routed>, Lost> {
        if seq < self.next {
            self.stream.next().now_or_never();
            return Ok(None);
        }
        if let Some(retained) = retained {
            let removed =
                removed_from_front(retained, self.spec.encoder.incarnation, self.next, seq - 1)?;
            // Every skipped position at or above the first retained one holds another topic
            // or was deleted on purpose.
            self.next = seq;
            if let Some((from, to)) = removed {
                return Ok(Some(self.removed(from, to)));
            }
        }
        // Peeked by the caller, so it is there.
        let Some(Some(Ok(delivery))) = self.stream.next().now_or_never() else {
            return Ok(None);
        };
        match delivery {
            Delivery::Message(message) => {
                self.next = seq + 1;
                Ok(self.spec.encoder.routed(message))
            }
            Delivery::Lost(lost) => {
                self.next = lost.last + 1;
                let reason = if lost.damaged {
                    GapReason::Damaged
                } else {
                    GapReason::Unconfirmed
                };
                tracing::warn!(filters = %self.spec.filters, from = seq, to = lost.last, reason = reason.label(), role = self.spec.role.label(), "positions the stream cannot deliver");
                Ok(Some(to_everyone(
                    self.spec.encoder.lost(seq, lost.last, reason),
                )))
            }
            Delivery::Removed(removed) => {
                self.next = removed.last + 1;
                tracing::debug!(filters = %self.spec.filters, from = seq, to = removed.last, subjects = ?removed.subjects, role = self.spec.role.label(), "removed messages passed over");
                let entry = self
                    .spec
                    .encoder
                    .lost(seq, removed.last, GapReason::Removed);
                let audience = match removed.subjects {
                    subjects if subjects.is_empty() => Audience::Everyone,
                    subjects => Audience::Subjects(
                        subjects.into_iter().map(String::into_boxed_str).collect(),
                    ),
                };
                Ok(Some(Routed {
                    entry,
                    audience,
                    message: None,
                }))
            }
        }
    }

    /// Takes the peeked error out of the subscription and records it.
    fn take_error(&mut self) -> Lost {
        match self.stream.next().now_or_never() {
            Some(Some(Err(err))) => self.spec.failed(Fault::Backend(err), "read failed"),
            _ => Lost::Failed,
        }
    }
}

/// A `Lost` entry, which concerns every topic set.
fn to_everyone(entry: Entry) -> Routed {
    Routed {
        entry,
        audience: Audience::Everyone,
        message: None,
    }
}

/// The first position of `delivery` not accounted for yet, when `next` is the next one
/// (below `next` when none is).
fn first_position(delivery: &Delivery, next: u64) -> u64 {
    let (first, last) = match delivery {
        Delivery::Message(message) => return message.seq,
        Delivery::Lost(lost) => (lost.first, lost.last),
        Delivery::Removed(removed) => (removed.first, removed.last),
    };
    if last >= next { first.max(next) } else { first }
}

/// The skip check needs the stream's state from the backend.
struct NeedsRoundTrip;

/// What went wrong under a source.
enum Fault {
    /// The stream is another incarnation.
    Replaced,
    /// The backend answered with an error.
    Backend(BackendError),
}

impl SourceSpec {
    /// What the skip check before position `seq` needs, when `next` is the source's position: nothing (`None`: no position is
    /// skipped) or the stream's retention, asked of the backend when it cannot answer
    /// in-process.
    async fn retained_before(&self, next: u64, seq: u64) -> Result<Option<Retained>, Lost> {
        if matches!(self.role, Role::Follower | Role::State) {
            return Ok(None);
        }
        match self.retained_in_process(next, seq) {
            Ok(retained) => Ok(retained),
            Err(NeedsRoundTrip) => Ok(Some(self.retained().await?)),
        }
    }

    /// [`SourceSpec::retained_before`] as far as it is known without a round trip.
    fn retained_in_process(&self, next: u64, seq: u64) -> Result<Option<Retained>, NeedsRoundTrip> {
        if seq <= next {
            return Ok(None);
        }
        match self.backend.retained_from() {
            Some(retained) => Ok(Some(retained)),
            None => Err(NeedsRoundTrip),
        }
    }

    /// The stream's first retained sequence and incarnation, asked of the backend.
    async fn retained(&self) -> Result<Retained, Lost> {
        match self.backend.stream_state().await {
            Ok(state) => Ok(Retained {
                first_seq: state.first_seq,
                expired_below: state.expired_below,
                incarnation: state.incarnation,
            }),
            Err(err) => Err(self.failed(Fault::Backend(err), "state check failed")),
        }
    }

    /// Records `fault` (logged as "`<role>` `<what>`", counted by kind) and says what it means.
    fn failed(&self, fault: Fault, what: &str) -> Lost {
        match fault {
            Fault::Replaced => Lost::Replaced,
            Fault::Backend(err) => {
                record(
                    &self.metrics,
                    &err,
                    &format!("{} {what}", self.role.label()),
                );
                Lost::Failed
            }
        }
    }
}

/// Subscribes from `start` if the stream is still the encoder's incarnation, before and after;
/// also returns the positions `from..=to` a limit or a purge had removed when the subscription
/// began (see [`StreamState::expired_below`](sluice_backend::StreamState::expired_below)).
async fn subscribe_in_incarnation(
    spec: &SourceSpec,
    start: u64,
) -> Result<(MessageStream, Option<(u64, u64)>), Fault> {
    let incarnation = spec.encoder.incarnation;
    let check = || async {
        match spec.backend.stream_state().await {
            Ok(state) if state.incarnation == incarnation => Ok(state.expired_below),
            Ok(_) => Err(Fault::Replaced),
            Err(err) => Err(Fault::Backend(err)),
        }
    };
    check().await?;
    let filters = spec.filters.as_slice();
    let stream = match (spec.role, spec.until) {
        (Role::State, Some(until)) => spec.backend.read_latest(filters, until).await,
        (_, Some(until)) => spec.backend.read_range(filters, start, until).await,
        (_, None) => spec.backend.subscribe(filters, start).await,
    }
    .map_err(Fault::Backend)?;
    let expired_below = check().await?;
    // A state read starts wherever the latest messages are: nothing before them is owed.
    let owed = spec.role != Role::State && start < expired_below;
    Ok((stream, owed.then(|| (start, expired_below - 1))))
}

/// A read of the stream skipped positions `from..=to`: those that hold other topics, were
/// deleted on purpose or went by their own TTL, and those removed from the stream's front by a
/// limit or a purge before the read reached them, which readers must be told of. Such removal
/// only ever raises `expired_below`, so every skipped position below it now may have held a
/// message the reader never got: that range is returned (positions, not messages — some may
/// hold other topics). An error when the stream is no longer incarnation `incarnation`.
fn removed_from_front(
    retained: Retained,
    incarnation: u64,
    from: u64,
    to: u64,
) -> Result<Option<(u64, u64)>, Lost> {
    if retained.incarnation != incarnation {
        return Err(Lost::Replaced);
    }
    let expired_below = retained.expired_below.min(retained.first_seq);
    Ok((expired_below > from).then(|| (from, to.min(expired_below - 1))))
}

/// Logs and counts a backend error by kind.
pub fn record(metrics: &Metrics, err: &BackendError, what: &str) {
    let kind = err.kind();
    tracing::warn!(error = %err, kind, "{what}");
    Metrics::count(&metrics.backend_errors, "kind", kind);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::EntryKind;
    use crate::fanout::testing::{Remote, encoder, open_backend, publish};
    use sluice_backend::embedded::EmbeddedBackend;
    use sluice_store::PurgeRequest;

    /// The default stream with `count` messages on topic `t`.
    async fn backend_with(dir: &std::path::Path, count: u64) -> Arc<EmbeddedBackend> {
        let backend = open_backend(dir).await;
        for _ in 0..count {
            publish(&*backend, "t").await;
        }
        backend
    }

    /// The source's next entry, which must come within a deadline.
    async fn next_entry(source: &mut Source) -> Entry {
        next(source).await.expect("an entry, not the end").entry
    }

    /// What the source's next step yields, within a deadline.
    async fn next(source: &mut Source) -> Option<Routed> {
        let step = tokio::time::timeout(std::time::Duration::from_secs(20), source.next());
        step.await.expect("the source answers").unwrap()
    }

    fn spec(backend: Arc<EmbeddedBackend>, incarnation: u64) -> SourceSpec {
        SourceSpec {
            backend,
            metrics: Arc::new(Metrics::new()),
            filters: FilterSet::new(["t"]).unwrap(),
            encoder: encoder(incarnation),
            until: None,
            role: Role::CatchUp,
        }
    }

    /// A source opened below the first retained sequence reports the positions already gone
    /// before anything else; one opened at the first retained sequence reports nothing; and no
    /// source opens in another incarnation.
    #[tokio::test]
    async fn opening_from_an_expired_position_reports_what_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend_with(dir.path(), 5).await;
        let stream = backend.store().unwrap().stream("sluice").unwrap();
        let purge = PurgeRequest {
            up_to_seq: Some(4),
            ..Default::default()
        };
        stream.purge(purge).await.unwrap();
        let first = stream.info(None).state.first_seq;
        let incarnation = backend.stream_state().await.unwrap().incarnation;

        let mut expired = Source::open(spec(backend.clone(), incarnation), 2)
            .await
            .unwrap();
        let lost = next_entry(&mut expired).await;
        assert_eq!(
            (lost.kind, lost.seq),
            (EntryKind::Lost(GapReason::Expired), first - 1)
        );
        assert!(String::from_utf8_lossy(&lost.frame).contains("\"from\":2"));
        assert_eq!(next_entry(&mut expired).await.seq, first);

        let mut fresh = Source::open(spec(backend.clone(), incarnation), first)
            .await
            .unwrap();
        let entry = next_entry(&mut fresh).await;
        assert_eq!((entry.kind, entry.seq), (EntryKind::Message, first));

        let replaced = Source::open(spec(backend, incarnation + 1), 1).await;
        assert!(matches!(replaced, Err(Lost::Replaced)));
    }

    /// Positions removed from the stream's front after a source began are reported before the
    /// next message, whether it is waited for or already at hand.
    #[tokio::test]
    async fn positions_removed_while_reading_are_reported_before_the_next_message() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend_with(dir.path(), 0).await;
        let incarnation = backend.stream_state().await.unwrap().incarnation;
        let mut source = Source::open(spec(backend.clone(), incarnation), 1)
            .await
            .unwrap();
        for subject in ["other", "other", "t"] {
            publish(&*backend, subject).await;
        }
        let stream = backend.store().unwrap().stream("sluice").unwrap();
        let purge = PurgeRequest {
            up_to_seq: Some(3),
            ..Default::default()
        };
        stream.purge(purge).await.unwrap();
        let lost = next_entry(&mut source).await;
        assert_eq!(
            (lost.kind, lost.seq),
            (EntryKind::Lost(GapReason::Expired), 2)
        );
        let message = source.ready().expect("the message is at hand").entry;
        assert_eq!((message.kind, message.seq), (EntryKind::Message, 3));
        assert_eq!(source.position(), 4);
    }

    /// A bounded source yields its topic's messages below the bound and is then done, without
    /// waiting for a later message of its topic; positions before the bound that were removed
    /// from the stream's front unread are reported at the end.
    #[tokio::test]
    async fn a_bounded_source_ends_at_its_bound_and_reports_what_went_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend_with(dir.path(), 0).await;
        for subject in ["t", "other", "t", "other", "other", "other"] {
            publish(&*backend, subject).await;
        }
        let incarnation = backend.stream_state().await.unwrap().incarnation;
        let bounded = |until| SourceSpec {
            until: Some(until),
            ..spec(backend.clone(), incarnation)
        };
        let mut source = Source::open(bounded(6), 1).await.unwrap();
        assert_eq!(next_entry(&mut source).await.seq, 1);
        assert_eq!(next_entry(&mut source).await.seq, 3);
        assert!(next(&mut source).await.is_none(), "done at the bound");
        assert_eq!(source.position(), 6);

        // Opened before the purge, read after it: positions 4 and 5 went unread.
        let mut source = Source::open(bounded(6), 4).await.unwrap();
        let stream = backend.store().unwrap().stream("sluice").unwrap();
        let purge = PurgeRequest {
            up_to_seq: Some(6),
            ..Default::default()
        };
        stream.purge(purge).await.unwrap();
        let lost = next_entry(&mut source).await;
        assert_eq!(
            (lost.kind, lost.seq),
            (EntryKind::Lost(GapReason::Expired), 5)
        );
        assert!(String::from_utf8_lossy(&lost.frame).contains("\"from\":4"));
        assert!(next(&mut source).await.is_none());
    }

    /// A reader of one topic among others checks the positions it skips against what the
    /// stream retains: on a network backend, a round trip each time. A follower of bookkeeping
    /// subjects does not: it asks for the stream's state only when it opens.
    #[tokio::test]
    async fn only_a_follower_steps_over_skipped_positions_without_asking() {
        let dir = tempfile::tempdir().unwrap();
        let embedded = open_backend(dir.path()).await;
        for subject in ["t", "x", "x", "t", "x", "t", "x", "t"] {
            publish(&*embedded, subject).await;
        }
        let incarnation = embedded.stream_state().await.unwrap().incarnation;
        let mut state_reads = Vec::new();
        for role in [Role::CatchUp, Role::Follower] {
            let remote = Arc::new(Remote::new(embedded.clone()));
            let spec = SourceSpec {
                backend: remote.clone(),
                until: Some(9),
                role,
                ..spec(embedded.clone(), incarnation)
            };
            let mut source = Source::open(spec, 1).await.unwrap();
            let opened = remote.state_reads();
            let mut seqs = Vec::new();
            while let Some(routed) = next(&mut source).await {
                seqs.push(routed.entry.seq);
            }
            assert_eq!(
                seqs,
                [1, 4, 6, 8],
                "{role:?} reads every message of its topic"
            );
            state_reads.push(remote.state_reads() - opened);
        }
        assert!(
            state_reads[0] >= 3,
            "a catch-up reader asks at each skip: {state_reads:?}"
        );
        assert_eq!(state_reads[1], 0, "a follower never asks after opening");
    }
}
