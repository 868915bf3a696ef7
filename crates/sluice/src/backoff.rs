//! The reconnection delays of `sluice sub`: exponential with jitter, capped, never below the
//! hub's own `retry:` hint.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// The delay before the first reconnection attempt after a connection was lost.
pub const FIRST: Duration = Duration::from_millis(500);
/// The longest delay between two attempts (before the hub's hint is applied).
pub const CAP: Duration = Duration::from_secs(30);

/// Delays between reconnection attempts: [`FIRST`], doubling up to [`CAP`], each drawn at random
/// from its upper half so that many clients of a restarted hub do not return in step; never
/// shorter than the hub's `retry:` hint.
#[derive(Debug)]
pub struct Backoff {
    /// The upper bound of the next delay.
    next: Duration,
    /// The hub's `retry:` hint (or `Retry-After`): no delay is shorter.
    floor: Duration,
    random: RandomState,
    draws: u64,
}

impl Backoff {
    /// A schedule starting at [`FIRST`] with no floor.
    pub fn new() -> Self {
        Self {
            next: FIRST,
            floor: Duration::ZERO,
            random: RandomState::new(),
            draws: 0,
        }
    }

    /// Starts again from [`FIRST`]: a connection was established.
    pub fn reset(&mut self) {
        self.next = FIRST;
    }

    /// Honours the hub's suggested reconnection delay as the shortest delay from now on.
    pub fn set_floor(&mut self, floor: Duration) {
        self.floor = floor;
    }

    /// The delay before the next attempt; the one after is twice as long, up to [`CAP`].
    pub fn next_delay(&mut self) -> Duration {
        let upper = self.next;
        self.next = (upper * 2).min(CAP);
        self.draws += 1;
        let half = upper / 2;
        let span = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let jitter = Duration::from_millis(self.random.hash_one(self.draws) % (span + 1));
        (half + jitter).max(self.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_half_a_second_up_to_the_cap_with_jitter_in_the_upper_half() {
        let mut backoff = Backoff::new();
        let mut upper = FIRST;
        for _ in 0..12 {
            let delay = backoff.next_delay();
            assert!(
                delay >= upper / 2 && delay <= upper,
                "{delay:?} for {upper:?}"
            );
            upper = (upper * 2).min(CAP);
        }
        assert_eq!(upper, CAP);
        backoff.reset();
        assert!(backoff.next_delay() <= FIRST);
    }

    #[test]
    fn the_hubs_hint_is_the_shortest_delay() {
        let mut backoff = Backoff::new();
        backoff.set_floor(Duration::from_secs(2));
        for _ in 0..3 {
            assert!(backoff.next_delay() >= Duration::from_secs(2));
        }
        backoff.set_floor(Duration::from_secs(90));
        assert_eq!(backoff.next_delay(), Duration::from_secs(90));
    }

    #[test]
    fn jitter_spreads_the_delays() {
        let mut delays = std::collections::HashSet::new();
        for _ in 0..20 {
            let mut backoff = Backoff::new();
            delays.insert(backoff.next_delay());
        }
        assert!(delays.len() > 1, "{delays:?}");
    }
}
