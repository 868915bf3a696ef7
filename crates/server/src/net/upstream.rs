//! Connections served by hyper: every HTTP/1.1 request that is not a fresh event stream
//! (keep-alive, bodies, pipelining; the bytes the connection layer already took are replayed
//! first), and every HTTP/2 connection (by ALPN over TLS, or cleartext with prior knowledge).

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use futures::FutureExt;
use futures::future::Either;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tower_service::Service;

use super::connection::Connection;
use super::h2_stream;
use super::throttle::Throttle;
use crate::http::take_session;
use sluice_core::conn::{ConnInfo, ConnState};
use sluice_core::metrics::Metrics;

/// hyper's smallest allowed read buffer limit.
const HYPER_MIN_BUF: usize = 8192;

/// Completes once the hub's shutdown has begun.
async fn shutting_down(connection: &Connection) {
    let mut shutdown = connection.hub.shutdown_signal();
    // The borrow `wait_for` returns is dropped here: it must not live across an await.
    let _ = shutdown.wait_for(|down| *down).await;
}

/// Which HTTP hyper speaks on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (and 1.0).
    Http1,
    /// HTTP/2.
    Http2,
}

/// Serves `io` with hyper until the client is done or, after shutdown begins, the requests
/// in flight are answered (HTTP/2: after a `GOAWAY`).
///
/// hyper's connection is built before the returned future, which keeps it (and `io` inside
/// it) once: an `async fn` would keep `io` as its argument as well, for the connection's
/// whole life.
pub fn serve<I>(
    connection: &Connection,
    io: I,
    protocol: Protocol,
    info: ConnInfo,
) -> impl Future<Output = ()> + Send + '_
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let served = match protocol {
        Protocol::Http1 => Either::Left(serve_http1(connection, io, info)),
        Protocol::Http2 => Either::Right(serve_http2(connection, io, info)),
    };
    // A combinator, not an `async` block: the block would keep `served` twice (as captured,
    // and as the future it awaits).
    served.map(move |result| {
        let Err(err) = result else {
            return;
        };
        tracing::debug!(error = %err, peer = %connection.peer, "connection ended with an error");
        if protocol == Protocol::Http2 {
            let reason = http2_error_label(&err);
            Metrics::count(&connection.hub.metrics.http2_errors, "reason", reason);
            if reason == "enhance_your_calm" {
                // A client sets how often this happens: one line a minute says how many.
                if let Some(count) = CALM_REPORTS.note(Instant::now()) {
                    tracing::warn!(
                        connections = count,
                        last_peer = %connection.peer,
                        "HTTP/2 connections closed for resetting too many streams (counted in sluice_http2_connection_errors_total)"
                    );
                }
            }
        }
    })
}

/// The one line a minute about connections closed for too many resets.
static CALM_REPORTS: Throttle = Throttle::new(Duration::from_secs(60));

/// The label of the HTTP/2 error that ended a connection: its code when the `h2` library
/// gave one, `io` when the socket failed, `other` otherwise.
fn http2_error_label(err: &hyper::Error) -> &'static str {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(h2) = cause.downcast_ref::<h2::Error>() {
            return match h2.reason() {
                Some(h2::Reason::ENHANCE_YOUR_CALM) => "enhance_your_calm",
                Some(h2::Reason::PROTOCOL_ERROR) => "protocol_error",
                Some(h2::Reason::FLOW_CONTROL_ERROR) => "flow_control_error",
                Some(h2::Reason::FRAME_SIZE_ERROR) => "frame_size_error",
                Some(h2::Reason::COMPRESSION_ERROR) => "compression_error",
                Some(_) => "other",
                None if h2.is_io() => "io",
                None => "other",
            };
        }
        source = cause.source();
    }
    "other"
}

