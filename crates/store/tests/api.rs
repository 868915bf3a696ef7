//! The public API end to end on real files.

use std::time::Duration;

use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, PurgeRequest, RecoveryPath, StorageType, Store, StoreOptions, StreamConfig,
    SyncPolicy,
};

fn opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Always,
        block_size: 4096,
        ..StoreOptions::default()
    }
}

#[tokio::test]
async fn publish_get_filter_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (store, reports) = Store::open(dir.path(), opts()).unwrap();
    assert!(reports.is_empty());
    let s = store
        .create_stream(StreamConfig::new("ORDERS", ["orders.>"]))
        .unwrap();
    for i in 0..100u32 {
        let subject = if i % 10 == 0 {
            "orders.rare"
        } else {
            "orders.common"
        };
        let ack = s
            .publish(subject, Headers::new(), format!("m{i}"))
            .await
            .unwrap();
        assert_eq!(ack.seq, i as u64 + 1);
    }
    let m = s.get(5).unwrap().unwrap();
    assert_eq!(
        (m.seq, m.subject.as_str(), &m.payload[..]),
        (5, "orders.common", &b"m4"[..])
    );
    let rare = FilterSet::new(["orders.rare"]).unwrap();
    assert_eq!(s.next_matching(2, &rare).unwrap().unwrap().seq, 11);
    assert_eq!(s.last_for_subject("orders.rare").unwrap().unwrap().seq, 91);
    let info = s.info(Some(&FilterSet::new([">"]).unwrap()));
    assert_eq!(
        (info.state.first_seq, info.state.last_seq, info.state.msgs),
        (1, 100, 100)
    );
    assert_eq!(info.state.subjects.unwrap()["orders.rare"], 10);
    let incarnation = info.incarnation;
    store.close();

    let (store, reports) = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].path, RecoveryPath::Index);
    assert!(reports[0].is_clean(), "{:?}", reports[0]);
    let s = store.stream("ORDERS").unwrap();
    assert_eq!(s.info(None).incarnation, incarnation);
    assert_eq!(s.info(None).state.msgs, 100);
    assert_eq!(s.get(100).unwrap().unwrap().payload, "m99");
    assert_eq!(store.list(), vec!["ORDERS".to_string()]);
}

#[tokio::test]
async fn subscribe_replays_then_follows_live() {
    let store = Store::in_memory(opts());
    let s = store
        .create_stream(StreamConfig {
            storage: StorageType::Memory,
            ..StreamConfig::new("S", ["a.*"])
        })
        .unwrap();
    for i in 0..3 {
        s.publish(if i == 1 { "a.y" } else { "a.x" }, Headers::new(), "old")
            .await
            .unwrap();
    }
    let mut sub = Box::pin(
        s.subscribe(1, FilterSet::new(["a.x"]).unwrap())
            .map(|d| d.map(|d| d.message().expect("nothing lost"))),
    );
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 1);
    assert_eq!(sub.next().await.unwrap().unwrap().seq, 3);
    let s2 = s.clone();
    let publisher = tokio::spawn(async move {
        s2.publish("a.y", Headers::new(), "skip").await.unwrap();
        s2.publish("a.x", Headers::new(), "live").await.unwrap();
    });
    let live = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((live.seq, &live.payload[..]), (5, &b"live"[..]));
    publisher.await.unwrap();
}

#[tokio::test]
async fn purge_delete_and_recreate_changes_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new("P", ["p.>"]))
        .unwrap();
    for i in 0..50 {
        s.publish(format!("p.{}", i % 5), Headers::new(), vec![0u8; 100])
            .await
            .unwrap();
    }
    assert!(s.delete_msg(3).await.unwrap());
    assert!(!s.delete_msg(3).await.unwrap());
    assert_eq!(
        s.purge(PurgeRequest {
            filter: Some("p.1".into()),
            ..Default::default()
        })
        .await
        .unwrap(),
        10
    );
    assert_eq!(
        s.purge(PurgeRequest {
            up_to_seq: Some(20),
            ..Default::default()
        })
        .await
        .unwrap(),
        14
    );
    assert_eq!(
        s.purge(PurgeRequest {
            keep: Some(5),
            ..Default::default()
        })
        .await
        .unwrap(),
        20
    );
    let before = s.info(None);
    assert_eq!(before.state.msgs, 5);
    assert_eq!(s.purge(PurgeRequest::default()).await.unwrap(), 5);
    assert_eq!(s.info(None).state.first_seq, 51);
    store.close();

    let (store, reports) = Store::open(dir.path(), opts()).unwrap();
    assert!(reports[0].is_clean());
    let s = store.stream("P").unwrap();
    let info = s.info(None);
    assert_eq!(
        (info.state.msgs, info.state.last_seq, info.state.first_seq),
        (0, 50, 51)
    );
    assert_eq!(s.publish("p.0", Headers::new(), "x").await.unwrap().seq, 51);
    let inc = info.incarnation;
    store.delete_stream("P").unwrap();
    assert!(store.stream("P").is_none());
    let s = store
        .create_stream(StreamConfig::new("P", ["p.>"]))
        .unwrap();
    assert_ne!(s.info(None).incarnation, inc);
    assert_eq!(s.info(None).state.last_seq, 0);
}

