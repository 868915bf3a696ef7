//! The store's promise about damage, under random operations: publishes on a few topics,
//! flushes, clean restarts and kill -9 restarts, with random damage to the files between a
//! stop and the next open (a flipped byte or a cut in a block, a deleted block, index.db,
//! lost.db or lease.db damaged or deleted). Small blocks, so there are many.
//!
//! The model is every acknowledged publish (seq → topic and a payload naming the publish),
//! and, per damage, the messages it could have cost: the record holding a flipped byte, the
//! records ending after a cut, a deleted block's records. After every open (and at the end):
//!
//! 1. a reader of everything from 1, and one per topic, gets in strictly increasing order, for
//!    every acknowledged message (of its topic), either that message once with its payload or
//!    a lost run covering it; only a message that damage could have cost may be missing;
//! 2. no sequence names two messages: a delivered sequence carries the payload it was
//!    acknowledged with, and a publish after an open gets a sequence above every one ever
//!    acknowledged;
//! 3. lost runs (for filtered readers too: a damaged record's subject cannot be read) cover
//!    only positions damage could have cost or that never held an acknowledged message.
//!
//! What cannot be reported, and the model allows (each where it is decided, below):
//! - a message cut from the end of the last block with no record or index.db behind it to
//!   prove it existed: only the sequence lease knows, so it is covered by an unconfirmed run,
//!   told only to a reader resuming inside it;
//! - the front block deleted with no index.db to name it: its leading last-sequence marker
//!   reads exactly like a front purge;
//! - a damaged run wholly below the first retained message: told as no longer retained
//!   ([`sluice_store::Retained`]), not as lost;
//! - once lost.db or lease.db is damaged, what only they remembered: the losses found so far
//!   may go unreported, and — lease.db gone — sequences nothing else proves were handed out
//!   may be handed out again (the model then forgets the messages they named).
//!
//! The kill is a copy of the data directory taken while the store is open: what a kill -9
//! leaves with the page cache intact, so the sync policy plays no part (every acknowledged
//! write is in the copy).

mod killed;

mod drained;
use drained::drain;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use sluice_store::{
    Delivery, Headers, LossCause, Lost, RecoveryReport, Store, StoreOptions, StreamConfig,
    StreamHandle,
};

const TOPICS: [&str; 3] = ["d.a", "d.b", "d.c"];
const BLOCK_SIZE: u64 = 300;

/// One of the sidecar files.
#[derive(Debug, Clone, Copy)]
enum Sidecar {
    Index,
    Lost,
    Lease,
}

impl Sidecar {
    fn file(self) -> &'static str {
        match self {
            Sidecar::Index => "index.db",
            Sidecar::Lost => "lost.db",
            Sidecar::Lease => "lease.db",
        }
    }
}

/// Damage done to a stopped store's files. Blocks are picked among those present, offsets
/// within the file, both modulo.
#[derive(Debug, Clone)]
enum Damage {
    FlipBlockByte {
        block: u8,
        at: u16,
    },
    CutBlock {
        block: u8,
        at: u16,
    },
    /// A cut at a record boundary: after the `record`-th message record of the block.
    CutBlockAtRecord {
        block: u8,
        record: u8,
    },
    DeleteBlock {
        block: u8,
    },
    FlipSidecarByte {
        file: Sidecar,
        at: u16,
    },
    DeleteSidecar(Sidecar),
}

#[derive(Debug, Clone)]
enum Op {
    /// Publishes one message per `(topic, padding)`, as one batch.
    Publish(Vec<(usize, u8)>),
    Flush,
    /// Stops the store (cleanly, or as kill -9 leaves it), damages its files, opens it.
    Restart {
        kill: bool,
        damage: Vec<Damage>,
    },
}

fn sidecar() -> impl Strategy<Value = Sidecar> {
    prop_oneof![
        Just(Sidecar::Index),
        Just(Sidecar::Lost),
        Just(Sidecar::Lease)
    ]
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        3 => (any::<u8>(), any::<u16>()).prop_map(|(block, at)| Damage::FlipBlockByte { block, at }),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(block, at)| Damage::CutBlock { block, at }),
        2 => (any::<u8>(), any::<u8>())
            .prop_map(|(block, record)| Damage::CutBlockAtRecord { block, record }),
        2 => any::<u8>().prop_map(|block| Damage::DeleteBlock { block }),
        2 => (sidecar(), any::<u16>()).prop_map(|(file, at)| Damage::FlipSidecarByte { file, at }),
        2 => sidecar().prop_map(Damage::DeleteSidecar),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => proptest::collection::vec((0..TOPICS.len(), 0u8..40), 1..8).prop_map(Op::Publish),
        1 => Just(Op::Flush),
        3 => (any::<bool>(), proptest::collection::vec(damage(), 0..3))
            .prop_map(|(kill, damage)| Op::Restart { kill, damage }),
    ]
}

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: BLOCK_SIZE,
        // Only the test's flushes and closes write index.db.
        flush_interval: Duration::from_secs(3600),
        ..StoreOptions::default()
    }
}

