//! Messages removed from inside a stream — a delete, a purge of some subjects, the per-subject
//! limit — are told to the subscribers whose filters match them (`Delivery::Removed`), and to no
//! other subscriber; after a restart, an index.db rebuild and a crash too. Messages gone by
//! their own TTL are told to nobody.

mod drained;
use drained::drain;

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use sluice_store::{
    Delivery, FilterSet, Headers, PurgeRequest, Removed, Store, StoreOptions, StreamConfig,
    StreamHandle,
};

const STREAM: &str = "R";

fn opts() -> StoreOptions {
    StoreOptions {
        // Small blocks, so removals and reads cross many of them.
        block_size: 1024,
        ..StoreOptions::default()
    }
}

/// The store in `dir` with stream `R` (created with `config` when missing).
fn open_with(dir: &Path, config: impl FnOnce() -> StreamConfig) -> (Store, StreamHandle) {
    let (store, _) = Store::open(dir, opts()).unwrap();
    let s = match store.stream(STREAM) {
        Some(s) => s,
        None => store.create_stream(config()).unwrap(),
    };
    (store, s)
}

fn config() -> StreamConfig {
    StreamConfig::new(STREAM, ["a", "b", "c.*"])
}

fn open(dir: &Path) -> (Store, StreamHandle) {
    open_with(dir, config)
}

async fn publish(s: &StreamHandle, subject: &str) -> u64 {
    s.publish(subject, Headers::new(), "m").await.unwrap().seq
}

/// A delivery in brief: `Ok(message seq)`, or `Err((first, last, subjects))` of a removal.
type Brief = Result<u64, (u64, u64, Vec<String>)>;

fn summary(deliveries: &[Delivery]) -> Vec<Brief> {
    deliveries
        .iter()
        .map(|d| match d {
            Delivery::Message(m) => Ok(m.seq),
            Delivery::Removed(Removed {
                first,
                last,
                subjects,
            }) => Err((*first, *last, subjects.clone())),
            Delivery::Lost(lost) => panic!("nothing is lost here: {lost:?}"),
        })
        .collect()
}

fn removed(first: u64, last: u64, subject: &str) -> Brief {
    Err((first, last, vec![subject.to_owned()]))
}

/// Copies the stream's directory as a crash would leave it (the store still open).
fn crash_copy(from: &Path, to: &Path) {
    let src = from.join("streams").join(STREAM);
    let dst = to.join("streams").join(STREAM);
    for entry in walk(&src) {
        let rel = entry.strip_prefix(&src).unwrap();
        let target = dst.join(rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `a` and `b` alternate over 1..=20 (`a` odd); a purge of `a` below 15 removes 1, 3, …, 13:
/// a reader of `a` is told of them in one removal before 15, a reader of `b` of nothing, a
/// reader of everything of each one where it lies. Nothing counts as expired. The same after a
/// clean restart (index.db) and after index.db is gone (rebuilt from the blocks).
#[tokio::test]
async fn a_subject_purge_is_told_to_the_readers_of_that_subject_only() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut s) = open(dir.path());
    for n in 1..=20u64 {
        publish(&s, if n % 2 == 1 { "a" } else { "b" }).await;
    }
    let purge = PurgeRequest {
        filter: Some("a".into()),
        up_to_seq: Some(15),
        ..PurgeRequest::default()
    };
    assert_eq!(s.purge(purge).await.unwrap(), 7);
    for round in ["live", "reopened", "rebuilt"] {
        match round {
            "reopened" => {
                store.close();
                (store, s) = open(dir.path());
            }
            "rebuilt" => {
                store.close();
                std::fs::remove_file(dir.path().join("streams/R/msgs/index.db")).unwrap();
                (store, s) = open(dir.path());
            }
            _ => {}
        }
        assert_eq!(
            summary(&drain(&s, 1, "a")),
            [removed(1, 13, "a"), Ok(15), Ok(17), Ok(19)],
            "{round}"
        );
        let b: Vec<_> = (1..=10).map(|n| Ok(2 * n)).collect();
        assert_eq!(summary(&drain(&s, 1, "b")), b, "{round}: no noise");
        let everything = summary(&drain(&s, 1, ">"));
        for gone in (1..=13).step_by(2) {
            assert!(
                everything.contains(&removed(gone, gone, "a")),
                "{round}: {gone} told to `>`: {everything:?}"
            );
        }
        assert_eq!(everything.len(), 20, "{round}");
        // From inside the removals: only those after the start.
        assert_eq!(
            summary(&drain(&s, 6, "a"))[0],
            removed(7, 13, "a"),
            "{round}"
        );
        assert!(s.retained_from().expired_below <= 1, "{round}");
    }
    store.close();
}

/// A reader resuming after a deleted position continues right after it, told only of the
/// deleted positions of its subject that follow.
#[tokio::test]
async fn resuming_from_a_deleted_position_continues_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    // a: 1, 2, 4, 6, 8, 10; b: 3, 5, 7, 9.
    for subject in ["a", "a", "b", "a", "b", "a", "b", "a", "b", "a"] {
        publish(&s, subject).await;
    }
    for seq in [4, 6, 5] {
        assert!(s.delete_msg(seq).await.unwrap());
    }
    // The reader had 4 (its last id), which is deleted now: it resumes at 5. Its removal
    // begins there: 4 to 6 are one run of removals (no message lies between), and position 5
    // held another subject's.
    assert_eq!(
        summary(&drain(&s, 5, "a")),
        [removed(5, 6, "a"), Ok(8), Ok(10)]
    );
    assert_eq!(
        summary(&drain(&s, 5, "b")),
        [removed(5, 5, "b"), Ok(7), Ok(9)]
    );
    assert_eq!(summary(&drain(&s, 7, "a")), [Ok(8), Ok(10)]);
    assert_eq!(summary(&drain(&s, 1, "c.*")), []);
    store.close();
}

