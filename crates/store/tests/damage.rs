//! Damage to block files costs exactly the damaged records, and every reader whose range
//! covers them is told: one test per case an operator meets (a flipped byte, a broken length
//! field, a block cut in half or deleted, a torn tail, a tail cut after a crash), with and
//! without a current index.db.

mod killed;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use sluice_store::{
    Delivery, FilterSet, Headers, LossCause, Lost, RecoveryPath, RecoveryReport, Store,
    StoreOptions, StreamConfig, StreamHandle,
};

const DEADLINE: Duration = Duration::from_secs(20);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn opts(block_size: u64) -> StoreOptions {
    StoreOptions {
        block_size,
        ..StoreOptions::default()
    }
}

fn payload(seq: u64) -> String {
    format!("payload-{seq:04}")
}

/// A stream killed with 10 acknowledged messages whose last block was then cut at the end of
/// record 7, with no index.db to tell.
fn killed_with_the_tail_cut_after_record_7() -> tempfile::TempDir {
    let dir = stream_of(10, 1 << 20, false);
    let _ = fs::remove_file(msgs_dir(dir.path()).join("index.db"));
    let (block, rec) = find(dir.path(), 7);
    edit(&block, |d| d.truncate(rec.offset + rec.len));
    dir
}

/// `n` messages on topics `d.a` / `d.b` alternating (odd seqs on `d.a`); the store is closed
/// cleanly when `clean`, else left as a crash would leave it (copied while open).
fn stream_of(n: u64, block_size: u64, clean: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts(block_size)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    rt().block_on(async {
        for seq in 1..=n {
            let topic = if seq % 2 == 1 { "d.a" } else { "d.b" };
            let ack = s
                .publish(topic, Headers::new(), payload(seq))
                .await
                .unwrap();
            assert_eq!(ack.seq, seq);
        }
    });
    if clean {
        store.close();
        return dir;
    }
    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    copy
}

fn msgs_dir(dir: &Path) -> PathBuf {
    dir.join("streams/D/msgs")
}

/// A record of a pristine block: its offset, length, kind and sequence.
#[derive(Debug, Clone, Copy)]
struct Rec {
    offset: usize,
    len: usize,
    kind: u8,
    seq: u64,
}

/// Walks a pristine block's records by their length fields.
fn records(block: &Path) -> Vec<Rec> {
    let data = fs::read(block).unwrap();
    let mut out = Vec::new();
    let mut off = 0;
    while off + 14 <= data.len() {
        let len = 4 + u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        let seq = u64::from_le_bytes(data[off + 6..off + 14].try_into().unwrap());
        out.push(Rec {
            offset: off,
            len,
            kind: data[off + 4],
            seq,
        });
        off += len;
    }
    out
}

/// The block file holding message `seq`, and the sequences of the messages it holds.
fn block_holding(dir: &Path, seq: u64) -> (PathBuf, Vec<u64>) {
    let (block, _) = find(dir, seq);
    let seqs = records(&block)
        .iter()
        .filter(|r| r.kind == 0)
        .map(|r| r.seq)
        .collect();
    (block, seqs)
}

/// The block holding message `seq`, and its record there.
fn find(dir: &Path, seq: u64) -> (PathBuf, Rec) {
    for id in 1.. {
        let block = msgs_dir(dir).join(format!("{id}.blk"));
        if !block.exists() {
            break;
        }
        if let Some(rec) = records(&block)
            .into_iter()
            .find(|r| r.kind == 0 && r.seq == seq)
        {
            return (block, rec);
        }
    }
    panic!("message {seq} not found");
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut data = fs::read(path).unwrap();
    change(&mut data);
    fs::write(path, data).unwrap();
}

fn flip_payload_byte(dir: &Path, seq: u64) {
    let (block, rec) = find(dir, seq);
    edit(&block, |d| d[rec.offset + rec.len - 9] ^= 0x20);
}

fn damaged(first: u64, last: u64) -> Lost {
    Lost {
        first,
        last,
        cause: LossCause::Damaged,
    }
}

