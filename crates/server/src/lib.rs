//! The sluice hub as a library: [`Hub`] and [`serve`] run it over a [`backend::Backend`] (the
//! embedded store or a NATS JetStream stream), configured by a [`config::Config`] whose
//! authorization part is [`auth`]'s.
//!
//! Data flows one way: `POST /publish` → the backend (durable, sequenced) → one fan-out feed
//! per distinct topic set → a session per client (a cursor into the feed's ring of frames
//! encoded once) → the socket. Everything between the configuration and the backend is the
//! crate's own; [`fuzzing`] opens its parsers to the fuzz targets.

mod admit;
pub mod auth;
pub mod backend;
mod bounded_file;
pub mod config;
mod conn;
mod duration;
mod event_id;
mod fanout;
mod file_version;
mod frames;
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod hub;
mod log_filter;
mod metrics;
mod net;
mod owned_runtime;
mod plan;
mod session;
pub mod tls;
mod topics;

pub use event_id::{EventId, EventIdError};
pub use hub::Hub;
pub use log_filter::may_log;
pub use net::{Listener, serve, serve_listeners};
