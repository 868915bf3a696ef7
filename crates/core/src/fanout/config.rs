//! The fan-out's part of the configuration (`[fanout]`), owned here and composed into the
//! hub's configuration.

use serde::{Deserialize, Serialize};

/// The in-memory fan-out (`[fanout]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FanoutConfig {
    /// Encoded frames kept in memory per distinct topic set (and, for all topics together, by
    /// the node's dispatch); a client further behind reads from the stream until it catches up.
    pub ring_size: usize,
    /// Reads of the stream behind a ring (clients catching up) that run at once on this hub;
    /// each is a backend subscription (on JetStream, a consumer on the server). More clients
    /// wait for a turn.
    pub max_catch_up_reads: usize,
}

impl Default for FanoutConfig {
    fn default() -> Self {
        Self {
            ring_size: 4096,
            max_catch_up_reads: 64,
        }
    }
}
