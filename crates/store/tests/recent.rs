//! Recent reads of a stream on real files: the latest message of each subject, the first of the
//! last N, the first since a time — against a model, across many small blocks, on a stream
//! reopened from index.db; and the latest read of one subject reads one block, not the stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proptest::prelude::*;
use sluice_store::{Delivery, FilterSet, Headers, Store, StoreOptions, StreamConfig, StreamHandle};

const STREAM: &str = "S";
const SUBJECTS: [&str; 5] = ["k.a", "k.b", "k.c.d", "k.e", "other"];
const FILTERS: [&[&str]; 4] = [&["k.>"], &["k.b"], &["k.a", "k.c.d"], &["k.*"]];

fn opts() -> StoreOptions {
    StoreOptions {
        // About four messages per block.
        block_size: 256,
        ..StoreOptions::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Publishes `picks` (subjects by index) to a new stream in `dir`, deletes the positions
/// `deletes` names, closes the store cleanly; the published `(seq, subject)` and the times
/// taken just before each publish.
fn fill(dir: &Path, picks: &[usize], deletes: &[u64]) -> Vec<(u64, &'static str, jiff::Timestamp)> {
    let (store, _) = Store::open(dir, opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new(STREAM, ["k.>", "other"]))
        .unwrap();
    let published = rt().block_on(async {
        let mut published = Vec::new();
        for &pick in picks {
            let before = jiff::Timestamp::now();
            let ack = s
                .publish(SUBJECTS[pick], Headers::new(), "v")
                .await
                .unwrap();
            published.push((ack.seq, SUBJECTS[pick], before));
        }
        for &seq in deletes {
            let _ = s.delete_msg(seq).await;
        }
        published
    });
    store.close();
    published
}

fn latest(s: &StreamHandle, filter: &FilterSet, until: u64) -> Vec<u64> {
    s.read_latest(until, filter.clone())
        .map(|d| match d.unwrap() {
            Delivery::Message(m) => m.seq,
            other => panic!("{other:?}"),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the messages, deletes, filters and bounds: the latest read gives the latest
    /// retained message of each matching subject below the bound, in order; the last-N start
    /// is the first of the N most recent matching; the since start is the first message stored
    /// at or after the time.
    #[test]
    fn recent_reads_are_what_the_model_says(
        picks in proptest::collection::vec(0usize..SUBJECTS.len(), 0..50),
        deletes in proptest::collection::vec(1u64..50, 0..8),
        filter in 0usize..FILTERS.len(),
        until in 1u64..55,
        n in 1u64..20,
        since_at in 0usize..50,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let published = fill(dir.path(), &picks, &deletes);
        let deleted: BTreeSet<u64> = deletes.iter().copied().collect();
        let filter = FilterSet::new(FILTERS[filter].iter().copied()).unwrap();
        let retained: Vec<(u64, &str)> = published
            .iter()
            .filter(|(seq, subject, _)| !deleted.contains(seq) && filter.matches(subject))
            .map(|(seq, subject, _)| (*seq, *subject))
            .collect();
        let last = published.len() as u64;

        // Reopened from index.db: no block read before the queries.
        let (store, _) = Store::open(dir.path(), opts()).unwrap();
        let s = store.stream(STREAM).unwrap();
        let by_subject: BTreeMap<&str, u64> = retained
            .iter()
            .filter(|(seq, _)| *seq < until)
            .map(|(seq, subject)| (*subject, *seq))
            .collect();
        let want: Vec<u64> = by_subject.into_values().collect::<BTreeSet<_>>().into_iter().collect();
        prop_assert_eq!(latest(&s, &filter, until), want);

        let upto = until.min(last);
        let matching: Vec<u64> = retained.iter().map(|(seq, _)| *seq).filter(|seq| *seq <= upto).collect();
        let want = match matching.len().checked_sub(n as usize) {
            _ if matching.is_empty() => upto + 1,
            Some(skip) => matching[skip],
            None => matching[0],
        };
        prop_assert_eq!(s.last_n_start(&filter, n, upto).unwrap(), want);

        // Just before message `since_at` was published: every earlier one is stored before.
        let since = published.get(since_at).map_or_else(jiff::Timestamp::now, |p| p.2);
        let want = published
            .iter()
            .skip(since_at)
            .map(|(seq, _, _)| *seq)
            .find(|seq| !deleted.contains(seq))
            .unwrap_or(last + 1);
        prop_assert_eq!(s.first_stored_since(since).unwrap(), want);
        store.close();
    }
}

/// The latest of one subject, on a stream of many blocks opened from index.db, reads the
/// block that holds it and no other: the per-subject index, not a scan.
#[test]
fn the_latest_of_one_subject_reads_one_block() {
    let dir = tempfile::tempdir().unwrap();
    let picks: Vec<usize> = (0..400)
        .map(|i| if i == 7 { 1 } else { i % 2 * 3 })
        .collect();
    fill(dir.path(), &picks, &[]);
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store.stream(STREAM).unwrap();
    assert_eq!(s.blocks_loaded(), 0);
    let filter = FilterSet::new(["k.b"]).unwrap();
    assert_eq!(latest(&s, &filter, 401), [8]);
    assert_eq!(s.blocks_loaded(), 1, "one block read");
    assert_eq!(s.last_n_start(&filter, 3, 400).unwrap(), 8);
    assert_eq!(s.blocks_loaded(), 1, "no other block read");
    store.close();
}
