//! The Mercure hub at `/.well-known/mercure` (the 0.x protocol and the 1.0 draft), on the
//! protocol layer of `sluice-mercure` and the hub's own machinery: updates are messages of the
//! served stream under `mercure.subject_prefix`, subscriptions are feeds of the fan-out with a
//! Mercure [`View`](sluice_core::fanout::View), sessions are the `/events` sessions.
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
pub(crate) mod state;
mod subscribe;
mod subscriptions;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::auth::AuthError;
use crate::hub::Hub;
use sluice_core::metrics::Metrics;

/// The path of the hub.
pub const HUB_PATH: &str = sluice_mercure::form::HUB_PATH;

pub use state::Mercure;

/// The Mercure routes (none when it is off: `/.well-known/mercure` is then a 404).
pub fn routes(hub: &Arc<Hub>) -> Option<Router<Arc<Hub>>> {
    let mercure = hub.mercure.as_ref()?;
    let mut router = Router::new().route(
        HUB_PATH,
        get(subscribe::subscribe)
            .post(publish::publish)
            .options(discovery::preflight),
    );
    if mercure.follows_subscriptions() {
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
    counter: &sluice_core::metrics::Counters,
    what: &'static str,
    reason: &'static str,
    status: StatusCode,
    detail: &str,
) -> Response {
    Metrics::count(counter, "reason", reason);
    tracing::info!(reason, status = status.as_u16(), detail, "{what} refused");
    (status, format!("{detail}\n")).into_response()
}
