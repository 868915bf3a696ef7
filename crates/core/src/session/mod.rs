//! One client's event stream: a [`Cursor`] into its topic set's shared feed, and what is the
//! session's own — the preamble, the plan's backlog rules (`replay.window`,
//! `replay.max_messages`), heartbeats, token expiry, shutdown and write batching.
//!
//! A session holds no queue of messages: at most one frame is in hand at a time, and the
//! frames themselves are shared with every other session of the same feed.

mod guard;
mod handoff;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use jiff::Timestamp;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

pub use guard::ConnectionGuard;
use guard::reason;
pub use handoff::StreamSession;

use crate::event_id::EventId;
use crate::fanout::{Cursor, Entry, EntryKind, Feed, Lost};
use crate::frames::{self, Gap, GapReason};
use crate::metrics::Metrics;
use crate::plan::Plan;

/// Most frames sent in one write to a client that is behind.
const MAX_BATCH_FRAMES: usize = 64;
/// Most bytes gathered into one write (the frames are shared, not copied).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// What a session needs from the hub.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// Where deliveries, drops and gaps are counted.
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
    cursor: Cursor,
    backlog_end: u64,
    window_cutoff: Option<Timestamp>,
    replayed: u64,
    pending_gap: Option<(u64, u64)>,
    preamble: Option<Bytes>,
    /// The clock as the current write's first live message was taken in: one reading per
    /// write for `sluice_delivery_latency_seconds` (the rest of a write is gathered without
    /// waiting).
    write_clock: Option<Timestamp>,
    heartbeat: Pin<Box<Sleep>>,
    expiry: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl Session {
    /// How many readers the session's feed has now, this one included.
    pub fn feed_readers(&self) -> usize {
        self.cursor.feed().core.readers()
    }

    /// A session following `plan` on `feed`; `preamble` (the `connected` frame and any resume
    /// gap) is sent first.
    pub fn new(
        ctx: SessionContext,
        mut guard: ConnectionGuard,
        feed: Arc<Feed>,
        plan: &Plan,
        preamble: Bytes,
    ) -> Self {
        guard.start_streaming();
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
            ctx,
            guard,
            cursor: match plan.latest_from {
                Some(_) => Cursor::after_latest(feed, plan.start),
                None => Cursor::new(feed, plan.start),
            },
            backlog_end: plan.backlog_end,
            window_cutoff,
            replayed: 0,
            pending_gap: None,
            preamble: Some(preamble),
            write_clock: None,
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
            let chunk = session.next_batch(&mut frames).await?;
            Some((Ok(chunk), (session, frames)))
        })
    }

    /// The next write: the frames [`Self::next_frames`] gathers, as one chunk (`frames` is
    /// scratch space, kept between calls so it is allocated once). `None` once the stream
    /// has ended.
    pub async fn next_batch(&mut self, frames: &mut Vec<Bytes>) -> Option<Bytes> {
        frames.clear();
        if !self.next_frames(frames).await {
            return None;
        }
        Some(match frames.as_slice() {
            [one] => one.clone(),
            many => many.concat().into(),
        })
    }

    /// Appends the next frames to write to `out` — with every frame already at hand after the
    /// first (in the ring, or read from the stream while catching up), so a woken client gets
    /// them in one write (bounded by `MAX_BATCH_FRAMES` and `MAX_BATCH_BYTES`). False when
    /// the stream has ended.
    pub async fn next_frames(&mut self, out: &mut Vec<Bytes>) -> bool {
        self.write_clock = None;
        let Some(first) = self.next_frame().await else {
            return false;
        };
        let mut bytes = first.len();
        out.push(first);
        while !self.ended && out.len() < MAX_BATCH_FRAMES && bytes < MAX_BATCH_BYTES {
            let Some(entry) = self.cursor.ready() else {
                break;
            };
            if let Some(frame) = self.admit(entry) {
                bytes += frame.len();
                out.push(frame);
            }
        }
        true
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
        self.guard.end(reason);
    }

    /// Applies the plan's backlog rules to an entry and returns the frame to send, if any.
    fn admit(&mut self, entry: Entry) -> Option<Bytes> {
        if !entry.kind.is_lost() && entry.seq <= self.backlog_end {
            if self.window_cutoff.is_some_and(|cutoff| entry.time < cutoff) {
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
        match entry.kind {
            EntryKind::Message | EntryKind::Deleted => {
                self.ctx.metrics.delivered.inc();
                if entry.seq > self.backlog_end {
                    self.observe_delivery(entry.time);
                }
            }
            EntryKind::Lost(reason) => {
                Metrics::count(&self.ctx.metrics.gaps, "reason", reason.label());
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
        self.guard.count_delivered();
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

    /// Records the delivery latency of a live message stored at `stored`, against the clock
    /// of this write. Backlog is left out: its age says when the client left, not how fast the
    /// hub delivers. A store clock ahead of this one counts as no delay.
    fn observe_delivery(&mut self, stored: Timestamp) {
        let now = *self.write_clock.get_or_insert_with(Timestamp::now);
        let nanos = now.as_nanosecond().saturating_sub(stored.as_nanosecond());
        let nanos = u64::try_from(nanos.max(0)).unwrap_or(u64::MAX);
        self.ctx.metrics.delivery_latency.observe_nanos(nanos);
    }

    /// The `gap` frame for backlog skipped by `replay.window`, if any is pending.
    fn take_gap_frame(&mut self) -> Option<Bytes> {
        let (from, to) = self.pending_gap.take()?;
        Metrics::count(
            &self.ctx.metrics.gaps,
            "reason",
            GapReason::ReplayWindow.label(),
        );
        let core = &self.cursor.feed().core;
        let id = EventId::before(to + 1, core.encoder().incarnation);
        Some(core.gap_frame(id, &Gap::range(GapReason::ReplayWindow, from, to)))
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
            if let Some(entry) = self.cursor.ready() {
                return Step::Entry(entry);
            }
            // Nothing at hand at the live end: backlog skipped by the replay window is reported
            // before waiting (while catching up, the skipped run may go on: one gap for it).
            if self.pending_gap.is_some()
                && self.cursor.is_at_live_end()
                && let Some(gap) = self.take_gap_frame()
            {
                return Step::Frame(gap);
            }
            // A cursor on the ring waits on its feed alone (one waiter list per wake-up, not
            // two): at shutdown the hub sets the flag and then wakes every feed's readers. A
            // cursor catching up waits on the stream, so it watches the flag too.
            if *self.ctx.shutdown.borrow() {
                return Step::End(reason::SHUTDOWN);
            }
            let catching_up = self.cursor.is_catching_up();
            tokio::select! {
                biased;
                _ = self.ctx.shutdown.wait_for(|down| *down), if catching_up => {
                    return Step::End(reason::SHUTDOWN);
                }
                next = self.cursor.next() => match next {
                    Ok(Some(entry)) => return Step::Entry(entry),
                    Ok(None) => {}
                    Err(Lost::Replaced) => return Step::End(reason::STREAM_RECREATED),
                    Err(Lost::Failed | Lost::Ended) => return Step::End(reason::BACKEND_ERROR),
                },
                () = self.heartbeat.as_mut() => return Step::Heartbeat,
                () = expired(&mut self.expiry) => return Step::End(reason::TOKEN_EXPIRED),
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
