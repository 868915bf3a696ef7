//! One accepted connection, as the layers that serve it share it: accepting reads its head,
//! the handshake and hyper's side (`upstream`) serve it.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::addresses::AddressSlot;
use crate::hub::Hub;

/// One accepted connection.
pub(super) struct Connection {
    pub(super) hub: Arc<Hub>,
    /// What answers its requests (a refusal when over the per-address limit).
    pub(super) router: Router,
    /// Where event streams run (see [`runtime::StreamRuntime`]).
    pub(super) streams: Handle,
    pub(super) peer: SocketAddr,
    /// Its place under `limits.max_connections_per_address` (`Err`: over the limit).
    pub(super) place: Result<Option<AddressSlot>, ()>,
    /// Held while the connection lives: the listener's drain waits for every sender to go.
    pub(super) _open: mpsc::Sender<()>,
}
