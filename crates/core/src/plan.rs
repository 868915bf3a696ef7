//! Planning where a subscription starts, from the requested position and the stream's state
//! at that moment. The plan is the single source of truth for the stream that follows: its
//! start, the `gap` to report first, and which messages count as backlog (only backlog is
//! subject to `replay.window` and `replay.max_messages`).

use serde::{Deserialize, Serialize};
use sluice_backend::StreamState;

use crate::event_id::EventId;
use crate::frames::{Gap, GapReason, Repair};

/// Where a client resumes when its position is lost (expired, ahead of the stream, or from
/// another incarnation of it). The client is always told with a `gap` frame first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLoss {
    /// Continue from the earliest retained message (the default).
    #[default]
    Earliest,
    /// Continue with new messages only.
    Live,
}

impl<'de> Deserialize<'de> for OnLoss {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        sluice_protocol::config_choice::choice(
            deserializer,
            &[("earliest", Self::Earliest), ("live", Self::Live)],
        )
    }
}

/// Where a reader asks to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    /// With the messages stored from now on.
    Live,
    /// With the earliest message the stream retains.
    Earliest,
    /// After the message this id names (a resume); where that position is lost, after a `gap`,
    /// where `[replay] on_loss` says (or with the latest state, under [`Repair::Latest`]).
    After(EventId),
    /// With recent messages of its subjects, then live: the latest of each subject, or every
    /// message from a position the backend located (the last N, those since a time). See
    /// [`crate::recent`].
    Recent(Located),
}

/// A recent start, located in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Located {
    /// The latest retained message of each subject, below the live end.
    Latest,
    /// Every message from this position on.
    From(u64),
}

/// Where and how a subscription starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// First sequence of the contiguous read: every message from here on is delivered.
    pub start: u64,
    /// The stream incarnation the subscription reads.
    pub incarnation: u64,
    /// Last sequence that existed at plan time: messages up to it are backlog.
    pub backlog_end: u64,
    /// What was lost, reported right after the `connected` frame.
    pub gap: Option<Gap>,
    /// When set, the latest message of each subject below `start` comes first, read from
    /// this position (the first retained one) on: the reader's state, then everything from
    /// `start`.
    pub latest_from: Option<u64>,
}

impl Plan {
    /// Plans a subscription that asked to start at `start`.
    pub fn for_start(
        start: StartPosition,
        state: &StreamState,
        on_loss: OnLoss,
        repair: Repair,
    ) -> Self {
        let live = state.last_seq.saturating_add(1);
        let first = state.first_seq.min(live);
        let from = |start: u64| Self {
            start,
            incarnation: state.incarnation,
            backlog_end: state.last_seq,
            gap: None,
            latest_from: None,
        };
        match start {
            StartPosition::Live => from(live),
            StartPosition::Earliest => from(first),
            StartPosition::Recent(Located::From(seq)) => from(seq.min(live)),
            StartPosition::Recent(Located::Latest) => Self {
                latest_from: Some(first),
                ..from(live)
            },
            StartPosition::After(cursor) => Self::resume(cursor, state, on_loss, repair),
        }
    }

    /// Plans a subscription that resumes after `cursor`.
    fn resume(cursor: EventId, state: &StreamState, on_loss: OnLoss, repair: Repair) -> Self {
        let live = state.last_seq.saturating_add(1);
        let first = state.first_seq.min(live);
        let fallback = match on_loss {
            OnLoss::Earliest => first,
            OnLoss::Live => live,
        };
        let mut plan = Self {
            start: live,
            incarnation: state.incarnation,
            backlog_end: state.last_seq,
            gap: None,
            latest_from: None,
        };
        let next = cursor.next_seq();
        let expired_below = state.expired_below.min(first);
        let (reason, lost_from, lost_to) =
            if cursor.incarnation.is_some_and(|e| e != state.incarnation) {
                (GapReason::Incarnation, first, fallback)
            } else if next < expired_below {
                // Positions from `expired_below` on went by their own TTL or a delete: the gap
                // ends before them unless the client is sent to the live end.
                let to = match (on_loss, repair) {
                    (OnLoss::Earliest, _) | (_, Repair::Latest) => expired_below,
                    (OnLoss::Live, Repair::None) => fallback,
                };
                (GapReason::Expired, next, to)
            } else if next > live {
                (GapReason::Ahead, fallback, fallback)
            } else {
                // Nothing was lost, even where positions before the first retained one are
                // gone (by their own TTL or a delete): the read skips them.
                plan.start = next;
                return plan;
            };
        let mut gap = Gap::range(reason, lost_from, lost_to.saturating_sub(1));
        gap.cursor = Some(cursor.to_string());
        match repair {
            Repair::None => plan.start = fallback,
            Repair::Latest => {
                plan.latest_from = Some(first);
                gap.repair = Some(Repair::Latest);
            }
        }
        plan.gap = Some(gap);
        plan
    }

