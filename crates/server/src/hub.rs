//! The hub: configuration, backend, metrics and fan-out shared by every request, and the
//! server loop with graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use tokio::sync::watch;

use crate::auth::{AuthConfigError, Authenticator};
use crate::config::Config;
use crate::http::mercure::state::Mercure;
use crate::owned_runtime::OwnedRuntime;
use sluice_backend::{Backend, BackendRoles, StreamAdmin, StreamStatistics};
use sluice_core::conn::ConnInfo;
use sluice_core::fanout::{Encoder, Fanout};
use sluice_core::metrics::Metrics;
use sluice_core::session::{ConnectionGuard, SessionContext};

/// One running hub: its configuration, backend, metrics, feeds and authorization, shared by
/// every request. Build it with [`Hub::new`], run it with [`serve`].
pub struct Hub {
    pub(crate) config: Arc<Config>,
    /// The stream's data path.
    pub(crate) backend: Arc<dyn Backend>,
    /// Administration of the backend's streams.
    pub(crate) admin: Arc<dyn StreamAdmin>,
    /// What the backend tells `/metrics`.
    pub(crate) statistics: Arc<dyn StreamStatistics>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) fanout: Fanout,
    /// The fan-out of Mercure's feeds, whose views select and encode on a thread of their own
    /// (`mercure_views`), when `[mercure]` is enabled.
    pub(crate) mercure_fanout: Option<Fanout>,
    /// The runtime of `mercure_fanout`'s dispatch, held for as long as the hub lives.
    _mercure_views: Option<OwnedRuntime>,
    pub(crate) auth: Arc<Authenticator>,
    /// The Mercure hub's state, when `[mercure]` is enabled.
    pub(crate) mercure: Option<Mercure>,
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
    /// A hub over `backend` (an `Arc` of either backend, or its roles). `config` must be
    /// validated; the authorization keys are read here, so a missing or bad key file is an
    /// error before any socket opens.
    pub fn new(
        config: Config,
        backend: impl Into<BackendRoles>,
    ) -> Result<Arc<Self>, AuthConfigError> {
        let BackendRoles {
            data: backend,
            admin,
            statistics,
        } = backend.into();
        let metrics = Arc::new(Metrics::for_backend(&*statistics));
        let lookups = metrics.token_cache_lookups.clone();
        let auth = Arc::new(
            Authenticator::counting_cache_lookups(&config.auth, lookups)?
                .with_cookie_origins(&config.cors.allowed_origins),
        );
        let mercure = Mercure::new(&config.mercure, &backend, &metrics)?;
        let encoder = Encoder {
            incarnation: 0,
            topic_prefix: config.topic_prefix.clone(),
            max_event_size: config.sse.max_event_size,
            event_type: config.sse.event_type.clone(),
            view_prefix: config
                .mercure
                .enabled
                .then(|| config.mercure.subject_prefix.clone()),
        };
        let fanout =
            |encoder| Fanout::new(backend.clone(), metrics.clone(), encoder, &config.fanout);
        let mercure_views = mercure.as_ref().and_then(|_| {
            OwnedRuntime::start_named(1, "sluice-mercure-views")
                .inspect_err(|e| {
                    tracing::error!(error = %e, "cannot start the Mercure views' thread; Mercure feeds are selected on the request threads")
                })
                .ok()
        });
        let mercure_fanout = mercure.as_ref().map(|mercure| {
            let runtime = mercure_views.as_ref().map(|r| r.handle().clone());
            fanout(encoder.clone()).for_views(mercure.wide_filter(), runtime)
        });
        let fanout = fanout(encoder);
        Ok(Arc::new(Self {
            config: Arc::new(config),
            backend,
            admin,
            statistics,
            metrics,
            fanout,
            mercure_fanout,
            _mercure_views: mercure_views,
            auth,
            mercure,
            slots: Arc::default(),
            shutdown: watch::channel(false).0,
        }))
    }

    /// Who may subscribe and publish, e.g. to reload its keys on SIGHUP
    /// ([`Authenticator::reload_on_sighup`]).
    pub fn auth(&self) -> &Arc<Authenticator> {
        &self.auth
    }

    /// The metrics as `GET /metrics` serves them (OpenMetrics text), with the per-stream
    /// gauges and the feeds' lag as the last `GET /metrics` read them.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// The shared backend feeds open now: one per distinct topic set being streamed.
    pub fn feed_count(&self) -> usize {
        self.fanout.feed_count() + self.mercure_fanout.as_ref().map_or(0, Fanout::feed_count)
    }

    /// How many sequences up to `last_seq` the feeds have not yet got (the slower fan-out's).
    pub(crate) fn feed_lag(&self, last_seq: u64) -> u64 {
        let mercure = self.mercure_fanout.as_ref().map_or(0, |f| f.lag(last_seq));
        self.fanout.lag(last_seq).max(mercure)
    }

    /// Takes a connection slot for an event stream, if `limits.max_connections` allows.
    pub(crate) fn acquire_slot(&self, conn: Option<&ConnInfo>) -> Option<ConnectionGuard> {
        ConnectionGuard::acquire(
            self.metrics.clone(),
            self.slots.clone(),
            self.config.limits.max_connections,
            conn.map(|c| c.state.clone()),
            conn.map(|c| c.peer),
        )
    }

    /// What a new session needs.
    pub(crate) fn session_context(&self) -> SessionContext {
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
    pub(crate) fn begin_shutdown(&self) {
        // The flag first: a session woken by its feed then sees it.
        self.shutdown.send_replace(true);
        self.fanout.wake_all();
        if let Some(fanout) = &self.mercure_fanout {
            fanout.wake_all();
        }
    }

    /// A receiver that turns true when shutdown begins.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// True once shutdown has begun.
    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
