//! The sluice hub as a library, its HTTP layer: [`Hub`] and [`serve`] run it over a backend in
//! its roles (`sluice_backend::BackendRoles`: the embedded store or a NATS JetStream stream),
//! configured by a [`config::Config`] whose authorization part is [`auth`]'s.
//!
//! Data flows one way: `POST /publish` → the backend (durable, sequenced) → one fan-out feed
//! per distinct topic set → a session per client (a cursor into the feed's ring of frames
//! encoded once) → the socket. What lies between the backend and the socket, whatever protocol
//! carries it, is `sluice-core`'s; this crate holds the protocols (`/events`, `/publish`,
//! Mercure, the admin API), authorization, configuration and the connection layer.
//! [`fuzzing`] opens its parsers to the fuzz targets.

pub mod auth;
mod bounded_file;
pub mod config;
mod file_version;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod hub;
mod log_filter;
mod net;
mod owned_runtime;
pub mod tls;
mod topics;

pub use hub::Hub;
pub use log_filter::may_log;
pub use net::{Listener, serve, serve_listeners};
pub use sluice_core::event_id::{EventId, EventIdError};
