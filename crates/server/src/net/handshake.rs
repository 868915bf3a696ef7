//! A connection to a TLS listener: the handshake, bounded by `limits.header_read_timeout`,
//! then the protocol ALPN chose: `h2` goes to hyper, HTTP/1.1 to the connection layer as on a
//! plain listener (an event stream written by it, anything else handed to hyper).
//!
//! The TLS stream runs over [`TimedIo`], so the write-stall rule (`slow_client`) applies to
//! its socket exactly as to a plain one.

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::TimedIo;
use super::connection::Connection;
use super::stream::Transport;
use super::upstream::{self, Protocol};
use sluice_core::conn::{ConnInfo, ConnState};
use sluice_core::metrics::Metrics;

/// Runs the handshake on `stream`, then serves the connection with hyper.
///
/// The connection's task keeps this future for its whole life, sized for its largest step.
/// So each step is a future of its own, boxed, and freed when done: the handshake's state is
/// not kept through the connection, and an HTTP/2 connection does not keep room for the
/// HTTP/1.1 path or the other way round.
pub(super) async fn serve(connection: Connection, stream: TcpStream, acceptor: TlsAcceptor) {
    let state = ConnState::default();
    let Some(tls) = Box::pin(handshake(&connection, stream, acceptor, state.clone())).await else {
        return;
    };
    // Boxed as well: rustls's state is large, and this future would keep room for it.
    let tls = Box::new(tls);
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        let info = ConnInfo {
            peer: connection.peer,
            state,
        };
        Box::pin(upstream::serve(&connection, tls, Protocol::Http2, info)).await;
    } else {
        Box::pin(connection.run(Transport::Tls(tls), state)).await;
    }
}

/// The TLS handshake on `stream`, within `limits.header_read_timeout`; `None` when it failed
/// (counted and logged), timed out or the hub began shutting down.
async fn handshake(
    connection: &Connection,
    stream: TcpStream,
    acceptor: TlsAcceptor,
    state: ConnState,
) -> Option<TlsStream<TimedIo>> {
    let hub = &connection.hub;
    let timeout = hub.config.limits.header_read_timeout;
    let io = TimedIo::new(stream, hub.config.sse.write_timeout, state);
    let mut shutdown = hub.shutdown_signal();
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(timeout, acceptor.accept(io)) => handshake,
        _ = shutdown.wait_for(|down| *down) => return None,
    };
    let peer = connection.peer;
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            Metrics::count(&hub.metrics.rejected, "reason", "tls_handshake");
            tracing::info!(reason = "tls_handshake", %peer, error = %err, "connection closed");
            return None;
        }
        Err(_) => {
            Metrics::count(&hub.metrics.rejected, "reason", "header_timeout");
            tracing::info!(reason = "header_timeout", %peer, detail = %format!("no TLS handshake within {timeout:?}"), "connection closed");
            return None;
        }
    };
    let kind = match tls.get_ref().1.handshake_kind() {
        Some(rustls::HandshakeKind::Resumed) => "resumed",
        _ => "full",
    };
    Metrics::count(&hub.metrics.tls_handshakes, "kind", kind);
    Some(tls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::future_size;

    /// A TLS connection's task keeps this future for its whole life: with the handshake and
    /// each protocol's step boxed apart, it holds little more than the connection (about 300
    /// bytes; 8.6 KiB while it kept room for the handshake, for rustls's state and for
    /// hyper's HTTP/2 connection twice over).
    #[test]
    fn a_tls_connection_keeps_no_room_for_the_steps_it_is_not_in() {
        let task = future_size::of3(serve);
        assert!(task <= 512, "a TLS connection's task is {task} bytes");
    }
}
