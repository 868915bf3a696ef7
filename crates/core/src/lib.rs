//! The sluice hub's core, with no HTTP in it: what happens between the durable stream
//! ([`sluice_backend`]) and a client's socket, whatever protocol carries it.
//!
//! A message stored by the backend reaches one shared [`fanout::Feed`] per distinct topic set,
//! is encoded there once into a ring of frames ([`frames`], ids from [`event_id`]), and every
//! client's [`session::Session`] reads that ring through its own cursor, starting where its
//! [`plan::Plan`] says. Every reader starts through [`hub::HubCore::open_session`], as a
//! [`reader::Reader`] of its protocol's own. [`metrics`] counts all of it; [`conn`] is what a
//! connection shares with the streams it carries. The HTTP layer (`sluice-server`) only calls
//! down into this crate.

pub mod conn;
pub mod event_id;
pub mod fanout;
pub mod frames;
pub mod hub;
pub mod metrics;
pub mod plan;
pub mod reader;
pub mod recent;
pub mod session;
