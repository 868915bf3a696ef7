//! The hub: configuration, backend, metrics and fan-out shared by every request, and the
//! server loop with graceful shutdown.

use std::sync::Arc;

use crate::auth::{AuthConfigError, Authenticator};
use crate::config::Config;
use crate::http::mercure::state::Mercure;
use crate::owned_runtime::OwnedRuntime;
use sluice_backend::{BackendRoles, StreamAdmin, StreamStatistics};
use sluice_core::fanout::{Encoder, Fanout};
use sluice_core::hub::{HubCore, SessionSettings};
use sluice_core::metrics::Metrics;

/// One running hub: its configuration, its core (backend, metrics, feeds, connection slots,
/// shutdown: [`HubCore`], which it derefs to), authorization and Mercure, shared by every
/// request. Build it with [`Hub::new`], run it with [`crate::serve`].
pub struct Hub {
    /// What every reader shares, with no HTTP in it.
    core: HubCore,
    pub(crate) config: Arc<Config>,
    /// Administration of the backend's streams.
    pub(crate) admin: Arc<dyn StreamAdmin>,
    /// What the backend tells `/metrics`.
    pub(crate) statistics: Arc<dyn StreamStatistics>,
    /// The runtime of the Mercure feeds' dispatch (the core's view fan-out), held for as long
    /// as the hub lives.
    _mercure_views: Option<OwnedRuntime>,
    pub(crate) auth: Arc<Authenticator>,
    /// The Mercure hub's state, when `[mercure]` is enabled.
    pub(crate) mercure: Option<Mercure>,
}

impl std::ops::Deref for Hub {
    type Target = HubCore;

    fn deref(&self) -> &HubCore {
        &self.core
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("backend", &self.core.backend)
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
        let settings = SessionSettings {
            max_connections: config.limits.max_connections,
            heartbeat: config.sse.heartbeat,
            replay_cap: config.replay.max_messages,
            replay_window: config.replay.window,
            on_loss: config.replay.on_loss,
            repair: config.sse.repair,
        };
        let events_fanout = fanout(encoder);
        let core = HubCore::new(backend, metrics, events_fanout, mercure_fanout, settings);
        Ok(Arc::new(Self {
            core,
            config: Arc::new(config),
            admin,
            statistics,
            _mercure_views: mercure_views,
            auth,
            mercure,
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
}
