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
//! | `stall.rs`      | the write-stall rule (`slow_client`), and hyper connections under it |

mod accept;
mod addresses;
pub mod head;
mod rewind;
mod runtime;
mod stall;
mod stream;
mod upstream;

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use stall::TimedIo;

use crate::hub::Hub;

/// Serves `hub` on `listener` until `signal` completes, then drains: stops accepting, ends
/// every event stream, waits for responses in flight, and shuts the backend down.
pub async fn serve(
    hub: Arc<Hub>,
    listener: TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let result = accept::accept_until(hub.clone(), listener, signal).await;
    hub.backend.shutdown().await;
    tracing::info!("shut down");
    result
}
