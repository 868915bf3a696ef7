//! A strict Server-Sent Events client for tests: every frame is parsed by `sluice-sse` and every
//! wait is bounded by a deadline.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, StatusCode};
use sluice_sse::{Frame, Parser};

use crate::http::{REQUEST_TIMEOUT, has_content_type, open, request};

/// How long [`SseClient::next_frame`] waits by default.
const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// An open `GET` of an event stream.
///
/// The connection is made whatever the status, so tests can check refusals (e.g. 429) through
/// [`SseClient::status`]; frames are only read from a `200 text/event-stream` response.
pub struct SseClient {
    url: String,
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
    parser: Parser,
    ready: VecDeque<Frame>,
    timeout: Duration,
    ended: bool,
}

impl SseClient {
    /// Opens `url` with `Accept: text/event-stream`, as a browser's `EventSource` does.
    ///
    /// # Errors
    /// When the connection fails or no response headers arrive within 30 s.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_with_headers(url, &[]).await
    }

    /// Opens `url` with extra request headers, e.g. `("last-event-id", "…")` or `("origin", "…")`.
    ///
    /// # Errors
    /// When the connection fails or no response headers arrive within 30 s.
    pub async fn connect_with_headers(url: &str, headers: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut all = vec![
            ("accept", "text/event-stream"),
            ("cache-control", "no-cache"),
        ];
        all.extend_from_slice(headers);
        let request = request(Method::GET, url, &all)?.body(Full::<Bytes>::default())?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, open(request))
            .await
            .map_err(|_| anyhow!("GET {url}: no response headers within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("GET {url}"))?;
        let (parts, body) = response.into_parts();
        Ok(Self {
            url: url.to_owned(),
            status: parts.status,
            headers: parts.headers,
            body,
            parser: Parser::new(),
            ready: VecDeque::new(),
            timeout: DEFAULT_FRAME_TIMEOUT,
            ended: false,
        })
    }

    /// The response status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The response headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The value of response header `name` as text, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// Sets how long [`SseClient::next_frame`] and friends wait.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The id a browser would send as `Last-Event-ID` when reconnecting now.
    pub fn last_event_id(&self) -> &str {
        self.parser.last_event_id()
    }

    /// The next frame of any kind (comments and `retry`-only frames included).
    ///
    /// # Errors
    /// When the response is not a `200 text/event-stream`, the stream ends, breaks the SSE
    /// rules or limits, or no frame arrives within the timeout.
    pub async fn next_frame(&mut self) -> anyhow::Result<Frame> {
        match self.next_frame_or_end().await? {
            Some(frame) => Ok(frame),
            None => bail!("GET {}: the event stream ended", self.url),
        }
    }

    /// The next frame a browser would dispatch as an event (one with `data`), skipping
    /// heartbeat comments and `retry`-only frames.
    ///
    /// # Errors
    /// As [`SseClient::next_frame`].
    pub async fn next_event(&mut self) -> anyhow::Result<Frame> {
        loop {
            let frame = self.next_frame().await?;
            if frame.dispatches_event() {
                return Ok(frame);
            }
        }
    }

    /// Reads frames until the server ends the stream, and returns them.
    ///
    /// # Errors
    /// As [`SseClient::next_frame`], except that the end of the stream is the expected outcome.
    pub async fn frames_until_end(&mut self) -> anyhow::Result<Vec<Frame>> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next_frame_or_end().await? {
            frames.push(frame);
        }
        Ok(frames)
    }

    /// The next frame, or `None` when the server ended the stream cleanly (between frames).
    ///
    /// # Errors
    /// When the response is not a `200 text/event-stream`, the stream ends inside a frame,
    /// breaks the SSE rules or limits, or nothing arrives within the timeout.
    pub async fn next_frame_or_end(&mut self) -> anyhow::Result<Option<Frame>> {
        if self.status != StatusCode::OK || !has_content_type(&self.headers, "text/event-stream") {
            bail!(
                "GET {}: not an event stream: status {}, content-type {:?}",
                self.url,
                self.status,
                self.header("content-type")
            );
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            if self.ended {
                return Ok(None);
            }
            let next = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .map_err(|_| anyhow!("GET {}: no SSE frame within {:?}", self.url, self.timeout))?;
            match next {
                None => {
                    self.ended = true;
                    if self.parser.has_partial_frame() {
                        bail!("GET {}: the stream ended inside a frame", self.url);
                    }
                }
                Some(Err(err)) => bail!("GET {}: reading the stream: {err}", self.url),
                Some(Ok(body_frame)) => {
                    if let Ok(data) = body_frame.into_data() {
                        let frames = self
                            .parser
                            .feed(&data)
                            .with_context(|| format!("GET {}", self.url))?;
                        self.ready.extend(frames);
                    }
                }
            }
        }
    }
}
