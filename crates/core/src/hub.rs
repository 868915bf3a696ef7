//! What every reader of one hub shares, whatever protocol carries it: the stream's data path,
//! the metrics, the fan-outs, the connection slots and the shutdown signal. A reader starts
//! through [`HubCore::open_session`] (see [`crate::reader`]).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use sluice_backend::Backend;
use tokio::sync::watch;

use crate::conn::ConnInfo;
use crate::fanout::Fanout;
use crate::frames::Repair;
use crate::metrics::Metrics;
use crate::plan::OnLoss;
use crate::session::{ConnectionGuard, SessionContext};

/// How the hub's sessions behave, from its configuration.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// `limits.max_connections`: event streams open at once.
    pub max_connections: usize,
    /// `sse.heartbeat`.
    pub heartbeat: Duration,
    /// `replay.max_messages` (0: no cap).
    pub replay_cap: u64,
    /// `replay.window`.
    pub replay_window: Option<Duration>,
    /// `replay.on_loss`: where a reader whose position is lost continues.
    pub on_loss: OnLoss,
    /// `sse.repair`: what a reader whose position is lost gets after its `gap`.
    pub repair: Repair,
}

/// The hub's core: what every reader shares.
#[derive(Debug)]
pub struct HubCore {
    /// The stream's data path.
    pub backend: Arc<dyn Backend>,
    /// Every metric of the hub.
    pub metrics: Arc<Metrics>,
    /// The fan-out of `/events` feeds.
    pub fanout: Fanout,
    /// The fan-out of feeds whose views select and encode on a runtime of their own (the
    /// Mercure hub's), when there is one.
    pub view_fanout: Option<Fanout>,
    settings: SessionSettings,
    slots: Arc<AtomicUsize>,
    shutdown: watch::Sender<bool>,
}

impl HubCore {
    /// The core over `backend`, counting in `metrics`.
    pub fn new(
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        fanout: Fanout,
        view_fanout: Option<Fanout>,
        settings: SessionSettings,
    ) -> Self {
        Self {
            backend,
            metrics,
            fanout,
            view_fanout,
            settings,
            slots: Arc::default(),
            shutdown: watch::channel(false).0,
        }
    }

    /// How the hub's sessions behave.
    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    /// The shared backend feeds open now: one per distinct topic set being streamed.
    pub fn feed_count(&self) -> usize {
        self.fanout.feed_count() + self.view_fanout.as_ref().map_or(0, Fanout::feed_count)
    }

    /// How many sequences up to `last_seq` the feeds have not yet got (the slower fan-out's).
    pub fn feed_lag(&self, last_seq: u64) -> u64 {
        let views = self.view_fanout.as_ref().map_or(0, |f| f.lag(last_seq));
        self.fanout.lag(last_seq).max(views)
    }

    /// Takes a connection slot for an event stream, if `limits.max_connections` allows.
    pub fn acquire_slot(&self, conn: Option<&ConnInfo>) -> Option<ConnectionGuard> {
        ConnectionGuard::acquire(
            self.metrics.clone(),
            self.slots.clone(),
            self.settings.max_connections,
            conn.map(|c| c.state.clone()),
            conn.map(|c| c.peer),
        )
    }

    /// What a new session needs.
    pub fn session_context(&self) -> SessionContext {
        SessionContext {
            metrics: self.metrics.clone(),
            heartbeat: self.settings.heartbeat,
            shutdown: self.shutdown.subscribe(),
            replay_cap: self.settings.replay_cap,
            replay_window: self.settings.replay_window,
            expires_in: None,
        }
    }

    /// Ends every event stream (each logs `disconnect_reason=shutdown`).
    pub fn begin_shutdown(&self) {
        // IMPORTANT: the flag first: a session woken by its feed then sees it.
        self.shutdown.send_replace(true);
        self.fanout.wake_all();
        if let Some(fanout) = &self.view_fanout {
            fanout.wake_all();
        }
    }

    /// A receiver that turns true when shutdown begins.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
