//! One client's event stream: a cursor into its topic set's shared feed, reading from the
//! backend itself only while it is behind the feed's ring.
//!
//! A session holds no queue of messages: at most one frame is in hand at a time, and the
//! frames themselves are shared with every other session of the same feed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::Peekable;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::backend::{Backend, MessageStream};
use crate::event_id::EventId;
use crate::fanout::{
    Entry, EntryKind, Feed, Lost, Read, record, removed_from_front, subscribe_in_epoch,
};
use crate::frames::{self, Gap, GapReason};
use crate::metrics::Metrics;
use crate::net::ConnState;
use crate::plan::Plan;

/// Most frames sent in one write to a client that is behind.
const MAX_BATCH_FRAMES: usize = 64;
/// Most bytes gathered into one write (the frames are shared, not copied).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Why a stream ended; logged as `disconnect_reason` and counted by reason.
pub mod reason {
    /// The server is shutting down.
    pub const SHUTDOWN: &str = "shutdown";
    /// The client closed the connection (or a write failed for another reason).
    pub const CLIENT_CLOSED: &str = "client_closed";
    /// The socket accepted nothing for `sse.write_timeout`.
    pub const SLOW_CLIENT: &str = "slow_client";
    /// The connection replayed `replay.max_messages` backlog messages; the client resumes by
    /// `Last-Event-ID`.
    pub const REPLAY_CAP_REACHED: &str = "replay_cap_reached";
    /// The backend subscription failed; the client resumes by `Last-Event-ID`.
    pub const BACKEND_ERROR: &str = "backend_error";
    /// The stream was deleted and created again; the client resumes and is told of the loss.
    pub const STREAM_RECREATED: &str = "stream_recreated";
    /// The subscriber's token expired; the client reconnects with a fresh one.
    pub const TOKEN_EXPIRED: &str = "token_expired";
}

/// Holds a connection slot and reports the stream's end exactly once.
#[derive(Debug)]
pub struct ConnectionGuard {
    metrics: Arc<Metrics>,
    slots: Arc<AtomicUsize>,
    conn: Option<ConnState>,
    peer: Option<SocketAddr>,
    reason: Option<&'static str>,
    delivered: u64,
    streaming: bool,
}

impl ConnectionGuard {
    /// Takes one of `max` slots (0: unlimited); `None` when all are taken.
    pub fn acquire(
        metrics: Arc<Metrics>,
        slots: Arc<AtomicUsize>,
        max: usize,
        conn: Option<ConnState>,
        peer: Option<SocketAddr>,
    ) -> Option<Self> {
        let taken = slots.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (max == 0 || n < max).then_some(n + 1)
        });
        taken.ok()?;
        metrics.active_connections.inc();
        Some(Self {
            metrics,
            slots,
            conn,
            peer,
            reason: None,
            delivered: 0,
            streaming: false,
        })
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.slots.fetch_sub(1, Ordering::AcqRel);
        self.metrics.active_connections.dec();
        if !self.streaming {
            // Refused before streaming (counted as a rejection by the handler).
            return;
        }
        let stalled = self.conn.as_ref().is_some_and(ConnState::stalled);
        let reason = match self.reason {
            Some(reason) => reason,
            None if stalled => reason::SLOW_CLIENT,
            None => reason::CLIENT_CLOSED,
        };
        if reason == reason::SLOW_CLIENT {
            self.metrics.slow_disconnects.inc();
        }
        Metrics::count(&self.metrics.disconnects, "reason", reason);
        tracing::info!(disconnect_reason = reason, peer = ?self.peer, delivered = self.delivered, "event stream ended");
    }
}

/// What a session needs from the hub.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// The backend, for catching up.
    pub backend: Arc<dyn Backend>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Heartbeat interval.
    pub heartbeat: Duration,
    /// Fires (true) when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// `replay.max_messages` (0: no cap).
    pub replay_cap: u64,
    /// `replay.window`.
    pub replay_window: Option<Duration>,
    /// When the subscriber's token expires (none: never).
    pub expires_in: Option<Duration>,
}

