//! The source index: updated with each stored sourced message, kept across purge, and recovered
//! from sources.db when current, brought up to date when stale, and rebuilt by the forward scan
//! when missing, corrupt or of a future version — each path observable in the recovery report.

use std::fs;
use std::path::Path;

use sluice_store::{
    Headers, PurgeRequest, SidecarRecovery, SourceConfig, Store, StoreOptions, StreamConfig,
    StreamHandle,
};

fn cfg() -> StreamConfig {
    let src = |name: &str, filter: &str| SourceConfig {
        name: name.into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: Some(filter.into()),
        subject_transforms: vec![],
    };
    StreamConfig {
        sources: vec![src("ORDERS", "orders.*"), src("CHAT", "chat.>")],
        ..StreamConfig::new("ALL", Vec::<String>::new())
    }
}

async fn source(s: &StreamHandle, origin: &str, filter: &str, seq: u64, subject: &str) {
    let mut h = Headers::new();
    h.insert(
        "Nats-Stream-Source",
        format!("{origin} {seq} {filter} > {subject} id-{origin}"),
    );
    s.publish_internal(subject, h, "m").await.unwrap();
}

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: 1024,
        ..StoreOptions::default()
    }
}

fn reopen(dir: &Path) -> (Store, sluice_store::RecoveryReport) {
    let (store, mut reports) = Store::open(dir, opts()).unwrap();
    (store, reports.remove(0))
}

#[tokio::test]
async fn source_index_recovery_paths() {
    let dir = tempfile::tempdir().unwrap();
    let sources_db = dir.path().join("streams/ALL/sources.db");
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let s = store.create_stream(cfg()).unwrap();
    for i in 1..=30 {
        source(&s, "ORDERS", "orders.*", i, "orders.new").await;
        if i % 3 == 0 {
            source(&s, "CHAT", "chat.>", i / 3, "chat.room").await;
        }
        // Filler so that many blocks hold no sourced message.
        for _ in 0..5 {
            s.publish_internal("filler", Headers::new(), vec![0u8; 100])
                .await
                .unwrap();
        }
    }
    let want = s.source_positions();
    assert_eq!(want["ORDERS orders.* >"].seq, 30);
    assert_eq!(want["ORDERS orders.* >"].ident, "id-ORDERS");
    assert_eq!(want["CHAT chat.> >"].seq, 10);

    // A purge keeps the index (it lives at the stream root).
    s.purge(PurgeRequest::default()).await.unwrap();
    assert_eq!(s.source_positions(), want);
    s.flush().await.unwrap();
    let stale_copy = fs::read(&sources_db).unwrap();
    for i in 31..=32 {
        source(&s, "ORDERS", "orders.*", i, "orders.new").await;
    }
    let mut want = s.source_positions();
    assert_eq!(want["ORDERS orders.* >"].seq, 32);
    store.close();

    let (store, r) = reopen(dir.path());
    assert_eq!(r.sources, SidecarRecovery::Current);
    assert_eq!(r.per_message_blocks_scanned, 0, "{r:?}");
    assert_eq!(store.stream("ALL").unwrap().source_positions(), want);
    store.close();

    fs::write(&sources_db, &stale_copy).unwrap();
    let (store, r) = reopen(dir.path());
    assert_eq!(r.sources, SidecarRecovery::Stale);
    assert_eq!(store.stream("ALL").unwrap().source_positions(), want);
    store.close();

    fs::remove_file(&sources_db).unwrap();
    let (store, r) = reopen(dir.path());
    assert_eq!(r.sources, SidecarRecovery::Missing);
    // Purged messages cannot be rescanned: only what is still stored is recovered.
    want.retain(|k, _| k.starts_with("ORDERS"));
    assert_eq!(store.stream("ALL").unwrap().source_positions(), want);
    store.close();

    let mut bytes = fs::read(&sources_db).unwrap();
    bytes[0] = 2; // a future version, with a checksum that matches it
    let n = bytes.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..n]).to_le_bytes();
    bytes[n..].copy_from_slice(&sum);
    fs::write(&sources_db, &bytes).unwrap();
    let (store, r) = reopen(dir.path());
    assert_eq!(r.sources, SidecarRecovery::Rejected);
    assert!(r.warnings.iter().any(|w| w.contains("sources.db")));
    assert_eq!(store.stream("ALL").unwrap().source_positions(), want);
    store.close();

    let mut bytes = fs::read(&sources_db).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(&sources_db, &bytes).unwrap();
    let (store, r) = reopen(dir.path());
    assert_eq!(r.sources, SidecarRecovery::Rejected);
    assert_eq!(store.stream("ALL").unwrap().source_positions(), want);
    store.close();
}

#[tokio::test]
async fn backward_scan_visits_only_sourced_messages_newest_first() {
    let store = Store::in_memory(opts());
    let s = store.create_stream(cfg()).unwrap();
    source(&s, "ORDERS", "orders.*", 1, "orders.new").await;
    s.publish_internal("filler", Headers::new(), "f")
        .await
        .unwrap();
    source(&s, "CHAT", "chat.>", 7, "chat.room").await;
    let mut old = Headers::new();
    old.insert("Nats-Stream-Source", "LEGACY 3");
    s.publish_internal("legacy", old, "l").await.unwrap();
    let mut seen = Vec::new();
    s.scan_sourced_back(|m| {
        seen.push(m.headers.get("Nats-Stream-Source").unwrap().to_string());
        true
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            "LEGACY 3",
            "CHAT 7 chat.> > chat.room id-CHAT",
            "ORDERS 1 orders.* > orders.new id-ORDERS"
        ]
    );
    assert_eq!(s.source_positions()["LEGACY > >"].seq, 3);
    let mut first_only = 0;
    s.scan_sourced_back(|_| {
        first_only += 1;
        false
    })
    .unwrap();
    assert_eq!(first_only, 1);
}
