//! The HTTP surface: routes, CORS and the JSON error shape.
//!
//! | route                         | purpose                                  |
//! |-------------------------------|------------------------------------------|
//! | `GET /events?topic=…`         | Server-Sent Events stream                |
//! | `GET /events/<topic>`         | the same with one topic in the path      |
//! | `POST /publish`               | store one message                        |
//! | `GET /livez` `/readyz` `/healthz` | probes (trailing slash tolerated)    |
//! | `GET /metrics`                | Prometheus text                          |
//! | `GET /`                       | a small page that subscribes and lists events |

mod events;
mod page;
mod probes;
mod publish;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use tower_http::cors::{AllowCredentials, AllowOrigin, CorsLayer};

pub(crate) use events::{accepts_event_stream, transient};

use crate::backend::{ApiError, BackendError};
use crate::hub::Hub;

/// Builds the router for `hub`.
pub fn router(hub: Arc<Hub>) -> Router {
    let body_limit = hub.config.limits.max_publish_body;
    let cors = cors(&hub.config.cors.allowed_origins);
    let mut router = Router::new()
        .route("/", get(page::index))
        .route("/events", get(events::by_query))
        .route("/events/", get(events::by_query))
        .route("/events/{*topic}", get(events::by_path))
        .route(
            "/publish",
            post(publish::publish).layer(DefaultBodyLimit::max(body_limit)),
        )
        .route("/metrics", get(probes::metrics));
    for (path, handler) in [
        ("/livez", get(probes::livez)),
        ("/readyz", get(probes::readyz)),
        ("/healthz", get(probes::healthz)),
    ] {
        router = router
            .route(path, handler.clone())
            .route(&format!("{path}/"), handler);
    }
    let router = router.with_state(hub);
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// CORS for `allowed_origins`: `*` lets any origin in without credentials; listed origins
/// are echoed and may send credentials. `Vary: Origin` is always set.
fn cors(allowed: &[String]) -> Option<CorsLayer> {
    if allowed.is_empty() {
        return None;
    }
    let any = allowed.iter().any(|o| o == "*");
    let exact: Arc<HashSet<HeaderValue>> = Arc::new(
        allowed
            .iter()
            .filter(|o| *o != "*")
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect(),
    );
    let listed = exact.clone();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, _| {
                any || exact.contains(origin)
            }))
            .allow_credentials(AllowCredentials::predicate(move |origin, _| {
                listed.contains(origin)
            }))
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers([
                header::CACHE_CONTROL,
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                HeaderName::from_static("last-event-id"),
            ])
            .max_age(Duration::from_secs(600)),
    )
}

/// The body of every error answer: `{"code": …, "description": …}`. `code` is the stream's
/// JetStream error code when the stream refused the request, otherwise the HTTP status.
#[derive(Serialize)]
struct ErrorBody<'a> {
    code: u32,
    description: &'a str,
}

/// The answer for `err`: its status (500 unless it is a client or server error status), and
/// its code and description as the body.
pub(crate) fn error_response(err: &ApiError) -> Response {
    let status = StatusCode::from_u16(err.status)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ErrorBody {
        code: err.code,
        description: &err.description,
    };
    (status, axum::Json(body)).into_response()
}

/// A refusal of the hub's own, not the stream's: its code is its HTTP status.
pub(crate) fn refusal(status: StatusCode, description: impl Into<String>) -> ApiError {
    let status = status.as_u16();
    ApiError::new(status, u32::from(status), description)
}

/// A `400 Bad Request` refusal of the hub's own.
pub(crate) fn bad_request(description: impl Into<String>) -> ApiError {
    refusal(StatusCode::BAD_REQUEST, description)
}

/// A backend error as an answer: the stream's refusal as it is; the backend out of reach as
/// `503`, storage that cannot be written (a full disk) as `507 Insufficient Storage`, anything
/// else as `500`, described by the error's message.
impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        match err {
            BackendError::Api(api) => api,
            BackendError::Unavailable(_) => {
                refusal(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
            }
            BackendError::Storage(_) => refusal(StatusCode::INSUFFICIENT_STORAGE, err.to_string()),
            other => refusal(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}
