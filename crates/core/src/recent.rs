//! Starting from recent state instead of a cursor: the start positions a client names with
//! `from=` — `live`, `earliest`, `latest` (the latest retained message of each subject it
//! reads), `last:<N>` (its N most recent messages) and `since:<RFC 3339 time or duration>`
//! (every message stored since then) — each followed by live messages with no seam.
//!
//! A request's `from=` is parsed into a [`StartFrom`]; a reader's [`Reader::check`] has the
//! hub [`HubCore::locate`] it in the stream, which gives the
//! [`StartPosition`] its plan starts from. A resume (`Last-Event-ID`) wins over `from=`.
//!
//! [`Reader::check`]: crate::reader::Reader::check
//!
//! ```
//! use sluice_core::recent::StartFrom;
//!
//! let now = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(1);
//! assert_eq!(StartFrom::parse("last:10", now), Ok(StartFrom::Last(10)));
//! assert_eq!(
//!     StartFrom::parse("since:10m", now),
//!     Ok(StartFrom::Since(now - jiff::SignedDuration::from_mins(10)))
//! );
//! assert!(StartFrom::parse("last:ten", now).is_err());
//! ```

use std::time::Duration;

use jiff::Timestamp;
use sluice_backend::{Recent, StreamState};
use sluice_protocol::subject::FilterSet;

use crate::fanout::record;
use crate::hub::HubCore;
use crate::plan::{Located, StartPosition};
use crate::reader::Refusal;

/// The longest the backend may take to locate a recent start.
const LOCATE_TIMEOUT: Duration = Duration::from_secs(5);

/// The accepted forms of `from=`, for error messages.
pub const FORMS: &str =
    "live, earliest, latest, last:<N> (N ≥ 1) or since:<RFC 3339 time, or a duration such as 10m>";

/// Where a client asks to start, before the stream is asked where that is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    /// New messages only (the default).
    Live,
    /// The earliest retained message on.
    Earliest,
    /// The latest retained message of each subject, then live.
    Latest,
    /// The N most recent retained messages, then live.
    Last(u64),
    /// Every retained message stored at or after this time, then live.
    Since(Timestamp),
}