/// What a subscriber of `filter` from `start` is given up to position `upto`: the message
/// seqs, and the lost runs in between.
fn read(s: &StreamHandle, filter: &str, start: u64, upto: u64) -> (Vec<u64>, Vec<Lost>) {
    let filter = FilterSet::new([filter]).unwrap();
    let mut sub = Box::pin(s.subscribe(start, filter));
    let (mut seqs, mut lost) = (Vec::new(), Vec::new());
    rt().block_on(async {
        while seqs.last().max(lost.last().map(|l: &Lost| &l.last)) < Some(&upto) {
            let next = tokio::time::timeout(DEADLINE, sub.next()).await;
            let next = next
                .unwrap_or_else(|_| panic!("the subscription went quiet after {seqs:?} {lost:?}"));
            match next.unwrap().unwrap() {
                Delivery::Message(m) => {
                    assert_eq!(m.payload, payload(m.seq), "message {} changed", m.seq);
                    seqs.push(m.seq);
                }
                Delivery::Lost(l) => lost.push(l),
                // Told to readers of the deleted message's subject: not a loss.
                Delivery::Removed(_) => {}
            }
        }
    });
    (seqs, lost)
}

fn odd(range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    range.filter(|s| s % 2 == 1).collect()
}

fn even(range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    range.filter(|s| s % 2 == 0).collect()
}

fn except(range: std::ops::RangeInclusive<u64>, gone: &[u64]) -> Vec<u64> {
    range.filter(|s| !gone.contains(s)).collect()
}

/// Asserts that every filter's reader gets every intact message of its topics and is told of
/// `lost`, on this open and after a restart.
fn assert_readers_step_over(dir: &Path, block_size: u64, n: u64, lost: Lost) {
    let gone: Vec<u64> = (lost.first..=lost.last).collect();
    for round in 0..2 {
        let (store, _) = Store::open(dir, opts(block_size)).unwrap();
        let s = store.stream("D").unwrap();
        let (all, told) = read(&s, ">", 1, n);
        assert_eq!(all, except(1..=n, &gone), "round {round}");
        assert_eq!(told, [lost], "round {round}");
        // Filtered readers are told too: a damaged record's topic cannot be read.
        for (filter, seqs) in [("d.a", odd(1..=n)), ("d.b", even(1..=n))] {
            let want: Vec<u64> = seqs.into_iter().filter(|s| !gone.contains(s)).collect();
            let upto = want.last().copied().unwrap_or(0).max(lost.last);
            let (got, told) = read(&s, filter, 1, upto);
            assert_eq!(got, want, "round {round} {filter}");
            assert_eq!(told, [lost], "round {round} {filter}");
        }
        let info = s.info(None).state;
        assert_eq!(info.lost.msgs, gone.len() as u64, "round {round}");
        store.close();
    }
}

#[test]
fn one_flipped_byte_costs_its_record_alone_and_every_reader_is_told() {
    let dir = stream_of(10, 1 << 20, true);
    flip_payload_byte(dir.path(), 5);
    assert_readers_step_over(dir.path(), 1 << 20, 10, damaged(5, 5));
}

#[test]
fn a_broken_length_field_costs_its_record_alone() {
    let dir = stream_of(10, 1 << 20, true);
    let (block, rec) = find(dir.path(), 5);
    edit(&block, |d| {
        d[rec.offset..rec.offset + 4].copy_from_slice(&7_000u32.to_le_bytes())
    });
    assert_readers_step_over(dir.path(), 1 << 20, 10, damaged(5, 5));
}

#[test]
fn a_middle_block_cut_in_half_costs_only_what_was_cut() {
    // About three messages per block.
    let dir = stream_of(24, 200, true);
    let (block, rec) = find(dir.path(), 11);
    let records = records(&block);
    let last = records.last().unwrap();
    assert!(
        last.seq > rec.seq,
        "the test needs a message after 11 in its block"
    );
    edit(&block, |d| d.truncate(rec.offset + rec.len / 2));
    assert_readers_step_over(dir.path(), 200, 24, damaged(11, last.seq));
}

#[test]
fn a_deleted_middle_block_costs_only_its_records() {
    let dir = stream_of(24, 200, true);
    let (block, seqs) = block_holding(dir.path(), 11);
    fs::remove_file(&block).unwrap();
    let (first, last) = (seqs[0], *seqs.last().unwrap());
    assert_readers_step_over(dir.path(), 200, 24, damaged(first, last));
}

