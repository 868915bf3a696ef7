//! Planning where a subscription starts, from the requested position and the stream's state
//! at that moment. The plan is the single source of truth for the stream that follows: its
//! start, the `gap` to report first, and which messages count as backlog (only backlog is
//! subject to `replay.window` and `replay.max_messages`).

use serde::{Deserialize, Serialize};
use sluice_backend::StreamState;

use crate::event_id::EventId;
use crate::frames::{Gap, GapReason};

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

/// Where a reader asks to start. Another way to start (the latest message of each subject, the
/// last N, since a time) is one more variant, planned by [`Plan::for_start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    /// With the messages stored from now on.
    Live,
    /// With the earliest message the stream retains.
    Earliest,
    /// After the message this id names (a resume); where that position is lost, after a `gap`,
    /// where `[replay] on_loss` says.
    After(EventId),
}

/// Where and how a subscription starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// First sequence to deliver.
    pub start: u64,
    /// The stream incarnation the subscription reads.
    pub incarnation: u64,
    /// Last sequence that existed at plan time: messages up to it are backlog.
    pub backlog_end: u64,
    /// What was lost, reported right after the `connected` frame.
    pub gap: Option<Gap>,
}

impl Plan {
    /// Plans a subscription that asked to start at `start`.
    pub fn for_start(start: StartPosition, state: &StreamState, on_loss: OnLoss) -> Self {
        match start {
            StartPosition::Live => Self::new(None, state, on_loss),
            StartPosition::Earliest => {
                let live = state.last_seq.saturating_add(1);
                Self {
                    start: state.first_seq.min(live),
                    incarnation: state.incarnation,
                    backlog_end: state.last_seq,
                    gap: None,
                }
            }
            StartPosition::After(cursor) => Self::new(Some(cursor), state, on_loss),
        }
    }

    /// Plans a subscription from `cursor` (none: new messages only).
    pub fn new(cursor: Option<EventId>, state: &StreamState, on_loss: OnLoss) -> Self {
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
        };
        let Some(cursor) = cursor else {
            return plan;
        };
        let next = cursor.next_seq();
        let expired_below = state.expired_below.min(first);
        let (reason, lost_from, lost_to) =
            if cursor.incarnation.is_some_and(|e| e != state.incarnation) {
                (GapReason::Incarnation, first, fallback)
            } else if next < expired_below {
                // Positions from `expired_below` on went by their own TTL or a delete: the gap
                // ends before them unless the client is sent to the live end.
                let to = match on_loss {
                    OnLoss::Earliest => expired_below,
                    OnLoss::Live => fallback,
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
        plan.start = fallback;
        let mut gap = Gap::range(reason, lost_from, lost_to.saturating_sub(1));
        gap.cursor = Some(cursor.to_string());
        plan.gap = Some(gap);
        plan
    }

    /// The id of the position just before the first delivery (the `connected` frame's id).
    pub fn start_id(&self) -> EventId {
        EventId::before(self.start, self.incarnation)
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

    fn id(seq: u64, incarnation: u64) -> Option<EventId> {
        Some(EventId {
            seq,
            incarnation: Some(incarnation),
        })
    }

    #[test]
    fn no_cursor_starts_live_and_connected_id_is_the_last_sequence() {
        let plan = Plan::new(None, &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!((plan.start, plan.gap.clone()), (11, None));
        assert_eq!(plan.start_id().to_string(), "10-7");
    }

    #[test]
    fn retained_cursor_resumes_right_after_it() {
        let plan = Plan::new(id(4, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!((plan.start, plan.backlog_end, plan.gap), (5, 10, None));
        let plan = Plan::new(id(10, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!((plan.start, plan.gap), (11, None));
    }

    #[test]
    fn expired_cursor_reports_the_lost_range() {
        let plan = Plan::new(id(2, 7), &state(6, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 6);
        let gap = plan.gap.expect("gap");
        assert_eq!(
            (gap.reason, gap.from, gap.to),
            (GapReason::Expired, Some(3), Some(5))
        );
        let plan = Plan::new(id(2, 7), &state(6, 10, 7), OnLoss::Live);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(3), Some(10)));
    }

    #[test]
    fn positions_gone_by_their_own_ttl_are_no_gap() {
        // 1..=2 removed by a limit, 3..=5 by their own TTL.
        let mut state = state(6, 10, 7);
        state.expired_below = 3;
        let plan = Plan::new(id(3, 7), &state, OnLoss::Earliest);
        assert_eq!((plan.start, plan.gap), (4, None));
        let plan = Plan::new(id(0, 7), &state, OnLoss::Earliest);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (6, Some(1), Some(2)));
        let plan = Plan::new(id(0, 7), &state, OnLoss::Live);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(1), Some(10)));
    }

    #[test]
    fn cursor_ahead_of_the_stream_falls_back() {
        let plan = Plan::new(id(50, 7), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 1);
        assert_eq!(plan.gap.expect("gap").reason, GapReason::Ahead);
    }

    #[test]
    fn cursor_from_another_incarnation_is_detected() {
        let plan = Plan::new(id(3, 6), &state(1, 10, 7), OnLoss::Earliest);
        assert_eq!(plan.start, 1);
        let gap = plan.gap.expect("gap");
        assert_eq!(
            (gap.reason, gap.from, gap.cursor.as_deref()),
            (GapReason::Incarnation, None, Some("3-6"))
        );
    }

    #[test]
    fn cursor_without_incarnation_is_taken_as_current() {
        let plan = Plan::new(
            Some(EventId {
                seq: 3,
                incarnation: None,
            }),
            &state(1, 10, 7),
            OnLoss::Earliest,
        );
        assert_eq!((plan.start, plan.gap), (4, None));
    }

    #[test]
    fn purged_empty_stream_reports_everything_lost() {
        // Purged: first = last + 1.
        let plan = Plan::new(id(3, 7), &state(11, 10, 7), OnLoss::Earliest);
        let gap = plan.gap.expect("gap");
        assert_eq!((plan.start, gap.from, gap.to), (11, Some(4), Some(10)));
    }

    #[test]
    fn each_start_position_is_planned_by_its_variant() {
        let retained = state(4, 10, 7);
        let plan = |start| Plan::for_start(start, &retained, OnLoss::Live);
        assert_eq!(plan(StartPosition::Live).start, 11);
        let earliest = plan(StartPosition::Earliest);
        assert_eq!(
            (earliest.start, earliest.backlog_end, earliest.gap),
            (4, 10, None)
        );
        assert_eq!(plan(StartPosition::After(EventId::before(6, 7))).start, 6);
        let empty = state(11, 10, 7);
        assert_eq!(
            Plan::for_start(StartPosition::Earliest, &empty, OnLoss::Live).start,
            11
        );
    }
}
