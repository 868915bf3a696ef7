//! A stream's info tells what readers can read, also while a batch is being written or
//! made durable: every message it counts can be fetched, and it counts no subject whose
//! messages cannot be.

use std::sync::atomic::{AtomicBool, Ordering};

use sluice_store::{FilterSet, Headers, Store, StoreOptions, StreamConfig, SyncPolicy};

/// Messages published while the reader checks; each on a subject of its own.
const MESSAGES: u64 = 300;

#[test]
fn info_counts_only_messages_that_can_be_read() {
    let all = FilterSet::new([">"]).unwrap();
    for sync in [SyncPolicy::Never, SyncPolicy::Always] {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            sync,
            ..StoreOptions::default()
        };
        let store = Store::open(dir.path(), options).unwrap().0;
        let s = store
            .create_stream(StreamConfig::new("S", ["s.>"]))
            .unwrap();
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