#[tokio::test]
async fn publish_batch_assigns_consecutive_sequences_with_per_message_results() {
    let store = Store::in_memory(opts());
    let s = store
        .create_stream(StreamConfig::new("B", ["b.*"]))
        .unwrap();
    let batch = vec![
        (
            "b.1".to_string(),
            Headers::new(),
            bytes::Bytes::from_static(b"1"),
        ),
        (
            "nope".to_string(),
            Headers::new(),
            bytes::Bytes::from_static(b"x"),
        ),
        (
            "b.2".to_string(),
            Headers::new(),
            bytes::Bytes::from_static(b"2"),
        ),
    ];
    let acks = s.publish_batch(batch).await.unwrap();
    assert_eq!(acks[0].as_ref().unwrap().seq, 1);
    assert!(
        acks[1].as_ref().unwrap_err().api().is_some(),
        "a subject outside the stream is rejected"
    );
    assert_eq!(acks[2].as_ref().unwrap().seq, 2);
    assert_eq!(s.get(2).unwrap().unwrap().payload, "2");
}

#[tokio::test]
async fn memory_stream_in_a_file_store_keeps_config_not_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store
        .create_stream(StreamConfig {
            storage: StorageType::Memory,
            ..StreamConfig::new("MEM", ["mem"])
        })
        .unwrap();
    s.publish("mem", Headers::new(), "x").await.unwrap();
    assert!(
        !dir.path().join("streams/MEM/msgs").exists(),
        "a memory stream writes no blocks"
    );
    store.close();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store.stream("MEM").unwrap();
    assert_eq!(s.info(None).config.storage, StorageType::Memory);
    assert_eq!(s.info(None).state.msgs, 0);
}

#[tokio::test]
async fn invalid_names_and_unknown_streams_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    for name in ["../escape", "a/b", "a.b", "x y"] {
        let err = store
            .create_stream(StreamConfig::new(name, ["z"]))
            .unwrap_err();
        assert!(
            matches!(err, sluice_store::StoreError::InvalidName { .. }),
            "{name}: {err}"
        );
    }
    assert!(!dir.path().join("escape").exists());
    assert!(store.delete_stream("NOPE").is_err());
    let s = store.create_stream(StreamConfig::new("S", ["s"])).unwrap();
    assert_eq!(
        store
            .create_stream(StreamConfig::new("S", ["s"]))
            .unwrap()
            .name(),
        "S"
    );
    assert_eq!(
        store
            .create_stream(StreamConfig::new("S", ["other"]))
            .unwrap_err()
            .api()
            .unwrap()
            .code,
        10058
    );
    drop(s);
}

#[test]
fn a_data_directory_is_opened_by_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    assert!(matches!(
        Store::open(dir.path(), opts()).unwrap_err(),
        sluice_store::StoreError::Locked(_)
    ));
    store.close();
    Store::open(dir.path(), opts()).unwrap();
}

#[tokio::test]
async fn oversized_headers_are_rejected_before_they_reach_a_block() {
    let store = Store::in_memory(opts());
    let s = store.create_stream(StreamConfig::new("H", ["h"])).unwrap();
    let mut h = Headers::new();
    h.insert("X-Big", "v".repeat(70 * 1024));
    assert_eq!(
        s.publish("h", h, "x")
            .await
            .unwrap_err()
            .api()
            .unwrap()
            .code,
        10097
    );
}

#[tokio::test]
async fn overlapping_subjects_are_refused_and_a_subject_finds_its_stream() {
    let store = Store::in_memory(opts());
    store
        .create_stream(StreamConfig::new("ORDERS", ["orders.>"]))
        .unwrap();
    let overlap = |err: sluice_store::StoreError| err.api().map(|a| a.code);
    let clash = store
        .create_stream(StreamConfig::new("EU", ["orders.eu"]))
        .unwrap_err();
    assert_eq!(overlap(clash), Some(10065));
    // A stream with neither subjects nor sources captures its own name.
    store
        .create_stream(StreamConfig::new("AUDIT", Vec::<String>::new()))
        .unwrap();
    let clash = store
        .create_stream(StreamConfig::new("X", ["AUDIT"]))
        .unwrap_err();
    assert_eq!(overlap(clash), Some(10065));
    store
        .create_stream(StreamConfig::new("CHAT", ["chat.*"]))
        .unwrap();
    let clash = store
        .update_stream(StreamConfig::new("CHAT", ["chat.*", "*.eu"]))
        .await
        .unwrap_err();
    assert_eq!(overlap(clash), Some(10065));

    let owner = |subject: &str| {
        store
            .stream_for_subject(subject)
            .map(|h| h.name().to_owned())
    };
    assert_eq!(owner("orders.eu.1").as_deref(), Some("ORDERS"));
    assert_eq!(owner("chat.room").as_deref(), Some("CHAT"));
    assert_eq!(owner("chat.room.deep"), None);
}
