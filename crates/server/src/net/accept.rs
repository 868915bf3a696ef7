//! The accept loops (one per listener) and the life of one connection, up to the point where it becomes an event
//! stream written by [`super::stream`] or is handed to hyper ([`super::upstream`]).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, Method, StatusCode, Version, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use super::addresses::AddressCounts;
use super::connection::Connection;
use super::head::{self, Head, HeadError};
use super::repoll::Repoll;
use super::rewind::Rewind;
use super::runtime;
use super::stream::{MovedSocket, Pending, Socket, Transport, stream_head, write_stream};
use super::upstream::{self, Protocol};
use super::{Listener, TimedIo, handshake};
use crate::http::mercure::HUB_PATH as MERCURE_HUB;
use crate::http::take_session;
use crate::http::{accepts_event_stream, error_response, refusal, transient};
use crate::hub::Hub;
use sluice_core::conn::{ConnInfo, ConnState};
use sluice_core::metrics::Metrics;

/// Accepts connections on every one of `listeners` until `signal` completes, then drains:
/// stops accepting, ends every event stream, and waits until every connection has finished.
pub(super) async fn accept_until(
    hub: Arc<Hub>,
    listeners: Vec<Listener>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let streams = runtime::start_streams()?;
    let shared = Shared {
        router: crate::http::router(hub.clone()),
        over_address_limit: over_address_limit(hub.clone()),
        addresses: AddressCounts::new(hub.config.limits.max_connections_per_address),
        streams: streams.handle().clone(),
        hub: hub.clone(),
    };
    // Every connection task holds a sender; the receiver sees the end once all are gone.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let (stop, stopped) = watch::channel(false);
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            let tls = listener
                .certificates
                .map(|certs| TlsAcceptor::from(certs.server_config(hub.config.http2.enabled)));
            let accepting = accept_loop(shared.clone(), listener.tcp, tls, open.clone());
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = accepting => {}
                    _ = stopped.wait_for(|stop| *stop) => {}
                }
            })
        })
        .collect();
    signal.await;
    let _ = stop.send(true);
    for accepting in loops {
        // Ends with its listener closed.
        let _ = accepting.await;
    }
    tracing::info!("shutting down: no new connections, ending event streams");
    hub.begin_shutdown();
    drop(open);
    let _ = all_closed.recv().await;
    drop(streams);
    Ok(())
}

/// What every connection of the hub shares.
#[derive(Clone)]
struct Shared {
    hub: Arc<Hub>,
    router: Router,
    /// Answers every request of a connection over `limits.max_connections_per_address`.
    over_address_limit: Router,
    addresses: Arc<AddressCounts>,
    streams: Handle,
}

/// Accepts on `listener` (speaking TLS when `tls` is set) for as long as it is polled.
async fn accept_loop(
    shared: Shared,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    open: mpsc::Sender<()>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Frames are small and latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        let place = shared.addresses.acquire(peer.ip());
        let router = match place {
            Ok(_) => shared.router.clone(),
            Err(()) => shared.over_address_limit.clone(),
        };
        let connection = Connection {
            hub: shared.hub.clone(),
            router,
            streams: shared.streams.clone(),
            peer,
            place,
            _open: open.clone(),
        };
        match &tls {
            Some(tls) => tokio::spawn(Repoll::new(handshake::serve(
                connection,
                stream,
                tls.clone(),
            ))),
            None => tokio::spawn(Repoll::new(
                connection.run(Transport::Plain(stream), ConnState::default()),
            )),
        };
    }
}

/// The answer to a request on a connection over `limits.max_connections_per_address`.
fn refuse_over_address_limit(hub: &Hub, headers: &HeaderMap) -> Response {
    transient(
        hub,
        accepts_event_stream(headers),
        "max_connections_per_address",
        StatusCode::TOO_MANY_REQUESTS,
        "too many connections from this address",
    )
}

/// A router that refuses every request with [`refuse_over_address_limit`] (for connections
/// served by hyper, where more than one request may come).
fn over_address_limit(hub: Arc<Hub>) -> Router {
    Router::new().fallback(move |request: Request| {
        let hub = hub.clone();
        async move { refuse_over_address_limit(&hub, request.headers()) }
    })
}