/// Why a `from=` value is refused: names the value and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?}: {reason}; expected {FORMS}")]
pub struct StartFromError {
    /// The value as given (cut when long).
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl StartFrom {
    /// Parses a `from=` value; a duration counts back from `now`.
    pub fn parse(value: &str, now: Timestamp) -> Result<Self, StartFromError> {
        let fail = |reason: String| StartFromError {
            value: value.chars().take(64).collect(),
            reason,
        };
        match value {
            "live" => return Ok(Self::Live),
            "earliest" => return Ok(Self::Earliest),
            "latest" => return Ok(Self::Latest),
            _ => {}
        }
        if let Some(count) = value.strip_prefix("last:") {
            return match count.parse::<u64>() {
                Ok(0) => Err(fail("N must be at least 1".to_owned())),
                Ok(n) if count.bytes().all(|b| b.is_ascii_digit()) => Ok(Self::Last(n)),
                _ => Err(fail(format!("{count:?} is not a whole number"))),
            };
        }
        if let Some(when) = value.strip_prefix("since:") {
            return since(when, now).map(Self::Since).map_err(fail);
        }
        Err(fail("not a start position".to_owned()))
    }
}

/// The time `when` names: an RFC 3339 time, or a duration back from `now`.
fn since(when: &str, now: Timestamp) -> Result<Timestamp, String> {
    let time = when.parse::<Timestamp>();
    if let Ok(time) = time {
        return Ok(time);
    }
    if let Some(duration) = when.strip_prefix('-')
        && !duration.contains(['-', ':'])
    {
        return Err(format!(
            "{when:?} is negative: a duration counts back from now"
        ));
    }
    if let Err(err) = time
        && when.contains(['-', ':'])
    {
        return Err(format!(
            "{when:?} is not an RFC 3339 time with an offset ({err})"
        ));
    }
    let ago = sluice_protocol::config_duration::parse(when)?;
    let ago = jiff::SignedDuration::try_from(ago).map_err(|_| format!("{when:?} is too long"))?;
    Ok(now.checked_sub(ago).unwrap_or(Timestamp::MIN))
}

impl HubCore {
    /// Where `from` starts a reader of `filters` in the stream as `state` shows it: the
    /// latest state needs no search (the reader's cursor reads it); the last N and a time are
    /// found by the backend (in its index, or with a short-lived consumer).
    pub async fn locate(
        &self,
        from: StartFrom,
        filters: &FilterSet,
        state: &StreamState,
    ) -> Result<StartPosition, Refusal> {
        let recent = match from {
            StartFrom::Live => return Ok(StartPosition::Live),
            StartFrom::Earliest => return Ok(StartPosition::Earliest),
            StartFrom::Latest => return Ok(StartPosition::Recent(Located::Latest)),
            StartFrom::Last(n) => Recent::Last(n),
            StartFrom::Since(time) => Recent::Since(time),
        };
        let search = self
            .backend
            .recent_start(filters.as_slice(), recent, state.last_seq);
        match tokio::time::timeout(LOCATE_TIMEOUT, search).await {
            Ok(Ok(start)) => Ok(StartPosition::Recent(Located::From(start))),
            Ok(Err(err)) => {
                record(&self.metrics, &err, "locating a recent start failed");
                Err(Refusal::BackendUnavailable(err.to_string()))
            }
            Err(_) => Err(Refusal::BackendUnavailable(
                "locating a recent start timed out".to_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use proptest::prelude::*;
    use sluice_backend::Backend;
    use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig, StreamDecl};

    use crate::fanout::testing::{encoder, publish};
    use crate::fanout::{Cursor, EntryKind, Fanout, FanoutConfig};
    use crate::frames::Repair;
    use crate::hub::SessionSettings;
    use crate::metrics::Metrics;
    use crate::plan::{OnLoss, Plan};

    const SUBJECTS: [&str; 4] = ["kv.a", "kv.b", "kv.c.d", "other"];
    const FILTERS: [&[&str]; 4] = [&["kv.>"], &["kv.a"], &["kv.a", "kv.c.d"], &[">"]];

    /// Where a case starts.
    #[derive(Debug, Clone, Copy)]
    enum Asked {
        Latest,
        Last(u64),
        /// Since just before the message at this index of the history was published.
        SinceIndex(usize),
    }

    fn asked() -> impl Strategy<Value = Asked> {
        prop_oneof![
            Just(Asked::Latest),
            (1u64..12).prop_map(Asked::Last),
            (0usize..40).prop_map(Asked::SinceIndex),
        ]
    }

    /// The model of a stream: the messages `published` (in order) that the per-subject
    /// limit and the deletes left, the deletes made after the first `deleted_after` of them
    /// (the limit counts only the messages a subject still has).
    fn retained(
        published: &[(u64, &'static str)],
        deleted: &BTreeSet<u64>,
        deleted_after: usize,
        per_subject: u64,
    ) -> Vec<(u64, &'static str)> {
        let mut kept: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for (index, &(seq, subject)) in published.iter().enumerate() {
            if index == deleted_after {
                kept.values_mut()
                    .for_each(|seqs| seqs.retain(|seq| !deleted.contains(seq)));
            }
            let seqs = kept.entry(subject).or_default();
            seqs.push(seq);
            if per_subject > 0 && seqs.len() as u64 > per_subject {
                seqs.remove(0);
            }
        }
        published
            .iter()
            .copied()
            .filter(|(seq, subject)| kept[subject].contains(seq) && !deleted.contains(seq))
            .collect()
    }

    /// What a reader of `filters` gets from a stream that `retained` (in order) by the time
    /// it reads: with a `latest` state, the latest message of each subject below `start`,
    /// then every message from `start` on.
    fn expected(
        start: u64,
        latest: bool,
        retained: &[(u64, &'static str)],
        filters: &FilterSet,
    ) -> Vec<u64> {
        let matching = retained.iter().filter(|(_, s)| filters.matches(s));
        let mut want = Vec::new();
        if latest {
            let latest: BTreeMap<&str, u64> = matching
                .clone()
                .filter(|(seq, _)| *seq < start)
                .map(|(seq, subject)| (*subject, *seq))
                .collect();
            want.extend(latest.into_values().collect::<BTreeSet<u64>>());
        }
        want.extend(
            matching
                .filter(|(seq, _)| *seq >= start)
                .map(|(seq, _)| *seq),
        );
        want
    }

    /// Where the model starts a reader of `filters` asked `asked` of a stream that retains
    /// `retained`: the first of its last N messages, or the first one since the time.
    fn model_start(
        asked: Asked,
        retained: &[(u64, &'static str)],
        filters: &FilterSet,
        since_seq: u64,
        live: u64,
    ) -> Option<u64> {
        let matching: Vec<u64> = retained
            .iter()
            .filter(|(_, s)| filters.matches(s))
            .map(|(seq, _)| *seq)
            .collect();
        match asked {
            Asked::Latest => None,
            Asked::Last(n) => Some(
                matching
                    .len()
                    .checked_sub(n as usize)
                    .map_or(matching.first().copied(), |skip| {
                        matching.get(skip).copied()
                    })
                    .unwrap_or(live),
            ),
            Asked::SinceIndex(_) => Some(
                matching
                    .iter()
                    .copied()
                    .find(|seq| *seq >= since_seq)
                    .unwrap_or(live),
            ),
        }
    }

    /// One case: publish `history` (subjects by index) under a per-subject limit, delete the
    /// positions `deletes` names, start a reader of `filters` as `asked`, publish `live`: the
    /// reader gets exactly the model's messages, then every live one, nothing twice.
    async fn case(
        history: Vec<usize>,
        deletes: Vec<usize>,
        per_subject: u64,
        filters: FilterSet,
        asked: Asked,
        live: Vec<usize>,
    ) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            data_dir: dir.path().to_owned(),
            sync: "never".into(),
            streams: vec![StreamDecl {
                max_msgs_per_subject: per_subject,
                ..StreamDecl::default_stream()
            }],
            ..EmbeddedConfig::default()
        };
        let backend = Arc::new(EmbeddedBackend::open(&config).await.unwrap().0);
        let mut published: Vec<(u64, &'static str)> = Vec::new();
        let mut since = None;
        for (index, &pick) in history.iter().enumerate() {
            if matches!(asked, Asked::SinceIndex(at) if at == index) {
                since = Some(jiff::Timestamp::now());
            }
            let seq = publish(&*backend, SUBJECTS[pick]).await;
            published.push((seq, SUBJECTS[pick]));
        }
        let stream = backend.store().unwrap().stream("sluice").unwrap();
        for &at in &deletes {
            if let Some(&(seq, _)) = published.get(at) {
                let _ = stream.delete_msg(seq).await;
            }
        }
        let deleted: BTreeSet<u64> = deletes
            .iter()
            .filter_map(|at| published.get(*at).map(|(seq, _)| *seq))
            .collect();
        let from = match asked {
            Asked::Latest => StartFrom::Latest,
            Asked::Last(n) => StartFrom::Last(n),
            Asked::SinceIndex(_) => StartFrom::Since(since.unwrap_or_else(jiff::Timestamp::now)),
        };
        let since_seq = match asked {
            Asked::SinceIndex(at) => published.get(at).map_or(u64::MAX, |(seq, _)| *seq),
            _ => 0,
        };

        let state = backend.stream_state().await.unwrap();
        let metrics = Arc::new(Metrics::new());
        let fanout = Fanout::new(
            backend.clone(),
            metrics.clone(),
            encoder(state.incarnation),
            &FanoutConfig {
                ring_size: 4,
                ..FanoutConfig::default()
            },
        );
        let settings = SessionSettings {
            max_connections: 10,
            heartbeat: Duration::from_secs(60),
            replay_cap: 0,
            replay_window: None,
            on_loss: OnLoss::Earliest,
            repair: Repair::None,
        };
        let core = HubCore::new(backend.clone(), metrics, fanout, None, settings);
        let position = core.locate(from, &filters, &state).await.unwrap();
        let plan = Plan::for_start(position, &state, OnLoss::Earliest, Repair::None);
        let before = retained(&published, &deleted, published.len(), per_subject);
        let live_end = state.last_seq + 1;
        let start = model_start(asked, &before, &filters, since_seq, live_end);
        let feed = core.fanout.feed(&filters, &state, plan.start);
        let mut cursor = match plan.latest_from {
            Some(_) => Cursor::after_latest(feed, plan.start),
            None => Cursor::new(feed, plan.start),
        };
        for &pick in &live {
            let seq = publish(&*backend, SUBJECTS[pick]).await;
            published.push((seq, SUBJECTS[pick]));
        }
        // The reader reads only now: what the stream retains now is what it can get.
        let now_retained = retained(&published, &deleted, history.len(), per_subject);
        let want = expected(
            start.unwrap_or(live_end),
            start.is_none(),
            &now_retained,
            &filters,
        );
        let mut got = Vec::new();
        let read = async {
            while got.len() < want.len() {
                let Some(entry) = cursor.next().await.unwrap() else {
                    continue;
                };
                match entry.kind {
                    EntryKind::Message => got.push(entry.seq),
                    // Nothing is lost here; removals of the reader's subjects (deletes, the
                    // per-subject limit) may be told on the way.
                    EntryKind::Lost(reason) => assert_eq!(
                        reason,
                        crate::frames::GapReason::Removed,
                        "at {}",
                        entry.seq
                    ),
                    EntryKind::TooLarge => panic!("nothing is too large"),
                    EntryKind::Deleted => panic!("no delete marker is stored"),
                }
            }
        };
        // A reader missing a message would wait for it for ever: what it got is compared.
        let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        prop_assert_eq!(&got, &want, "plan {:?}, retained {:?}", plan, now_retained);
        while let Some(entry) = cursor.ready() {
            let told = entry.kind == EntryKind::Lost(crate::frames::GapReason::Removed);
            prop_assert!(told, "nothing more but removals: {:?}", entry.kind);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the stream (subjects interleaved, a per-subject limit, deletes), the
        /// filters and the start (latest, last N, since a time): the reader gets exactly the
        /// messages the model says, in stream order, then every live message — nothing
        /// skipped at the hand-over, nothing twice.
        #[test]
        fn every_recent_start_gives_what_the_model_says_then_live_without_a_seam(
            history in proptest::collection::vec(0usize..SUBJECTS.len(), 0..40),
            deletes in proptest::collection::vec(0usize..40, 0..6),
            per_subject in prop_oneof![Just(0u64), 1u64..4],
            filter in 0usize..FILTERS.len(),
            asked in asked(),
            live in proptest::collection::vec(0usize..SUBJECTS.len(), 0..12),
        ) {
            let filters = FilterSet::new(FILTERS[filter].iter().copied()).unwrap();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(case(history, deletes, per_subject, filters, asked, live))?;
        }
    }

    fn now() -> Timestamp {
        "2026-12-07T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn every_form_parses() {
        let parse = |v| StartFrom::parse(v, now());
        assert_eq!(parse("live"), Ok(StartFrom::Live));
        assert_eq!(parse("earliest"), Ok(StartFrom::Earliest));
        assert_eq!(parse("latest"), Ok(StartFrom::Latest));
        assert_eq!(parse("last:1"), Ok(StartFrom::Last(1)));
        assert_eq!(
            parse("since:2026-12-07T11:00:00+01:00"),
            Ok(StartFrom::Since("2026-12-07T10:00:00Z".parse().unwrap()))
        );
        assert_eq!(
            parse("since:1h 30m"),
            Ok(StartFrom::Since("2026-12-07T10:30:00Z".parse().unwrap()))
        );
        assert_eq!(
            parse("since:90"),
            Ok(StartFrom::Since("2026-12-07T11:58:30Z".parse().unwrap()))
        );
    }

    #[test]
    fn bad_values_name_the_value_and_the_forms() {
        for bad in [
            "",
            "Latest",
            "last:",
            "last:0",
            "last:-1",
            "last:+3",
            "last:1.5",
            "last:99999999999999999999",
            "since:",
            "since:yesterday",
            "since:2026-13-01T00:00:00Z",
            "since:2026-12-07T11:00:00",
            "since:-5m",
        ] {
            let err = StartFrom::parse(bad, now()).expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("last:<N>") && err.contains("since:"), "{err}");
        }
    }

    #[test]
    fn a_time_out_of_range_or_a_negative_duration_is_told_as_such() {
        let err = StartFrom::parse("since:9999-12-31T23:59:59Z", now())
            .expect_err("past the last representable time")
            .to_string();
        assert!(err.contains("range"), "{err}");
        let err = StartFrom::parse("since:-5m", now())
            .expect_err("negative")
            .to_string();
        assert!(err.contains("\"-5m\" is negative"), "{err}");
    }
}
