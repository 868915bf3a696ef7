//! The Mercure hub at `/.well-known/mercure` (the 0.x protocol and the 1.0 draft), on the
//! protocol layer of `sluice-mercure` and the hub's own machinery: updates are messages of the
//! served stream under `mercure.subject_prefix`, subscriptions are feeds of the fan-out with a
//! Mercure [`View`](crate::fanout::View), sessions are the `/events` sessions.
//!
//! | file           | job                                                              |
//! |----------------|------------------------------------------------------------------|
//! | `config.rs`    | the `[mercure]` section, its validation and environment          |
//! | `auth.rs`      | tokens: where they are found, verified with the Mercure keys      |
//! | `publish.rs`   | `POST /.well-known/mercure`                                      |
//! | `subscribe.rs` | `GET /.well-known/mercure`: selectors, grants, resume, the stream |
//! | `view.rs`      | one feed's selection and encoding of updates (the frames)         |
//! | `discovery.rs` | the `Link` header and CORS                                        |
//! | `subscriptions.rs` | `GET /.well-known/mercure/subscriptions…`: the subscriptions API |
//! | `announce.rs`  | this node's subscription events, subscriber ids and lease         |
//! | `active.rs`    | the table of every node's active subscriptions                   |
//! | `follow.rs`    | the task folding the stream's subscription events into the table |

mod active;
mod announce;
mod auth;
pub(crate) mod config;
mod discovery;
mod follow;
mod publish;
mod subscribe;
mod subscriptions;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sluice_mercure::Scheme;

pub use config::{CollectionShape, MercureConfig};

use crate::auth::{AuthConfigError, AuthError};
use crate::backend::Backend;
use crate::hub::Hub;
use crate::metrics::Metrics;
use auth::Verifier;
use follow::Presence;

/// The longest shutdown waits for the ends of the subscriptions it ended to be stored.
const ENDS_DRAIN: Duration = Duration::from_secs(5);

/// The path of the hub.
pub const HUB_PATH: &str = sluice_mercure::form::HUB_PATH;

/// What every Mercure request needs, built once with the hub.
#[derive(Debug)]
pub struct Mercure {
    /// How updates are stored (shared with every feed's view).
    scheme: Arc<Scheme>,
    publisher: Verifier,
    subscriber: Verifier,
    /// Active subscriptions, with `mercure.subscriptions`.
    presence: Option<Arc<Presence>>,
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
        let presence = config.subscriptions.then(|| {
            Arc::new(Presence::new(
                scheme.clone(),
                backend.clone(),
                metrics.clone(),
                config.subscriptions_lease,
            ))
        });
        Ok(Some(Self {
            scheme,
            publisher,
            subscriber,
            presence,
        }))
    }

    /// Starts following the stream's subscription events (with `mercure.subscriptions`),
    /// until the hub shuts down.
    pub(crate) fn start(&self, hub: &Hub) {
        if let Some(presence) = &self.presence {
            tokio::spawn(presence.clone().follow(hub.shutdown_signal()));
        }
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

/// The Mercure routes (none when it is off: `/.well-known/mercure` is then a 404).
pub fn routes(hub: &Arc<Hub>) -> Option<Router<Arc<Hub>>> {
    let mercure = hub.mercure.as_ref()?;
    let mut router = Router::new().route(
        HUB_PATH,
        get(subscribe::subscribe)
            .post(publish::publish)
            .options(discovery::preflight),
    );
    if mercure.presence.is_some() {
        let path = sluice_mercure::subscription::SUBSCRIPTIONS_PATH;
        router = router.route(path, get(subscriptions::subscriptions)).route(
            &format!("{path}/{{*rest}}"),
            get(subscriptions::subscriptions),
        );
    }
    Some(router.layer(axum::middleware::from_fn_with_state(
        hub.clone(),
        discovery::headers,
    )))
}

/// A subscriber's request refused by its token (`401` with the challenge, or `403`): counted
/// in `sluice_connections_rejected_total` and logged as `<what> refused`.
fn refuse_token(hub: &Hub, what: &'static str, err: AuthError) -> Response {
    Metrics::count(&hub.metrics.rejected, "reason", err.reason());
    tracing::info!(reason = err.reason(), status = err.status().as_u16(), detail = %err, "{what} refused");
    err.into_response()
}

/// A refusal as Mercure answers it: the status and a plain-text reason; counted under
/// `counter` by `reason` and logged as `what` refused.
fn refuse(
    counter: &crate::metrics::Counters,
    what: &'static str,
    reason: &'static str,
    status: StatusCode,
    detail: &str,
) -> Response {
    Metrics::count(counter, "reason", reason);
    tracing::info!(reason, status = status.as_u16(), detail, "{what} refused");
    (status, format!("{detail}\n")).into_response()
}
