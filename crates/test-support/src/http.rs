//! A small HTTP/1.1 client for tests: JSON GET and POST against a loopback server.

use std::time::Duration;

use anyhow::{Context, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How long a request may take, headers and body, before the helper gives up.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body the helper reads.
const MAX_BODY: usize = 16 << 20;

/// A complete response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl HttpResponse {
    /// The body parsed as JSON.
    ///
    /// # Errors
    /// When the body is not JSON; the error shows the status and the body.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("response {} is not JSON: {:?}", self.status, self.text()))
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of header `name` as text, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// `GET url`.
///
/// # Errors
/// When the request fails or times out.
pub async fn get(url: &str) -> anyhow::Result<HttpResponse> {
    send(request(Method::GET, url, &[])?.body(Full::default())?).await
}

/// `POST url` with `body` as JSON.
///
/// # Errors
/// When the request fails or times out.
pub async fn post_json(url: &str, body: &serde_json::Value) -> anyhow::Result<HttpResponse> {
    let request = request(Method::POST, url, &[("content-type", "application/json")])?
        .body(Full::new(Bytes::from(body.to_string())))?;
    send(request).await
}

/// Sends any request and reads the whole response (at most 16 MiB of body).
///
/// # Errors
/// When the request fails or times out, or the body is too large.
pub async fn send(request: Request<Full<Bytes>>) -> anyhow::Result<HttpResponse> {
    let target = format!("{} {}", request.method(), request.uri());
    let exchange = async {
        let response = open(request).await?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|err| anyhow!("reading the body: {err}"))?
            .to_bytes();
        anyhow::Ok(HttpResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow!("{target}: no complete response within {REQUEST_TIMEOUT:?}"))?
        .with_context(|| target)
}

/// A request builder for `method url` with extra `headers`.
///
/// # Errors
/// When a header name or value is invalid.
pub fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<hyper::http::request::Builder> {
    let mut builder = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(
            HeaderName::from_bytes(name.as_bytes())
                .with_context(|| format!("header name {name:?}"))?,
            HeaderValue::from_str(value)
                .with_context(|| format!("header {name} value {value:?}"))?,
        );
    }
    Ok(builder)
}

/// Sends `request` and returns the response as soon as its headers arrive.
pub(crate) async fn open(request: Request<Full<Bytes>>) -> anyhow::Result<Response<Incoming>> {
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    Ok(client.request(request).await?)
}

/// Whether a response's `Content-Type` starts with `expected` (parameters ignored).
pub(crate) fn has_content_type(headers: &HeaderMap, expected: &str) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with(expected))
}