/// An acknowledged message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Msg {
    topic: usize,
    payload: String,
}

/// The payload of publish `uid`: the marker `P<uid>:` then padding, so that its record can be
/// found in the block files (and no marker is part of another).
fn payload(uid: u64, pad: u8) -> String {
    format!("P{uid:06}:{}", "x".repeat(pad as usize))
}

#[derive(Default, Debug)]
struct Model {
    /// Every acknowledged message still owed.
    acked: BTreeMap<u64, Msg>,
    /// The highest sequence ever acknowledged.
    max_acked: u64,
    next_uid: u64,
    /// Sequences of messages some damage could have cost.
    touched: BTreeSet<u64>,
    /// Touched sequences whose loss may go unreported (see the module comment).
    vanishable: BTreeSet<u64>,
    /// Any damage done so far.
    damaged_ever: bool,
}

/// Where the message records are: block id → `(seq, start, end)` of every record holding an
/// acknowledged message's payload marker (damaged ones too, so that nothing is missed).
fn locate(msgs: &Path, model: &Model) -> BTreeMap<u32, Vec<(u64, usize, usize)>> {
    let by_uid: BTreeMap<String, (u64, usize)> = model
        .acked
        .iter()
        .map(|(seq, m)| (m.payload[..8].to_string(), (*seq, m.payload.len())))
        .collect();
    let mut out = BTreeMap::new();
    for id in block_ids(msgs) {
        let data = fs::read(block_file(msgs, id)).unwrap();
        let mut found = Vec::new();
        for p in 0..data.len().saturating_sub(8) {
            if data[p] != b'P' || data[p + 7] != b':' {
                continue;
            }
            let Ok(marker) = std::str::from_utf8(&data[p..p + 8]) else {
                continue;
            };
            if let Some(&(seq, len)) = by_uid.get(marker) {
                // Length prefix, kind, flags, seq, ts, subject length, subject; payload; checksum.
                let start = p.saturating_sub(4 + 1 + 1 + 8 + 8 + 2 + 3);
                found.push((seq, start, p + len + 8));
            }
        }
        out.insert(id, found);
    }
    out
}

fn block_file(msgs: &Path, id: u32) -> PathBuf {
    msgs.join(format!("{id}.blk"))
}

fn block_ids(msgs: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = fs::read_dir(msgs)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name();
            name.to_str()?.strip_suffix(".blk")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut data = fs::read(path).unwrap();
    change(&mut data);
    fs::write(path, data).unwrap();
}

/// Does `d` to the stopped store in `dir`, noting in the model what it could cost.
fn apply(dir: &Path, d: &Damage, model: &mut Model, window: &mut Window) {
    let msgs = dir.join("streams/D/msgs");
    let ids = block_ids(&msgs);
    let records = locate(&msgs, model);
    let pick = |b: u8| ids.get(b as usize % ids.len().max(1)).copied();
    match *d {
        Damage::FlipBlockByte { block, at } => {
            let Some(id) = pick(block) else { return };
            let path = block_file(&msgs, id);
            let len = fs::metadata(&path).unwrap().len() as usize;
            if len == 0 {
                return;
            }
            let at = at as usize % len;
            edit(&path, |data| data[at] ^= 0x10);
            // A damaged record costs only itself.
            let hit = records[&id]
                .iter()
                .filter(|(_, s, e)| (*s..*e).contains(&at));
            model.touched.extend(hit.map(|(seq, _, _)| *seq));
        }
        Damage::CutBlock { block, at } => {
            let Some(id) = pick(block) else { return };
            let path = block_file(&msgs, id);
            let len = fs::metadata(&path).unwrap().len() as usize;
            cut(&path, at as usize % (len + 1), &records[&id], model);
        }
        Damage::CutBlockAtRecord { block, record } => {
            let Some(id) = pick(block) else { return };
            let recs = &records[&id];
            if recs.is_empty() {
                return;
            }
            let at = recs[record as usize % recs.len()].2;
            cut(&block_file(&msgs, id), at, recs, model);
        }
        Damage::DeleteBlock { block } => {
            if ids.len() < 2 {
                return;
            }
            let id = pick(block).unwrap();
            fs::remove_file(block_file(&msgs, id)).unwrap();
            let seqs = records[&id].iter().map(|(seq, _, _)| *seq);
            model.touched.extend(seqs.clone());
            if id == ids[0] {
                // With no index.db naming it, a missing front block looks exactly like blocks
                // removed after a purge (the next one starts with a last-sequence marker).
                model.vanishable.extend(seqs);
            }
        }
        Damage::FlipSidecarByte { file, at } => {
            let path = msgs.join(file.file());
            let Ok(len) = fs::metadata(&path).map(|m| m.len() as usize) else {
                return;
            };
            if len > 0 {
                edit(&path, |data| data[at as usize % len] ^= 0x10);
                window.sidecar(file);
            }
        }
        Damage::DeleteSidecar(file) => {
            if fs::remove_file(msgs.join(file.file())).is_ok() {
                window.sidecar(file);
            }
        }
    }
    model.damaged_ever = true;
}