impl Connection {
    /// Serves an HTTP/1.1 connection (plain, or TLS after its handshake) from its first
    /// request head: an event stream is written by the connection layer, anything else is
    /// handed to hyper. `state` is the connection's (over TLS, its socket's already).
    pub(super) async fn run(self, mut transport: Transport, state: ConnState) {
        let hub = self.hub.clone();
        let limits = &hub.config.limits;
        let mut shutdown = hub.shutdown_signal();
        let mut buf = head::buffer();
        let read = tokio::select! {
            read = tokio::time::timeout(
                limits.header_read_timeout,
                head::read(&mut transport, &mut buf, limits.max_header_bytes),
            ) => read,
            _ = shutdown.wait_for(|down| *down) => return,
        };
        let info = ConnInfo {
            peer: self.peer,
            state,
        };
        let plain = matches!(transport, Transport::Plain(_));
        let mut socket = Socket {
            transport,
            write_timeout: hub.config.sse.write_timeout,
            state: info.state.clone(),
        };
        let head = match read {
            Ok(Ok(head)) => head,
            Ok(Err(HeadError::Closed(_))) => return,
            Ok(Err(err @ HeadError::TooLarge(_))) => {
                let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
                return self
                    .refuse(&mut socket, "header_too_large", status, &err.to_string())
                    .await;
            }
            Ok(Err(HeadError::Malformed(_)))
                if plain && hub.config.http2.h2c && head::is_h2_preface(&buf) =>
            {
                return self
                    .hand_to_hyper(socket.transport, buf.freeze(), info, Protocol::Http2)
                    .await;
            }
            Ok(Err(err @ HeadError::Malformed(_))) => {
                let status = StatusCode::BAD_REQUEST;
                return self
                    .refuse(&mut socket, "bad_request", status, &err.to_string())
                    .await;
            }
            Err(_) => {
                let detail = format!(
                    "no complete request head within {:?} ({} bytes received)",
                    limits.header_read_timeout,
                    buf.len()
                );
                Metrics::count(&hub.metrics.rejected, "reason", "header_timeout");
                tracing::info!(reason = "header_timeout", peer = %self.peer, %detail, "connection closed");
                if !buf.is_empty() {
                    let answer = refusal(StatusCode::REQUEST_TIMEOUT, detail);
                    socket.write_answer(error_response(&answer)).await;
                }
                return;
            }
        };
        if self.place.is_err() {
            let answer = refuse_over_address_limit(&hub, head.request.headers());
            return socket.write_answer(answer).await;
        }
        if is_fresh_stream(&head, buf.len()) {
            self.stream(socket, head, info).await;
        } else {
            self.hand_to_hyper(socket.transport, buf.freeze(), info, Protocol::Http1)
                .await;
        }
    }

    /// Serves the rest of the connection with hyper, `already_read` replayed first.
    async fn hand_to_hyper(
        &self,
        transport: Transport,
        already_read: Bytes,
        info: ConnInfo,
        protocol: Protocol,
    ) {
        match transport {
            Transport::Plain(stream) => {
                let timeout = self.hub.config.sse.write_timeout;
                let io = TimedIo::new(stream, timeout, info.state.clone());
                upstream::serve(self, Rewind::new(already_read, io), protocol, info).await;
            }
            Transport::Tls(tls) => {
                upstream::serve(self, Rewind::new(already_read, tls), protocol, info).await;
            }
        }
    }

    /// Runs `head` through the router; an event stream then gets a task of its own
    /// ([`write_stream`]: a plain one on the runtime [`runtime::for_session`] picks, a TLS one
    /// where its handshake ran), any other answer is written at once.
    async fn stream(self, mut socket: Socket, head: Head, info: ConnInfo) {
        let mut request = head.request;
        request.extensions_mut().insert(ConnectInfo(info));
        let Ok(mut response) = self.router.clone().call(request).await;
        let Some(session) = take_session(&mut response) else {
            return socket.write_answer(response).await;
        };
        let head = stream_head(&response);
        drop(response);
        // Move a plain socket to the stream's runtime (its reactor then watches it).
        let Socket {
            transport,
            write_timeout,
            state,
        } = socket;
        let stream = match transport {
            Transport::Plain(stream) => stream,
            Transport::Tls(tls) => {
                let socket = Socket {
                    transport: Transport::Tls(tls),
                    write_timeout,
                    state,
                };
                tokio::spawn(write_stream(self, Pending::Ready(socket), head, session));
                return;
            }
        };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::warn!(error = %err, peer = %self.peer, "cannot move a stream's socket");
                return;
            }
        };
        let moved = MovedSocket {
            stream,
            write_timeout,
            state,
        };
        let runtime = runtime::for_session(&self.streams, &session);
        // The connection is held until the stream ends: the address's place and the drain
        // count.
        runtime.spawn(write_stream(self, Pending::Moved(moved), head, session));
    }

    async fn refuse(
        &self,
        socket: &mut Socket,
        reason: &'static str,
        status: StatusCode,
        detail: &str,
    ) {
        Metrics::count(&self.hub.metrics.rejected, "reason", reason);
        tracing::info!(reason, peer = %self.peer, detail, "connection refused");
        let answer = refusal(status, detail);
        socket.write_answer(error_response(&answer)).await;
    }
}

/// A request the connection layer streams itself: `GET /events…` or a Mercure subscription
/// (`GET /.well-known/mercure`) over HTTP/1.1 without a body, upgrade or pipelined requests
/// behind it. Anything else goes to hyper.
fn is_fresh_stream(head: &Head, read: usize) -> bool {
    let request = &head.request;
    let path = request.uri().path();
    let headers = request.headers();
    request.method() == Method::GET
        && request.version() == Version::HTTP_11
        && (path == "/events" || path.starts_with("/events/") || path == MERCURE_HUB)
        && read == head.head_len
        && !headers.contains_key(header::TRANSFER_ENCODING)
        && !headers.contains_key(header::UPGRADE)
        && headers
            .get(header::CONTENT_LENGTH)
            .is_none_or(|len| len.as_bytes() == b"0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::future_size;

    /// What one open event stream keeps in the hub (its task, with the session and the
    /// connection's bookkeeping inside) must stay well below the 8 KiB-per-connection goal:
    /// no HTTP buffers, no request state, and each value once (about 1.3 KiB in a debug
    /// build; 2.3 KiB while the task held the session three times over).
    #[test]
    fn an_open_stream_keeps_little_state() {
        let task = future_size::of4(write_stream::<Connection>);
        assert!(task <= 1536, "an event stream's task is {task} bytes");
    }
}
