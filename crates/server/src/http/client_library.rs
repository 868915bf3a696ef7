//! `GET /sluice.js`: the browser client library (`clients/js/sluice.js`), served by the hub so
//! that a page imports it with no build step:
//!
//! ```html
//! <script type="module">
//!   import { subscribe } from "/sluice.js";
//!   subscribe({ topics: ["orders.*"], onMessage: (m) => console.log(m.topic, m.payload) });
//! </script>
//! ```
//!
//! Any origin may load it (it is public code, and a module script is fetched with CORS). It is
//! revalidated on every use (`no-cache` with an `ETag` of its content), so a page gets the
//! library of the hub it talks to, upgrades included. docs/CLIENT.md describes its API.

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;

/// The library, as kept in the repository.
const LIBRARY: &str = include_str!("../../../../clients/js/sluice.js");

/// The strong `ETag` of [`LIBRARY`]: a digest of its bytes.
static ETAG: LazyLock<HeaderValue> = LazyLock::new(|| {
    let digest = ring::digest::digest(&ring::digest::SHA256, LIBRARY.as_bytes());
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest.as_ref()[..16]);
    HeaderValue::from_str(&format!("\"{tag}\"")).expect("a base64 tag is a header value")
});

/// The library, or `304 Not Modified` for a request that holds it already.
pub async fn library(request: HeaderMap) -> Response {
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|tag| tag.trim() == "*" || tag.trim().as_bytes() == ETAG.as_bytes())
        });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        LIBRARY.into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
        (header::CACHE_CONTROL, "no-cache"),
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(header::ETAG, ETAG.clone());
    response
}