/// Cuts the block at `at`: the records ending after it are gone.
fn cut(path: &Path, at: usize, records: &[(u64, usize, usize)], model: &mut Model) {
    edit(path, |data| data.truncate(at));
    let hit = records.iter().filter(|(_, _, end)| *end > at);
    model.touched.extend(hit.map(|(seq, _, _)| *seq));
}

/// What the damage between a stop and the next open did to what only sidecars remember.
#[derive(Default)]
struct Window {
    lost_db: bool,
    lease_db: bool,
}

impl Window {
    fn sidecar(&mut self, file: Sidecar) {
        match file {
            Sidecar::Index => {}
            Sidecar::Lost => self.lost_db = true,
            Sidecar::Lease => self.lease_db = true,
        }
    }
}

fn covers(ranges: &[(u64, u64)], seq: u64) -> bool {
    ranges.iter().any(|(a, b)| (*a..=*b).contains(&seq))
}

/// Checks every reader against the model; returns the highest position the store knows of
/// (delivered, or named by a lost run).
fn check(s: &StreamHandle, model: &Model) -> Result<u64, TestCaseError> {
    let state = s.info(None).state;
    let unconfirmed = state.lost.unconfirmed.clone();
    let first_retained = s.retained_from().first_seq;
    let mut known = state.last_seq;
    for &(_, b) in state.lost.damaged.iter().chain(&unconfirmed) {
        known = known.max(b);
    }
    let mut everything: Option<BTreeSet<u64>> = None;
    for filter in [">"].into_iter().chain(TOPICS) {
        let topic = TOPICS.iter().position(|t| *t == filter);
        let deliveries = drain(s, 1, filter);
        let mut delivered = BTreeSet::new();
        let mut lost: Vec<(u64, u64)> = Vec::new();
        let mut after = 0;
        for d in &deliveries {
            let first = match d {
                Delivery::Message(m) => m.seq,
                Delivery::Lost(l) => l.first,
                Delivery::Removed(r) => r.first,
            };
            prop_assert!(
                first > after,
                "{filter}: out of order at {first} after {after}: {deliveries:?}"
            );
            after = d.last_seq();
            known = known.max(after);
            match d {
                Delivery::Message(m) => {
                    let want = model.acked.get(&m.seq);
                    prop_assert!(want.is_some(), "{filter}: {m:?} was never acknowledged");
                    let want = want.unwrap();
                    prop_assert_eq!(&m.payload[..], want.payload.as_bytes(), "seq {}", m.seq);
                    prop_assert_eq!(m.subject.as_str(), TOPICS[want.topic], "seq {}", m.seq);
                    prop_assert!(topic.is_none_or(|t| t == want.topic), "{filter}: {m:?}");
                    delivered.insert(m.seq);
                }
                Delivery::Lost(l) => {
                    prop_assert_eq!(l.cause, LossCause::Damaged, "{}: from 1: {:?}", filter, l);
                    for seq in model.acked.range(l.first..=l.last).map(|(s, _)| *s) {
                        prop_assert!(
                            model.touched.contains(&seq),
                            "{filter}: {l:?} covers {seq}, which no damage touched"
                        );
                    }
                    lost.push((l.first, l.last));
                }
                // Nothing is deleted or purged here: no removal can be told.
                Delivery::Removed(r) => prop_assert!(false, "{filter}: {r:?} told"),
            }
        }
        for (&seq, m) in &model.acked {
            if topic.is_some_and(|t| t != m.topic) || delivered.contains(&seq) {
                continue;
            }
            prop_assert!(
                model.touched.contains(&seq),
                "{filter}: {seq} ({m:?}), which no damage touched, is missing: {deliveries:?}"
            );
            let told = covers(&lost, seq)
                || covers(&unconfirmed, seq)
                || model.vanishable.contains(&seq)
                || seq < first_retained;
            prop_assert!(
                told,
                "{filter}: {seq} is missing and no reader is told: {deliveries:?}, unconfirmed {unconfirmed:?}"
            );
        }
        match (&everything, topic) {
            (None, _) => everything = Some(delivered),
            (Some(all), Some(t)) => {
                let want: BTreeSet<u64> = all
                    .iter()
                    .copied()
                    .filter(|seq| model.acked[seq].topic == t)
                    .collect();
                prop_assert_eq!(delivered, want, "{} against >", filter);
            }
            (Some(_), None) => unreachable!(),
        }
    }
    // A reader holding an id inside an unconfirmed run is told the rest of it first.
    for &(a, b) in &unconfirmed {
        if a + 1 < b {
            let first = drain(s, a + 2, ">").into_iter().next();
            let want = Lost {
                first: a + 2,
                last: b,
                cause: LossCause::Unconfirmed,
            };
            prop_assert_eq!(first, Some(Delivery::Lost(want)));
        }
    }
    Ok(known)
}

