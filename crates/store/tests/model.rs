//! The store against a simple in-memory model under random operations, including close and
//! reopen (with and without index.db) and small blocks so rollover and block removal happen.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sluice_store::{FilterSet, Headers, PurgeRequest, Store, StoreOptions, StreamConfig};

#[derive(Debug, Clone)]
enum Op {
    Publish(u8, u8),
    Delete(u8),
    PurgeSubject(u8),
    PurgeUpTo(u8),
    PurgeKeep(u8),
    Reopen { drop_index: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..4, any::<u8>()).prop_map(|(s, n)| Op::Publish(s, n)),
        2 => any::<u8>().prop_map(Op::Delete),
        1 => (0u8..4).prop_map(Op::PurgeSubject),
        1 => any::<u8>().prop_map(Op::PurgeUpTo),
        1 => (0u8..6).prop_map(Op::PurgeKeep),
        1 => any::<bool>().prop_map(|drop_index| Op::Reopen { drop_index }),
    ]
}

#[derive(Default, Debug)]
struct Model {
    msgs: BTreeMap<u64, (String, Vec<u8>)>,
    last: u64,
}

const MAX_MSGS: usize = 30;
const MAX_PER_SUBJECT: usize = 12;

impl Model {
    /// Discard old: the subject's oldest beyond its limit, then the stream's oldest.
    fn enforce_limits(&mut self, subject: &str) {
        let on_subject: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, (s, _))| s == subject)
            .map(|(k, _)| *k)
            .collect();
        for seq in on_subject
            .iter()
            .take(on_subject.len().saturating_sub(MAX_PER_SUBJECT))
        {
            self.msgs.remove(seq);
        }
        while self.msgs.len() > MAX_MSGS {
            self.msgs.pop_first();
        }
    }
}

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: 512,
        ..StoreOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path(), opts()).unwrap();
        let cfg = StreamConfig { max_msgs: MAX_MSGS as i64, max_msgs_per_subject: MAX_PER_SUBJECT as i64, ..StreamConfig::new("M", ["m.*"]) };
        let mut s = store.create_stream(cfg).unwrap();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Publish(subj, n) => {
                    let subject = format!("m.{subj}");
                    let payload = vec![n; n as usize % 90];
                    let ack = rt.block_on(s.publish(subject.clone(), Headers::new(), payload.clone())).unwrap();
                    model.last += 1;
                    prop_assert_eq!(ack.seq, model.last);
                    model.msgs.insert(ack.seq, (subject.clone(), payload));
                    model.enforce_limits(&subject);
                }
                Op::Delete(n) => {
                    let seq = n as u64 % (model.last + 2);
                    let existed = rt.block_on(s.delete_msg(seq)).unwrap();
                    prop_assert_eq!(existed, model.msgs.remove(&seq).is_some());
                }
                Op::PurgeSubject(subj) => {
                    let subject = format!("m.{subj}");
                    let n = rt.block_on(s.purge(PurgeRequest { filter: Some(subject.clone()), ..Default::default() })).unwrap();
                    let before = model.msgs.len();
                    model.msgs.retain(|_, (sub, _)| *sub != subject);
                    prop_assert_eq!(n as usize, before - model.msgs.len());
                }
                Op::PurgeUpTo(n) => {
                    let upto = n as u64 % (model.last + 2);
                    rt.block_on(s.purge(PurgeRequest { up_to_seq: Some(upto), ..Default::default() })).unwrap();
                    model.msgs.retain(|seq, _| *seq >= upto);
                }
                Op::PurgeKeep(k) => {
                    rt.block_on(s.purge(PurgeRequest { keep: Some(k as u64), ..Default::default() })).unwrap();
                    let cut = model.msgs.len().saturating_sub(k as usize);
                    let doomed: Vec<u64> = model.msgs.keys().take(cut).copied().collect();
                    for seq in doomed {
                        model.msgs.remove(&seq);
                    }
                }
                Op::Reopen { drop_index } => {
                    store.close();
                    if drop_index {
                        let _ = std::fs::remove_file(dir.path().join("streams/M/msgs/index.db"));
                    }
                    let (st, reports) = Store::open(dir.path(), opts()).unwrap();
                    prop_assert!(reports[0].truncated.is_empty() && reports[0].lost.is_empty(), "{:?}", reports[0]);
                    store = st;
                    s = store.stream("M").unwrap();
                }
            }
            let info = s.info(None).state;
            prop_assert_eq!(info.msgs, model.msgs.len() as u64);
            prop_assert_eq!(info.last_seq, model.last);
            prop_assert_eq!(info.first_seq, model.msgs.keys().next().copied().unwrap_or(model.last + 1));
        }
        for seq in 0..=model.last + 1 {
            let got = s.get(seq).unwrap().map(|m| (m.subject, m.payload.to_vec()));
            prop_assert_eq!(got, model.msgs.get(&seq).cloned(), "seq {}", seq);
        }
        for subj in 0..4u8 {
            let subject = format!("m.{subj}");
            let filter = FilterSet::new([subject.as_str()]).unwrap();
            for from in [0, 1, model.last / 2, model.last] {
                let want = model.msgs.range(from..).find(|(_, (s, _))| *s == subject).map(|(k, _)| *k);
                prop_assert_eq!(s.next_matching(from, &filter).unwrap().map(|m| m.seq), want);
            }
            let want_last = model.msgs.iter().rev().find(|(_, (s, _))| *s == subject).map(|(k, _)| *k);
            prop_assert_eq!(s.last_for_subject(&subject).unwrap().map(|m| m.seq), want_last);
        }
        let wild = FilterSet::new(["m.*"]).unwrap();
        prop_assert_eq!(s.next_matching(0, &wild).unwrap().map(|m| m.seq), model.msgs.keys().next().copied());
        store.close();
    }
}
