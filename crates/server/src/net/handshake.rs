//! A connection to a TLS listener: the handshake, bounded by `limits.header_read_timeout`,
//! then the protocol ALPN chose: `h2` goes to hyper, HTTP/1.1 to the connection layer as on a
//! plain listener (an event stream written by it, anything else handed to hyper).
//!
//! The TLS stream runs over [`TimedIo`], so the write-stall rule (`slow_client`) applies to
//! its socket exactly as to a plain one.

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::TimedIo;
use super::connection::Connection;
use super::stream::Transport;
use super::upstream::{self, Protocol};
use sluice_core::conn::{ConnInfo, ConnState};
use sluice_core::metrics::Metrics;

/// Runs the handshake on `stream`, then serves the connection with hyper.
pub(super) async fn serve(connection: Connection, stream: TcpStream, acceptor: TlsAcceptor) {
    let hub = connection.hub.clone();
    let timeout = hub.config.limits.header_read_timeout;
    let state = ConnState::default();
    let io = TimedIo::new(stream, hub.config.sse.write_timeout, state.clone());
    let mut shutdown = hub.shutdown_signal();
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(timeout, acceptor.accept(io)) => handshake,
        _ = shutdown.wait_for(|down| *down) => return,
    };
    let peer = connection.peer;
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(err)) => {
            Metrics::count(&hub.metrics.rejected, "reason", "tls_handshake");
            tracing::info!(reason = "tls_handshake", %peer, error = %err, "connection closed");
            return;
        }
        Err(_) => {
            Metrics::count(&hub.metrics.rejected, "reason", "header_timeout");
            tracing::info!(reason = "header_timeout", %peer, detail = %format!("no TLS handshake within {timeout:?}"), "connection closed");
            return;
        }
    };
    let kind = match tls.get_ref().1.handshake_kind() {
        Some(rustls::HandshakeKind::Resumed) => "resumed",
        _ => "full",
    };
    Metrics::count(&hub.metrics.tls_handshakes, "kind", kind);
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        let info = ConnInfo { peer, state };
        upstream::serve(&connection, tls, Protocol::Http2, info).await;
    } else {
        connection.run(Transport::Tls(Box::new(tls)), state).await;
    }
}
