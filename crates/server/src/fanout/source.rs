//! A backend subscription turned into entries: the one place where stream messages become
//! what readers are given.
//!
//! Both readers of the stream use it: the shared feed (which puts the entries into its ring)
//! and a cursor that fell behind the ring (which hands them straight to its session).

use std::pin::Pin;
use std::sync::Arc;

use futures::stream::Peekable;
use futures::{FutureExt, StreamExt};
use sluice_protocol::subject::FilterSet;

use super::encode::Encoder;
use super::ring::Entry;
use crate::backend::{Backend, BackendError, Delivery, MessageStream, Retained};
use crate::frames::GapReason;
use crate::metrics::Metrics;

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

/// When a source checks whether skipped positions were removed from the stream's front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipCheck {
    /// Only where the backend answers in-process ([`Backend::retained_from`]): a live feed of
    /// one topic skips at almost every message, and a round trip each time would cost more
    /// than the feed itself.
    InProcess,
    /// At every skip, asking the backend when it cannot answer in-process (a reader catching
    /// up, where a skipped position may be one it was promised).
    Always,
}

/// Who reads a source; names the source in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The shared feed of a topic set.
    Feed,
    /// A reader catching up behind the ring.
    CatchUp,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Self::Feed => "feed",
            Self::CatchUp => "catch-up",
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
    /// When skipped positions are checked.
    pub skip_check: SkipCheck,
    /// Who reads it.
    pub role: Role,
}

