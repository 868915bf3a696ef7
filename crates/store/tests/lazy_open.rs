//! Opening from index.db reads no block: a stream reopened from it answers exactly like the
//! stream before it was closed, reads only the blocks its queries need, and a damaged block
//! found on first read fails only the reads of what it lost.

mod killed;

use std::fs;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use sluice_store::{
    FilterSet, Headers, INDEX_BYTES_PER_MESSAGE, LossCause, Lost, PurgeRequest, RecoveryPath,
    Store, StoreError, StoreOptions, StreamConfig, StreamHandle,
};

fn opts(block_size: u64) -> StoreOptions {
    StoreOptions {
        block_size,
        ..StoreOptions::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    /// Subject number, payload byte, with a TTL.
    Publish(u8, u8, bool),
    Delete(u8),
    PurgeSubject(u8),
    PurgeUpTo(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0u8..5, any::<u8>(), any::<bool>()).prop_map(|(s, n, t)| Op::Publish(s, n, t)),
        3 => any::<u8>().prop_map(Op::Delete),
        1 => (0u8..5).prop_map(Op::PurgeSubject),
        1 => any::<u8>().prop_map(Op::PurgeUpTo),
    ]
}

/// Everything a reader can ask, answered by `s`: info with per-subject counts, every message,
/// and the next match from several places for every subject, a wildcard and everything.
#[derive(Debug, PartialEq)]
struct Answers {
    state: sluice_store::StreamState,
    msgs: Vec<Option<(String, Vec<u8>, bool)>>,
    next: Vec<Option<u64>>,
    last_for_subject: Vec<Option<u64>>,
}

fn answers(s: &StreamHandle) -> Answers {
    let all = FilterSet::new([">"]).unwrap();
    let state = s.info(Some(&all)).state;
    let last = state.last_seq;
    let msgs = (0..=last + 1)
        .map(|seq| {
            s.get(seq).unwrap().map(|m| {
                let ttl = m.headers.get("Nats-TTL").is_some();
                (m.subject, m.payload.to_vec(), ttl)
            })
        })
        .collect();
    let mut filters: Vec<String> = (0..5).map(|i| format!("l.{i}")).collect();
    filters.extend(["l.*".to_string(), ">".to_string()]);
    let mut next = Vec::new();
    for f in &filters {
        let filter = FilterSet::new([f.as_str()]).unwrap();
        for from in [0, 1, last / 3, last / 2, last] {
            next.push(s.next_matching(from, &filter).unwrap().map(|m| m.seq));
        }
    }
    let last_for_subject = (0..5)
        .map(|i| {
            s.last_for_subject(&format!("l.{i}"))
                .unwrap()
                .map(|m| m.seq)
        })
        .collect();
    Answers {
        state,
        msgs,
        next,
        last_for_subject,
    }
}

/// The stream the properties write: five subjects, at most 9 messages each, TTLs allowed.
fn stream_l() -> StreamConfig {
    StreamConfig {
        max_msgs_per_subject: 9,
        allow_msg_ttl: true,
        ..StreamConfig::new("L", ["l.*"])
    }
}

