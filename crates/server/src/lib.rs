//! The sluice hub as a library: configuration, HTTP and Server-Sent Events, publishing,
//! fan-out and the backends that hold the durable streams.

pub mod auth;
pub mod backend;
pub mod config;
pub mod event_id;
