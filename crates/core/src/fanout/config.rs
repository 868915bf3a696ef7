//! The fan-out's part of the configuration (`[fanout]`), owned here and composed into the
//! hub's configuration.

use serde::{Deserialize, Serialize};
use sluice_protocol::config_error::InvalidSetting;

/// The in-memory fan-out (`[fanout]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FanoutConfig {
    /// Encoded frames kept in memory per distinct topic set (and, for all topics together, by
    /// the node's dispatch); a client further behind reads from the stream until it catches up.
    pub ring_size: usize,
    /// Bytes the rings of one fan-out may hold together (its dispatch's and every topic
    /// set's); when they hold more, the oldest entries of all rings go first. A frame kept by
    /// several rings counts in each.
    pub ring_memory: usize,
    /// Reads of the stream behind a ring (clients catching up) that run at once on this hub;
    /// each is a backend subscription (on JetStream, a consumer on the server). More clients
    /// wait for a turn.
    pub max_catch_up_reads: usize,
}

impl Default for FanoutConfig {
    fn default() -> Self {
        Self {
            ring_size: 4096,
            ring_memory: 128 << 20,
            max_catch_up_reads: 64,
        }
    }
}

impl FanoutConfig {
    /// Checks every value of the section.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !(16..=1 << 20).contains(&self.ring_size) {
            return Err(InvalidSetting::new(
                "fanout.ring_size",
                self.ring_size,
                "must be between 16 and 1048576",
            ));
        }
        if self.ring_memory < 16 << 20 {
            return Err(InvalidSetting::new(
                "fanout.ring_memory",
                self.ring_memory,
                "must be at least 16777216 (16 MiB)",
            ));
        }
        if !(1..=65536).contains(&self.max_catch_up_reads) {
            return Err(InvalidSetting::new(
                "fanout.max_catch_up_reads",
                self.max_catch_up_reads,
                "must be between 1 and 65536",
            ));
        }
        Ok(())
    }
}
