//! The hub: configuration, backend, metrics and fan-out shared by every request, and the
//! server loop with graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::sync::watch;

use crate::auth::{AuthConfigError, Authenticator};
use crate::backend::Backend;
use crate::config::Config;
use crate::conn::ConnInfo;
use crate::fanout::Fanout;
use crate::metrics::Metrics;
use crate::session::{ConnectionGuard, SessionContext};

/// Everything a request handler needs.
pub struct Hub {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// The durable stream.
    pub backend: Arc<dyn Backend>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Shared feeds.
    pub fanout: Fanout,
    /// Who may subscribe and publish.
    pub auth: Arc<Authenticator>,
    slots: Arc<AtomicUsize>,
    shutdown: watch::Sender<bool>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("backend", &self.backend)
            .field("listen", &self.config.listen)
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub over `backend`. `config` must be validated; the authorization keys are read
    /// here, so a missing or bad key file is an error before any socket opens.
    pub fn new(config: Config, backend: Arc<dyn Backend>) -> Result<Arc<Self>, AuthConfigError> {
        let auth = Arc::new(Authenticator::new(&config.auth)?);
        let metrics = Arc::new(Metrics::for_backend(&*backend));
        let fanout = Fanout::new(
            backend.clone(),
            metrics.clone(),
            config.topic_prefix.clone(),
            config.sse.max_event_size,
            config.fanout.ring_size,
        );
        Ok(Arc::new(Self {
            config: Arc::new(config),
            backend,
            metrics,
            fanout,
            auth,
            slots: Arc::default(),
            shutdown: watch::channel(false).0,
        }))
    }

    /// Takes a connection slot for an event stream, if `limits.max_connections` allows.
    pub fn acquire_slot(&self, conn: Option<&ConnInfo>) -> Option<ConnectionGuard> {
        ConnectionGuard::acquire(
            self.metrics.clone(),
            self.slots.clone(),
            self.config.limits.max_connections,
            conn.map(|c| c.state.clone()),
            conn.map(|c| c.peer),
        )
    }

    /// What a new session needs.
    pub fn session_context(&self) -> SessionContext {
        SessionContext {
            metrics: self.metrics.clone(),
            heartbeat: self.config.sse.heartbeat,
            shutdown: self.shutdown.subscribe(),
            replay_cap: self.config.replay.max_messages,
            replay_window: self.config.replay.window,
            expires_in: None,
        }
    }

    /// Ends every event stream (each logs `disconnect_reason=shutdown`).
    pub fn begin_shutdown(&self) {
        // The flag first: a session woken by its feed then sees it.
        self.shutdown.send_replace(true);
        self.fanout.wake_all();
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
