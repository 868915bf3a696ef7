//! Who applies a publish: with `sync` other than `always` a publisher that finds the writer
//! free stores its message on its own thread; under contention requests queue for the writer
//! thread. Either way the order of each publisher's calls is the order of sequences, the
//! writer thread still does the periodic fsync, and a stream's info counts only what readers
//! can read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use sluice_store::{
    FilterSet, Headers, Store, StoreOptions, StreamConfig, StreamHandle, SyncPolicy,
};

/// A fresh store with `sync`, its directory, and its one stream `S` (subjects `s.>`).
fn stream(sync: SyncPolicy) -> (tempfile::TempDir, Store, StreamHandle) {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        sync,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), options).unwrap().0;
    let s = store
        .create_stream(StreamConfig::new("S", ["s.>"]))
        .unwrap();
    (dir, store, s)
}

#[test]
fn with_sync_never_a_free_writer_stores_the_message_before_publish_returns() {
    let (_dir, store, s) = stream(SyncPolicy::Never);
    for expected in 1..=3u64 {
        // No hand-off to the writer thread: the answer is there when `publish` returns.
        let ack = s
            .publish("s.a", Headers::new(), "m")
            .now_or_never()
            .expect("answered at once")
            .unwrap();
        assert_eq!(ack.seq, expected);
        assert_eq!(s.get(expected).unwrap().unwrap().payload, "m");
    }
    store.close();
}

#[test]
fn publishers_on_many_threads_get_distinct_sequences_in_each_ones_order() {
    const THREADS: u64 = 4;
    const EACH: u64 = 2_000;
    for sync in [SyncPolicy::Never, SyncPolicy::Always] {
        let (_dir, store, s) = stream(sync);
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    // Queued without waiting, so several requests of one thread are in flight.
                    let pending: Vec<_> = (0..EACH)
                        .map(|i| s.publish(format!("s.{t}"), Headers::new(), i.to_string()))
                        .collect();
                    pending
                        .into_iter()
                        .map(|ack| futures::executor::block_on(ack).unwrap().seq)
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let mut all = Vec::new();
        for (t, thread) in threads.into_iter().enumerate() {
            let seqs = thread.join().unwrap();
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "{sync:?}: thread {t} out of order"
            );
            for (i, seq) in seqs.iter().enumerate() {
                let m = s.get(*seq).unwrap().unwrap();
                assert_eq!(
                    (m.subject, m.payload),
                    (format!("s.{t}"), i.to_string().into())
                );
            }
            all.extend(seqs);
        }
        all.sort_unstable();
        assert_eq!(all, (1..=THREADS * EACH).collect::<Vec<_>>(), "{sync:?}");
        store.close();
    }
}

#[test]
fn a_publish_after_close_is_refused_whoever_would_apply_it() {
    for sync in [SyncPolicy::Never, SyncPolicy::Always] {
        let (_dir, store, s) = stream(sync);
        futures::executor::block_on(s.publish("s.a", Headers::new(), "m")).unwrap();
        store.close();
        let refused = futures::executor::block_on(s.publish("s.a", Headers::new(), "m"));
        assert!(
            matches!(refused, Err(sluice_store::StoreError::Closed(_))),
            "{sync:?}: {refused:?}"
        );
    }
}

#[test]
fn with_sync_interval_publishes_stored_by_their_callers_are_still_fsynced() {
    let (_dir, store, s) = stream(SyncPolicy::Interval(Duration::from_secs(1)));
    s.publish("s.a", Headers::new(), "m")
        .now_or_never()
        .expect("answered at once")
        .unwrap();
    assert_eq!(s.info(None).stats.fsyncs, 0, "synced by the publish itself");
    // The writer thread syncs what callers wrote; poll for it (bounded, no fixed sleep).
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.info(None).stats.fsyncs == 0 {
        assert!(Instant::now() < deadline, "no fsync within 30 s");
        std::thread::yield_now();
    }
    store.close();
}

/// A stream's info tells what readers can read, also while a batch is being written or
/// made durable: every message it counts can be fetched, and it counts no subject whose
/// messages cannot be.
#[test]
fn info_counts_only_messages_that_can_be_read() {
    // Published while the reader checks, each on a subject of its own.
    const MESSAGES: u64 = 300;
    let all = FilterSet::new([">"]).unwrap();
    for sync in [SyncPolicy::Never, SyncPolicy::Always] {
        let (_dir, store, s) = stream(sync);
        let done = AtomicBool::new(false);
        let checks = std::thread::scope(|scope| {
            let (publisher, done) = (s.clone(), &done);
            scope.spawn(move || {
                for i in 0..MESSAGES {
                    futures::executor::block_on(publisher.publish(
                        format!("s.{i}"),
                        Headers::new(),
                        "m",
                    ))
                    .unwrap();
                }
                done.store(true, Ordering::Release);
            });
            let mut checks = 0u64;
            while !done.load(Ordering::Acquire) {
                let st = s.info(Some(&all)).state;
                let subjects = st.subjects.map_or(0, |s| s.len() as u64);
                // Nothing is deleted: sequences 1..=last_seq are exactly the messages.
                assert_eq!(
                    (st.msgs, st.num_subjects, subjects),
                    (st.last_seq, st.last_seq, st.last_seq),
                    "{sync:?}: (msgs, subjects, subjects listed) against last_seq"
                );
                if st.last_seq > 0 {
                    assert!(s.get(st.last_seq).unwrap().is_some(), "{sync:?}");
                }
                checks += 1;
            }
            checks
        });
        assert!(checks > 0, "{sync:?}: the reader never checked");
        assert_eq!(s.info(None).state.msgs, MESSAGES);
        store.close();
    }
}