/// Applies `ops` to `s`, in order.
fn apply(rt: &tokio::runtime::Runtime, s: &StreamHandle, ops: &[Op]) {
    let mut last = 0u64;
    for op in ops {
        match *op {
            Op::Publish(subj, n, ttl) => {
                let mut h = Headers::new();
                if ttl {
                    h.insert("Nats-TTL", "1h");
                }
                let payload = vec![n; n as usize % 70];
                last = rt
                    .block_on(s.publish(format!("l.{subj}"), h, payload))
                    .unwrap()
                    .seq;
            }
            Op::Delete(n) => {
                rt.block_on(s.delete_msg(n as u64 % (last + 2))).unwrap();
            }
            Op::PurgeSubject(subj) => {
                let req = PurgeRequest {
                    filter: Some(format!("l.{subj}")),
                    ..Default::default()
                };
                rt.block_on(s.purge(req)).unwrap();
            }
            Op::PurgeUpTo(n) => {
                let req = PurgeRequest {
                    up_to_seq: Some(n as u64 % (last + 2)),
                    ..Default::default()
                };
                rt.block_on(s.purge(req)).unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Interior deletes, subject purges, purges up to a sequence, per-subject limits and TTL'd
    /// messages over many small blocks: reopened from index.db, with no block read by the
    /// open, the stream answers every query exactly as before it was closed.
    #[test]
    fn reopened_from_index_answers_like_the_stream_never_closed(
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let rt = rt();
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), opts(400)).unwrap();
        let s = store.create_stream(stream_l()).unwrap();
        apply(&rt, &s, &ops);
        let before = answers(&s);
        store.close();

        let (store, reports) = Store::open(dir.path(), opts(400)).unwrap();
        prop_assert_eq!(reports[0].path, RecoveryPath::Index);
        prop_assert!(reports[0].is_clean(), "{:?}", reports[0]);
        let s = store.stream("L").unwrap();
        prop_assert_eq!(s.blocks_loaded(), 0, "open read a block");
        prop_assert_eq!(answers(&s), before);
        store.close();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// A stream whose table may keep only a few messages in memory (`index_memory`), so its
    /// sealed blocks let go of theirs and are read again on every need, answers every query
    /// exactly as one that keeps them all, before and after a reopen; and it keeps no more
    /// than its budget beyond the block being written.
    #[test]
    fn a_table_that_lets_go_of_blocks_answers_like_one_that_keeps_them(
        ops in proptest::collection::vec(op(), 1..120),
        budget in 0u64..12,
    ) {
        let rt = rt();
        let small = StoreOptions {
            index_memory: budget * INDEX_BYTES_PER_MESSAGE,
            index_idle: Duration::ZERO,
            ..opts(400)
        };
        let (kept, lean) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (keeping, _) = Store::open(kept.path(), opts(400)).unwrap();
        let (letting_go, _) = Store::open(lean.path(), small.clone()).unwrap();
        let (k, l) = (keeping.create_stream(stream_l()).unwrap(), letting_go.create_stream(stream_l()).unwrap());
        apply(&rt, &k, &ops);
        apply(&rt, &l, &ops);
        // The two streams stored their messages at other times.
        let timeless = |s: &StreamHandle| {
            let mut a = answers(s);
            (a.state.first_time, a.state.last_time) = (None, None);
            a
        };
        let want = timeless(&k);
        prop_assert_eq!(&timeless(&l), &want);
        // A 400-byte block holds at most 10 of these messages; beyond the budget, the block
        // being written and the two a reader went through last are kept.
        prop_assert!(l.index_messages() <= budget + 30, "{} in memory", l.index_messages());
        letting_go.close();
        let (letting_go, _) = Store::open(lean.path(), small).unwrap();
        let l = letting_go.stream("L").unwrap();
        prop_assert_eq!(timeless(&l), want);
        prop_assert!(l.index_messages() <= budget + 30, "{} in memory after reopen", l.index_messages());
        keeping.close();
        letting_go.close();
    }
}

/// With room for 100 messages, a stream of 2,000 in blocks of about 20 keeps at most that many
/// in memory beyond the block being written and the two a reader went through last, however
/// it is read: every message reads back whole, blocks let go of are read again when needed,
/// and a message deleted while its block was out of memory stays deleted.
#[test]
fn the_table_keeps_within_its_memory_and_reads_blocks_again() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        index_memory: 100 * INDEX_BYTES_PER_MESSAGE,
        index_idle: Duration::ZERO,
        ..opts(2048)
    };
    let (store, _) = Store::open(dir.path(), options).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    let rt = rt();
    let payload = |seq: u64| format!("payload-{seq:06}-{}", "x".repeat(60));
    for seq in 1..=2000 {
        rt.block_on(s.publish(format!("d.{}", seq % 10), Headers::new(), payload(seq)))
            .unwrap();
        assert!(
            s.index_messages() <= 175,
            "{} in memory while writing",
            s.index_messages()
        );
    }
    assert!(block_files(dir.path()) > 50, "the test needs many blocks");
    assert!(
        rt.block_on(s.delete_msg(500)).unwrap(),
        "deleted while out of memory"
    );
    for seq in 1..=2000 {
        let got = s.get(seq).unwrap().map(|m| m.payload.to_vec());
        let want = (seq != 500).then(|| payload(seq).into_bytes());
        assert_eq!(got, want, "seq {seq}");
        assert!(
            s.index_messages() <= 175,
            "{} in memory while reading",
            s.index_messages()
        );
    }
    assert!(
        s.blocks_loaded() > 50,
        "blocks were read again: {}",
        s.blocks_loaded()
    );
    let filter = FilterSet::new(["d.3"]).unwrap();
    assert_eq!(s.next_matching(1, &filter).unwrap().unwrap().seq, 3);
    assert_eq!(s.last_for_subject("d.3").unwrap().unwrap().seq, 1993);
    store.close();
}

