//! Publish rules: one test per JetStream error code, dedupe, and group commit.

use std::time::Duration;

use sluice_store::{
    DiscardPolicy, Headers, PubAck, Store, StoreError, StoreOptions, StreamConfig, StreamHandle,
    SyncPolicy,
};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(
        dir.path(),
        StoreOptions {
            sync: SyncPolicy::Always,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    (dir, store)
}

fn hdrs(pairs: &[(&str, &str)]) -> Headers {
    let mut h = Headers::new();
    for (n, v) in pairs {
        h.insert(*n, *v);
    }
    h
}

async fn code_of(s: &StreamHandle, subject: &str, h: Headers, payload: &'static str) -> (u16, u32) {
    match s.publish(subject, h, payload).await {
        Err(StoreError::Api(e)) => (e.status, e.code),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn duplicate_msg_id_returns_original_sequence() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("D", ["d"])).unwrap();
    let a = s
        .publish("d", hdrs(&[("Nats-Msg-Id", "x")]), "1")
        .await
        .unwrap();
    s.publish("d", Headers::new(), "2").await.unwrap();
    let dup = s
        .publish("d", hdrs(&[("Nats-Msg-Id", "x")]), "again")
        .await
        .unwrap();
    assert_eq!(
        dup,
        PubAck {
            seq: a.seq,
            duplicate: true
        }
    );
    assert_eq!(s.info(None).state.msgs, 2);
    // The window survives a restart.
    store.close();
    let (store, _) = Store::open(_d.path(), StoreOptions::default()).unwrap();
    let s = store.stream("D").unwrap();
    assert_eq!(
        s.publish("d", hdrs(&[("Nats-Msg-Id", "x")]), "3")
            .await
            .unwrap(),
        PubAck {
            seq: 1,
            duplicate: true
        }
    );
}

#[tokio::test]
async fn expected_stream_mismatch_is_10060() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    assert_eq!(
        code_of(&s, "e", hdrs(&[("Nats-Expected-Stream", "OTHER")]), "x").await,
        (400, 10060)
    );
    s.publish("e", hdrs(&[("Nats-Expected-Stream", "E")]), "x")
        .await
        .unwrap();
}

#[tokio::test]
async fn expected_last_sequence_is_10071() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    s.publish("e", Headers::new(), "x").await.unwrap();
    assert_eq!(
        code_of(&s, "e", hdrs(&[("Nats-Expected-Last-Sequence", "5")]), "x").await,
        (400, 10071)
    );
    s.publish("e", hdrs(&[("Nats-Expected-Last-Sequence", "1")]), "x")
        .await
        .unwrap();
}

#[tokio::test]
async fn expected_last_subject_sequence_is_10071() {
    let (_d, store) = store();
    let s = store
        .create_stream(StreamConfig::new("E", ["e.*"]))
        .unwrap();
    s.publish("e.a", Headers::new(), "x").await.unwrap();
    s.publish("e.b", Headers::new(), "x").await.unwrap();
    assert_eq!(
        code_of(
            &s,
            "e.a",
            hdrs(&[("Nats-Expected-Last-Subject-Sequence", "2")]),
            "x"
        )
        .await,
        (400, 10071)
    );
    s.publish(
        "e.a",
        hdrs(&[("Nats-Expected-Last-Subject-Sequence", "1")]),
        "x",
    )
    .await
    .unwrap();
    s.publish(
        "e.c",
        hdrs(&[("Nats-Expected-Last-Subject-Sequence", "0")]),
        "x",
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn expected_last_msg_id_is_10070() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    s.publish("e", hdrs(&[("Nats-Msg-Id", "a")]), "x")
        .await
        .unwrap();
    assert_eq!(
        code_of(&s, "e", hdrs(&[("Nats-Expected-Last-Msg-Id", "b")]), "x").await,
        (400, 10070)
    );
    s.publish("e", hdrs(&[("Nats-Expected-Last-Msg-Id", "a")]), "x")
        .await
        .unwrap();
}

#[tokio::test]
async fn max_msg_size_is_10054() {
    let (_d, store) = store();
    let s = store
        .create_stream(StreamConfig {
            max_msg_size: 10,
            ..StreamConfig::new("E", ["e"])
        })
        .unwrap();
    assert_eq!(
        code_of(&s, "e", Headers::new(), "0123456789").await,
        (400, 10054)
    );
    s.publish("e", Headers::new(), "012345678").await.unwrap();
}

#[tokio::test]
async fn discard_new_limits_are_10077() {
    let (_d, store) = store();
    let s = store
        .create_stream(StreamConfig {
            max_msgs: 2,
            discard: DiscardPolicy::New,
            ..StreamConfig::new("M", ["m"])
        })
        .unwrap();
    s.publish("m", Headers::new(), "1").await.unwrap();
    s.publish("m", Headers::new(), "2").await.unwrap();
    assert_eq!(code_of(&s, "m", Headers::new(), "3").await, (503, 10077));
    let s = store
        .create_stream(StreamConfig {
            max_bytes: 200,
            discard: DiscardPolicy::New,
            ..StreamConfig::new("B", ["b"])
        })
        .unwrap();
    s.publish("b", Headers::new(), "1").await.unwrap();
    let big: &'static str = Box::leak("x".repeat(200).into_boxed_str());
    assert_eq!(code_of(&s, "b", Headers::new(), big).await, (503, 10077));
    let s = store
        .create_stream(StreamConfig {
            max_msgs_per_subject: 1,
            discard: DiscardPolicy::New,
            discard_new_per_subject: true,
            ..StreamConfig::new("S", ["s.*"])
        })
        .unwrap();
    s.publish("s.a", Headers::new(), "1").await.unwrap();
    s.publish("s.b", Headers::new(), "1").await.unwrap();
    assert_eq!(code_of(&s, "s.a", Headers::new(), "2").await, (503, 10077));
}

#[tokio::test]
async fn sealed_stream_is_10109() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    s.publish("e", Headers::new(), "x").await.unwrap();
    store
        .update_stream(StreamConfig {
            sealed: true,
            ..StreamConfig::new("E", ["e"])
        })
        .await
        .unwrap();
    assert_eq!(code_of(&s, "e", Headers::new(), "x").await, (400, 10109));
    assert_eq!(
        s.delete_msg(1).await.unwrap_err().api().unwrap().code,
        10109
    );
}

