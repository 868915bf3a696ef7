//! Per-message TTL, `never` exemption from max_age, subject delete markers, TTL state across restarts.

use std::time::Duration;

use sluice_store::{Headers, Store, StoreOptions, StreamConfig, StreamHandle};
use sluice_test_support::eventually;

fn ttl(v: &str) -> Headers {
    let mut h = Headers::new();
    h.insert("Nats-TTL", v);
    h
}

/// A new store in `dir` with stream `T` (subject `t`) that accepts per-message TTLs.
fn open_ttl_stream(dir: &std::path::Path) -> (Store, StreamHandle) {
    let (store, _) = Store::open(dir, StoreOptions::default()).unwrap();
    let cfg = StreamConfig {
        allow_msg_ttl: true,
        ..StreamConfig::new("T", ["t"])
    };
    let stream = store.create_stream(cfg).unwrap();
    (store, stream)
}

fn live(s: &StreamHandle, seq: u64) -> bool {
    s.get(seq).unwrap().is_some()
}

#[tokio::test]
async fn ttl_expires_in_background_and_never_survives_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let cfg = StreamConfig {
        allow_msg_ttl: true,
        max_age: Duration::from_secs(2),
        ..StreamConfig::new("T", ["t.*"])
    };
    let s = store.create_stream(cfg).unwrap();
    s.publish("t.short", ttl("1s"), "a").await.unwrap();
    s.publish("t.keep", ttl("never"), "b").await.unwrap();
    s.publish("t.plain", Headers::new(), "c").await.unwrap();
    eventually("the 1s TTL expired", || !live(&s, 1)).await;
    eventually("max_age removed the plain message", || !live(&s, 3)).await;
    assert!(live(&s, 2), "a TTL never message must survive max_age");
}

#[tokio::test]
async fn ttl_state_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, s) = open_ttl_stream(dir.path());
        s.publish("t", ttl("2s"), "a").await.unwrap();
        s.publish("t", Headers::new(), "b").await.unwrap();
        store.close();
    }
    // Once with thw.db, once without it (recovered by the forward scan).
    for remove_thw in [false, true] {
        if remove_thw {
            std::fs::remove_file(dir.path().join("streams/T/msgs/thw.db")).unwrap();
        }
        let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let s = store.stream("T").unwrap();
        if remove_thw {
            eventually("the TTL expired after restart", || !live(&s, 1)).await;
            assert!(live(&s, 2));
        }
        store.close();
    }
}

/// A thw.db whose checksum holds but whose entries stop parsing is ignored whole: the
/// well-formed entry before the bad one must not expire a message that carries no TTL.
#[tokio::test]
async fn a_refused_thw_db_expires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, s) = open_ttl_stream(dir.path());
        s.publish("t", Headers::new(), "no ttl").await.unwrap();
        store.close();
    }
    // Version 1, two entries, stamp 2 (last sequence + 1); entry 1 is (expiry 1 ns, seq 1),
    // entry 2 a varint that never ends; then the checksum over all of it.
    let mut file = vec![1u8];
    file.extend_from_slice(&2u64.to_le_bytes());
    file.extend_from_slice(&2u64.to_le_bytes());
    file.extend_from_slice(&[2, 1, 0xff, 0xff]);
    let sum = xxhash_rust::xxh3::xxh3_64(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    std::fs::write(dir.path().join("streams/T/msgs/thw.db"), file).unwrap();

    let (store, reports) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(
        reports[0].warnings.iter().any(|w| w.contains("thw.db")),
        "{reports:?}"
    );
    let s = store.stream("T").unwrap();
    // Once a message with a TTL has expired, the pass that would have expired seq 1 has run.
    s.publish("t", ttl("1s"), "short").await.unwrap();
    eventually("the 1s TTL expired", || !live(&s, 2)).await;
    assert!(
        live(&s, 1),
        "an entry of a refused thw.db expired a message"
    );
}

#[tokio::test]
async fn max_age_removal_leaves_subject_delete_marker() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let cfg = StreamConfig {
        allow_msg_ttl: true,
        max_age: Duration::from_secs(1),
        subject_delete_marker_ttl: Duration::from_secs(60),
        ..StreamConfig::new("M", ["m.*"])
    };
    let s = store.create_stream(cfg).unwrap();
    s.publish("m.a", Headers::new(), "x").await.unwrap();
    eventually("the marker was written", || {
        s.info(None).state.last_seq >= 2
    })
    .await;
    let marker = s.get(2).unwrap().expect("marker stored");
    assert_eq!(marker.subject, "m.a");
    assert_eq!(marker.headers.get("Nats-Marker-Reason"), Some("MaxAge"));
    assert_eq!(marker.headers.get("Nats-TTL"), Some("60s"));
    assert!(marker.payload.is_empty());
    assert!(!live(&s, 1));
}