#[test]
fn a_rebuild_keeps_every_intact_record_after_a_bad_one() {
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    let (block, _) = find(dir.path(), 5);
    let size = fs::metadata(&block).unwrap().len();
    flip_payload_byte(dir.path(), 5);

    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let r = &reports[0];
    assert_eq!(r.path, RecoveryPath::Rebuild);
    assert_eq!(r.lost, [5..=5], "{r:?}");
    assert_eq!(r.damaged.len(), 1, "{r:?}");
    assert!(r.truncated.is_empty(), "nothing is cut: {r:?}");
    // The damaged bytes stay in place, for inspection; nothing intact was removed.
    assert_eq!(fs::metadata(&block).unwrap().len(), size);
    let s = store.stream("D").unwrap();
    for seq in except(1..=10, &[5]) {
        assert_eq!(s.get(seq).unwrap().unwrap().payload, payload(seq));
    }
    assert_eq!(
        read(&s, ">", 1, 10),
        (except(1..=10, &[5]), vec![damaged(5, 5)])
    );
    store.close();
    // The loss is remembered (lost.db) once index.db is current again.
    assert_readers_step_over(dir.path(), 1 << 20, 10, damaged(5, 5));
}

#[test]
fn a_torn_tail_is_cut_and_set_aside_and_its_sequence_reported() {
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    let (block, rec) = find(dir.path(), 10);
    let torn = fs::read(&block).unwrap()[rec.offset..rec.offset + rec.len / 2].to_vec();
    edit(&block, |d| d.truncate(rec.offset + rec.len / 2));

    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let r = &reports[0];
    assert_eq!(r.truncated.len(), 1, "{r:?}");
    assert_eq!(r.lost, [10..=10], "the torn header names seq 10: {r:?}");
    let aside: Vec<PathBuf> = fs::read_dir(msgs_dir(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("1.blk.damaged-"))
        .collect();
    assert_eq!(aside.len(), 1, "the cut bytes are kept: {aside:?}");
    assert_eq!(fs::read(&aside[0]).unwrap(), torn);
    let s = store.stream("D").unwrap();
    assert_eq!(
        read(&s, ">", 1, 10),
        ((1..=9).collect(), vec![damaged(10, 10)])
    );
    let ack = rt()
        .block_on(s.publish("d.a", Headers::new(), "new"))
        .unwrap();
    assert_eq!(ack.seq, 11);
    store.close();
}

#[test]
fn sequences_are_never_handed_out_twice_after_a_tail_is_cut() {
    let dir = killed_with_the_tail_cut_after_record_7();

    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let r = &reports[0];
    let s = store.stream("D").unwrap();
    let last = s.info(None).state.last_seq;
    assert!(
        last >= 10,
        "the lease covers every acknowledged sequence: {r:?}"
    );
    assert_eq!(r.unconfirmed, Some(8..=last), "{r:?}");
    let acks: Vec<u64> = rt().block_on(async {
        let mut acks = Vec::new();
        for i in 0..3 {
            acks.push(
                s.publish("d.a", Headers::new(), format!("new-{i}"))
                    .await
                    .unwrap()
                    .seq,
            );
        }
        acks
    });
    assert_eq!(acks, [last + 1, last + 2, last + 3]);
    let unconfirmed = |first, last| Lost {
        first,
        last,
        cause: LossCause::Unconfirmed,
    };
    // A client holding id 10 is told the rest of the unconfirmed run, then gets the new ones.
    let mut sub = Box::pin(s.subscribe(11, FilterSet::new([">"]).unwrap()));
    rt().block_on(async {
        let first = sub.next().await.unwrap().unwrap();
        assert_eq!(first, Delivery::Lost(unconfirmed(11, last)));
        let next = sub.next().await.unwrap().unwrap().message().unwrap();
        assert_eq!(next.seq, last + 1);
    });
    // A client holding id 7, the last intact one, resumes with nothing to be told.
    let mut sub = Box::pin(s.subscribe(8, FilterSet::new([">"]).unwrap()));
    rt().block_on(async {
        let next = sub.next().await.unwrap().unwrap().message().unwrap();
        assert_eq!(next.seq, last + 1);
    });
    store.close();
    // After a clean close nothing new is unconfirmed, and the run is still told.
    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    assert_eq!(reports[0].unconfirmed, None, "{:?}", reports[0]);
    let s = store.stream("D").unwrap();
    assert_eq!(s.info(None).state.last_seq, last + 3);
    assert_eq!(s.info(None).state.lost.unconfirmed, [(8, last)]);
    store.close();
}

#[test]
fn a_clean_close_leaves_nothing_unconfirmed() {
    let dir = stream_of(10, 1 << 20, true);
    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    assert!(reports[0].is_clean(), "{:?}", reports[0]);
    assert_eq!(store.stream("D").unwrap().info(None).state.last_seq, 10);
    store.close();
}

#[test]
fn a_lost_db_that_does_not_verify_is_set_aside_not_deleted() {
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    flip_payload_byte(dir.path(), 5);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    store.close();
    let lost_db = msgs_dir(dir.path()).join("lost.db");
    edit(&lost_db, |d| d[2] ^= 1);
    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    assert_set_aside_once(dir.path(), &reports[0], "lost.db");
    store.close();
}

#[test]
fn a_block_deleted_before_a_rebuild_is_reported_from_the_next_blocks_marker() {
    let dir = stream_of(24, 200, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    let (block, seqs) = block_holding(dir.path(), 11);
    fs::remove_file(&block).unwrap();
    let (first, last) = (seqs[0], *seqs.last().unwrap());
    let (store, reports) = Store::open(dir.path(), opts(200)).unwrap();
    assert_eq!(reports[0].lost, [first..=last], "{:?}", reports[0]);
    store.close();
    assert_readers_step_over(dir.path(), 200, 24, damaged(first, last));
}

#[test]
fn stream_info_counts_the_bytes_stepped_over() {
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    let (_, rec) = find(dir.path(), 5);
    flip_payload_byte(dir.path(), 5);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let lost = store.stream("D").unwrap().info(None).state.lost;
    assert_eq!((lost.msgs, lost.damaged), (1, vec![(5, 5)]));
    // The walk resynchronises at the next record: the damaged record's bytes, no more.
    assert_eq!(lost.bytes, rec.len as u64);
    store.close();
}

#[test]
fn lost_runs_below_the_first_retained_message_are_forgotten() {
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    flip_payload_byte(dir.path(), 5);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    assert_eq!(read(&s, ">", 1, 10).1, [damaged(5, 5)]);
    rt().block_on(s.purge(sluice_store::PurgeRequest {
        up_to_seq: Some(7),
        ..Default::default()
    }))
    .unwrap();
    rt().block_on(s.flush()).unwrap();
    assert_eq!(s.info(None).state.lost.damaged, []);
    store.close();
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    assert_eq!(s.info(None).state.lost.msgs, 0);
    assert_eq!(read(&s, ">", 7, 10), (vec![7, 8, 9, 10], vec![]));
    store.close();
}

#[test]
fn a_literal_topic_never_in_the_damaged_block_is_not_told() {
    // Topic d.c only in the first block; the damage is in a later one.
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    rt().block_on(async {
        s.publish("d.c", Headers::new(), payload(1)).await.unwrap();
        for seq in 2..=20 {
            s.publish("d.a", Headers::new(), payload(seq))
                .await
                .unwrap();
        }
    });
    store.close();
    let (block, _) = find(dir.path(), 15);
    assert_ne!(
        block,
        find(dir.path(), 1).0,
        "the test needs 15 in a later block"
    );
    flip_payload_byte(dir.path(), 15);
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store.stream("D").unwrap();
    // A d.c reader reads only the first block: it finds its message and nothing to be told.
    let c = FilterSet::new(["d.c"]).unwrap();
    assert_eq!(s.next_matching(1, &c).unwrap().map(|m| m.seq), Some(1));
    assert!(matches!(s.next_matching(2, &c), Ok(None)));
    // A wildcard reader is told.
    assert_eq!(read(&s, "d.*", 1, 20).1, [damaged(15, 15)]);
    store.close();
}

/// Creates stream `ALL`, sourcing every message of `D`.
fn sourcing_all_of_d(store: &Store) -> StreamHandle {
    let source = sluice_store::SourceConfig {
        name: "D".into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: None,
        subject_transforms: vec![],
    };
    store
        .create_stream(StreamConfig {
            sources: vec![source],
            ..StreamConfig::new("ALL", Vec::<String>::new())
        })
        .unwrap()
}

#[test]
fn a_damaged_origin_record_is_counted_as_dropped_by_a_sourcing_stream() {
    let dir = stream_of(10, 1 << 20, true);
    flip_payload_byte(dir.path(), 5);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let all = sourcing_all_of_d(&store);
    // Every intact origin message arrives, in order, then the status says what was dropped.
    let mut sub = Box::pin(all.subscribe(1, FilterSet::new([">"]).unwrap()));
    let payloads: Vec<String> = rt().block_on(async {
        let mut out = Vec::new();
        while out.len() < 9 {
            let next = tokio::time::timeout(DEADLINE, sub.next()).await.unwrap();
            let m = next
                .unwrap()
                .unwrap()
                .message()
                .expect("nothing lost in ALL");
            out.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
        out
    });
    let want: Vec<String> = except(1..=10, &[5]).into_iter().map(payload).collect();
    assert_eq!(payloads, want);
    rt().block_on(sluice_test_support::eventually(
        "the source status counts every origin position",
        || {
            let status = all.source_status();
            (status[0].sourced, status[0].dropped) == (9, 1)
        },
    ));
    store.close();
}

#[test]
fn a_sourcing_streams_lost_record_is_reported_and_copied_again_when_its_position_is_rebuilt() {
    let dir = stream_of(10, 1 << 20, true);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let all = sourcing_all_of_d(&store);
    rt().block_on(sluice_test_support::eventually(
        "ALL holds every message",
        || all.info(None).state.msgs == 10,
    ));
    store.close();
    // ALL's newest record damaged, with its index.db and sources.db gone.
    let all_msgs = dir.path().join("streams/ALL/msgs");
    fs::remove_file(all_msgs.join("index.db")).unwrap();
    fs::remove_file(dir.path().join("streams/ALL/sources.db")).unwrap();
    let block = all_msgs.join("1.blk");
    let last = *records(&block).last().unwrap();
    assert_eq!((last.kind, last.seq), (0, 10));
    edit(&block, |d| d[last.offset + last.len - 9] ^= 0x20);

    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let report = reports.iter().find(|r| r.stream == "ALL").unwrap();
    assert_eq!(report.lost, [10..=10], "{report:?}");
    let all = store.stream("ALL").unwrap();
    let mut sub = Box::pin(all.subscribe(1, FilterSet::new([">"]).unwrap()));
    rt().block_on(async {
        for seq in 1..=9 {
            let m = sub.next().await.unwrap().unwrap().message().unwrap();
            assert_eq!((m.seq, m.payload), (seq, payload(seq).into()));
        }
        assert_eq!(
            sub.next().await.unwrap().unwrap(),
            Delivery::Lost(damaged(10, 10))
        );
        // The origin's message 10 is sourced again, under a new sequence.
        let next = tokio::time::timeout(DEADLINE, sub.next()).await.unwrap();
        let again = next.unwrap().unwrap().message().unwrap();
        assert_eq!((again.seq, again.payload), (11, payload(10).into()));
    });
    store.close();
}

#[test]
fn a_deleted_block_right_after_index_db_costs_only_its_records_after_a_kill() {
    // index.db names the blocks up to message 6; blocks started after it follow. Killed, then
    // the first block index.db does not name is deleted: the ones after it must still be found.
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    rt().block_on(async {
        for seq in 1..=24 {
            let topic = if seq % 2 == 1 { "d.a" } else { "d.b" };
            s.publish(topic, Headers::new(), payload(seq))
                .await
                .unwrap();
            if seq == 6 {
                s.flush().await.unwrap();
            }
        }
    });
    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    let (indexed, _) = find(copy.path(), 6);
    let id: u32 = indexed
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let next = msgs_dir(copy.path()).join(format!("{}.blk", id + 1));
    let seqs: Vec<u64> = records(&next)
        .iter()
        .filter(|r| r.kind == 0)
        .map(|r| r.seq)
        .collect();
    assert!(
        *seqs.last().unwrap() < 24,
        "the test needs a block after it"
    );
    fs::remove_file(&next).unwrap();

    let (store, reports) = Store::open(copy.path(), opts(200)).unwrap();
    let s = store.stream("D").unwrap();
    let (first, last) = (seqs[0], *seqs.last().unwrap());
    let (all, told) = read(&s, ">", 1, 24);
    assert_eq!(all, except(1..=24, &seqs), "{:?}", reports[0]);
    assert_eq!(told, [damaged(first, last)], "{:?}", reports[0]);
    store.close();
}

#[test]
fn positions_lost_db_names_are_never_handed_out_again_without_index_and_lease() {
    // Killed with 10 acknowledged messages: the open reports the rest of the lease unconfirmed
    // (in lost.db). Closed cleanly, then index.db and lease.db are both lost.
    let dir = stream_of(10, 1 << 20, false);
    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let unconfirmed = reports[0]
        .unconfirmed
        .clone()
        .expect("a kill leaves a lease");
    store.close();
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    fs::remove_file(msgs_dir(dir.path()).join("lease.db")).unwrap();

    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    let state = s.info(None).state;
    assert_eq!(
        state.lost.unconfirmed,
        [(*unconfirmed.start(), *unconfirmed.end())]
    );
    assert_eq!(state.last_seq, *unconfirmed.end());
    let ack = rt()
        .block_on(s.publish("d.a", Headers::new(), "new"))
        .unwrap();
    assert_eq!(ack.seq, unconfirmed.end() + 1);
    store.close();
}

#[test]
fn unconfirmed_positions_are_not_reported_damaged_after_a_second_kill() {
    // Killed with 10 messages: 11 up to the lease are unconfirmed. Then the next message (too
    // big for the last block) starts a block, whose leading marker names the raised last
    // sequence, and the store is killed again.
    let dir = stream_of(10, 200, false);
    let (store, reports) = Store::open(dir.path(), opts(200)).unwrap();
    let unconfirmed = reports[0]
        .unconfirmed
        .clone()
        .expect("a kill leaves a lease");
    let s = store.stream("D").unwrap();
    let ack = rt()
        .block_on(s.publish("d.a", Headers::new(), "x".repeat(180)))
        .unwrap();
    assert_eq!(ack.seq, unconfirmed.end() + 1);
    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    let _ = fs::remove_file(msgs_dir(copy.path()).join("index.db"));

    let (store, reports) = Store::open(copy.path(), opts(200)).unwrap();
    assert!(
        reports[0].lost.is_empty(),
        "nothing was damaged: {:?}",
        reports[0]
    );
    let s = store.stream("D").unwrap();
    let lost = s.info(None).state.lost;
    assert!(lost.damaged.is_empty(), "{lost:?}");
    assert_eq!(
        lost.unconfirmed[0],
        (*unconfirmed.start(), *unconfirmed.end())
    );
    store.close();
}

#[test]
fn a_lost_lease_is_written_again_on_open_so_a_second_crash_still_knows() {
    // lease.db is lost after a clean close; the store is opened and killed at once, then the
    // tail is cut after record 8 and there is no index.db to tell.
    let dir = stream_of(10, 1 << 20, true);
    fs::remove_file(msgs_dir(dir.path()).join("lease.db")).unwrap();
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    let _ = fs::remove_file(msgs_dir(copy.path()).join("index.db"));
    let (block, rec) = find(copy.path(), 8);
    edit(&block, |d| d.truncate(rec.offset + rec.len));

    let (store, reports) = Store::open(copy.path(), opts(1 << 20)).unwrap();
    assert_eq!(reports[0].unconfirmed, Some(9..=10), "{:?}", reports[0]);
    let s = store.stream("D").unwrap();
    let ack = rt()
        .block_on(s.publish("d.a", Headers::new(), "new"))
        .unwrap();
    assert_eq!(ack.seq, 11);
    store.close();
}

#[test]
fn a_block_left_empty_by_a_cut_starts_with_a_marker_again() {
    // About three messages per block. Killed; the last block is cut to nothing; opened, one
    // message appended (into that block), killed again; then the block before it loses its
    // end at a record boundary, with no index.db: the marker is what tells.
    let dir = stream_of(12, 200, false);
    let last = *fs::read_dir(msgs_dir(dir.path()))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name();
            name.to_str()?.strip_suffix(".blk")?.parse::<u32>().ok()
        })
        .collect::<Vec<_>>()
        .iter()
        .max()
        .unwrap();
    let _ = fs::remove_file(msgs_dir(dir.path()).join("index.db"));
    edit(&msgs_dir(dir.path()).join(format!("{last}.blk")), |d| {
        d.clear()
    });
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store.stream("D").unwrap();
    let ack = rt()
        .block_on(s.publish("d.a", Headers::new(), "new"))
        .unwrap();
    let copy = tempfile::tempdir().unwrap();
    killed::copy_files(dir.path(), copy.path());
    store.close();
    let before = msgs_dir(copy.path()).join(format!("{}.blk", last - 1));
    let recs: Vec<Rec> = records(&before)
        .into_iter()
        .filter(|r| r.kind == 0)
        .collect();
    let (keep, cut) = (recs[0], recs[1..].to_vec());
    edit(&before, |d| d.truncate(keep.offset + keep.len));
    let _ = fs::remove_file(msgs_dir(copy.path()).join("index.db"));

    let (store, reports) = Store::open(copy.path(), opts(200)).unwrap();
    let (first, gone) = (cut[0].seq, cut.last().unwrap().seq);
    assert_eq!(reports[0].lost, [first..=gone], "{:?}", reports[0]);
    let s = store.stream("D").unwrap();
    assert_eq!(s.get(ack.seq).unwrap().unwrap().payload, "new");
    store.close();
}

#[test]
fn a_lease_db_that_does_not_verify_is_set_aside_and_written_again() {
    let dir = stream_of(10, 1 << 20, true);
    let lease = msgs_dir(dir.path()).join("lease.db");
    edit(&lease, |d| d[3] ^= 1);
    let (store, reports) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    assert_set_aside_once(dir.path(), &reports[0], "lease.db");
    assert!(lease.exists(), "open writes the lease again");
    store.close();
}

/// Open warned that `file` (in `msgs/`) was kept aside, and exactly one
/// `<file>.damaged-<ns>` is there.
fn assert_set_aside_once(dir: &Path, report: &RecoveryReport, file: &str) {
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains(file) && w.contains("kept as")),
        "{report:?}"
    );
    let prefix = format!("{file}.damaged-");
    let kept = fs::read_dir(msgs_dir(dir))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with(&prefix)
        })
        .count();
    assert_eq!(kept, 1, "one {prefix}<ns>");
}

