//! What every answer of the Mercure hub carries: the `Link: <…/.well-known/mercure>;
//! rel="mercure"` discovery header, and CORS — `mercure.cors_origins` for subscribers (`GET`,
//! with credentials, for the cookie) and `mercure.publish_origins` for publishers (`POST`).
//!
//! A listed origin is echoed with `Access-Control-Allow-Credentials: true`; `*` lets any
//! origin in without credentials (a browser sends no cookie then). `Vary: Origin` is always set.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::hub::Hub;

/// The request headers a browser may send to the hub.
const ALLOWED_HEADERS: &str = "authorization, cache-control, content-type, last-event-id";

/// Adds the discovery link and the CORS headers of the request's direction to the answer.
pub async fn headers(State(hub): State<Arc<Hub>>, request: Request, next: Next) -> Response {
    let origins = origins_for(&hub, request.method(), request.headers());
    let origin = request.headers().get(header::ORIGIN).cloned();
    let mut response = next.run(request).await;
    let out = response.headers_mut();
    // An answer with a `rel="mercure"` link of its own (the 1.0 draft's subscriptions API,
    // which adds the cursor to it) keeps it alone.
    if !out.contains_key(header::LINK) {
        out.append(header::LINK, link());
    }
    allow(out, origin.as_ref(), origins);
    response
}

/// `OPTIONS /.well-known/mercure`: the CORS preflight of a subscriber or a publisher.
pub async fn preflight(State(hub): State<Arc<Hub>>, request: Request) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let origins = origins_for(&hub, request.method(), request.headers());
    let out = response.headers_mut();
    if allow(out, request.headers().get(header::ORIGIN), origins) {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        out.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        out.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
    response
}

/// The origins allowed for the request's direction: publishing for a `POST` (or its
/// preflight), subscribing otherwise.
fn origins_for<'h>(hub: &'h Hub, method: &Method, headers: &HeaderMap) -> &'h [String] {
    let config = &hub.config.mercure;
    let asked = headers
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .map(HeaderValue::as_bytes);
    let publishing =
        method == Method::POST || (method == Method::OPTIONS && asked == Some(b"POST"));
    if publishing {
        &config.publish_origins
    } else {
        &config.cors_origins
    }
}

/// Sets the CORS answer for `origin` among `origins`; true when it is allowed.
fn allow(out: &mut HeaderMap, origin: Option<&HeaderValue>, origins: &[String]) -> bool {
    out.append(header::VARY, HeaderValue::from_static("Origin"));
    let Some(origin) = origin else {
        return false;
    };
    // A listed origin is echoed with credentials (for the cookie); `*` allows any origin
    // without them.
    let listed = origins.iter().any(|o| o.as_bytes() == origin.as_bytes());
    let allowed = if listed {
        out.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        origin.clone()
    } else if origins.iter().any(|o| o == "*") {
        HeaderValue::from_static("*")
    } else {
        return false;
    };
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
    out.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("last-event-id, link"),
    );
    true
}

/// `Link: </.well-known/mercure>; rel="mercure"` (relative: it resolves against the URL the
/// client asked, whatever name the hub is reached by).
fn link() -> HeaderValue {
    HeaderValue::from_static("</.well-known/mercure>; rel=\"mercure\"")
}
