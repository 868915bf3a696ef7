//! Whole-block retention, interval sync, and subscribers of a deleted stream.

use std::time::Duration;

use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, PurgeRequest, Store, StoreError, StoreOptions, StreamConfig, SyncPolicy,
};

fn block_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("streams/R/msgs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".blk"))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn limits_and_purge_remove_whole_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        block_size: 1024,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(dir.path(), opts.clone()).unwrap();
    let s = store
        .create_stream(StreamConfig {
            max_msgs: 20,
            ..StreamConfig::new("R", ["r"])
        })
        .unwrap();
    for _ in 0..500 {
        s.publish("r", Headers::new(), vec![7u8; 100])
            .await
            .unwrap();
    }
    let blocks = block_files(dir.path());
    // 20 live messages of ~140 bytes fit in 3-4 blocks of 1 KiB; 500 messages needed ~70.
    assert!(blocks.len() <= 5, "old blocks were not removed: {blocks:?}");
    assert_eq!(s.info(None).state.msgs, 20);
    s.purge(PurgeRequest::default()).await.unwrap();
    assert_eq!(
        block_files(dir.path()).len(),
        1,
        "a full purge leaves only the fresh block"
    );
    store.close();
    let (store, reports) = Store::open(dir.path(), opts).unwrap();
    assert!(reports[0].is_clean());
    let st = store.stream("R").unwrap().info(None).state;
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (0, 501, 500));
}

#[tokio::test]
async fn interval_sync_fsyncs_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(
        dir.path(),
        StoreOptions {
            sync: SyncPolicy::Interval(Duration::from_millis(50)),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let s = store.create_stream(StreamConfig::new("R", ["r"])).unwrap();
    s.publish("r", Headers::new(), "x").await.unwrap();
    sluice_test_support::eventually("a background fsync", || s.info(None).stats.fsyncs > 0).await;
}

#[tokio::test]
async fn deleting_a_stream_ends_its_subscriptions_with_an_error() {
    let store = Store::in_memory(StoreOptions::default());
    let s = store.create_stream(StreamConfig::new("R", ["r"])).unwrap();
    let mut sub = Box::pin(
        s.subscribe(1, FilterSet::new(["r"]).unwrap())
            .map(|d| d.map(|d| d.message().expect("nothing lost"))),
    );
    s.publish("r", Headers::new(), "x").await.unwrap();
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 1);
    store.delete_stream("R").unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .unwrap();
    assert!(matches!(end, Some(Err(StoreError::Closed(_)))), "{end:?}");
    assert!(sub.next().await.is_none());
    assert!(matches!(
        s.publish("r", Headers::new(), "y").await,
        Err(StoreError::Closed(_))
    ));
}
