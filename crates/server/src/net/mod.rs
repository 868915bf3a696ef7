//! The connection layer: sluice accepts and reads requests itself, so that an event stream
//! costs only its session and its socket.
//!
//! ```text
//! accept ─► per-address limit ─► first request head (small buffer, header_read_timeout,
//!                                 max_header_bytes, httparse)
//!            ├─ GET /events (HTTP/1.1, no body) ─► Router ─► stream: the head and then the
//!            │                                     frames written on the raw socket
//!            └─ anything else ─► hyper (the bytes already read replayed first), same Router
//! ```
//!
//! | file            | job                                                               |
//! |-----------------|-------------------------------------------------------------------|
//! | `accept.rs`     | accept loop, per-connection task, drain on shutdown               |
//! | `addresses.rs`  | `limits.max_connections_per_address`                              |
//! | `head.rs`       | reading and parsing the first request head                        |
//! | `stream.rs`     | writing a response (event stream or complete answer) on the socket |
//! | `upstream.rs`   | handing a connection to hyper                                     |
//! | `rewind.rs`     | replaying bytes already read to hyper                             |
//! | `runtime.rs`    | the event streams' own worker threads                             |
//! | `stall.rs`      | write-stall detection for hyper connections                       |

mod accept;
mod addresses;
pub mod head;
mod rewind;
mod runtime;
mod stall;
mod stream;
mod upstream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use accept::serve;
pub use stall::TimedIo;

use crate::session::Session;

/// Shared state of one TCP connection.
#[derive(Debug, Clone, Default)]
pub struct ConnState(Arc<AtomicBool>);

impl ConnState {
    /// True once a write stalled for the whole write timeout.
    pub fn stalled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn mark_stalled(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What a handler learns about its connection (a request extension, wrapped in axum's
/// `ConnectInfo`).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection's shared state.
    pub state: ConnState,
}

/// A request extension set when the connection layer writes the event stream itself: the
/// `GET /events` handler leaves its [`Session`] here instead of wrapping it in a body.
#[derive(Clone, Default)]
pub struct StreamHandoff(Arc<Mutex<Option<Session>>>);

impl std::fmt::Debug for StreamHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHandoff").finish_non_exhaustive()
    }
}

impl StreamHandoff {
    /// Leaves `session` for the connection layer.
    pub fn put(&self, session: Session) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(session);
    }

    fn take(&self) -> Option<Session> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}
