//! The NATS JetStream backend: the hub in front of an existing JetStream stream, through
//! async-nats.

mod config;

pub use config::{JetStreamConfig, redact_url};
