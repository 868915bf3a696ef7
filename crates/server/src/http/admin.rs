//! `/admin/…`: stream administration over HTTP while the hub runs, off unless `[auth.admin]`
//! is configured (then every request needs a token whose `sluice` claim has `"admin": true`)
//! or `admin.loopback` lets in an operator on the hub's own machine without one (see
//! [`local_operator`]).
//!
//! | route                                         | answer                                  |
//! |-----------------------------------------------|-----------------------------------------|
//! | `GET /admin/streams`                          | `{"streams": [name, …]}`                |
//! | `GET /admin/streams/{name}`                   | the stream described (`sluice stream info`) |
//! | `POST /admin/streams/{name}/purge`            | `{"purged": n}`; body `{"subject"?, "keep"?, "up_to_seq"?}`, empty for all |
//! | `DELETE /admin/streams/{name}/messages/{seq}` | `{"deleted": seq}`                      |
//!
//! With the API off every admin route answers `404`, as if it did not exist. Refusals are JSON
//! errors (`{"code", "description"}`, naming the bad value), logged with their reason and
//! counted in `sluice_admin_refusals_total`; every request in `sluice_admin_requests_total`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json, Router};
use serde_json::json;

use super::body::{self, BodyBudget, BodyLimits};
use super::{bad_request, error_response, refusal};
use crate::auth::{AuthError, Direction, Grant, request_origin};
use crate::hub::Hub;
use sluice_backend::{ApiError, BackendError, PurgeOptions};
use sluice_core::conn::ConnInfo;
use sluice_core::metrics::Metrics;

/// Largest purge body: three small fields.
const MAX_PURGE_BODY: usize = 4096;

/// The admin routes, to be merged into the hub's router.
pub fn routes(budget: Arc<BodyBudget>) -> Router<Arc<Hub>> {
    Router::new()
        .route("/admin/streams", get(list))
        .route("/admin/streams/{name}", get(info))
        .route(
            "/admin/streams/{name}/purge",
            post(purge).layer(Extension(budget)),
        )
        .route("/admin/streams/{name}/messages/{seq}", delete(remove))
}

/// Why an admin request was refused: its metric and log label, the answer, and for an
/// authorization refusal its `WWW-Authenticate` challenge.
struct Refusal {
    reason: &'static str,
    error: ApiError,
    challenge: Option<HeaderValue>,
}

impl Refusal {
    /// A malformed request of the client's (a bad name, sequence or body).
    fn invalid(description: String) -> Self {
        Self {
            reason: "invalid_request",
            error: bad_request(description),
            challenge: None,
        }
    }
}

impl From<AuthError> for Refusal {
    fn from(err: AuthError) -> Self {
        Self {
            reason: err.reason(),
            error: refusal(err.status(), err.to_string()),
            challenge: Some(err.www_authenticate()),
        }
    }
}

impl From<BackendError> for Refusal {
    fn from(err: BackendError) -> Self {
        let error = ApiError::from(err);
        let reason = match error.status {
            503 => "unavailable",
            400..=499 => "stream_refused",
            _ => "failed",
        };
        Self {
            reason,
            error,
            challenge: None,
        }
    }
}

/// Runs one admin request: the answer, or its refusal counted, logged and answered.
async fn answer(
    hub: &Hub,
    action: &'static str,
    handled: impl Future<Output = Result<Response, Refusal>>,
) -> Response {
    let refused = match handled.await {
        Ok(response) => {
            Metrics::count(&hub.metrics.admin_requests, "result", "ok");
            return response;
        }
        Err(refused) => refused,
    };
    let status = refused.error.status;
    let result = if status >= 500 { "failed" } else { "refused" };
    Metrics::count(&hub.metrics.admin_requests, "result", result);
    Metrics::count(&hub.metrics.admin_refusals, "reason", refused.reason);
    tracing::info!(
        action,
        result,
        reason = refused.reason,
        status,
        detail = %refused.error.description,
        "admin request refused"
    );
    let mut response = error_response(&refused.error);
    if let Some(challenge) = refused.challenge {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// Lets in a request with an admin token, or a local operator's with `admin.loopback`; with
/// neither configured the API is off (`404`).
fn admit(
    hub: &Hub,
    headers: &HeaderMap,
    query: Option<&str>,
    peer: Option<SocketAddr>,
) -> Result<Grant, Refusal> {
    if hub.config.admin.loopback && peer.is_some_and(|peer| local_operator(headers, peer)) {
        return Ok(Grant::unrestricted(Direction::Admin));
    }
    if !hub.auth.is_enabled(Direction::Admin) {
        return Err(Refusal {
            reason: "admin_off",
            error: refusal(
                StatusCode::NOT_FOUND,
                "the admin API is off: configure [auth.admin], or admin.loopback for this machine alone",
            ),
            challenge: None,
        });
    }
    Ok(hub.auth.authenticate(Direction::Admin, headers, query)?)
}

/// Whether a request comes from an operator on the hub's own machine: from a loopback
/// address, to a loopback host name (a page whose name was rebound to 127.0.0.1 sends its own),
/// not forwarded by a proxy (which would make every remote client look local), and not sent
/// by a page of another origin (a browser names it in `Origin` on every `POST` and `DELETE`).
fn local_operator(headers: &HeaderMap, peer: SocketAddr) -> bool {
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|name| headers.contains_key(*name));
    let loopback_name = |authority: &str| {
        let host = match authority.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        };
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .is_some_and(loopback_name);
    let origin = match request_origin(headers) {
        None => true,
        Some(origin) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| loopback_name(authority)),
    };
    peer.ip().is_loopback() && !forwarded && host && origin
}