/// Readers going through old blocks that together exceed the budget keep them for
/// `index_idle` instead of taking turns reading them again: three readers, each in a block or
/// two of about 20 messages, room for 10: each block is read once; with no idle time, nearly
/// every read reads a block again.
#[test]
fn readers_in_old_blocks_keep_them_while_they_read() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 2000);
    let reads = |index_memory: u64, index_idle: Duration| {
        let options = StoreOptions {
            index_memory,
            index_idle,
            ..opts(2048)
        };
        let (store, _) = Store::open(dir.path(), options).unwrap();
        let s = store.stream("D").unwrap();
        for i in 0..15 {
            for start in [100, 800, 1500] {
                let seq = start + i;
                let m = s.get(seq).unwrap().unwrap();
                assert!(
                    String::from_utf8_lossy(&m.payload).starts_with(&format!("payload-{seq:06}-"))
                );
            }
        }
        let loaded = s.blocks_loaded();
        store.close();
        loaded
    };
    let room = 10 * INDEX_BYTES_PER_MESSAGE;
    let blocks = reads(u64::MAX, Duration::ZERO);
    assert!(blocks <= 6, "the readers' ranges lie in {blocks} blocks");
    assert_eq!(
        reads(room, Duration::from_secs(3600)),
        blocks,
        "each block read once"
    );
    assert!(
        reads(room, Duration::ZERO) > 30,
        "without idle time the readers take turns"
    );
}

/// `n` messages on subjects `d.0`..`d.9` in blocks of about 20, closed cleanly.
fn deep_stream(dir: &Path, n: u64) {
    let rt = rt();
    let (store, _) = Store::open(dir, opts(2048)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    rt.block_on(async {
        for seq in 1..=n {
            let payload = format!("payload-{seq:06}-{}", "x".repeat(60));
            s.publish(format!("d.{}", seq % 10), Headers::new(), payload)
                .await
                .unwrap();
        }
    });
    store.close();
}

fn block_files(dir: &Path) -> usize {
    fs::read_dir(dir.join("streams/D/msgs"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "blk")
        })
        .count()
}

#[test]
fn opening_a_deep_stream_reads_no_block_and_a_read_only_the_block_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 2000);
    assert!(block_files(dir.path()) > 50, "the test needs many blocks");

    let (store, reports) = Store::open(dir.path(), opts(2048)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index);
    let s = store.stream("D").unwrap();
    let info = s.info(None).state;
    assert_eq!((info.msgs, info.first_seq, info.last_seq), (2000, 1, 2000));
    assert!(info.first_time.is_some());
    assert_eq!(s.blocks_loaded(), 0, "open (and info) read a block");

    let m = s.get(1000).unwrap().unwrap();
    assert!(String::from_utf8_lossy(&m.payload).starts_with("payload-001000-"));
    assert_eq!(
        s.blocks_loaded(),
        1,
        "a read of one message reads one block"
    );
    s.get(1001).unwrap().unwrap();
    assert_eq!(
        s.blocks_loaded(),
        1,
        "its neighbour lives in the same block"
    );
    let filter = FilterSet::new(["d.7"]).unwrap();
    assert_eq!(s.next_matching(1995, &filter).unwrap().unwrap().seq, 1997);
    assert_eq!(
        s.blocks_loaded(),
        2,
        "a match near the end reads the last block"
    );
    assert_eq!(s.last_for_subject("d.3").unwrap().unwrap().seq, 1993);
    assert_eq!(s.blocks_loaded(), 2);
    store.close();
}