    /// The id of the position just before the first delivery (the `connected` frame's id):
    /// a reader that reconnects with it loses nothing. For a plan that starts with the latest
    /// state, that is the position before the first retained message (the state's first
    /// message may be any of them).
    pub fn start_id(&self) -> EventId {
        EventId::before(self.latest_from.unwrap_or(self.start), self.incarnation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(first: u64, last: u64, incarnation: u64) -> StreamState {
        StreamState {
            first_seq: first,
            expired_below: first,
            last_seq: last,
            messages: 0,
            bytes: 0,
            first_time: None,
            incarnation,
            subjects: vec![">".into()],
        }
    }

    fn id(seq: u64, incarnation: u64) -> EventId {
        EventId {
            seq,
            incarnation: Some(incarnation),
        }
    }

    fn resume(cursor: EventId, state: &StreamState, on_loss: OnLoss) -> Plan {
        Plan::for_start(StartPosition::After(cursor), state, on_loss, Repair::None)
    }

    #[test]
    fn no_cursor_starts_live_and_connected_id_is_the_last_sequence() {
        let plan = Plan::for_start(
            StartPosition::Live,
            &state(1, 10, 7),
            OnLoss::Earliest,
            Repair::None,
        );
        assert_eq!((plan.start, plan.gap.clone()), (11, None));
        assert_eq!(plan.start_id().to_string(), "10-7");
    }

    #[test]
    fn retained_cursor_resumes_right_after_it() {
        let plan = resume(id(4, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!((plan.start, plan.backlog_end, plan.gap), (5, 10, None));
        let plan = resume(id(10, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!((plan.start, plan.gap), (11, None));
    }

    #[test]
    fn expired_cursor_reports_the_lost_range() {
        let plan = resume(id(2, 7), &state(6, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 6);
        let gap = plan.gap.expect("gap");
        assert_eq!(
            (gap.reason, gap.from, gap.to),
            (GapReason::Expired, Some(3), Some(5))
        );
        let plan = resume(id(2, 7), &state(6, 10, 7), OnLoss::Live);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(3), Some(10)));
    }

    #[test]
    fn positions_gone_by_their_own_ttl_are_no_gap() {
        // 1..=2 removed by a limit, 3..=5 by their own TTL.
        let mut state = state(6, 10, 7);
        state.expired_below = 3;
        let plan = resume(id(3, 7), &state, OnLoss::Earliest);
        assert_eq!((plan.start, plan.gap), (4, None));
        let plan = resume(id(0, 7), &state, OnLoss::Earliest);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (6, Some(1), Some(2)));
        let plan = resume(id(0, 7), &state, OnLoss::Live);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(1), Some(10)));
    }

    #[test]
    fn cursor_ahead_of_the_stream_falls_back() {
        let plan = resume(id(50, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 1);
        assert_eq!(plan.gap.expect("gap").reason, GapReason::Ahead);
    }

    #[test]
    fn cursor_from_another_incarnation_is_detected() {
        let plan = resume(id(3, 6), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 1);
        let gap = plan.gap.expect("gap");
        assert_eq!(
            (gap.reason, gap.from, gap.cursor.as_deref()),
            (GapReason::Incarnation, None, Some("3-6"))
        );
    }

    #[test]
    fn cursor_without_incarnation_is_taken_as_current() {
        let plan = resume(
            EventId {
                seq: 3,
                incarnation: None,
            },
            &state(1, 10, 7),
            OnLoss::Earliest,
        );
        assert_eq!((plan.start, plan.gap), (4, None));
    }

    #[test]
    fn purged_empty_stream_reports_everything_lost() {
        // Purged: first = last + 1.
        let plan = resume(id(3, 7), &state(11, 10, 7), OnLoss::Earliest);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(4), Some(10)));
    }

    #[test]
    fn each_start_position_is_planned_by_its_variant() {
        let retained = state(4, 10, 7);
        let plan = |start| Plan::for_start(start, &retained, OnLoss::Live, Repair::None);
        assert_eq!(plan(StartPosition::Live).start, 11);
        let earliest = plan(StartPosition::Earliest);
        assert_eq!(
            (earliest.start, earliest.backlog_end, earliest.gap),
            (4, 10, None)
        );
        assert_eq!(plan(StartPosition::After(EventId::before(6, 7))).start, 6);
        let from = plan(StartPosition::Recent(Located::From(7)));
        assert_eq!((from.start, from.latest_from, &from.gap), (7, None, &None));
        assert_eq!(from.start_id().to_string(), "6-7");
        let latest = plan(StartPosition::Recent(Located::Latest));
        assert_eq!((latest.start, latest.latest_from), (11, Some(4)));
        assert_eq!(
            latest.start_id().to_string(),
            "3-7",
            "a reconnect loses no state"
        );
        let empty = state(11, 10, 7);
        assert_eq!(
            Plan::for_start(StartPosition::Earliest, &empty, OnLoss::Live, Repair::None).start,
            11
        );
    }

    #[test]
    fn a_lost_position_repaired_with_the_latest_state_is_told_then_gets_it() {
        let plan = |cursor, state: &StreamState| {
            Plan::for_start(
                StartPosition::After(cursor),
                state,
                OnLoss::Live,
                Repair::Latest,
            )
        };
        let expired = plan(id(2, 7), &state(6, 10, 7));
        let gap = expired.gap.clone().expect("gap");
        assert_eq!(
            (gap.reason, gap.from, gap.to, gap.repair),
            (GapReason::Expired, Some(3), Some(5), Some(Repair::Latest))
        );
        assert_eq!((expired.start, expired.latest_from), (11, Some(6)));
        let recreated = plan(id(3, 6), &state(1, 10, 7));
        assert_eq!(recreated.gap.expect("gap").reason, GapReason::Incarnation);
        assert_eq!(recreated.latest_from, Some(1));
        let retained = plan(id(7, 7), &state(6, 10, 7));
        assert_eq!(
            (retained.start, retained.gap, retained.latest_from),
            (8, None, None)
        );
    }
}
