//! Event streams over HTTP/2: the session runs in a task of its own and hands its batches of
//! frames to the response body one at a time, so the write-stall rule holds per stream.
//!
//! The session's task runs on its connection's runtime, whatever the size of its feed (as an
//! HTTP/1.1 stream over TLS does): every batch goes on through hyper's stream task and the
//! connection's task, which live there, so a session on the streams' runtime paid two
//! wake-ups across threads per batch, about a tenth of the hub's CPU per event with a
//! thousand browser tabs on one topic.
//!
//! hyper takes a body's next batch only once the stream's flow-control window has room for
//! it; a stream whose client accepts nothing (its window stays shut) leaves its batch untaken.
//! A batch that waits `sse.write_timeout` ends that stream's session as `slow_client` (its
//! slot and cursor are freed at once); the connection's other streams go on. hyper polls the
//! body again only once the window opens, and then resets the stream instead of ending it. A
//! socket that accepts nothing stalls every stream of the connection: each then ends as
//! `slow_client` too.
//!
//! The handoff is a one-batch [`Slot`] rather than a channel: a bounded tokio channel
//! allocates a block of 32 slots (about 1 KiB) for each stream, of which one is ever used.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use hyper::body::Frame;
use sluice_core::conn::ConnState;
use sluice_core::session::Session;

/// The write-stall rule of one stream.
#[derive(Debug, Clone)]
pub struct StallRule {
    /// `sse.write_timeout`.
    pub write_timeout: Duration,
    /// The stream's own state, which its session's guard reads.
    pub stream: ConnState,
    /// The connection's state, marked when its socket stalls.
    pub socket: ConnState,
}

/// `response` (the handler's head) with `session` as its body: the session is started beside
/// the connection.
pub fn respond(response: Response, session: Session, rule: StallRule) -> Response {
    // One batch in hand: the body holds at most one besides what hyper is sending.
    let slot = Arc::new(Slot::default());
    let batches = Handoff(slot.clone());
    let body = StreamBody {
        batches: Taker(slot),
        stream: rule.stream.clone(),
    };
    tokio::spawn(pump(session, batches, rule));
    // `take_session` already dropped the length the router gave the empty body.
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, Body::new(body))
}

/// Runs `session` and hands its batches to the body, until the session ends, the body is
/// dropped (the client reset the stream, or the connection ended) or a batch waits for the
/// write timeout.
///
/// This future is what an open stream keeps besides hyper's stream state, so it holds each
/// value once: an `async move` block (an `async fn` keeps a second copy of each argument),
/// and the session lent to each read, never moved into a stream of its own.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep a second copy of each argument"
)]
fn pump(
    mut session: Session,
    batches: Handoff,
    rule: StallRule,
) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let mut frames = Vec::new();
        let body_gone = loop {
            let batch = tokio::select! {
                biased;
                batch = session.next_batch(&mut frames) => batch,
                () = batches.closed() => break true,
            };
            // None: the session has ended (and logged why).
            let Some(batch) = batch else { break false };
            match batches.send(batch, rule.write_timeout).await {
                Ok(()) => {}
                Err(Refused::BodyGone) => break true,
                Err(Refused::Stalled) => {
                    rule.stream.mark_stalled();
                    break false;
                }
            }
        };
        // The body is gone: a stalled socket is the reason, if there is one.
        if body_gone && rule.socket.stalled() {
            rule.stream.mark_stalled();
        }
        // IMPORTANT: the session ends (its guard reads the stall marks and logs the reason)
        // before `batches` is dropped, which ends the body.
        drop(session);
    }
}

/// The one batch between a session's task and its response body, and who waits on it.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    batch: Option<Bytes>,
    /// The body, waiting for a batch.
    body_waiting: Option<Waker>,
    /// The session's task, waiting for the slot to empty or the body to go.
    pump_waiting: Option<Waker>,
    /// The body was dropped: the stream is over.
    body_gone: bool,
    /// The session's task ended: no batch follows the one in the slot.
    pump_gone: bool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Keeps `waker` as the one to wake, replacing an older one.
fn wait_with(waiting: &mut Option<Waker>, waker: &Waker) {
    match waiting {
        Some(old) if old.will_wake(waker) => {}
        _ => *waiting = Some(waker.clone()),
    }
}

/// Why a batch was not handed to the body.
#[derive(Debug, PartialEq)]
enum Refused {
    /// The body is gone: nothing more can be handed to it.
    BodyGone,
    /// The body took nothing for the write timeout.
    Stalled,
}

/// The session's side of a [`Slot`].
struct Handoff(Arc<Slot>);

impl Handoff {
    /// Puts `batch` in the slot once it is empty. Fails when the body is gone, or when the
    /// slot stays full for `timeout`. Cancelling it drops `batch`.
    async fn send(&self, batch: Bytes, timeout: Duration) -> Result<(), Refused> {
        let mut batch = Some(batch);
        // Most batches find the slot empty: the timer is armed only for one that waits. (A
        // full slot keeps the no-op waker only until the timed wait below registers the task.)
        if let Poll::Ready(sent) = self.poll_put(&mut batch, Waker::noop()) {
            return sent;
        }
        // Boxed: a waiting batch is the rare case, and the timer kept inline would make every
        // open stream's task bigger.
        let put = poll_fn(|cx| self.poll_put(&mut batch, cx.waker()));
        Box::pin(tokio::time::timeout(timeout, put))
            .await
            .unwrap_or(Err(Refused::Stalled))
    }

