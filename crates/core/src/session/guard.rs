//! A connection slot held by an event stream, and the logged, counted reason it ended.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::conn::ConnState;
use crate::metrics::Metrics;

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
    /// Told the end reason when the stream ends (dropped unsent if it never streamed).
    on_end: Option<tokio::sync::oneshot::Sender<&'static str>>,
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
            on_end: None,
        })
    }
}

impl ConnectionGuard {
    /// The slot now holds a stream: its end is logged and counted.
    pub(super) fn start_streaming(&mut self) {
        self.streaming = true;
    }

    /// Why the stream ends (otherwise the client closed it, or it stalled).
    pub(super) fn end(&mut self, reason: &'static str) {
        self.reason = Some(reason);
    }

    /// `tell` learns the end reason when the stream ends, however it ends.
    pub fn on_end(&mut self, tell: tokio::sync::oneshot::Sender<&'static str>) {
        self.on_end = Some(tell);
    }

    /// One more frame delivered (logged at the end).
    pub(super) fn count_delivered(&mut self) {
        self.delivered += 1;
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
        if let Some(tell) = self.on_end.take() {
            let _ = tell.send(reason);
        }
        tracing::info!(
            disconnect_reason = reason,
            peer = self.peer.map(tracing::field::display),
            delivered = self.delivered,
            "event stream ended"
        );
    }
}