/// One step of reading.
enum Step {
    Entry(Entry),
    Frame(Bytes),
    Heartbeat,
    End(&'static str),
}

/// A client's event stream.
pub struct Session {
    ctx: SessionContext,
    guard: ConnectionGuard,
    feed: Arc<Feed>,
    position: watch::Receiver<u64>,
    next: u64,
    backlog_end: u64,
    window_cutoff: Option<Timestamp>,
    replayed: u64,
    pending_gap: Option<(u64, u64)>,
    preamble: Option<Bytes>,
    /// The session's own read of the stream while it is behind the ring (boxed: most
    /// sessions never need one).
    catchup: Option<Box<Peekable<MessageStream>>>,
    heartbeat: Pin<Box<Sleep>>,
    expiry: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl Session {
    /// A session following `plan` on `feed`; `preamble` (the `connected` frame and any resume
    /// gap) is sent first.
    pub fn new(
        ctx: SessionContext,
        mut guard: ConnectionGuard,
        feed: Arc<Feed>,
        plan: &Plan,
        preamble: Bytes,
    ) -> Self {
        guard.streaming = true;
        let window_cutoff = ctx
            .replay_window
            .filter(|_| plan.start <= plan.backlog_end)
            .and_then(|window| jiff::SignedDuration::try_from(window).ok())
            .and_then(|window| Timestamp::now().checked_sub(window).ok());
        let heartbeat = Box::pin(tokio::time::sleep(ctx.heartbeat));
        let expiry = ctx
            .expires_in
            .map(|after| Box::pin(tokio::time::sleep(after)));
        Self {
            position: feed.core.subscribe(),
            ctx,
            guard,
            feed,
            next: plan.start,
            backlog_end: plan.backlog_end,
            window_cutoff,
            replayed: 0,
            pending_gap: None,
            preamble: Some(preamble),
            catchup: None,
            heartbeat,
            expiry,
            ended: false,
        }
    }

    /// Turns the session into the body of an HTTP response (for connections served by
    /// hyper; the connection layer writes [`Session::next_frames`] itself).
    pub fn into_stream(
        self,
    ) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
        futures::stream::unfold((self, Vec::new()), |(mut session, mut frames)| async move {
            frames.clear();
            if !session.next_frames(&mut frames).await {
                return None;
            }
            let chunk = match frames.as_slice() {
                [one] => one.clone(),
                many => many.concat().into(),
            };
            Some((Ok(chunk), (session, frames)))
        })
    }

    /// Appends the next frames to write to `out` — with every frame already at hand after the
    /// first (in the ring, or read from the stream while catching up), so a woken client gets
    /// them in one write (bounded by [`MAX_BATCH_FRAMES`] and [`MAX_BATCH_BYTES`]). False when
    /// the stream has ended.
    pub async fn next_frames(&mut self, out: &mut Vec<Bytes>) -> bool {
        let Some(first) = self.next_frame().await else {
            return false;
        };
        let mut bytes = first.len();
        out.push(first);
        if self.ended {
            return true;
        }
        while out.len() < MAX_BATCH_FRAMES && bytes < MAX_BATCH_BYTES {
            let entry = if self.catchup.is_some() {
                self.ready_catchup_entry()
            } else {
                match self.feed.core.read(self.next) {
                    Read::Entry(entry) => Some(entry),
                    Read::Wait | Read::Behind => None,
                }
            };
            let Some(entry) = entry else {
                break;
            };
            let Some(frame) = self.admit(entry) else {
                if self.ended {
                    break;
                }
                continue;
            };
            bytes += frame.len();
            out.push(frame);
            if self.ended {
                break;
            }
        }
        true
    }

    /// The next catch-up message that is already at hand and still behind the ring, encoded.
    /// Anything else (nothing ready, an error, the end, a message the ring covers) is left in
    /// the stream for [`Session::next_step`].
    fn ready_catchup_entry(&mut self) -> Option<Entry> {
        let low = self.feed.core.low();
        let stream = self.catchup.as_mut()?;
        loop {
            // A message past a skipped position is left for `next_step`, which asks whether
            // the skipped positions were removed meanwhile.
            let next = self.next;
            let seq = match Pin::new(&mut **stream).peek().now_or_never() {
                Some(Some(Ok(message))) if message.seq < low && message.seq <= next => message.seq,
                _ => return None,
            };
            // Peeked above, so it is there.
            let Some(Some(Ok(message))) = stream.next().now_or_never() else {
                return None;
            };
            if seq < self.next {
                continue;
            }
            match self.feed.core.encoder.entry(&message) {
                Some(entry) => return Some(entry),
                None => self.next = seq + 1,
            }
        }
    }