/// One backend subscription pinned to one stream incarnation, yielding [`Entry`]s in stream
/// order from a start position.
///
/// # Contract
///
/// - Every position from the start onward is accounted for exactly once, in order: a message of
///   the topic set arrives as its entry (a message, or a `too_large` placeholder), a position
///   removed from the stream before it could be read arrives inside a `Lost` entry, and only
///   control messages, other topics and deliberate deletes are passed over in silence (with
///   [`SkipCheck::InProcess`], front removal is reported only where the backend knows it
///   in-process).
/// - [`Source::position`] is the next position not yet accounted for.
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
    lost_at_start: Option<Entry>,
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
            spec.encoder.lost(from, to, GapReason::Expired)
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

    /// The next entry, waiting for the backend if need be (cancel-safe).
    pub async fn next(&mut self) -> Result<Entry, Lost> {
        loop {
            if let Some(lost) = self.lost_at_start.take() {
                return Ok(lost);
            }
            let seq = match Pin::new(&mut self.stream).peek().await {
                Some(Ok(delivery)) => first_position(delivery, self.next),
                Some(Err(_)) => return Err(self.take_error()),
                None => return Err(Lost::Ended),
            };
            let retained = match self.retained_in_process(seq) {
                Ok(retained) => retained,
                Err(NeedsRoundTrip) => Some(self.spec.retained().await?),
            };
            if let Some(entry) = self.take(seq, retained)? {
                return Ok(entry);
            }
        }
    }

    /// The next entry if it is at hand without waiting, not even for a round trip to the
    /// backend. Anything else (nothing ready, an error, the end) is left for [`Source::next`].
    pub fn ready(&mut self) -> Option<Entry> {
        loop {
            if let Some(lost) = self.lost_at_start.take() {
                return Some(lost);
            }
            let seq = match Pin::new(&mut self.stream).peek().now_or_never()? {
                Some(Ok(delivery)) => first_position(delivery, self.next),
                Some(Err(_)) | None => return None,
            };
            let retained = self.retained_in_process(seq).ok()?;
            match self.take(seq, retained) {
                Ok(Some(entry)) => return Some(entry),
                Ok(None) => {}
                Err(_) => return None,
            }
        }
    }

    /// What the skip check before the message at `seq` needs, as far as it is known without a
    /// round trip: nothing (`Ok(None)`: no position skipped, or the check is in-process only
    /// and the backend cannot answer in-process), the stream's retention, or a round trip.
    fn retained_in_process(&self, seq: u64) -> Result<Option<Retained>, NeedsRoundTrip> {
        if seq <= self.next {
            return Ok(None);
        }
        match (self.spec.backend.retained_from(), self.spec.skip_check) {
            (Some(retained), _) => Ok(Some(retained)),
            (None, SkipCheck::InProcess) => Ok(None),
            (None, SkipCheck::Always) => Err(NeedsRoundTrip),
        }
    }

    /// Accounts for the peeked delivery starting at `seq`: the entry for it, or for the
    /// skipped positions before it that `retained` shows were removed from the stream's front
    /// (the delivery then stays peeked, for the next call). `None` for a delivery that yields
    /// no entry (a control message, or one already accounted for).
    fn take(&mut self, seq: u64, retained: Option<Retained>) -> Result<Option<Entry>, Lost> {
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
                tracing::warn!(filters = %self.spec.filters, from, to, role = self.spec.role.label(), "positions removed before they were read");
                return Ok(Some(self.spec.encoder.lost(from, to, GapReason::Expired)));
            }
        }
        // Peeked by the caller, so it is there.
        let Some(Some(Ok(delivery))) = self.stream.next().now_or_never() else {
            return Ok(None);
        };
        match delivery {
            Delivery::Message(message) => {
                self.next = seq + 1;
                Ok(self.spec.encoder.entry(&message))
            }
            Delivery::Lost(lost) => {
                self.next = lost.last + 1;
                let reason = if lost.damaged {
                    GapReason::Damaged
                } else {
                    GapReason::Unconfirmed
                };
                tracing::warn!(filters = %self.spec.filters, from = seq, to = lost.last, reason = reason.label(), role = self.spec.role.label(), "positions the stream cannot deliver");
                Ok(Some(self.spec.encoder.lost(seq, lost.last, reason)))
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

/// The first position of `delivery` not accounted for yet, when `next` is the next one
/// (below `next` when none is).
fn first_position(delivery: &Delivery, next: u64) -> u64 {
    match delivery {
        Delivery::Message(message) => message.seq,
        Delivery::Lost(lost) if lost.last >= next => lost.first.max(next),
        Delivery::Lost(lost) => lost.first,
    }
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
/// began (see [`StreamState::expired_below`](crate::backend::StreamState::expired_below)).
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
    let stream = spec
        .backend
        .subscribe(spec.filters.as_slice(), start)
        .await
        .map_err(Fault::Backend)?;
    let expired_below = check().await?;
    Ok((
        stream,
        (start < expired_below).then(|| (start, expired_below - 1)),
    ))
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
    use crate::backend::embedded::EmbeddedBackend;
    use crate::fanout::EntryKind;
    use crate::fanout::testing::{encoder, open_backend, publish};
    use sluice_store::PurgeRequest;

    /// The default stream with `count` messages on topic `t`.
    async fn backend_with(dir: &std::path::Path, count: u64) -> Arc<EmbeddedBackend> {
        let backend = open_backend(dir).await;
        for _ in 0..count {
            publish(&*backend, "t").await;
        }
        backend
    }

    fn spec(backend: Arc<EmbeddedBackend>, incarnation: u64) -> SourceSpec {
        SourceSpec {
            backend,
            metrics: Arc::new(Metrics::new()),
            filters: FilterSet::new(["t"]).unwrap(),
            encoder: encoder(incarnation),
            skip_check: SkipCheck::Always,
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
        let lost = expired.next().await.unwrap();
        assert_eq!(
            (lost.kind, lost.seq),
            (EntryKind::Lost(GapReason::Expired), first - 1)
        );
        assert!(String::from_utf8_lossy(&lost.frame).contains("\"from\":2"));
        assert_eq!(expired.next().await.unwrap().seq, first);

        let mut fresh = Source::open(spec(backend.clone(), incarnation), first)
            .await
            .unwrap();
        let entry = fresh.next().await.unwrap();
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
        let lost = source.next().await.unwrap();
        assert_eq!(
            (lost.kind, lost.seq),
            (EntryKind::Lost(GapReason::Expired), 2)
        );
        let message = source.ready().expect("the message is at hand");
        assert_eq!((message.kind, message.seq), (EntryKind::Message, 3));
        assert_eq!(source.position(), 4);
    }
}