/// With one message per subject, every message superseded before a reader got to it is told
/// to the readers of its subject; the newest of each is delivered.
#[tokio::test]
async fn superseded_messages_are_told_to_the_readers_of_their_subject() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open_with(dir.path(), || StreamConfig {
        max_msgs_per_subject: 1,
        ..config()
    });
    // a, b, c.x, a, b, c.x, … 30 messages: the newest of each are 28, 29, 30.
    for n in 0..30 {
        publish(&s, ["a", "b", "c.x"][n % 3]).await;
    }
    assert_eq!(summary(&drain(&s, 1, "a")), [removed(1, 25, "a"), Ok(28)]);
    assert_eq!(
        summary(&drain(&s, 1, "c.*")),
        [removed(3, 27, "c.x"), Ok(30)]
    );
    assert_eq!(summary(&drain(&s, 29, "a")), []);
    // A reader of a subject that never had a message is told nothing.
    assert_eq!(summary(&drain(&s, 1, "c.y")), []);
    store.close();
}

/// Removals written after the last index.db are found again from their tombstones by the scan
/// recovery runs after a crash.
#[tokio::test]
async fn removals_after_the_last_snapshot_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    for n in 1..=10u64 {
        publish(&s, if n % 2 == 1 { "a" } else { "b" }).await;
    }
    s.flush().await.unwrap();
    assert!(s.delete_msg(3).await.unwrap());
    let purge = PurgeRequest {
        filter: Some("b".into()),
        up_to_seq: Some(7),
        ..PurgeRequest::default()
    };
    s.purge(purge).await.unwrap();
    crash_copy(dir.path(), crashed.path());
    store.close();
    let (store, s) = open(crashed.path());
    assert_eq!(
        summary(&drain(&s, 1, "a")),
        [Ok(1), removed(3, 3, "a"), Ok(5), Ok(7), Ok(9)]
    );
    assert_eq!(
        summary(&drain(&s, 1, "b")),
        [removed(2, 6, "b"), Ok(8), Ok(10)]
    );
    store.close();
}

/// A message that reaches its own TTL went as its publisher meant: no reader is told.
#[tokio::test]
async fn messages_gone_by_their_own_ttl_are_told_to_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open_with(dir.path(), || StreamConfig {
        allow_msg_ttl: true,
        ..config()
    });
    publish(&s, "b").await;
    let mut ttl = Headers::new();
    ttl.insert("Nats-TTL", "1s");
    s.publish("a", ttl, "short").await.unwrap();
    publish(&s, "a").await;
    sluice_test_support::eventually("the TTL expired", || matches!(s.get(2), Ok(None))).await;
    assert_eq!(summary(&drain(&s, 1, "a")), [Ok(3)]);
    store.close();
    let (store, s) = open(dir.path());
    assert_eq!(summary(&drain(&s, 1, "a")), [Ok(3)], "after a restart");
    store.close();
}

#[derive(Debug, Clone)]
enum Op {
    Publish(usize),
    /// Deletes the n-th live message (modulo).
    Delete(usize),
    /// Purges one subject, below a sequence or keeping the newest few.
    Purge(usize, Option<u8>, Option<u8>),
    Reopen,
    /// Closes, deletes index.db, opens (a rebuild from the blocks).
    Rebuild,
}

const SUBJECTS: [&str; 4] = ["a", "b", "c.x", "c.y"];
const FILTERS: [&str; 5] = ["a", "b", "c.*", ">", "c.z"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..SUBJECTS.len()).prop_map(Op::Publish),
        3 => any::<usize>().prop_map(Op::Delete),
        2 => (0..SUBJECTS.len(), proptest::option::of(any::<u8>()), proptest::option::of(0u8..3))
            .prop_map(|(n, up_to, keep)| Op::Purge(n, up_to, keep)),
        1 => Just(Op::Reopen),
        1 => Just(Op::Rebuild),
    ]
}