#[test]
fn a_damaged_sealed_block_fails_only_the_reads_of_what_it_lost() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 300);
    // Flip one byte inside the payload of sequence 150, in a sealed block.
    let msgs = dir.path().join("streams/D/msgs");
    let needle = b"payload-000150-";
    let (path, at) = fs::read_dir(&msgs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blk"))
        .find_map(|p| {
            let data = fs::read(&p).unwrap();
            let at = data.windows(needle.len()).position(|w| w == needle)?;
            Some((p, at))
        })
        .unwrap();
    let mut data = fs::read(&path).unwrap();
    data[at + needle.len() + 3] ^= 0x20;
    fs::write(&path, &data).unwrap();

    let (store, reports) = Store::open(dir.path(), opts(2048)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index);
    let s = store.stream("D").unwrap();
    assert_eq!(s.blocks_loaded(), 0);
    match s.get(150) {
        Err(StoreError::Corrupt { seq: 150, path: p }) => assert_eq!(p, path),
        other => panic!("expected a corrupt-record error for 150, got {other:?}"),
    }
    for seq in (1..=300).filter(|s| *s != 150) {
        let m = s
            .get(seq)
            .unwrap()
            .unwrap_or_else(|| panic!("{seq} missing"));
        let want = format!("payload-{seq:06}-");
        assert!(String::from_utf8_lossy(&m.payload).starts_with(&want));
    }
    // A reader walking past the damage is told, not silently skipped past it.
    let everything = FilterSet::new([">"]).unwrap();
    assert!(matches!(
        s.next_matching(149, &everything).unwrap().map(|m| m.seq),
        Some(149)
    ));
    assert!(matches!(
        s.next_matching(150, &everything),
        Err(StoreError::Lost {
            lost: Lost {
                first: 150,
                last: 150,
                cause: LossCause::Damaged
            },
            ..
        })
    ));
    assert_eq!(s.next_matching(151, &everything).unwrap().unwrap().seq, 151);
    // The stream still takes writes and deletes, including of the unreadable message.
    let rt = rt();
    assert!(rt.block_on(s.delete_msg(150)).unwrap());
    assert_eq!(s.get(150).unwrap().map(|m| m.seq), None);
    let ack = rt
        .block_on(s.publish("d.1", Headers::new(), "after"))
        .unwrap();
    assert_eq!(ack.seq, 301);
    store.close();
}

#[test]
fn an_index_of_version_1_is_rebuilt_from_the_blocks_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 50);
    let index = dir.path().join("streams/D/msgs/index.db");
    let mut bytes = fs::read(&index).unwrap();
    bytes[4] = 1;
    let body = bytes.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum.to_le_bytes());
    fs::write(&index, &bytes).unwrap();

    let (store, reports) = Store::open(dir.path(), opts(2048)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Rebuild);
    assert!(
        reports[0]
            .warnings
            .iter()
            .any(|w| w.contains("unknown version 1")),
        "{:?}",
        reports[0]
    );
    assert!(reports[0].lost.is_empty() && reports[0].truncated.is_empty());
    let s = store.stream("D").unwrap();
    assert_eq!(s.info(None).state.msgs, 50);
    assert_eq!(s.get(50).unwrap().unwrap().subject, "d.0");
    store.close();
}

