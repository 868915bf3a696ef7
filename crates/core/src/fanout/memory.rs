//! What the rings of one dispatch hold in memory, against `fanout.ring_memory`.
//!
//! Every ring is bounded in entries (`fanout.ring_size`), yet a busy topic set keeps its ring
//! full for as long as it has readers: without a bound in bytes, the rings of thousands of
//! topic sets, or of large events, would grow the hub's memory with its traffic. The dispatch
//! adds up what its rings weigh as it fills them; past the budget it evicts the oldest entries
//! of all its rings (see `Routes::keep_to_budget`), which costs a reader behind them a read of
//! the stream, never a message.

use prometheus_client::metrics::gauge::Gauge;

/// The bytes a dispatch's rings hold, told to the `sluice_fanout_ring_bytes` gauge (which
/// sums every dispatch's).
#[derive(Debug)]
pub struct RingMemory {
    held: usize,
    budget: usize,
    /// What of `held` the gauge has been told.
    reported: usize,
    gauge: Gauge,
}

impl RingMemory {
    /// Nothing held yet, against `budget` bytes.
    pub fn new(budget: usize, gauge: Gauge) -> Self {
        Self {
            held: 0,
            budget,
            reported: 0,
            gauge,
        }
    }

    /// A ring's weight changed by `delta`.
    pub fn changed(&mut self, delta: isize) {
        self.held = self.held.saturating_add_signed(delta);
    }

    /// A ring let go of `bytes`.
    pub fn released(&mut self, bytes: usize) {
        self.held = self.held.saturating_sub(bytes);
    }

    /// The rings are gone: they hold nothing, and the gauge is told.
    pub fn release_all(&mut self) {
        self.held = 0;
        self.report();
    }

    /// Whether the rings hold more than the budget.
    pub fn over_budget(&self) -> bool {
        self.held > self.budget
    }

    /// Whether eviction, once started, goes on: down to an eighth below the budget, so a
    /// dispatch at its budget looks for the oldest entries once per eighth of it, not once
    /// per message.
    pub fn above_target(&self) -> bool {
        self.held > self.budget - self.budget / 8
    }

    /// Tells the gauge what changed since it was last told.
    pub fn report(&mut self) {
        if self.held != self.reported {
            self.gauge.inc_by(self.held as i64 - self.reported as i64);
            self.reported = self.held;
        }
    }
}

impl Drop for RingMemory {
    fn drop(&mut self) {
        self.gauge.dec_by(self.reported as i64);
    }
}