/// The client's address, as the connection layer recorded it.
fn peer(conn: Option<Extension<ConnectInfo<ConnInfo>>>) -> Option<SocketAddr> {
    conn.map(|Extension(ConnectInfo(info))| info.peer)
}

/// The stream name of a route, valid as a stream name of either backend.
fn stream_name(path: Result<Path<String>, PathRejection>) -> Result<String, Refusal> {
    let Path(name) = path.map_err(|err| Refusal::invalid(format!("invalid path: {err}")))?;
    sluice_store::validate_stream_name(&name).map_err(|err| Refusal::invalid(err.to_string()))?;
    Ok(name)
}

/// `GET /admin/streams`.
async fn list(
    State(hub): State<Arc<Hub>>,
    conn: Option<Extension<ConnectInfo<ConnInfo>>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    answer(&hub, "list", async {
        admit(&hub, &headers, uri.query(), peer(conn))?;
        let streams = hub.admin.stream_names().await?;
        Ok(Json(json!({ "streams": streams })).into_response())
    })
    .await
}

/// `GET /admin/streams/{name}`.
async fn info(
    State(hub): State<Arc<Hub>>,
    path: Result<Path<String>, PathRejection>,
    conn: Option<Extension<ConnectInfo<ConnInfo>>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    answer(&hub, "info", async {
        admit(&hub, &headers, uri.query(), peer(conn))?;
        let name = stream_name(path)?;
        let report = hub.admin.stream_report(&name).await?;
        Ok(Json(report).into_response())
    })
    .await
}

/// `POST /admin/streams/{name}/purge`.
async fn purge(
    State(hub): State<Arc<Hub>>,
    Extension(budget): Extension<Arc<BodyBudget>>,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let conn = parts.extensions.get::<ConnectInfo<ConnInfo>>().cloned();
    answer(&hub, "purge", async {
        let grant = admit(
            &hub,
            &parts.headers,
            parts.uri.query(),
            peer(conn.map(Extension)),
        )?;
        let name = stream_name(path)?;
        let limits = BodyLimits {
            max: MAX_PURGE_BODY,
            timeout: hub.config.limits.body_read_timeout,
        };
        let body = body::read(&parts.headers, body, limits, &budget)
            .await
            .map_err(|err| Refusal {
                reason: err.reason(),
                error: refusal(err.status(), err.to_string()),
                challenge: None,
            })?;
        let options: PurgeOptions = if body.bytes.iter().all(u8::is_ascii_whitespace) {
            PurgeOptions::default()
        } else {
            serde_json::from_slice(&body.bytes)
                .map_err(|err| Refusal::invalid(format!("invalid purge body: {err}")))?
        };
        if let Some(subject) = &options.subject {
            sluice_protocol::subject::validate_filter(subject).map_err(|err| {
                Refusal::invalid(format!("invalid purge subject {subject:?}: {err}"))
            })?;
        }
        let purged = hub.admin.purge_stream(&name, options.clone()).await?;
        tracing::info!(
            stream = %name,
            by = grant.subject(),
            subject = options.subject.as_deref(),
            keep = options.keep,
            up_to_seq = options.up_to_seq,
            purged,
            "stream purged"
        );
        Ok(Json(json!({ "purged": purged })).into_response())
    })
    .await
}

/// `DELETE /admin/streams/{name}/messages/{seq}`.
async fn remove(
    State(hub): State<Arc<Hub>>,
    path: Result<Path<(String, String)>, PathRejection>,
    conn: Option<Extension<ConnectInfo<ConnInfo>>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    answer(&hub, "delete", async {
        let grant = admit(&hub, &headers, uri.query(), peer(conn))?;
        let (name, seq) = match path {
            Ok(Path((name, seq))) => (stream_name(Ok(Path(name)))?, seq),
            Err(err) => return Err(Refusal::invalid(format!("invalid path: {err}"))),
        };
        let seq: u64 = seq.parse().ok().filter(|seq| *seq > 0).ok_or_else(|| {
            Refusal::invalid(format!(
                "invalid sequence {seq:?}: expected a whole number from 1"
            ))
        })?;
        hub.admin.delete_message(&name, seq).await?;
        tracing::info!(stream = %name, by = grant.subject(), seq, "message deleted");
        Ok(Json(json!({ "deleted": seq })).into_response())
    })
    .await
}
