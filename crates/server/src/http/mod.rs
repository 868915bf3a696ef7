//! The HTTP surface: routes, CORS, the request framing every route relies on, and the JSON
//! error shape.
//!
//! | route                         | purpose                                  |
//! |-------------------------------|------------------------------------------|
//! | `GET /events?topic=…`         | Server-Sent Events stream                |
//! | `GET /events/<topic>`         | the same with one topic in the path      |
//! | `POST /publish`               | store one message, or a batch            |
//! | `GET /livez` `/readyz` `/healthz` | probes, at the `[probes]` paths (trailing slash tolerated) |
//! | `GET /metrics`                | OpenMetrics or Prometheus text, by `Accept` |
//! | `GET /stream`                 | the stream's summary, for the console    |
//! | `GET /`                       | the console: subscribe, publish, watch   |
//! | `/admin/streams…`             | stream administration, with `[auth.admin]` (see [`admin`]) |
//! | `GET`/`POST /.well-known/mercure` | the Mercure hub, with `[mercure]` (see [`mercure`]) |

mod admin;
pub(crate) mod batch;
mod body;
mod client_library;
mod events;
pub(crate) mod mercure;
mod page;
mod probes;
pub(crate) mod publish;
mod stream_summary;

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Serialize;
use tower_http::cors::{AllowCredentials, AllowOrigin, CorsLayer};

pub(crate) use events::{
    accepts_event_stream, carrying, event_stream_response, refusal_response, refusal_status,
    take_session, transient, turned_away,
};

use crate::config::CorsConfig;
use crate::hub::Hub;
use sluice_backend::ApiError;
use sluice_core::conn::ConnInfo;
use sluice_core::metrics::Metrics;

/// Builds the router for `hub`.
pub fn router(hub: Arc<Hub>) -> Router {
    let budget = body::BodyBudget::for_max_body(
        hub.config.limits.max_publish_body,
        hub.metrics.body_bytes.clone(),
    );
    let cors = cors(&hub.config.cors);
    let mut router = Router::new()
        .route("/", get(page::index))
        .route("/sluice.js", get(client_library::library))
        .route("/events", get(events::by_query))
        .route("/events/", get(events::by_query))
        .route("/events/{*topic}", get(events::by_path))
        .route(
            "/publish",
            post(publish::publish).layer(Extension(budget.clone())),
        )
        .route("/metrics", get(probes::metrics))
        .route("/stream", get(stream_summary::summary))
        .merge(admin::routes(budget.clone()));
    let paths = &hub.config.probes;
    for (path, handler) in [
        (&paths.live_path, get(probes::livez)),
        (&paths.ready_path, get(probes::readyz)),
        (&paths.health_path, get(probes::healthz)),
    ] {
        router = router
            .route(path, handler.clone())
            .route(&format!("{path}/"), handler);
    }
    let router = router.with_state(hub.clone());
    let router = match cors {
        Some(cors) => router.layer(cors),
        None => router,
    };
    // After the `[cors]` layer: the Mercure hub answers CORS by its own origins.
    let router = match mercure::routes(&hub) {
        Some(mercure) => router.merge(mercure.layer(Extension(budget)).with_state(hub.clone())),
        None => router,
    };
    router.layer(middleware::from_fn_with_state(hub, framing))
}