#[test]
fn a_damaged_delete_record_brings_back_the_original_message_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store
        .create_stream(StreamConfig::new("D", ["d.*"]))
        .unwrap();
    rt().block_on(async {
        for seq in 1..=3 {
            s.publish("d.a", Headers::new(), payload(seq))
                .await
                .unwrap();
        }
        assert!(s.delete_msg(2).await.unwrap());
    });
    store.close();
    fs::remove_file(msgs_dir(dir.path()).join("index.db")).unwrap();
    let block = msgs_dir(dir.path()).join("1.blk");
    let tombstone = records(&block)
        .into_iter()
        .find(|r| r.kind == 1 && r.seq == 2)
        .expect("the delete is a record");
    edit(&block, |d| d[tombstone.offset + tombstone.len - 9] ^= 0x20);

    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    // The message is live again: the one published at 2, never another.
    assert_eq!(s.get(2).unwrap().unwrap().payload, payload(2));
    assert_eq!(read(&s, ">", 1, 3), (vec![1, 2, 3], vec![]));
    store.close();
}

/// Everything a bounded read gives until it ends; fails when it is still open after
/// [`DEADLINE`] (it must end by itself: every position below the bound is there).
fn read_range(s: &StreamHandle, filter: &str, start: u64, until: u64) -> Vec<Delivery> {
    let mut read = Box::pin(s.read_range(start, until, FilterSet::new([filter]).unwrap()));
    let mut out = Vec::new();
    rt().block_on(async {
        loop {
            match tokio::time::timeout(DEADLINE, read.next()).await {
                Err(_) => panic!("the bounded read did not end after {out:?}"),
                Ok(None) => break,
                Ok(Some(next)) => out.push(next.unwrap()),
            }
        }
    });
    out
}