#[test]
fn a_missing_index_is_rebuilt_from_the_blocks_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 50);
    let blocks = block_files(dir.path());
    fs::remove_file(dir.path().join("streams/D/msgs/index.db")).unwrap();

    let (store, reports) = Store::open(dir.path(), opts(2048)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Rebuild);
    let expected = format!("index.db missing; rebuilding from {blocks} block file(s)");
    assert_eq!(reports[0].warnings, [expected], "{:?}", reports[0]);
    assert!(reports[0].lost.is_empty() && reports[0].truncated.is_empty());
    assert_eq!(store.stream("D").unwrap().info(None).state.msgs, 50);
    store.close();

    // A stream with no block has nothing to rebuild: no warning.
    let empty = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(empty.path(), opts(2048)).unwrap();
    store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    store.close();
    let _ = fs::remove_file(empty.path().join("streams/E/msgs/index.db"));
    let (store, reports) = Store::open(empty.path(), opts(2048)).unwrap();
    assert!(reports[0].warnings.is_empty(), "{:?}", reports[0]);
    store.close();
}

/// Open trusts index.db's block list without listing the directory only when no block follows
/// its last one. Blocks started after the snapshot — some of them already deleted again by a
/// purge, which rewrites index.db before deleting — are all found after a crash.
#[test]
fn blocks_started_or_deleted_after_index_db_are_all_accounted_for_after_a_crash() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts(1024)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    let publish = |from: u64, to: u64| {
        for seq in from..=to {
            let payload = format!("payload-{seq:06}-{}", "x".repeat(40));
            let ack = rt
                .block_on(s.publish("d.1", Headers::new(), payload))
                .unwrap();
            assert_eq!(ack.seq, seq);
        }
    };
    publish(1, 30);
    rt.block_on(s.flush()).unwrap();
    // After the snapshot: new blocks, then a purge that deletes the oldest ones.
    publish(31, 90);
    let blocks_before = block_files(dir.path());
    rt.block_on(s.purge(PurgeRequest {
        up_to_seq: Some(40),
        ..Default::default()
    }))
    .unwrap();
    assert!(
        block_files(dir.path()) < blocks_before,
        "the purge deleted no block"
    );
    publish(91, 150);

    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    let (store, reports) = Store::open(copy.path(), opts(1024)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index, "{:?}", reports[0]);
    let r = &reports[0];
    assert!(
        r.truncated.is_empty() && r.damaged.is_empty() && r.lost.is_empty(),
        "{r:?}"
    );
    let s = store.stream("D").unwrap();
    let info = s.info(None).state;
    // After a crash the positions up to the sequence lease are unconfirmed, never reused.
    assert_eq!(r.unconfirmed, Some(151..=info.last_seq), "{r:?}");
    assert_eq!((info.first_seq, info.msgs), (40, 111));
    for seq in 40..=150 {
        let m = s
            .get(seq)
            .unwrap()
            .unwrap_or_else(|| panic!("{seq} missing"));
        assert!(String::from_utf8_lossy(&m.payload).starts_with(&format!("payload-{seq:06}-")));
    }
    store.close();
}

/// A purge of everything needs no message: on a stream just opened from index.db it reads no
/// block, and the purge holds across a reopen.
#[test]
fn purging_everything_of_a_deep_stream_reads_no_block() {
    let dir = tempfile::tempdir().unwrap();
    deep_stream(dir.path(), 2000);
    let rt = rt();
    let (store, _) = Store::open(dir.path(), opts(2048)).unwrap();
    let s = store.stream("D").unwrap();
    let n = rt.block_on(s.purge(PurgeRequest::default())).unwrap();
    assert_eq!(n, 2000);
    assert_eq!(s.blocks_loaded(), 0, "the purge read a block");
    assert_eq!(block_files(dir.path()), 1, "old blocks left behind");
    let info = s.info(None).state;
    assert_eq!((info.msgs, info.first_seq, info.last_seq), (0, 2001, 2000));
    store.close();

    let (store, reports) = Store::open(dir.path(), opts(2048)).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index);
    let s = store.stream("D").unwrap();
    let info = s.info(None).state;
    assert_eq!((info.msgs, info.first_seq, info.num_subjects), (0, 2001, 0));
    assert_eq!(s.get(1000).unwrap().map(|m| m.seq), None);
    let ack = rt
        .block_on(s.publish("d.1", Headers::new(), "after"))
        .unwrap();
    assert_eq!(ack.seq, 2001);
    store.close();
}
