//! Sourcing under random operations — origin publishes on sourced and unsourced subjects,
//! purges of the sourcing stream, flushes, and restarts with sources.db kept, deleted or
//! corrupted: every matching origin message is sourced exactly once, never one that does not
//! match.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;

use proptest::prelude::*;
use sluice_store::{
    FilterSet, Headers, PurgeRequest, SourceConfig, Store, StoreOptions, StoredMessage,
    StreamConfig, StreamHandle,
};
use tokio::runtime::Runtime;

const SUBJECTS: [&str; 3] = ["o.a", "o.b", "o.c"];
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy)]
enum SourcesDb {
    Keep,
    Delete,
    Corrupt,
}

#[derive(Debug, Clone)]
enum Op {
    Publish(usize, u8),
    Purge,
    Flush,
    Reopen(SourcesDb),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SUBJECTS.len(), 1u8..6).prop_map(|(s, n)| Op::Publish(s, n)),
        1 => Just(Op::Purge),
        1 => Just(Op::Flush),
        2 => prop_oneof![Just(SourcesDb::Keep), Just(SourcesDb::Delete), Just(SourcesDb::Corrupt)]
            .prop_map(Op::Reopen),
    ]
}

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: 1024,
        ..StoreOptions::default()
    }
}

fn aggregate() -> StreamConfig {
    let src = |filter: &str| SourceConfig {
        name: "O".into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: Some(filter.into()),
        subject_transforms: vec![],
    };
    StreamConfig {
        sources: vec![src("o.a"), src("o.b")],
        ..StreamConfig::new("ALL", Vec::<String>::new())
    }
}

/// Everything the sourcing stream ever stored: origin seq → times stored.
#[derive(Default)]
struct Seen {
    count: BTreeMap<u64, u32>,
    read_to: u64,
}

impl Seen {
    /// Counts one message the sourcing stream stored.
    fn note(&mut self, m: &StoredMessage) {
        let v = m.headers.get("Nats-Stream-Source").unwrap();
        let origin_seq: u64 = v.split(' ').nth(1).unwrap().parse().unwrap();
        *self.count.entry(origin_seq).or_default() += 1;
        self.read_to = m.seq;
    }

    /// Follows what `all` stores, as it is stored, until every origin seq in `want` has
    /// arrived (deadline).
    fn catch_up(&mut self, rt: &Runtime, all: &StreamHandle, want: &[u64]) {
        let mut stored = Box::pin(
            all.subscribe(self.read_to + 1, FilterSet::new([">"]).unwrap())
                .map(|d| d.map(|d| d.message().expect("nothing lost"))),
        );
        let until_all_arrived = async {
            while !want.iter().all(|s| self.count.contains_key(s)) {
                let m = stored.next().await.expect("the stream is open").unwrap();
                self.note(&m);
            }
        };
        let arrived =
            rt.block_on(async { tokio::time::timeout(DEADLINE, until_all_arrived).await });
        assert!(arrived.is_ok(), "not sourced: {want:?} vs {:?}", self.count);
    }
}

fn damage(dir: &Path, how: SourcesDb) {
    let path = dir.join("streams/ALL/sources.db");
    match how {
        SourcesDb::Keep => {}
        SourcesDb::Delete => {
            let _ = std::fs::remove_file(path);
        }
        SourcesDb::Corrupt => {
            if let Ok(mut b) = std::fs::read(&path) {
                let last = b.len() - 1;
                b[last] ^= 1;
                std::fs::write(&path, b).unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn every_matching_origin_message_is_sourced_exactly_once(ops in proptest::collection::vec(op(), 1..16)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path(), opts()).unwrap();
        let mut origin = store.create_stream(StreamConfig::new("O", ["o.*"])).unwrap();
        let mut all = store.create_stream(aggregate()).unwrap();
        let mut matching: Vec<u64> = Vec::new();
        let mut seen = Seen::default();
        let publish = |origin: &StreamHandle, subject: usize, matching: &mut Vec<u64>| {
            let ack = rt.block_on(origin.publish(SUBJECTS[subject], Headers::new(), "x")).unwrap();
            if subject < 2 {
                matching.push(ack.seq);
            }
        };
        for op in ops {
            match op {
                Op::Publish(subject, n) => {
                    for _ in 0..n {
                        publish(&origin, subject, &mut matching);
                    }
                }
                Op::Purge => {
                    seen.catch_up(&rt, &all, &matching);
                    rt.block_on(all.purge(PurgeRequest::default())).unwrap();
                }
                Op::Flush => rt.block_on(all.flush()).unwrap(),
                Op::Reopen(how) => {
                    seen.catch_up(&rt, &all, &matching);
                    store.close();
                    damage(dir.path(), how);
                    let (s, _) = Store::open(dir.path(), opts()).unwrap();
                    store = s;
                    origin = store.stream("O").unwrap();
                    all = store.stream("ALL").unwrap();
                }
            }
        }
        // Sourcing follows origin order: once these arrive, any duplicate would have too.
        publish(&origin, 0, &mut matching);
        publish(&origin, 1, &mut matching);
        seen.catch_up(&rt, &all, &matching);
        let twice: Vec<_> = seen.count.iter().filter(|(_, n)| **n > 1).collect();
        prop_assert!(twice.is_empty(), "sourced more than once: {:?}", twice);
        let got: Vec<u64> = seen.count.keys().copied().collect();
        prop_assert_eq!(got, matching);
        store.close();
    }
}