    /// The next frame to write, or `None` when the stream ends.
    async fn next_frame(&mut self) -> Option<Bytes> {
        if let Some(preamble) = self.preamble.take() {
            return Some(preamble);
        }
        while !self.ended {
            let entry = match self.next_step().await {
                Step::Entry(entry) => entry,
                Step::Frame(frame) => return Some(frame),
                Step::Heartbeat => return Some(self.heartbeat_frame()),
                Step::End(reason) => {
                    self.end(reason);
                    let gap = self.take_gap_frame();
                    if reason != reason::TOKEN_EXPIRED {
                        return gap;
                    }
                    let mut last = BytesMut::from(gap.unwrap_or_default());
                    last.extend_from_slice(&frames::token_expired());
                    return Some(last.freeze());
                }
            };
            if let Some(frame) = self.admit(entry) {
                return Some(frame);
            }
        }
        None
    }

    fn end(&mut self, reason: &'static str) {
        self.ended = true;
        self.guard.reason = Some(reason);
    }

    /// Applies the plan's backlog rules to an entry and returns the frame to send, if any.
    fn admit(&mut self, entry: Entry) -> Option<Bytes> {
        if entry.kind != EntryKind::Lost && entry.seq <= self.backlog_end {
            if self.window_cutoff.is_some_and(|cutoff| entry.time < cutoff) {
                self.next = entry.seq + 1;
                let from = self.pending_gap.map_or(entry.seq, |(from, _)| from);
                self.pending_gap = Some((from, entry.seq));
                Metrics::count(
                    &self.ctx.metrics.dropped,
                    "reason",
                    GapReason::ReplayWindow.label(),
                );
                return None;
            }
            if self.ctx.replay_cap > 0 && self.replayed >= self.ctx.replay_cap {
                self.end(reason::REPLAY_CAP_REACHED);
                return self.take_gap_frame();
            }
            self.replayed += 1;
        }
        self.next = entry.seq + 1;
        match entry.kind {
            EntryKind::Message => {
                self.ctx.metrics.delivered.inc();
            }
            EntryKind::Lost => {
                Metrics::count(&self.ctx.metrics.gaps, "reason", GapReason::Expired.label());
            }
            EntryKind::TooLarge => {
                Metrics::count(
                    &self.ctx.metrics.dropped,
                    "reason",
                    GapReason::TooLarge.label(),
                );
                Metrics::count(
                    &self.ctx.metrics.gaps,
                    "reason",
                    GapReason::TooLarge.label(),
                );
            }
        };
        self.guard.delivered += 1;
        Some(match self.take_gap_frame() {
            Some(gap) => {
                let mut both = BytesMut::with_capacity(gap.len() + entry.frame.len());
                both.extend_from_slice(&gap);
                both.extend_from_slice(&entry.frame);
                both.freeze()
            }
            None => entry.frame,
        })
    }

    /// The `gap` frame for backlog skipped by `replay.window`, if any is pending.
    fn take_gap_frame(&mut self) -> Option<Bytes> {
        let (from, to) = self.pending_gap.take()?;
        Metrics::count(
            &self.ctx.metrics.gaps,
            "reason",
            GapReason::ReplayWindow.label(),
        );
        let id = EventId::before(to + 1, self.feed.core.encoder.epoch);
        Some(frames::gap(
            id,
            &Gap::range(GapReason::ReplayWindow, from, to),
        ))
    }

    /// While catching up, the stream skipped the positions from `self.next` to `to`; those
    /// removed from its front meanwhile are reported before the next message.
    async fn removed_while_catching_up(&mut self, to: u64) -> Result<Option<Entry>, &'static str> {
        let encoder = &self.feed.core.encoder;
        match removed_from_front(&*self.ctx.backend, encoder.epoch, self.next, to).await {
            Ok(None) => Ok(None),
            Ok(Some((from, to))) => {
                tracing::warn!(from, to, "positions removed while catching up");
                Ok(Some(encoder.lost(from, to)))
            }
            Err(Lost::Replaced) => Err(reason::STREAM_RECREATED),
            Err(Lost::Failed(err)) => {
                record(&self.ctx.metrics, &err, "catch-up state check failed");
                Err(reason::BACKEND_ERROR)
            }
        }
    }

    fn heartbeat_frame(&mut self) -> Bytes {
        let deadline = Instant::now() + self.ctx.heartbeat;
        self.heartbeat.as_mut().reset(deadline);
        frames::heartbeat(Timestamp::now())
    }

