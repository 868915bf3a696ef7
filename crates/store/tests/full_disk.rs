//! A full disk is a transient condition: on a real, small tmpfs, publishes fail with a typed
//! error while it is full, nothing acknowledged is lost, nothing that failed is ever visible,
//! and once space is freed publishing resumes without a reopen. Needs root (to mount the tmpfs);
//! skipped with a message otherwise.

use std::time::Duration;

use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, PubAck, Store, StoreError, StoreOptions, StreamConfig, StreamHandle,
    SyncPolicy,
};
use sluice_test_support::Tmpfs;

/// Blocks small enough that the test rolls over several of them.
const BLOCK_SIZE: u64 = 64 << 10;
/// A payload larger than what a full tmpfs has left in the pages its files already hold.
const PAYLOAD: usize = 8 << 10;
/// A payload larger than a block: it gets a block of its own, so its batch starts one.
const HUGE_PAYLOAD: usize = BLOCK_SIZE as usize + 1024;

fn opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Always,
        block_size: BLOCK_SIZE,
        ..StoreOptions::default()
    }
}

/// A payload naming its publish attempt, padded to `len` bytes.
fn payload(attempt: usize, len: usize) -> String {
    let mut text = format!("attempt-{attempt}-");
    text.extend(std::iter::repeat_n('x', len.saturating_sub(text.len())));
    text
}

/// What was acknowledged: the sequence and the payload stored there.
struct Acked(Vec<(u64, String)>);

impl Acked {
    /// Publishes `text`; records it when acknowledged, checking its sequence is above every
    /// earlier one.
    async fn publish(&mut self, s: &StreamHandle, text: String) -> Result<PubAck, StoreError> {
        let ack = s.publish("disk.t", Headers::new(), text.clone()).await?;
        if let Some((last, _)) = self.0.last() {
            assert!(ack.seq > *last, "seq {} after {last}", ack.seq);
        }
        self.0.push((ack.seq, text));
        Ok(ack)
    }

    fn last_seq(&self) -> u64 {
        self.0.last().map_or(0, |(seq, _)| *seq)
    }
}

fn assert_storage_full(result: Result<PubAck, StoreError>) {
    match result {
        Err(e @ StoreError::WriteFailed { .. }) => {
            assert!(e.is_storage_full(), "not a full disk: {e}");
        }
        other => panic!("expected a failed write, got {other:?}"),
    }
}

#[tokio::test]
async fn a_full_disk_fails_publishes_until_space_is_freed() {
    let Some(disk) = Tmpfs::mount("2m", "a_full_disk_fails_publishes_until_space_is_freed") else {
        return;
    };
    let (store, _) = Store::open(disk.path(), opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new("DISK", ["disk.>"]))
        .unwrap();
    let mut subscriber = Box::pin(s.subscribe(1, FilterSet::new([">"]).unwrap()));
    let mut acked = Acked(Vec::new());
    let mut attempt = 0;
    for _ in 0..20 {
        attempt += 1;
        acked.publish(&s, payload(attempt, 1024)).await.unwrap();
    }

    disk.fill().unwrap();
    // What still fits in pages the block files already hold is stored; the first publish that
    // needs a new page fails.
    let failed_first = loop {
        attempt += 1;
        if let Err(e) = acked.publish(&s, payload(attempt, PAYLOAD)).await {
            break e;
        }
        assert!(attempt < 100, "the disk never filled up");
    };
    assert_storage_full(Err(failed_first));
    let before = s.info(None).state;
    assert_eq!(
        before.last_seq,
        acked.last_seq(),
        "the failed seq is not visible"
    );
    assert!(s.get(acked.last_seq() + 1).unwrap().is_none());
    let health = s.write_health();
    assert!(health.failing.is_some(), "{health:?}");
    assert!(health.write_errors >= 1, "{health:?}");

    // Concurrent publishes share a batch, which fails whole; one starting a block, too.
    let batch: Vec<_> = (0..5)
        .map(|i| s.publish("disk.t", Headers::new(), payload(1000 + i, PAYLOAD)))
        .collect();
    for result in futures::future::join_all(batch).await {
        assert_storage_full(result);
    }
    attempt += 1;
    assert_storage_full(acked.publish(&s, payload(attempt, HUGE_PAYLOAD)).await);
    // index.db cannot be written either: counted, the stream stays open.
    s.flush().await.unwrap();
    assert!(s.write_health().snapshot_errors >= 1);
    assert_eq!(
        s.info(None).state,
        before,
        "nothing of the failed batches remains"
    );

    disk.free().unwrap();
    for len in [PAYLOAD, HUGE_PAYLOAD, 1024] {
        attempt += 1;
        acked
            .publish(&s, payload(attempt, len))
            .await
            .expect("publishing resumes once space is back");
    }
    assert_eq!(s.write_health().failing, None);

    // The subscriber saw exactly what was acknowledged, in order.
    for (seq, text) in &acked.0 {
        let m = tokio::time::timeout(Duration::from_secs(10), subscriber.next())
            .await
            .expect("the subscriber gets every acknowledged message")
            .unwrap()
            .unwrap()
            .message()
            .expect("nothing lost");
        assert_eq!((m.seq, &m.payload[..]), (*seq, text.as_bytes()));
    }
    drop(subscriber);
    store.close();

    let (store, reports) = Store::open(disk.path(), opts()).unwrap();
    assert!(reports[0].lost.is_empty(), "{:?}", reports[0]);
    let s = store.stream("DISK").unwrap();
    for (seq, text) in &acked.0 {
        let m = s.get(*seq).unwrap().expect("every acknowledged message");
        assert_eq!(&m.payload[..], text.as_bytes(), "seq {seq}");
    }
    let state = s.info(None).state;
    assert_eq!(
        (state.msgs, state.last_seq),
        (acked.0.len() as u64, acked.last_seq())
    );
}

#[tokio::test]
async fn closing_a_store_whose_disk_is_full_returns_promptly() {
    let Some(disk) = Tmpfs::mount("1m", "closing_a_store_whose_disk_is_full_returns_promptly")
    else {
        return;
    };
    let (store, _) = Store::open(disk.path(), opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new("DISK", ["disk.>"]))
        .unwrap();
    s.publish("disk.t", Headers::new(), payload(0, 1024))
        .await
        .unwrap();
    disk.fill().unwrap();
    let failed = s
        .publish("disk.t", Headers::new(), payload(1, PAYLOAD))
        .await;
    assert_storage_full(failed);

    // Closing writes index.db, which fails on the full disk: close gives up on it and returns.
    let (done, closed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        store.close();
        let _ = done.send(());
    });
    closed
        .recv_timeout(Duration::from_secs(10))
        .expect("close returns while the disk is full");

    disk.free().unwrap();
    let (store, reports) = Store::open(disk.path(), opts()).unwrap();
    assert!(reports[0].lost.is_empty(), "{:?}", reports[0]);
    let state = store.stream("DISK").unwrap().info(None).state;
    assert_eq!(state.msgs, 1);
    // The lease could not be settled on the full disk: the positions up to it are unconfirmed,
    // as after a crash, and never handed out again.
    assert_eq!(
        reports[0].unconfirmed,
        Some(2..=state.last_seq),
        "{:?}",
        reports[0]
    );
}
