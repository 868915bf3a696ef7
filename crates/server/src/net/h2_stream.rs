//! Event streams over HTTP/2: the session runs in a task of its own on the streams' runtime
//! and hands its batches of frames to the response body one at a time, so the write-stall
//! rule holds per stream.
//!
//! hyper takes a body's next batch only once the stream's flow-control window has room for
//! it; a stream whose client accepts nothing (its window stays shut) leaves its batch untaken.
//! A batch that waits `sse.write_timeout` ends that stream's session as `slow_client` (its
//! slot and cursor are freed at once); the connection's other streams go on. hyper polls the
//! body again only once the window opens, and then resets the stream instead of ending it. A
//! socket that accepts nothing stalls every stream of the connection: each then ends as
//! `slow_client` too.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::conn::ConnState;
use crate::session::Session;

/// The write-stall rule of one stream.
#[derive(Debug, Clone)]
pub struct StallRule {
    /// `sse.write_timeout`.
    pub write_timeout: Duration,
    /// The stream's own state, which its session's guard reads.
    pub stream: ConnState,
    /// The connection's state, marked when its socket stalls.
    pub socket: ConnState,
}

/// `response` (the handler's head) with `session` as its body: the session is started on
/// `streams`.
pub fn respond(
    response: Response,
    session: Session,
    streams: &Handle,
    rule: StallRule,
) -> Response {
    // One batch in hand: the body holds at most one besides what hyper is sending.
    let (batches, body) = mpsc::channel(1);
    let body = StreamBody {
        batches: body,
        stream: rule.stream.clone(),
    };
    streams.spawn(pump(session, batches, rule));
    let (mut parts, _) = response.into_parts();
    // The handler's head was made for an empty body (its length 0); this one is endless.
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::new(body))
}

/// Runs `session` and hands its batches to the body, until the session ends, the body is
/// dropped (the client reset the stream, or the connection ended) or a batch waits for the
/// write timeout.
async fn pump(session: Session, batches: mpsc::Sender<Bytes>, rule: StallRule) {
    let frames = session.into_stream();
    futures::pin_mut!(frames);
    loop {
        let batch = tokio::select! {
            biased;
            batch = frames.next() => batch,
            () = batches.closed() => break,
        };
        let Some(Ok(batch)) = batch else {
            // The session has ended (and logged why); dropping the sender ends the body.
            return;
        };
        match tokio::time::timeout(rule.write_timeout, batches.send(batch)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                rule.stream.mark_stalled();
                return;
            }
        }
    }
    // The body is gone: a stalled socket is the reason, if there is one.
    if rule.socket.stalled() {
        rule.stream.mark_stalled();
    }
}

/// The response body of an HTTP/2 event stream.
struct StreamBody {
    batches: mpsc::Receiver<Bytes>,
    stream: ConnState,
}

impl hyper::body::Body for StreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.batches.poll_recv(cx) {
            Poll::Ready(Some(batch)) => Poll::Ready(Some(Ok(Frame::data(batch)))),
            // A stalled stream is reset rather than ended: its client did not get it all.
            Poll::Ready(None) if self.stream.stalled() => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the stream accepted nothing for the write timeout",
            )))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one idle HTTP/2 event stream keeps besides hyper's stream state: its task (the
    /// session inside) and its body must stay well below the 8 KiB-per-stream goal.
    #[test]
    fn an_open_http2_stream_keeps_little_state() {
        fn future_size<A, B, C, F: std::future::Future>(_: fn(A, B, C) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let task = future_size(pump);
        let body = std::mem::size_of::<StreamBody>();
        assert!(task + body <= 4096, "task {task} bytes, body {body} bytes");
    }
}
