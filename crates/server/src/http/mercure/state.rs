//! What every Mercure request needs, built once with the hub: the storage scheme, the
//! publishers' and subscribers' token verifiers, and the active subscriptions followed.

use std::sync::Arc;
use std::time::Duration;

use sluice_backend::Backend;
use sluice_core::metrics::Metrics;
use sluice_mercure::Scheme;
use tokio::sync::watch;

use super::auth::Verifier;
use super::config::MercureConfig;
use super::follow::Presence;
use crate::auth::AuthConfigError;

/// The longest shutdown waits for the ends of the subscriptions it ended to be stored.
const ENDS_DRAIN: Duration = Duration::from_secs(5);

/// What every Mercure request needs, built once with the hub.
#[derive(Debug)]
pub struct Mercure {
    /// How updates are stored (shared with every feed's view).
    pub(super) scheme: Arc<Scheme>,
    pub(super) publisher: Verifier,
    pub(super) subscriber: Verifier,
    /// Active subscriptions, with `mercure.subscriptions`.
    pub(super) presence: Option<Arc<Presence>>,
}

impl Mercure {
    /// The hub's Mercure state when `config.enabled`, storing in `backend`; the keys were
    /// checked with the rest of the configuration.
    pub fn new(
        config: &MercureConfig,
        backend: &Arc<dyn Backend>,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Self>, AuthConfigError> {
        if !config.enabled {
            return Ok(None);
        }
        let invalid = |key: &str, err: String| AuthConfigError::invalid(key.to_owned(), "", err);
        let scheme = Scheme::new(&config.subject_prefix)
            .map_err(|err| invalid("mercure.subject_prefix", err.to_string()))?;
        let audience = config.audience.as_deref();
        let issuer = config.issuer.as_deref();
        let publisher = Verifier::new(
            "mercure.publisher_jwt",
            config.publisher_jwt_key.as_ref(),
            &config.publisher_jwt_alg,
            audience,
            issuer,
            metrics.token_cache_lookups.clone(),
        )?;
        let (key, alg) = config.subscriber_key();
        let subscriber = Verifier::new(
            "mercure.subscriber_jwt",
            key,
            alg,
            audience,
            issuer,
            metrics.token_cache_lookups.clone(),
        )?;
        let scheme = Arc::new(scheme);
        let presence = config
            .subscriptions
            .then(|| {
                Presence::new(
                    scheme.clone(),
                    backend.clone(),
                    metrics.clone(),
                    config.subscriptions_lease,
                )
                .map(Arc::new)
                .map_err(|err| invalid("mercure.subject_prefix", err.to_string()))
            })
            .transpose()?;
        Ok(Some(Self {
            scheme,
            publisher,
            subscriber,
            presence,
        }))
    }

    /// Starts following the stream's subscription events (with `mercure.subscriptions`),
    /// until `shutdown` turns true.
    pub(crate) fn start(&self, shutdown: watch::Receiver<bool>) {
        if let Some(presence) = &self.presence {
            tokio::spawn(presence.clone().follow(shutdown));
        }
    }

    /// True when the active subscriptions are followed and served (`mercure.subscriptions`).
    pub(crate) fn follows_subscriptions(&self) -> bool {
        self.presence.is_some()
    }

    /// Waits until the ends of the subscriptions shutdown ended are stored (or
    /// [`ENDS_DRAIN`] passed).
    pub(crate) async fn finish(&self) {
        if let Some(presence) = &self.presence {
            presence.announcer().drain(ENDS_DRAIN).await;
        }
    }

    /// The filter the dispatch must read for Mercure's feeds.
    pub fn wide_filter(&self) -> String {
        self.scheme.wide_filter()
    }
}
