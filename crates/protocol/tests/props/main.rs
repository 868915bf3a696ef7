//! Property tests for every codec and validator of sluice-protocol.

mod duration;
mod headers;
mod schedule;
mod subject;
mod ttl;
