//! Bounded reads (`StreamHandle::read_range`) on real store files: what a subscription gives
//! below the bound, then the end, without waiting for any later message.

use futures::{FutureExt, StreamExt};
use proptest::prelude::*;
use sluice_store::{
    Delivery, FilterSet, Headers, Lost, PurgeRequest, Removed, Store, StoreOptions, StreamConfig,
    StreamHandle,
};

fn opts() -> StoreOptions {
    StoreOptions {
        // Small blocks, so reads cross many of them.
        block_size: 1024,
        ..StoreOptions::default()
    }
}

fn open(dir: &std::path::Path) -> (Store, StreamHandle) {
    let (store, _) = Store::open(dir, opts()).unwrap();
    let s = match store.stream("U") {
        Some(s) => s,
        None => store
            .create_stream(StreamConfig::new("U", ["user.>"]))
            .unwrap(),
    };
    (store, s)
}

/// What a read gives without waiting: every delivery ready now, and whether it then ended
/// (`false`: it waits for positions not visible yet).
fn drain(
    read: impl futures::Stream<Item = sluice_store::Result<Delivery>>,
) -> (Vec<Delivery>, bool) {
    let mut read = Box::pin(read);
    let mut out = Vec::new();
    loop {
        match read.next().now_or_never() {
            Some(Some(next)) => out.push(next.expect("a read failed")),
            Some(None) => return (out, true),
            None => return (out, false),
        }
    }
}

/// A bounded read of `filter` that must end without waiting; its message sequences.
fn bounded_seqs(s: &StreamHandle, filter: &str, start: u64, until: u64) -> Vec<u64> {
    let (got, ended) = drain(s.read_range(start, until, FilterSet::new([filter]).unwrap()));
    assert!(
        ended,
        "the read of {filter} from {start} until {until} waits after {got:?}"
    );
    got.into_iter()
        .map(|d| d.message().expect("no loss").seq)
        .collect()
}

async fn publish(s: &StreamHandle, subject: &str) -> u64 {
    s.publish(subject, Headers::new(), "m").await.unwrap().seq
}

/// 300 messages: one in 50 on `user.7` (seqs 7, 57, …, 257), the rest spread over other users.
async fn sparse_stream(s: &StreamHandle) -> Vec<u64> {
    let mut sparse = Vec::new();
    for n in 1..=300u64 {
        let subject = if n % 50 == 7 {
            "user.7".to_owned()
        } else {
            format!("user.{}", 100 + n % 13)
        };
        let seq = publish(s, &subject).await;
        if subject == "user.7" {
            sparse.push(seq);
        }
    }
    sparse
}

#[tokio::test]
async fn a_bounded_read_of_a_sparse_topic_gives_what_is_below_the_bound_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    let sparse = sparse_stream(&s).await;
    assert_eq!(sparse, [7, 57, 107, 157, 207, 257]);
    // Later messages of the topic exist.
    assert_eq!(bounded_seqs(&s, "user.7", 1, 200), [7, 57, 107, 157]);
    assert_eq!(bounded_seqs(&s, "user.7", 100, 208), [107, 157, 207]);
    // None exists yet: the read does not wait for the next one.
    assert_eq!(bounded_seqs(&s, "user.7", 1, 301), sparse);
    assert_eq!(bounded_seqs(&s, "user.*", 258, 301).len(), 43);
    store.close();
}

#[tokio::test]
async fn a_bounded_read_with_nothing_to_give_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    sparse_stream(&s).await;
    assert_eq!(bounded_seqs(&s, "user.nobody", 1, 301), [0u64; 0]);
    assert_eq!(bounded_seqs(&s, "user.7", 258, 301), [0u64; 0]);
    // An empty range.
    assert_eq!(bounded_seqs(&s, ">", 50, 50), [0u64; 0]);
    assert_eq!(bounded_seqs(&s, ">", 50, 10), [0u64; 0]);
    assert_eq!(bounded_seqs(&s, ">", 0, 0), [0u64; 0]);
    store.close();
}

