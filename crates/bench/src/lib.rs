//! The load generator behind `sluice bench`, for a running hub on this machine only.
//!
//! [`run`] opens [`Config::clients`] SSE streams (`GET /events?topic=…`) spread over
//! [`Config::topics`] topics, waits until every one has its `connected` frame, publishes
//! [`Config::rate`] messages per second (`POST /publish`), round-robin over the topics, for
//! [`Config::duration`], waits until everything has arrived, and returns a [`Report`]:
//! delivered events per second, publish→receive latency, every error and loss, and the hub's
//! memory per connection. It only speaks HTTP, so the same run works against a hub on the
//! embedded store or in front of NATS JetStream — and, with [`Hub::Nchan`], against nginx-nchan,
//! or with [`Hub::Mercure`] against the hub's Mercure endpoints, with the same clients and
//! checks.
//!
//! It speaks `http://` or `https://` ([`Config::ca_file`]), HTTP/1.1 (one connection per event
//! stream) or HTTP/2 ([`Config::protocol`], [`Config::streams_per_connection`] streams on each
//! connection); the clients' checks and the accounting are the same for every protocol.
//!
//! Every stage is bounded in time: connecting (`clients / connect_rate` plus 30 s), publishing
//! (`duration`), draining (until nothing arrives for 5 s, at most 60 s).

mod config;
mod event_stream;
mod http;
mod hub;
mod limits;
mod mercure;
mod message;
mod multiplex;
mod payload;
mod publisher;
mod report;
mod run;
mod run_context;
mod server;
mod stats;
mod subscriber;
pub mod tls;
mod transport;

pub use config::{Config, MAX_SOURCE_ADDRESSES};
pub use http::Protocol;
pub use hub::Hub;
pub use limits::raise_open_files;
pub use mercure::PublisherKey;
pub use report::Report;
pub use run::run;
pub use server::cpu_seconds_of;