/// Refuses, before any route sees it, a request whose framing the hub does not accept: a
/// missing `Host` on HTTP/1.1 or a repeated one is a `400` (RFC 9112 §3.2; HTTP/1.0 may omit
/// it), a `Transfer-Encoding` other than exactly `chunked` a `501` (the hub decodes no other
/// coding, so `gzip, chunked` would be read as plain text).
async fn framing(State(hub): State<Arc<Hub>>, request: Request, next: Next) -> Response {
    let Some((reason, status, detail)) = framing_error(request.version(), request.headers()) else {
        return next.run(request).await;
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<ConnInfo>>()
        .map(|info| tracing::field::display(info.0.peer));
    Metrics::count(&hub.metrics.rejected, "reason", reason);
    tracing::info!(
        reason,
        status = status.as_u16(),
        peer,
        detail,
        "request refused"
    );
    let mut response = error_response(&refusal(status, detail));
    // A body that may follow is never read.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What [`framing`] refuses: its reason label, status and description.
fn framing_error(
    version: Version,
    headers: &HeaderMap,
) -> Option<(&'static str, StatusCode, &'static str)> {
    let hosts = headers.get_all(header::HOST).iter().count();
    if hosts > 1 {
        let detail = "more than one Host header";
        return Some(("bad_request", StatusCode::BAD_REQUEST, detail));
    }
    if hosts == 0 && version == Version::HTTP_11 {
        let detail = "an HTTP/1.1 request needs a Host header";
        return Some(("bad_request", StatusCode::BAD_REQUEST, detail));
    }
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|coding| !coding.is_empty());
    let only_chunked = match codings.next() {
        None => true,
        Some(first) => first.eq_ignore_ascii_case(b"chunked") && codings.next().is_none(),
    };
    if !only_chunked {
        let detail = "only the chunked transfer coding is supported";
        return Some(("transfer_encoding", StatusCode::NOT_IMPLEMENTED, detail));
    }
    None
}

/// CORS for `allowed_origins`: `*` lets any origin in without credentials; listed origins
/// are echoed and may send credentials. `Vary: Origin` is always set.
fn cors(config: &CorsConfig) -> Option<CorsLayer> {
    let allowed = &config.allowed_origins;
    if allowed.is_empty() {
        return None;
    }
    // Validated with the configuration: names and methods all parse.
    let headers: Vec<HeaderName> = config
        .allowed_headers
        .iter()
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    let methods: Vec<Method> = config
        .allowed_methods
        .iter()
        .filter_map(|method| Method::from_bytes(method.as_bytes()).ok())
        .collect();
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
            .allow_methods(methods)
            .allow_headers(headers)
            .max_age(Duration::from_secs(600)),
    )
}

/// The body of every error answer: `{"code": …, "description": …}`. `code` is the stream's
/// JetStream error code when the stream refused the request, otherwise the HTTP status.
/// A refused item of a batch publish answers with the same shape.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    code: u32,
    description: Cow<'a, str>,
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
        description: Cow::Borrowed(&err.description),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's version and headers, and the status [`framing_error`] answers (`None`: let
    /// through).
    type Case = (
        Version,
        &'static [(&'static str, &'static str)],
        Option<u16>,
    );

    #[test]
    fn framing_refuses_missing_or_repeated_hosts_and_other_codings() {
        let cases: &[Case] = &[
            (Version::HTTP_11, &[("host", "x")], None),
            (Version::HTTP_11, &[], Some(400)),
            (Version::HTTP_11, &[("host", "x"), ("host", "y")], Some(400)),
            (Version::HTTP_10, &[], None),
            (Version::HTTP_10, &[("host", "x"), ("host", "x")], Some(400)),
            (
                Version::HTTP_11,
                &[("host", "x"), ("transfer-encoding", "chunked")],
                None,
            ),
            (
                Version::HTTP_11,
                &[("host", "x"), ("transfer-encoding", "Chunked ")],
                None,
            ),
            (
                Version::HTTP_11,
                &[("host", "x"), ("transfer-encoding", "gzip, chunked")],
                Some(501),
            ),
            (
                Version::HTTP_11,
                &[
                    ("host", "x"),
                    ("transfer-encoding", "gzip"),
                    ("transfer-encoding", "chunked"),
                ],
                Some(501),
            ),
            (
                Version::HTTP_11,
                &[("host", "x"), ("transfer-encoding", "chunked, chunked")],
                Some(501),
            ),
        ];
        for (version, headers, expected) in cases {
            let mut map = HeaderMap::new();
            for (name, value) in *headers {
                map.append(
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                );
            }
            let status = framing_error(*version, &map).map(|(_, status, _)| status.as_u16());
            assert_eq!(status, *expected, "{version:?} {headers:?}");
        }
    }
}