fn seqs_and_losses(deliveries: Vec<Delivery>) -> Vec<Result<u64, Lost>> {
    deliveries
        .into_iter()
        .filter_map(|d| match d {
            Delivery::Message(m) => Some(Ok(m.seq)),
            Delivery::Lost(lost) => Some(Err(lost)),
            Delivery::Removed(_) => None,
        })
        .collect()
}

#[test]
fn a_bounded_read_is_told_of_a_damaged_record_below_its_bound_then_ends() {
    let dir = stream_of(10, 1 << 20, true);
    flip_payload_byte(dir.path(), 5);
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    assert_eq!(
        seqs_and_losses(read_range(&s, "d.a", 1, 8)),
        [Ok(1), Ok(3), Err(damaged(5, 5)), Ok(7)]
    );
    // Whatever the filter: a damaged record's topic cannot be read.
    assert_eq!(
        seqs_and_losses(read_range(&s, "d.b", 1, 6)),
        [Ok(2), Ok(4), Err(damaged(5, 5))]
    );
    // Above the bound, the damage is not the read's.
    assert_eq!(seqs_and_losses(read_range(&s, "d.b", 1, 5)), [Ok(2), Ok(4)]);
    store.close();
}

#[test]
fn a_bounded_read_is_told_of_a_damaged_run_up_to_its_bound() {
    let dir = stream_of(24, 200, true);
    let (block, seqs) = block_holding(dir.path(), 11);
    assert!(seqs.len() >= 2, "the test needs a run: {seqs:?}");
    fs::remove_file(&block).unwrap();
    let (first, last) = (seqs[0], *seqs.last().unwrap());
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store.stream("D").unwrap();
    let mut want: Vec<Result<u64, Lost>> = (first - 2..first).map(Ok).collect();
    want.push(Err(damaged(first, last - 1)));
    assert_eq!(seqs_and_losses(read_range(&s, ">", first - 2, last)), want);
    store.close();
}

