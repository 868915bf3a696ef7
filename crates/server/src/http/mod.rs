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

use crate::backend::BackendError;
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
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    /// Error code.
    pub code: u32,
    /// What went wrong, naming the offending value.
    pub description: String,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error whose code is its HTTP status.
    pub fn new(status: StatusCode, description: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                code: u32::from(status.as_u16()),
                description: description.into(),
            },
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, description)
    }
}

impl From<BackendError> for ApiError {
    fn from(err: BackendError) -> Self {
        match err {
            BackendError::Api {
                status,
                code,
                description,
            } => Self {
                status: StatusCode::from_u16(status)
                    .ok()
                    .filter(|s| s.is_client_error() || s.is_server_error())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body: ErrorBody { code, description },
            },
            BackendError::Unavailable(detail) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("backend unavailable: {detail}"),
            ),
            BackendError::Other(detail) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, detail),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}
