//! Log lines whose rate a client sets (a connection it makes misbehave on purpose) are
//! written at most once per interval, saying how many events they stand for; a metric counts
//! every one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one report per `interval`, counting the events in between.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the last report was let through (`None`: never).
    last: Option<Instant>,
    /// Events since then, the one being noted included.
    pending: u64,
}

impl Throttle {
    /// A throttle letting one report through per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(State {
                last: None,
                pending: 0,
            }),
        }
    }

    /// Notes one event at `now`: `Some(n)` when a report is due, `n` being the events it
    /// stands for (this one and those held back since the last report), `None` otherwise.
    pub fn note(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.pending += 1;
        let due = state
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if !due {
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_report_per_interval_counts_the_events_held_back() {
        let throttle = Throttle::new(Duration::from_secs(60));
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        assert_eq!(
            throttle.note(at(0)),
            Some(1),
            "the first is reported at once"
        );
        for secs in 1..=59 {
            assert_eq!(throttle.note(at(secs)), None);
        }
        assert_eq!(throttle.note(at(60)), Some(60), "59 held back and this one");
        assert_eq!(throttle.note(at(61)), None);
        assert_eq!(throttle.note(at(500)), Some(2));
    }
}