/// A purge of subjects and a delete leave a marker on each subject they left empty, saying
/// why (`Purge`, `Remove`), as JetStream does; a subject that keeps a message, a purge from
/// the front and a stream without `subject_delete_marker_ttl` leave none.
#[tokio::test]
async fn purging_or_deleting_a_subjects_last_message_leaves_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let marked = StreamConfig {
        allow_msg_ttl: true,
        subject_delete_marker_ttl: Duration::from_secs(60),
        ..StreamConfig::new("M", ["m.>"])
    };
    let s = store.create_stream(marked).unwrap();
    for subject in ["m.a", "m.b", "m.b", "m.c", "m.w.x", "m.w.y", "m.w.x"] {
        s.publish(subject, Headers::new(), "x").await.unwrap();
    }
    let purge = |filter: &str| sluice_store::PurgeRequest {
        filter: Some(filter.to_owned()),
        ..Default::default()
    };
    let marker = |seq: u64| {
        let m = s.get(seq).unwrap().expect("a marker");
        assert!(m.payload.is_empty());
        assert_eq!(m.headers.get("Nats-TTL"), Some("60s"));
        assert_eq!(m.headers.get("Nats-Rollup"), Some("sub"));
        let reason = m.headers.get("Nats-Marker-Reason").unwrap_or("none");
        (m.subject, reason.to_owned())
    };
    let last_seq = || s.info(None).state.last_seq;
    assert_eq!(s.purge(purge("m.b")).await.unwrap(), 2);
    assert_eq!(marker(8), ("m.b".to_owned(), "Purge".to_owned()));
    // Two subjects emptied at once: a marker each, in the order of their first removal.
    assert_eq!(s.purge(purge("m.w.*")).await.unwrap(), 3);
    assert_eq!(marker(9), ("m.w.x".to_owned(), "Purge".to_owned()));
    assert_eq!(marker(10), ("m.w.y".to_owned(), "Purge".to_owned()));
    assert!(s.delete_msg(4).await.unwrap());
    assert_eq!(marker(11), ("m.c".to_owned(), "Remove".to_owned()));
    // m.a keeps a message: no marker.
    s.publish("m.a", Headers::new(), "x").await.unwrap();
    assert!(s.delete_msg(1).await.unwrap());
    assert_eq!(last_seq(), 12);
    // A purge from the front deletes no key.
    let front = sluice_store::PurgeRequest {
        up_to_seq: Some(13),
        ..Default::default()
    };
    assert_eq!(s.purge(front).await.unwrap(), 5);
    assert_eq!(last_seq(), 12);

    let plain = store
        .create_stream(StreamConfig::new("U", ["u.*"]))
        .unwrap();
    plain.publish("u.a", Headers::new(), "x").await.unwrap();
    plain.publish("u.b", Headers::new(), "x").await.unwrap();
    assert_eq!(plain.purge(purge("u.a")).await.unwrap(), 1);
    assert!(plain.delete_msg(2).await.unwrap());
    assert_eq!(
        plain.info(None).state.last_seq,
        2,
        "no marker without the setting"
    );
}

/// `(first_seq, expired_below)` of stream `s`.
fn front(s: &StreamHandle) -> (u64, u64) {
    let state = s.info(None).state;
    assert_eq!(
        (state.first_seq, state.expired_below),
        {
            let retained = s.retained_from();
            (retained.first_seq, retained.expired_below)
        },
        "info and retained_from agree"
    );
    (state.first_seq, state.expired_below)
}

/// Why the front of a stream went is kept: a purge or a limit raises `expired_below` (readers
/// that asked for those positions are told), a message's own TTL or a delete does not. Both
/// the fast open from index.db and a rebuild from the blocks alone give it back.
#[tokio::test]
async fn own_ttl_and_deletes_at_the_front_are_not_expired_positions() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, s) = open_ttl_stream(dir.path());
        s.publish("t", Headers::new(), "1 purged").await.unwrap();
        s.publish("t", ttl("1s"), "2 by its own TTL").await.unwrap();
        s.publish("t", Headers::new(), "3 deleted").await.unwrap();
        s.publish("t", Headers::new(), "4 kept").await.unwrap();
        let purge = sluice_store::PurgeRequest {
            up_to_seq: Some(2),
            ..Default::default()
        };
        assert_eq!(s.purge(purge).await.unwrap(), 1);
        assert_eq!(front(&s), (2, 2));
        eventually("the 1s TTL expired", || !live(&s, 2)).await;
        assert_eq!(front(&s), (3, 2));
        assert!(s.delete_msg(3).await.unwrap());
        assert_eq!(front(&s), (4, 2));
        store.close();
    }
    for remove_index in [false, true] {
        if remove_index {
            std::fs::remove_file(dir.path().join("streams/T/msgs/index.db")).unwrap();
        }
        let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let s = store.stream("T").unwrap();
        assert_eq!(front(&s), (4, 2), "index.db removed: {remove_index}");
        store.close();
    }
}

/// A message `max_age` removes right behind one that went by its own TTL is an expired
/// position, and so is everything a purge of the whole stream removes.
#[tokio::test]
async fn limits_and_purges_at_the_front_are_expired_positions() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let cfg = StreamConfig {
        allow_msg_ttl: true,
        max_age: Duration::from_secs(2),
        ..StreamConfig::new("T", ["t"])
    };
    let s = store.create_stream(cfg).unwrap();
    s.publish("t", ttl("1s"), "1 by its own TTL").await.unwrap();
    s.publish("t", Headers::new(), "2 by max_age")
        .await
        .unwrap();
    eventually("max_age removed 2", || !live(&s, 2)).await;
    assert_eq!(front(&s), (3, 3));
    s.publish("t", Headers::new(), "3").await.unwrap();
    s.publish("t", Headers::new(), "4").await.unwrap();
    assert_eq!(s.purge(Default::default()).await.unwrap(), 2);
    assert_eq!(front(&s), (5, 5));
    store.close();
}
