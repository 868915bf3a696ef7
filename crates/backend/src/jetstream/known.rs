//! What the backend knows of its stream between requests — incarnation, subjects, the highest
//! sequence seen — so that a publish takes one round trip instead of asking for the stream's
//! info first.
//!
//! The rule that keeps event ids right: an id carries the incarnation known when its publish
//! was acknowledged, and what is known is dropped (the next publish reads the stream's info
//! again) whenever it may be stale:
//!
//! - the NATS connection was re-established (anything may have happened meanwhile);
//! - a JetStream advisory about the stream arrived (created, deleted, updated, leader elected);
//! - an acknowledgement that is not a duplicate carries a sequence at or below the highest one
//!   known when its publish was sent: a message sent after sequence N was acknowledged gets a
//!   higher one in the same incarnation, so the stream was created again. (Measured against
//!   what was known at sending, not at the acknowledgement: concurrent publishes may be
//!   acknowledged in any order.) The stream's info is read before answering and its
//!   incarnation is used.
//!
//! The info is read again at most once per such event, not per publish. Not covered: a stream
//! created again and filled past the highest sequence known before its advisory arrives (an
//! acknowledgement does not carry the incarnation); reading the info before each publish left
//! the same window between the two requests.

use std::sync::Mutex;

use super::info::StreamFacts;

/// The stream as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Known {
    /// The stream's incarnation.
    pub incarnation: u64,
    /// The subjects it captures.
    pub subjects: Vec<String>,
    /// The highest sequence seen in this incarnation (info or acknowledgements).
    pub last_seq: u64,
    /// Whether the stream accepts message schedules.
    pub allow_msg_schedules: bool,
    /// The connection count (see `Shared::reconnects`) when it was read.
    reconnects: u64,
}

impl Known {
    /// What `facts` say, as of no particular connection.
    pub fn from_facts(facts: &StreamFacts) -> Self {
        Self {
            incarnation: facts.state.incarnation,
            subjects: facts.state.subjects.clone(),
            last_seq: facts.state.last_seq,
            allow_msg_schedules: facts.allow_msg_schedules,
            reconnects: u64::MAX,
        }
    }
}

/// The cache itself: empty until the stream's info is read, and again after [`KnownStream::forget`].
#[derive(Debug, Default)]
pub(super) struct KnownStream(Mutex<Option<Known>>);

impl KnownStream {
    /// What is known, unless the connection was re-established since (`reconnects` is the
    /// current connection count).
    pub fn get(&self, reconnects: u64) -> Option<Known> {
        self.lock()
            .clone()
            .filter(|known| known.reconnects == reconnects)
    }

    /// Takes in freshly read stream info.
    pub fn remember(&self, facts: &StreamFacts, reconnects: u64) {
        let state = &facts.state;
        let mut known = self.lock();
        let last_seq = match &*known {
            Some(old) if old.incarnation == state.incarnation => old.last_seq.max(state.last_seq),
            _ => state.last_seq,
        };
        *known = Some(Known {
            incarnation: state.incarnation,
            subjects: state.subjects.clone(),
            last_seq,
            allow_msg_schedules: facts.allow_msg_schedules,
            reconnects,
        });
    }

    /// Takes in the sequence acknowledged for a publish sent while `sent_with` was known:
    /// false when it cannot belong to that incarnation (at or below the highest sequence known
    /// then), i.e. the stream was created again.
    pub fn acknowledged(&self, sent_with: &Known, seq: u64) -> bool {
        if seq <= sent_with.last_seq {
            return false;
        }
        let mut known = self.lock();
        // Forgotten or replaced meanwhile: the next publish reads the info again anyway.
        if let Some(known) = known
            .as_mut()
            .filter(|known| known.incarnation == sent_with.incarnation)
        {
            known.last_seq = known.last_seq.max(seq);
        }
        true
    }

    /// Drops what is known; the next publish reads the stream's info first.
    pub fn forget(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Known>> {
        // A panic while holding the lock cannot leave the value half-written.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StreamState;

    fn facts(incarnation: u64, last_seq: u64) -> StreamFacts {
        StreamFacts {
            state: StreamState {
                first_seq: 1,
                expired_below: 1,
                last_seq,
                messages: 0,
                bytes: 0,
                first_time: None,
                incarnation,
                subjects: vec!["events.>".to_owned()],
            },
            inactive_threshold_limit: None,
            allow_msg_schedules: false,
        }
    }

    #[test]
    fn a_sequence_that_does_not_grow_means_another_incarnation() {
        let known = KnownStream::default();
        known.remember(&facts(7, 3), 1);
        let now = || known.get(1).unwrap();
        assert!(known.acknowledged(&now(), 4));
        assert!(!known.acknowledged(&now(), 4));
        assert!(!known.acknowledged(&now(), 1));
        assert_eq!(now().last_seq, 4);
        // An older info read does not lower what acknowledgements taught.
        known.remember(&facts(7, 2), 1);
        assert_eq!(now().last_seq, 4);
        known.remember(&facts(8, 0), 1);
        assert!(known.acknowledged(&now(), 1));
    }

    #[test]
    fn concurrent_publishes_acknowledged_out_of_order_are_of_the_same_incarnation() {
        let known = KnownStream::default();
        known.remember(&facts(7, 3), 1);
        // Two publishes sent while 3 was the highest sequence; the later one's ack comes first.
        let sent_with = known.get(1).unwrap();
        assert!(known.acknowledged(&sent_with, 5));
        assert!(known.acknowledged(&sent_with, 4));
        assert_eq!(known.get(1).unwrap().last_seq, 5, "never lowered");
    }

    #[test]
    fn a_reconnection_or_forgetting_makes_it_unknown() {
        let known = KnownStream::default();
        assert_eq!(known.get(1), None);
        known.remember(&facts(7, 3), 1);
        assert_eq!(known.get(2), None);
        assert!(known.get(1).is_some());
        known.forget();
        assert_eq!(known.get(1), None);
    }
}