#[tokio::test]
async fn client_source_header_is_10227_internal_allowed() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    let forged = hdrs(&[("Nats-Stream-Source", "O 1 > > e abc")]);
    assert_eq!(code_of(&s, "e", forged.clone(), "x").await, (400, 10227));
    let ack = s.publish_internal("e", forged, "x").await.unwrap();
    assert_eq!(ack.seq, 1);
}

#[tokio::test]
async fn ttl_disabled_is_10166_invalid_is_10165() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("E", ["e"])).unwrap();
    assert_eq!(
        code_of(&s, "e", hdrs(&[("Nats-TTL", "5s")]), "x").await,
        (400, 10166)
    );
    let t = store
        .create_stream(StreamConfig {
            allow_msg_ttl: true,
            ..StreamConfig::new("T", ["t"])
        })
        .unwrap();
    assert_eq!(
        code_of(&t, "t", hdrs(&[("Nats-TTL", "500ms")]), "x").await,
        (400, 10165)
    );
    assert_eq!(
        code_of(&t, "t", hdrs(&[("Nats-TTL", "soon")]), "x").await,
        (400, 10165)
    );
    t.publish("t", hdrs(&[("Nats-TTL", "never")]), "x")
        .await
        .unwrap();
}

#[tokio::test]
async fn deny_delete_and_deny_purge_are_refused() {
    let (_d, store) = store();
    let s = store
        .create_stream(StreamConfig {
            deny_delete: true,
            deny_purge: true,
            ..StreamConfig::new("E", ["e"])
        })
        .unwrap();
    s.publish("e", Headers::new(), "x").await.unwrap();
    assert!(s.delete_msg(1).await.unwrap_err().api().is_some());
    assert!(
        s.purge(Default::default())
            .await
            .unwrap_err()
            .api()
            .is_some()
    );
    assert_eq!(s.info(None).state.msgs, 1);
}

#[tokio::test]
async fn group_commit_shares_fsyncs_between_concurrent_publishers() {
    let (_d, store) = store();
    let s = store.create_stream(StreamConfig::new("G", ["g"])).unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    s.publish("g", Headers::new(), "payload").await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let info = s.info(None);
    assert_eq!(info.state.msgs, 64 * 20);
    assert!(info.stats.fsyncs > 0);
    assert!(
        info.stats.fsyncs * 4 < info.stats.msgs_stored,
        "{:?}",
        info.stats
    );
}

#[tokio::test]
async fn limits_discard_old_keep_the_newest() {
    let (_d, store) = store();
    let s = store
        .create_stream(StreamConfig {
            max_msgs: 5,
            max_msgs_per_subject: 2,
            ..StreamConfig::new("L", ["l.*"])
        })
        .unwrap();
    for i in 0..10 {
        s.publish(if i % 2 == 0 { "l.a" } else { "l.b" }, Headers::new(), "x")
            .await
            .unwrap();
    }
    let st = s.info(None).state;
    assert_eq!((st.msgs, st.first_seq, st.last_seq), (4, 7, 10));
    let s = store
        .create_stream(StreamConfig {
            max_age: Duration::from_secs(1),
            ..StreamConfig::new("A", ["a"])
        })
        .unwrap();
    s.publish("a", Headers::new(), "x").await.unwrap();
    sluice_test_support::eventually("max_age to remove the message", || {
        s.info(None).state.msgs == 0
    })
    .await;
}