#[tokio::test]
async fn a_bounded_read_waits_only_while_positions_below_its_bound_are_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    for _ in 0..10 {
        publish(&s, "user.1").await;
    }
    let mut read = Box::pin(s.read_range(1, 13, FilterSet::new(["user.1"]).unwrap()));
    let (got, ended) = drain(read.by_ref());
    assert_eq!(
        (got.len(), ended),
        (10, false),
        "11 and 12 are not there yet"
    );
    publish(&s, "user.2").await;
    assert!(matches!(drain(read.by_ref()), (got, false) if got.is_empty()));
    publish(&s, "user.2").await;
    let (got, ended) = drain(read.by_ref());
    assert!(
        ended && got.is_empty(),
        "12 is there: {got:?}, ended {ended}"
    );
    store.close();
}

/// Restricts deliveries to the positions below `until`. A removal is kept as where it begins:
/// the subscription joins the removals before its next message into one, which may reach past
/// the bound over positions of other subjects (and name subjects removed only there), where
/// the bounded read stops at its last removal below the bound.
fn below(deliveries: Vec<Delivery>, until: u64) -> Vec<Delivery> {
    deliveries
        .into_iter()
        .filter_map(|d| match d {
            Delivery::Message(m) => (m.seq < until).then_some(Delivery::Message(m)),
            Delivery::Lost(lost) => (lost.first < until).then(|| {
                Delivery::Lost(Lost {
                    last: lost.last.min(until - 1),
                    ..lost
                })
            }),
            Delivery::Removed(removed) => (removed.first < until).then(|| {
                Delivery::Removed(Removed {
                    last: removed.first,
                    subjects: Vec::new(),
                    ..removed
                })
            }),
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    /// One message on `user.<n>`; user 0 is rare.
    Publish(u8),
    /// Removes user `n`'s messages, all or up to a sequence.
    Purge(u8, Option<u16>),
    /// Closes and opens the store again.
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (1u8..5).prop_map(Op::Publish),
        2 => Just(Op::Publish(0)),
        2 => (0u8..5, proptest::option::of(any::<u16>())).prop_map(|(n, up_to)| Op::Purge(n, up_to)),
        1 => Just(Op::Reopen),
    ]
}

fn filter(n: u8) -> &'static str {
    ["user.0", "user.1", "user.*", ">", "user.nobody"][n as usize % 5]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// For any history, start and bound, a bounded read gives what the subscription from the
    /// same start gives below the bound, and then ends without waiting.
    #[test]
    fn a_bounded_read_is_the_subscription_cut_at_its_bound(
        ops in proptest::collection::vec(op(), 1..120),
        reads in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>()), 1..12),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut s) = open(dir.path());
        for op in ops {
            match op {
                Op::Publish(n) => {
                    futures::executor::block_on(publish(&s, &format!("user.{n}")));
                }
                Op::Purge(n, up_to) => {
                    let request = PurgeRequest {
                        filter: Some(format!("user.{n}")),
                        up_to_seq: up_to.map(u64::from),
                        ..PurgeRequest::default()
                    };
                    futures::executor::block_on(s.purge(request)).unwrap();
                }
                Op::Reopen => {
                    store.close();
                    (store, s) = open(dir.path());
                }
            }
        }
        let last = s.info(None).state.last_seq;
        for (f, start, until) in reads {
            let (start, until) = (u64::from(start) % (last + 2), u64::from(until) % (last + 2));
            let (name, filter) = (filter(f), FilterSet::new([filter(f)]).unwrap());
            let (all, _) = drain(s.subscribe(start, filter.clone()));
            let (bounded, ended) = drain(s.read_range(start, until, filter));
            prop_assert!(ended, "{name} from {start} until {until} (last {last}) waits");
            // A removal the bounded read tells ends no later than the subscription's.
            let removals = |d: &[Delivery]| -> Vec<(u64, u64)> {
                d.iter()
                    .filter_map(|d| match d {
                        Delivery::Removed(r) if r.first < until => Some((r.first, r.last)),
                        _ => None,
                    })
                    .collect()
            };
            for (b, a) in removals(&bounded).into_iter().zip(removals(&all)) {
                prop_assert!(b.0 == a.0 && b.1 <= a.1 && b.1 < until, "{b:?} {a:?}");
            }
            prop_assert_eq!(
                below(bounded, until),
                below(all, until),
                "{} from {} until {}",
                name,
                start,
                until
            );
        }
        store.close();
    }
}