    async fn next_step(&mut self) -> Step {
        loop {
            if self.expiry.as_ref().is_some_and(|e| e.is_elapsed()) {
                return Step::End(reason::TOKEN_EXPIRED);
            }
            if self.catchup.is_some() && self.next >= self.feed.core.low() {
                // Caught up with what the ring covers: drop the private subscription.
                self.catchup = None;
            }
            if let Some(stream) = self.catchup.as_mut() {
                tokio::task::consume_budget().await;
                let skipped_to = tokio::select! {
                    biased;
                    _ = self.ctx.shutdown.wait_for(|down| *down) => return Step::End(reason::SHUTDOWN),
                    item = Pin::new(&mut **stream).peek() => match item {
                        Some(Ok(message)) if message.seq > self.next => Some(message.seq - 1),
                        _ => None,
                    },
                    () = self.heartbeat.as_mut() => return Step::Heartbeat,
                    () = expired(&mut self.expiry) => return Step::End(reason::TOKEN_EXPIRED),
                };
                if let Some(to) = skipped_to {
                    match self.removed_while_catching_up(to).await {
                        Ok(Some(lost)) => return Step::Entry(lost),
                        Ok(None) => {}
                        Err(reason) => return Step::End(reason),
                    }
                }
                let Some(stream) = self.catchup.as_mut() else {
                    continue;
                };
                // Peeked above: the item is there.
                let item = stream.next().await;
                match item {
                    Some(Ok(message)) if message.seq < self.next => {}
                    Some(Ok(message)) => {
                        if message.seq >= self.feed.core.low() {
                            // The ring covers this position now: rejoin it.
                            self.catchup = None;
                            self.next = message.seq;
                            continue;
                        }
                        match self.feed.core.encoder.entry(&message) {
                            Some(entry) => return Step::Entry(entry),
                            None => self.next = message.seq + 1,
                        }
                    }
                    Some(Err(err)) => {
                        record(&self.ctx.metrics, &err, "catch-up read failed");
                        return Step::End(reason::BACKEND_ERROR);
                    }
                    None => return Step::End(reason::BACKEND_ERROR),
                }
                continue;
            }
            match self.feed.core.read(self.next) {
                Read::Entry(entry) => return Step::Entry(entry),
                Read::Behind => {
                    let core = &self.feed.core;
                    let filters = core.filters.as_slice().to_vec();
                    let epoch = core.encoder.epoch;
                    match subscribe_in_epoch(&*self.ctx.backend, &filters, self.next, epoch).await {
                        Ok(subscription) => {
                            self.ctx.metrics.catchups.inc();
                            self.catchup = Some(Box::new(subscription.stream.peekable()));
                            if let Some((from, to)) = subscription.lost {
                                return Step::Entry(core.encoder.lost(from, to));
                            }
                        }
                        Err(Lost::Replaced) => return Step::End(reason::STREAM_RECREATED),
                        Err(Lost::Failed(err)) => {
                            record(&self.ctx.metrics, &err, "catch-up subscribe failed");
                            return Step::End(reason::BACKEND_ERROR);
                        }
                    }
                }
                Read::Wait => {
                    if self.feed.core.is_closed() {
                        return Step::End(reason::STREAM_RECREATED);
                    }
                    if let Some(gap) = self.take_gap_frame() {
                        return Step::Frame(gap);
                    }
                    // Waiting on the feed alone (one waiter list per wake-up, not two): at
                    // shutdown the hub sets the flag and then wakes every feed's readers.
                    if *self.ctx.shutdown.borrow() {
                        return Step::End(reason::SHUTDOWN);
                    }
                    tokio::select! {
                        biased;
                        changed = self.position.changed() => {
                            if changed.is_err() {
                                return Step::End(reason::STREAM_RECREATED);
                            }
                        }
                        () = self.heartbeat.as_mut() => return Step::Heartbeat,
                        () = expired(&mut self.expiry) => return Step::End(reason::TOKEN_EXPIRED),
                    }
                }
            }
        }
    }
}

/// Completes when the token's expiry passes; never without one.
async fn expired(expiry: &mut Option<Pin<Box<Sleep>>>) {
    match expiry {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-connection state must stay small (the goal is ≤ 8 KiB per connection in total,
    /// sockets and HTTP buffers included): no message queue lives here.
    #[test]
    fn session_state_is_small() {
        let size = std::mem::size_of::<Session>();
        assert!(size <= 512, "Session is {size} bytes");
    }
}