/// Model: every position's subject, and whether it is still there.
type Model = BTreeMap<u64, (usize, bool)>;

fn apply(rt: &tokio::runtime::Runtime, dir: &Path, ops: Vec<Op>) -> (Store, StreamHandle, Model) {
    let (mut store, mut s) = open(dir);
    let mut model = Model::new();
    for op in ops {
        match op {
            Op::Publish(n) => {
                let seq = rt.block_on(publish(&s, SUBJECTS[n]));
                model.insert(seq, (n, true));
            }
            Op::Delete(n) => {
                let live: Vec<u64> = model.iter().filter(|(_, m)| m.1).map(|(s, _)| *s).collect();
                if let Some(&seq) = live.get(n % live.len().max(1)) {
                    assert!(rt.block_on(s.delete_msg(seq)).unwrap());
                    model.get_mut(&seq).unwrap().1 = false;
                }
            }
            Op::Purge(n, up_to, keep) => {
                let request = PurgeRequest {
                    filter: Some(SUBJECTS[n].into()),
                    up_to_seq: up_to.map(u64::from),
                    keep: keep.map(u64::from),
                };
                rt.block_on(s.purge(request)).unwrap();
                let mut doomed: Vec<u64> = model
                    .iter()
                    .filter(|(seq, m)| {
                        m.1 && m.0 == n && up_to.is_none_or(|u| **seq < u64::from(u))
                    })
                    .map(|(s, _)| *s)
                    .collect();
                let kept = keep.map_or(0, usize::from).min(doomed.len());
                doomed.truncate(doomed.len() - kept);
                for seq in doomed {
                    model.get_mut(&seq).unwrap().1 = false;
                }
            }
            Op::Reopen | Op::Rebuild => {
                store.close();
                if matches!(op, Op::Rebuild) {
                    let _ = std::fs::remove_file(dir.join("streams/R/msgs/index.db"));
                }
                (store, s) = open(dir);
            }
        }
    }
    (store, s, model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Whatever was deleted and purged, and however the store was reopened: a subscriber of
    /// any filter from any position gets every message of its subjects still there, is told
    /// of every removed position of its subjects after its start, and of no removal that holds
    /// nothing of its own.
    #[test]
    fn every_subscriber_is_told_its_removals_and_only_those(
        ops in proptest::collection::vec(op(), 1..100),
        starts in proptest::collection::vec(any::<u8>(), 1..6),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (store, s, model) = apply(&rt, dir.path(), ops);
        let last = model.len() as u64;
        for filter in FILTERS {
            let f = FilterSet::new([filter]).unwrap();
            for &start in &starts {
                let start = u64::from(start) % (last + 2);
                let mine = |seq: u64, live: bool| {
                    model.get(&seq).is_some_and(|(n, l)| *l == live && f.matches(SUBJECTS[*n]))
                };
                let deliveries = drain(&s, start, filter);
                let mut messages = Vec::new();
                let mut told = Vec::new();
                let mut after = start.saturating_sub(1);
                for d in &deliveries {
                    match d {
                        Delivery::Message(m) => {
                            prop_assert!(m.seq > after);
                            messages.push(m.seq);
                            after = m.seq;
                        }
                        Delivery::Removed(r) => {
                            prop_assert!(r.first > after && r.first <= r.last, "{r:?} after {after}");
                            prop_assert!(
                                (r.first..=r.last).any(|seq| mine(seq, false)),
                                "{filter} from {start}: {r:?} holds nothing of its own"
                            );
                            prop_assert!(r.subjects.iter().all(|s| f.matches(s)));
                            told.push((r.first, r.last));
                            after = r.last;
                        }
                        Delivery::Lost(lost) => prop_assert!(false, "{lost:?}"),
                    }
                }
                let want: Vec<u64> = (start.max(1)..=last).filter(|seq| mine(*seq, true)).collect();
                prop_assert_eq!(&messages, &want, "{} from {}", filter, start);
                // Below it, every reader asking for them is told they expired (the hub does,
                // when its read of the stream opens).
                let expired_below = s.retained_from().expired_below;
                for seq in (start.max(expired_below).max(1)..=last).filter(|seq| mine(*seq, false)) {
                    prop_assert!(
                        told.iter().any(|(a, b)| (*a..=*b).contains(&seq)),
                        "{} from {}: removed {} passed in silence: {:?}", filter, start, seq, deliveries
                    );
                }
            }
        }
        store.close();
    }
}