/// hyper's HTTP/1.1 connection on `io`, built at once (see [`serve`]).
fn serve_http1<I>(
    connection: &Connection,
    io: I,
    info: ConnInfo,
) -> impl Future<Output = hyper::Result<()>> + Send + '_
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = &connection.hub.config;
    let router = connection.router.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(info.clone()));
        let mut router = router.clone();
        async move {
            let Ok(mut response) = router.call(request).await;
            if let Some(session) = take_session(&mut response) {
                *response.body_mut() = Body::from_stream(session.into_stream());
            }
            Ok::<_, Infallible>(response)
        }
    });
    // Boxed: the future below would otherwise keep it twice (as captured, and pinned).
    let mut served = Box::pin(
        http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(config.limits.header_read_timeout)
            .max_buf_size(config.limits.max_header_bytes.max(HYPER_MIN_BUF))
            .serve_connection(TokioIo::new(io), service),
    );
    async move {
        tokio::select! {
            result = served.as_mut() => result,
            () = shutting_down(connection) => {
                served.as_mut().graceful_shutdown();
                served.await
            }
        }
    }
}

/// hyper's HTTP/2 connection on `io`, built at once (see [`serve`]).
fn serve_http2<I>(
    connection: &Connection,
    io: I,
    info: ConnInfo,
) -> impl Future<Output = hyper::Result<()>> + Send + '_
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = &connection.hub.config;
    let router = connection.router.clone();
    let write_timeout = config.sse.write_timeout;
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(Body::new);
        // Each stream has its own stall state: one that accepts nothing is `slow_client`
        // alone, and the connection's own (its socket) still counts for every stream.
        let stream = ConnState::default();
        let stream_info = ConnInfo {
            peer: info.peer,
            state: stream.clone(),
        };
        request.extensions_mut().insert(ConnectInfo(stream_info));
        let router = router.clone();
        let socket = info.state.clone();
        // Boxed: hyper keeps a stream's service future in the stream's task for the stream's
        // life, sized for its largest state; boxed, the request's routing is freed once it
        // has answered (about 600 bytes per open event stream).
        Box::pin(async move {
            let Ok(mut response) = router.clone().call(request).await;
            Ok::<_, Infallible>(match take_session(&mut response) {
                None => response,
                Some(session) => {
                    let rule = h2_stream::StallRule {
                        write_timeout,
                        stream,
                        socket,
                    };
                    h2_stream::respond(response, session, rule)
                }
            })
        })
    });
    let max_header = u32::try_from(config.limits.max_header_bytes).unwrap_or(u32::MAX);
    // Boxed: the future below would otherwise keep it twice (as captured, and pinned).
    let mut served = Box::pin(
        http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.http2.max_concurrent_streams)
            .max_header_list_size(max_header)
            // No dynamic table for request headers: an entry is a slice of the frame it came in,
            // which would pin that read buffer (about 4 KiB resident) for the connection's life.
            .header_table_size(0)
            .serve_connection(TokioIo::new(io), service),
    );
    let peer = info.peer;
    async move {
        tokio::select! {
            result = served.as_mut() => result,
            () = shutting_down(connection) => {
                // GOAWAY: no new streams; the open ones end as the hub ends their sessions.
                // A stream whose window the client keeps shut would hold the drain: it gets
                // as long as a write and a body may take, then the connection is closed.
                served.as_mut().graceful_shutdown();
                let grace = write_timeout + config.limits.body_read_timeout;
                match tokio::time::timeout(grace, served).await {
                    Ok(result) => result,
                    Err(_) => {
                        tracing::info!(%peer, ?grace, "HTTP/2 connection closed: streams still open after the drain grace");
                        Ok(())
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::TimedIo;
    use crate::net::future_size;
    use tokio_rustls::server::TlsStream;

    /// A connection hyper serves keeps hyper's connection once, boxed: what the future
    /// around it keeps is small (about 320 bytes; 6.8 KiB while hyper's
    /// connection was kept both as captured and as pinned, and rustls's state once more as
    /// an argument).
    #[test]
    fn a_connection_served_by_hyper_keeps_it_once() {
        let served = future_size::of4(serve::<Box<TlsStream<TimedIo>>>);
        assert!(
            served <= 512,
            "a connection served by hyper keeps {served} bytes"
        );
    }
}