#[test]
fn a_bounded_read_resuming_inside_an_unconfirmed_run_is_told_the_rest_below_its_bound() {
    let dir = killed_with_the_tail_cut_after_record_7();
    let (store, _) = Store::open(dir.path(), opts(1 << 20)).unwrap();
    let s = store.stream("D").unwrap();
    let last = s.info(None).state.last_seq;
    assert!(last >= 10, "the lease covers every acknowledged sequence");
    let unconfirmed = Lost {
        first: 9,
        last: last - 1,
        cause: LossCause::Unconfirmed,
    };
    assert_eq!(
        seqs_and_losses(read_range(&s, ">", 9, last)),
        [Err(unconfirmed)]
    );
    store.close();
}

/// A latest read finds a subject's latest record damaged on disk: the subject's latest intact
/// message comes, and the damaged position is told in its place in stream order (its subject
/// cannot be read, so it may have held anyone's newer value); other subjects are as usual.
#[test]
fn a_damaged_latest_message_is_told_to_a_latest_read() {
    let dir = stream_of(10, 200, true);
    flip_payload_byte(dir.path(), 9);
    let (store, _) = Store::open(dir.path(), opts(200)).unwrap();
    let s = store.stream("D").unwrap();
    let read = s.read_latest(11, FilterSet::new(["d.*"]).unwrap());
    let got: Vec<Delivery> = read.map(Result::unwrap).collect();
    let brief: Vec<Result<u64, Lost>> = got
        .into_iter()
        .map(|d| match d {
            Delivery::Message(m) => Ok(m.seq),
            Delivery::Lost(lost) => Err(lost),
            other => panic!("{other:?}"),
        })
        .collect();
    // d.b's latest is 10; d.a's is 9, damaged, found when its block is read: 7 is d.a's
    // latest readable value, and 9 is told.
    assert_eq!(brief, [Ok(7), Err(damaged(9, 9)), Ok(10)]);
    store.close();
}