fn open(dir: &Path) -> (Store, StreamHandle, RecoveryReport) {
    let (store, mut reports) =
        Store::open(dir, opts()).expect("the store opens whatever the damage");
    let s = store.stream("D").expect("the stream is there");
    (store, s, reports.remove(0))
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    let (mut store, mut s) = (store, s);
    let mut model = Model::default();
    // The highest position the store knew of at the last open.
    let mut floor = 0;
    for op in ops {
        match op {
            Op::Publish(batch) => {
                let batch: Vec<_> = batch
                    .into_iter()
                    .map(|(topic, pad)| {
                        model.next_uid += 1;
                        (topic, payload(model.next_uid, pad))
                    })
                    .collect();
                let request = batch
                    .iter()
                    .map(|(t, p)| (TOPICS[*t].to_string(), Headers::new(), p.clone().into()))
                    .collect();
                let acks = futures::executor::block_on(s.publish_batch(request)).unwrap();
                let mut prev: Option<u64> = None;
                for ((topic, payload), ack) in batch.into_iter().zip(acks) {
                    let seq = ack.unwrap().seq;
                    match prev {
                        Some(p) => prop_assert_eq!(seq, p + 1),
                        None => {
                            prop_assert!(
                                seq > floor,
                                "{seq} handed out again: the store knew of positions up to {floor}"
                            );
                            prop_assert!(
                                seq > model.max_acked,
                                "{seq} handed out again (acknowledged up to {})",
                                model.max_acked
                            );
                        }
                    }
                    prev = Some(seq);
                    model.acked.insert(seq, Msg { topic, payload });
                    model.max_acked = model.max_acked.max(seq);
                }
            }
            Op::Flush => futures::executor::block_on(s.flush()).unwrap(),
            Op::Restart { kill, damage } => {
                if kill {
                    let copy = tempfile::tempdir().unwrap();
                    killed::copy_files(dir.path(), copy.path());
                    store.close();
                    dir = copy;
                } else {
                    store.close();
                }
                let mut window = Window::default();
                for d in &damage {
                    apply(dir.path(), d, &mut model, &mut window);
                }
                if window.lost_db || window.lease_db {
                    // What only they remembered may be forgotten.
                    let touched = model.touched.clone();
                    model.vanishable.extend(touched);
                }
                let (st, handle, report) = open(dir.path());
                (store, s) = (st, handle);
                if !model.damaged_ever {
                    prop_assert!(
                        report.lost.is_empty()
                            && report.truncated.is_empty()
                            && report.damaged.is_empty(),
                        "nothing was damaged: {report:?}"
                    );
                }
                floor = check(&s, &model).map_err(|e| {
                    TestCaseError::fail(format!("{e}\nafter {damage:?}\nreport {report:?}"))
                })?;
                if window.lease_db {
                    // With the lease lost, the sequences nothing else proves were handed out
                    // will be handed out again: the messages they named are forgotten.
                    let stale: Vec<u64> = model.acked.range(floor + 1..).map(|(s, _)| *s).collect();
                    for seq in stale {
                        prop_assert!(model.vanishable.contains(&seq), "{seq} forgotten");
                        model.acked.remove(&seq);
                    }
                    model.max_acked = model.acked.keys().last().copied().unwrap_or(0);
                }
            }
        }
    }
    check(&s, &model)?;
    store.close();
    let (store, s, _) = open(dir.path());
    check(&s, &model)?;
    store.close();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn damage_costs_only_what_it_touched(ops in proptest::collection::vec(op(), 10..25)) {
        run(ops)?;
    }
}
