//! The connection layer: sluice accepts and reads requests itself, so that an event stream
//! costs only its session and its socket.
//!
//! ```text
//! plain listener:
//! accept ─► per-address limit ─► first request head (small buffer, header_read_timeout,
//!                                 max_header_bytes, httparse)
//!            ├─ GET /events (HTTP/1.1, no body) ─► Router ─► stream: the head and then the
//!            │                                     frames written on the raw socket
//!            ├─ the HTTP/2 preface (http2.h2c) ─► hyper's HTTP/2 server, same Router
//!            └─ anything else ─► hyper (the bytes already read replayed first), same Router
//! TLS listener:
//! accept ─► per-address limit ─► TLS handshake (header_read_timeout) ─► ALPN
//!            ├─ h2 ─► hyper's HTTP/2 server: an event stream's session runs in a task of its
//!            │        own and feeds its body, with the write-stall rule per stream
//!            └─ http/1.1 ─► as on the plain listener, over TLS: a fresh event stream is
//!                           written by the connection layer (staying on the runtime of its
//!                           handshake), anything else goes to hyper
//! ```
//!
//! | file            | job                                                               |
//! |-----------------|-------------------------------------------------------------------|
//! | `accept.rs`     | accept loop, per-connection task, drain on shutdown               |
//! | `addresses.rs`  | `limits.max_connections_per_address`                              |
//! | `head.rs`       | reading and parsing the first request head                        |
//! | `stream.rs`     | writing a response (event stream or complete answer) on the socket |
//! | `upstream.rs`   | handing a connection to hyper (HTTP/1.1 or HTTP/2)                |
//! | `handshake.rs`  | a TLS listener's connections: handshake, then ALPN's protocol     |
//! | `h2_stream.rs`  | event streams over HTTP/2, with the stall rule per stream         |
//! | `repoll.rs`     | a connection that wakes itself is polled again, not rescheduled   |
//! | `rewind.rs`     | replaying bytes already read to hyper                             |
//! | `runtime.rs`    | the event streams' own worker threads                             |
//! | `stall.rs`      | the write-stall rule (`slow_client`), and hyper connections under it |

mod accept;
mod addresses;
mod connection;
mod h2_stream;
mod handshake;
pub mod head;
mod repoll;
mod rewind;
mod runtime;
mod stall;
mod stream;
mod throttle;
mod upstream;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use stall::TimedIo;

/// The size of the future a function returns: what a connection's or a stream's task keeps
/// for its life (the unit tests of `accept`, `handshake` and `upstream` bound them).
#[cfg(test)]
mod future_size {
    use std::future::Future;

    pub(super) fn of3<A, B, C, F: Future>(_: fn(A, B, C) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    pub(super) fn of4<A, B, C, D, F: Future>(_: fn(A, B, C, D) -> F) -> usize {
        std::mem::size_of::<F>()
    }
}

use crate::hub::Hub;
use crate::tls::Certificates;

/// A bound socket the hub serves: plain HTTP, or TLS with [`Certificates`].
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    certificates: Option<Arc<Certificates>>,
}

impl Listener {
    /// Plain HTTP/1.1 on `tcp` (and cleartext HTTP/2 with `http2.h2c`).
    pub fn plain(tcp: TcpListener) -> Self {
        Self {
            tcp,
            certificates: None,
        }
    }

    /// TLS on `tcp`, presenting `certificates` (reloadable); HTTP/2 or HTTP/1.1 by ALPN.
    pub fn tls(tcp: TcpListener, certificates: Arc<Certificates>) -> Self {
        Self {
            tcp,
            certificates: Some(certificates),
        }
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// `https` for a TLS listener, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.certificates.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// Serves `hub` on `listener` (plain HTTP) until `signal` completes, then drains: stops
/// accepting, ends every event stream, waits for responses in flight, and shuts the backend
/// down.
pub async fn serve(
    hub: Arc<Hub>,
    listener: TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_listeners(hub, vec![Listener::plain(listener)], signal).await
}

/// [`serve`] on several listeners at once (plain and TLS side by side), draining them
/// together.
pub async fn serve_listeners(
    hub: Arc<Hub>,
    listeners: Vec<Listener>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    if let Some(mercure) = &hub.mercure {
        mercure.start(hub.shutdown_signal());
    }
    let result = accept::accept_until(hub.clone(), listeners, signal).await;
    if let Some(mercure) = &hub.mercure {
        // The ends of the subscriptions the drain ended.
        mercure.finish().await;
    }
    hub.backend.shutdown().await;
    tracing::info!("shut down");
    result
}
