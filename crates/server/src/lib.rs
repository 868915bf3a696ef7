//! The sluice hub as a library: configuration, HTTP and Server-Sent Events, publishing,
//! fan-out and the backends that hold the durable streams.
//!
//! Data flows one way: `POST /publish` → [`backend::Backend`] (durable, sequenced) → one
//! [`fanout`] feed per distinct topic set → a [`session`] per client (a cursor into the feed's
//! ring of frames encoded once) → the socket.

pub mod auth;
pub mod backend;
pub mod config;
mod duration;
pub mod event_id;
pub mod fanout;
pub mod frames;
pub mod http;
pub mod hub;
pub mod metrics;
pub mod net;
pub mod plan;
pub mod session;
pub mod topics;

pub use hub::{Hub, serve};
