//! What a handler and a session know of their TCP connection. A leaf: the connection layer
//! (`net`) fills it in, sessions and handlers read it, and neither imports the other for it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared state of one TCP connection.
#[derive(Debug, Clone, Default)]
pub struct ConnState(Arc<AtomicBool>);

impl ConnState {
    /// True once a write stalled for the whole write timeout.
    pub fn stalled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Records that a write stalled for the whole write timeout (the stream logs `slow_client`).
    pub fn mark_stalled(&self) {
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
