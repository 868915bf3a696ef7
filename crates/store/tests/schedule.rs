//! Message schedules: codes, firing into the target, one-shots, missed runs after a restart,
//! and the per-block counters that let recovery skip blocks.

use std::time::Duration;

use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, RecoveryPath, Store, StoreError, StoreOptions, StreamConfig,
};

fn sched(pattern: &str, target: &str) -> Headers {
    let mut h = Headers::new();
    h.insert("Nats-Schedule", pattern);
    h.insert("Nats-Schedule-Target", target);
    h
}

fn cfg() -> StreamConfig {
    StreamConfig {
        allow_msg_schedules: true,
        allow_msg_ttl: true,
        ..StreamConfig::new("S", ["sched.*", "out.*"])
    }
}

fn code(r: Result<sluice_store::PubAck, StoreError>) -> u32 {
    r.unwrap_err().api().expect("API error").code
}

#[tokio::test]
async fn schedules_disabled_is_10188_bad_pattern_is_10189() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let off = store
        .create_stream(StreamConfig::new("OFF", ["sched.*", "out.*"]))
        .unwrap();
    assert_eq!(
        code(
            off.publish("sched.a", sched("@every 1s", "out.a"), "x")
                .await
        ),
        10188
    );
    // Subjects belong to one stream at a time.
    store.delete_stream("OFF").unwrap();
    let s = store.create_stream(cfg()).unwrap();
    assert_eq!(
        code(
            s.publish("sched.a", sched("@every 10ms", "out.a"), "x")
                .await
        ),
        10189
    );
    assert_eq!(
        code(
            s.publish("sched.a", sched("every minute", "out.a"), "x")
                .await
        ),
        10189
    );
    assert_eq!(
        code(
            s.publish("sched.a", sched("@every 1s", "sched.a"), "x")
                .await
        ),
        10190
    );
}

#[tokio::test]
async fn every_fires_into_target_with_scheduler_header() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let s = store.create_stream(cfg()).unwrap();
    let mut sub = Box::pin(
        s.subscribe(1, FilterSet::new(["out.a"]).unwrap())
            .map(|d| d.map(|d| d.message().expect("nothing lost"))),
    );
    s.publish("sched.a", sched("@every 1s", "out.a"), "tick")
        .await
        .unwrap();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(20), sub.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(m.subject, "out.a");
        assert_eq!(&m.payload[..], b"tick");
        assert_eq!(m.headers.get("Nats-Scheduler"), Some("sched.a"));
        assert_eq!(m.headers.get("Nats-Schedule"), None);
    }
}

#[tokio::test]
async fn missed_one_shot_fires_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fires = std::time::SystemTime::now() + Duration::from_secs(2);
    let at = jiff::Timestamp::try_from(fires).unwrap();
    {
        let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let s = store.create_stream(cfg()).unwrap();
        s.publish(
            "sched.once",
            sched(&format!("@at {at}"), "out.once"),
            "boom",
        )
        .await
        .unwrap();
        store.close();
    }
    // Stay down past the fire time.
    sluice_test_support::wall_clock_passes(fires).await;
    let (store, reports) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index);
    let s = store.stream("S").unwrap();
    let mut sub = Box::pin(
        s.subscribe(1, FilterSet::new(["out.once"]).unwrap())
            .map(|d| d.map(|d| d.message().expect("nothing lost"))),
    );
    let m = tokio::time::timeout(Duration::from_secs(20), sub.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(m.headers.get("Nats-Scheduler"), Some("sched.once"));
    assert_eq!(m.headers.get("Nats-Schedule-Next"), Some("purge"));
    // The one-shot is gone: its message removed, nothing else fires.
    sluice_test_support::eventually("the one-shot schedule removed", || {
        s.get(1).unwrap().is_none()
    })
    .await;
    let info = s.info(Some(&FilterSet::new(["out.once"]).unwrap()));
    assert_eq!(info.state.subjects.unwrap().get("out.once"), Some(&1));
}

#[tokio::test]
async fn per_message_recovery_skips_blocks_without_ttl_or_schedules() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        block_size: 1024,
        ..StoreOptions::default()
    };
    {
        let (store, _) = Store::open(dir.path(), opts.clone()).unwrap();
        let s = store.create_stream(cfg()).unwrap();
        for i in 0..200 {
            let mut h = Headers::new();
            if i == 100 {
                h.insert("Nats-TTL", "1h");
            }
            s.publish("out.x", h, vec![b'x'; 64]).await.unwrap();
        }
        store.close();
    }
    std::fs::remove_file(dir.path().join("streams/S/msgs/thw.db")).unwrap();
    let (store, reports) = Store::open(dir.path(), opts).unwrap();
    assert_eq!(reports[0].path, RecoveryPath::Index);
    assert_eq!(reports[0].per_message_blocks_scanned, 1, "{:?}", reports[0]);
    store.close();
}