    /// Puts `batch` in the slot if it is empty, else leaves `waker` to be woken when it is.
    fn poll_put(&self, batch: &mut Option<Bytes>, waker: &Waker) -> Poll<Result<(), Refused>> {
        let body = {
            let mut state = self.0.lock();
            if state.body_gone {
                return Poll::Ready(Err(Refused::BodyGone));
            }
            if state.batch.is_some() {
                wait_with(&mut state.pump_waiting, waker);
                return Poll::Pending;
            }
            state.batch = batch.take();
            state.body_waiting.take()
        };
        if let Some(body) = body {
            body.wake();
        }
        Poll::Ready(Ok(()))
    }

    /// Completes once the body is gone.
    async fn closed(&self) {
        poll_fn(|cx| {
            let mut state = self.0.lock();
            if state.body_gone {
                return Poll::Ready(());
            }
            wait_with(&mut state.pump_waiting, cx.waker());
            Poll::Pending
        })
        .await;
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        let body = {
            let mut state = self.0.lock();
            state.pump_gone = true;
            state.body_waiting.take()
        };
        if let Some(body) = body {
            body.wake();
        }
    }
}

/// The body's side of a [`Slot`].
struct Taker(Arc<Slot>);

impl Taker {
    /// The batch in the slot; `None` once the session's task has ended and the slot is empty.
    fn poll_take(&self, cx: &Context<'_>) -> Poll<Option<Bytes>> {
        let (batch, pump) = {
            let mut state = self.0.lock();
            match state.batch.take() {
                Some(batch) => (batch, state.pump_waiting.take()),
                None if state.pump_gone => return Poll::Ready(None),
                None => {
                    wait_with(&mut state.body_waiting, cx.waker());
                    return Poll::Pending;
                }
            }
        };
        if let Some(pump) = pump {
            pump.wake();
        }
        Poll::Ready(Some(batch))
    }
}

impl Drop for Taker {
    fn drop(&mut self) {
        let pump = {
            let mut state = self.0.lock();
            state.body_gone = true;
            state.batch = None;
            state.pump_waiting.take()
        };
        if let Some(pump) = pump {
            pump.wake();
        }
    }
}

/// The response body of an HTTP/2 event stream.
struct StreamBody {
    batches: Taker,
    stream: ConnState,
}

impl hyper::body::Body for StreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.batches.poll_take(cx) {
            Poll::Ready(Some(batch)) => Poll::Ready(Some(Ok(Frame::data(batch)))),
            // A stalled stream is reset rather than ended: its client did not get it all.
            Poll::Ready(None) if self.stream.stalled() => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the stream accepted nothing for the write timeout",
            )))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(taker: &Taker) -> Poll<Option<Bytes>> {
        taker.poll_take(&Context::from_waker(Waker::noop()))
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn the_slot_holds_one_batch_and_says_when_either_side_is_gone() {
        let slot = Arc::new(Slot::default());
        let (handoff, taker) = (Handoff(slot.clone()), Taker(slot));
        assert!(take(&taker).is_pending());
        handoff.send(Bytes::from_static(b"a"), WAIT).await.unwrap();
        {
            // A second batch waits until the first is taken.
            let second = handoff.send(Bytes::from_static(b"b"), WAIT);
            tokio::pin!(second);
            assert!(futures::poll!(second.as_mut()).is_pending());
            assert_eq!(take(&taker), Poll::Ready(Some(Bytes::from_static(b"a"))));
            second.await.unwrap();
        }
        // The session ends: its last batch is still delivered, then the body ends.
        drop(handoff);
        assert_eq!(take(&taker), Poll::Ready(Some(Bytes::from_static(b"b"))));
        assert_eq!(take(&taker), Poll::Ready(None));

        let slot = Arc::new(Slot::default());
        let (handoff, taker) = (Handoff(slot.clone()), Taker(slot));
        handoff.send(Bytes::from_static(b"a"), WAIT).await.unwrap();
        let closed = handoff.closed();
        tokio::pin!(closed);
        assert!(futures::poll!(closed.as_mut()).is_pending());
        // The client reset the stream: the session's task hears of it.
        drop(taker);
        closed.await;
        let refused = handoff.send(Bytes::from_static(b"b"), WAIT).await;
        assert_eq!(refused, Err(Refused::BodyGone));
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_the_body_leaves_for_the_write_timeout_is_refused_as_stalled() {
        let slot = Arc::new(Slot::default());
        let (handoff, taker) = (Handoff(slot.clone()), Taker(slot));
        handoff.send(Bytes::from_static(b"a"), WAIT).await.unwrap();
        let started = tokio::time::Instant::now();
        let refused = handoff.send(Bytes::from_static(b"b"), WAIT).await;
        assert_eq!(refused, Err(Refused::Stalled));
        assert_eq!(started.elapsed(), WAIT);
        // The first batch is still there for the body; the refused one is dropped.
        assert_eq!(take(&taker), Poll::Ready(Some(Bytes::from_static(b"a"))));
        assert!(take(&taker).is_pending());
    }

    /// What one idle HTTP/2 event stream keeps besides hyper's stream state: its task (the
    /// session inside, held once: 1,152 bytes in a debug build, the topic sets a `removed`
    /// gap is routed to included; 1,640 when the task was an `async fn` that moved the session
    /// into a stream of its own) and its body must stay well below the 8 KiB goal.
    #[test]
    fn an_open_http2_stream_keeps_little_state() {
        let task = crate::net::future_size::of3(pump);
        let body = std::mem::size_of::<StreamBody>();
        assert!(task + body <= 1168, "task {task} bytes, body {body} bytes");
    }
}
