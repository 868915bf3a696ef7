//! Sourcing end to end on real files: origin order, filter and transform, the header, exactly
//! once across purges, restarts (with sources.db missing, stale, corrupt or of a future
//! version), crashes, filter changes and a recreated origin — each resume asserting WHICH path
//! ran through `source_status()` and the recovery report.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::run_child_until_killed;
use futures::StreamExt;
use sluice_store::{
    FilterSet, Headers, PurgeRequest, RecoveryReport, SidecarRecovery, SourceConfig, SourceResume,
    SourceStatus, Store, StoreOptions, StoredMessage, StreamConfig, StreamHandle, SubjectTransform,
    SyncPolicy,
};

const DEADLINE: Duration = Duration::from_secs(20);

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: 2048,
        ..StoreOptions::default()
    }
}

fn source(name: &str, filter: Option<&str>) -> SourceConfig {
    SourceConfig {
        name: name.into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: filter.map(Into::into),
        subject_transforms: vec![],
    }
}

fn aggregate(sources: Vec<SourceConfig>) -> StreamConfig {
    StreamConfig {
        sources,
        ..StreamConfig::new("ALL", Vec::<String>::new())
    }
}

/// Creates origin `O` (subject `o`) and the sourcing stream `all`.
fn origin_and_aggregate(store: &Store, all: StreamConfig) -> (StreamHandle, StreamHandle) {
    let origin = store.create_stream(StreamConfig::new("O", ["o"])).unwrap();
    (origin, store.create_stream(all).unwrap())
}

fn open(dir: &Path) -> (Store, BTreeMap<String, RecoveryReport>) {
    let (store, reports) = Store::open(dir, opts()).unwrap();
    let reports = reports.into_iter().map(|r| (r.stream.clone(), r)).collect();
    (store, reports)
}

async fn publish(s: &StreamHandle, subject: &str, n: usize) {
    for i in 0..n {
        s.publish(subject, Headers::new(), format!("{subject}-{i}"))
            .await
            .unwrap();
    }
}

/// The next `n` messages of `s` from `from_seq`, waiting (with a deadline) for them to arrive.
async fn next_msgs(s: &StreamHandle, from_seq: u64, n: usize) -> Vec<StoredMessage> {
    let sub = s
        .subscribe(from_seq, FilterSet::new([">"]).unwrap())
        .map(|d| d.map(|d| d.message().expect("nothing lost")));
    let got = tokio::time::timeout(DEADLINE, sub.take(n).collect::<Vec<_>>())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{n} messages from {from_seq} did not arrive: {:?}",
                s.source_status()
            )
        });
    got.into_iter().map(Result::unwrap).collect()
}

/// `Nats-Stream-Source` split into its fields.
fn header(m: &StoredMessage) -> Vec<String> {
    m.headers
        .get("Nats-Stream-Source")
        .expect("sourced message without Nats-Stream-Source")
        .split(' ')
        .map(str::to_string)
        .collect()
}

/// (origin, origin seq) of every message of `s`, asserting there is no duplicate.
fn sourced_set(s: &StreamHandle) -> Vec<(String, u64)> {
    let last = s.info(None).state.last_seq;
    let mut seen = Vec::new();
    for seq in 1..=last {
        if let Some(m) = s.get(seq).unwrap() {
            let h = header(&m);
            seen.push((h[0].clone(), h[1].parse().unwrap()));
        }
    }
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "duplicates in {seen:?}");
    seen
}

fn status(s: &StreamHandle, iname: &str) -> SourceStatus {
    s.source_status()
        .into_iter()
        .find(|st| st.index_name == iname)
        .unwrap_or_else(|| panic!("no source {iname}: {:?}", s.source_status()))
}

/// Waits (with a deadline) until the source's status satisfies `ok`: the counters are updated
/// right after the writer's answer, a moment after the message becomes visible.
async fn wait_status(s: &StreamHandle, iname: &str, ok: impl Fn(&SourceStatus) -> bool) {
    sluice_test_support::eventually(&format!("the status of {iname}"), || ok(&status(s, iname)))
        .await;
}

#[tokio::test]
async fn sources_in_origin_order_with_filter_transform_and_header() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let origin = store
        .create_stream(StreamConfig::new("ORDERS", ["orders.>", "chat"]))
        .unwrap();
    let mut transformed = source("ORDERS", None);
    transformed.subject_transforms = vec![SubjectTransform {
        src: "orders.*.*".into(),
        dest: "eu.{{wildcard(2)}}.$1".into(),
    }];
    let all = store
        .create_stream(aggregate(vec![source("ORDERS", Some("chat")), transformed]))
        .unwrap();
    let mut h = Headers::new();
    h.insert("Nats-Expected-Stream", "ORDERS");
    h.insert("Nats-Msg-Id", "m1");
    h.insert("X-App", "kept");
    origin.publish("orders.new.7", h, "o1").await.unwrap();
    origin.publish("chat", Headers::new(), "c1").await.unwrap();
    origin
        .publish("orders.x", Headers::new(), "skipped")
        .await
        .unwrap();
    origin
        .publish("orders.old.8", Headers::new(), "o2")
        .await
        .unwrap();
    let got = next_msgs(&all, 1, 3).await;
    let ident = format!("{:016x}", origin.info(None).incarnation);
    let subjects: Vec<&str> = got.iter().map(|m| m.subject.as_str()).collect();
    // Each source keeps origin order; the two sources interleave freely.
    let mut sorted = subjects.clone();
    sorted.sort();
    assert_eq!(sorted, ["chat", "eu.7.new", "eu.8.old"]);
    let pos = |s| subjects.iter().position(|x| *x == s).unwrap();
    assert!(pos("eu.7.new") < pos("eu.8.old"));
    let first = &got[pos("eu.7.new")];
    assert_eq!(
        header(first),
        [
            "ORDERS",
            "1",
            "orders.*.*",
            "eu.{{wildcard(2)}}.$1",
            "orders.new.7",
            &ident
        ]
    );
    assert_eq!(first.headers.get("X-App"), Some("kept"));
    assert_eq!(first.headers.get("Nats-Msg-Id"), Some("m1"));
    assert_eq!(first.headers.get("Nats-Expected-Stream"), None);
    assert_eq!(
        header(&got[pos("chat")]),
        ["ORDERS", "2", "chat", ">", "chat", &ident]
    );
    assert_eq!(status(&all, "ORDERS chat >").resume, SourceResume::Start);
    wait_status(&all, "ORDERS chat >", |s| s.sourced == 1).await;
    store.close();
}

#[tokio::test]
async fn forged_source_header_is_rejected_with_10227() {
    let store = Store::in_memory(opts());
    let (origin, all) = origin_and_aggregate(
        &store,
        StreamConfig {
            subjects: vec!["all".into()],
            ..aggregate(vec![source("O", None)])
        },
    );
    for (s, subject) in [(&origin, "o"), (&all, "all")] {
        let mut h = Headers::new();
        h.insert("Nats-Stream-Source", "O 1 > > o x");
        let e = s.publish(subject, h, "forged").await.unwrap_err();
        let api = e.api().expect("a coded rejection");
        assert_eq!((api.status, api.code), (400, 10227), "{e}");
        assert_eq!(
            api.description,
            "message stream source header is not allowed"
        );
    }
    assert_eq!(all.info(None).state.msgs, 0);
}

#[tokio::test]
async fn bad_transforms_and_filters_are_rejected_naming_the_value() {
    let store = Store::in_memory(opts());
    let mut bad = source("O", None);
    bad.subject_transforms = vec![SubjectTransform {
        src: "a.*".into(),
        dest: "b.$3".into(),
    }];
    let e = store
        .create_stream(aggregate(vec![bad]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("b.$3") && e.contains("wildcard 3"), "{e}");
    let e = store
        .create_stream(aggregate(vec![source("O", Some("a..b"))]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a..b"), "{e}");
    let mut both = source("O", Some("a.*"));
    both.subject_transforms = vec![SubjectTransform {
        src: "a.*".into(),
        dest: "b.$1".into(),
    }];
    let e = store
        .create_stream(aggregate(vec![both]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("exclusive"), "{e}");
    let e = store
        .create_stream(aggregate(vec![source("ALL", None)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("itself"), "{e}");
    // A → B → ALL → A: refused when the cycle would close, on create and on update.
    store
        .create_stream(StreamConfig {
            sources: vec![source("B", None)],
            ..StreamConfig::new("A", ["a"])
        })
        .unwrap();
    store
        .create_stream(StreamConfig {
            sources: vec![source("ALL", None)],
            ..StreamConfig::new("B", ["b"])
        })
        .unwrap();
    let e = store
        .create_stream(aggregate(vec![source("A", None)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ALL → A → B → ALL"), "{e}");
    store.create_stream(aggregate(vec![])).unwrap();
    let e = store
        .update_stream(aggregate(vec![source("A", None)]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("cycle"), "{e}");
}

#[tokio::test]
async fn resume_after_purge_sources_nothing_again_and_the_next_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let (origin, all) = origin_and_aggregate(&store, aggregate(vec![source("O", None)]));
    publish(&origin, "o", 5).await;
    next_msgs(&all, 1, 5).await;
    all.purge(PurgeRequest::default()).await.unwrap();
    store.close();

    let (store, reports) = open(dir.path());
    assert_eq!(reports["ALL"].sources, SidecarRecovery::Current);
    assert_eq!(reports["ALL"].per_message_blocks_scanned, 0);
    let all = store.stream("ALL").unwrap();
    assert_eq!(all.info(None).state.msgs, 0);
    let st = status(&all, "O > >");
    assert_eq!((st.resume, st.resumed_after), (SourceResume::Index, 5));
    publish(&store.stream("O").unwrap(), "o", 1).await;
    let got = next_msgs(&all, 1, 1).await;
    assert_eq!(header(&got[0])[1], "6");
    assert_eq!(sourced_set(&all), [("O".to_string(), 6)]);
    assert_eq!(all.info(None).state.msgs, 1);
    store.close();
}

/// What is done to sources.db while the store is closed.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Missing,
    Stale,
    Corrupt,
    FutureVersion,
}

fn damage(path: &Path, how: Damage, stale_copy: &[u8]) {
    match how {
        Damage::Missing => fs::remove_file(path).unwrap(),
        Damage::Stale => fs::write(path, stale_copy).unwrap(),
        Damage::Corrupt => {
            let mut b = fs::read(path).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0x55;
            fs::write(path, b).unwrap();
        }
        Damage::FutureVersion => {
            let mut b = fs::read(path).unwrap();
            b[0] = 9;
            let n = b.len() - 8;
            let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]).to_le_bytes();
            b[n..].copy_from_slice(&sum);
            fs::write(path, b).unwrap();
        }
    }
}

#[tokio::test]
async fn restart_with_sources_db_missing_stale_corrupt_or_future_resumes_without_gap_or_duplicate()
{
    for (how, want) in [
        (Damage::Missing, SidecarRecovery::Missing),
        (Damage::Stale, SidecarRecovery::Stale),
        (Damage::Corrupt, SidecarRecovery::Rejected),
        (Damage::FutureVersion, SidecarRecovery::Rejected),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let sources_db = dir.path().join("streams/ALL/sources.db");
        let (store, _) = open(dir.path());
        let origin = store
            .create_stream(StreamConfig::new("O", ["o.*"]))
            .unwrap();
        let all = store
            .create_stream(aggregate(vec![
                source("O", Some("o.a")),
                source("O", Some("o.b")),
            ]))
            .unwrap();
        publish(&origin, "o.a", 20).await;
        publish(&origin, "o.b", 5).await;
        next_msgs(&all, 1, 25).await;
        all.flush().await.unwrap();
        let stale_copy = fs::read(&sources_db).unwrap();
        publish(&origin, "o.a", 3).await;
        next_msgs(&all, 26, 3).await;
        store.close();

        damage(&sources_db, how, &stale_copy);
        let (store, reports) = open(dir.path());
        assert_eq!(reports["ALL"].sources, want, "{how:?}");
        // Brought up to date by the forward recovery scan over the blocks with sourced messages.
        assert!(reports["ALL"].per_message_blocks_scanned > 0, "{how:?}");
        let all = store.stream("ALL").unwrap();
        // The recovery scan rebuilt the index from the stored messages: the index resolves both.
        for (iname, after) in [("O o.a >", 28), ("O o.b >", 25)] {
            let st = status(&all, iname);
            assert_eq!(
                (st.resume, st.resumed_after),
                (SourceResume::Index, after),
                "{how:?}"
            );
        }
        publish(&store.stream("O").unwrap(), "o.b", 2).await;
        next_msgs(&all, 29, 2).await;
        let mut seqs: Vec<u64> = sourced_set(&all).into_iter().map(|(_, s)| s).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=30).collect::<Vec<_>>(), "{how:?}");
        store.close();
    }
}

#[tokio::test]
async fn purged_stream_without_sources_db_resumes_after_its_last_time() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let (origin, all) = origin_and_aggregate(&store, aggregate(vec![source("O", None)]));
    publish(&origin, "o", 4).await;
    next_msgs(&all, 1, 4).await;
    all.purge(PurgeRequest::default()).await.unwrap();
    store.close();
    fs::remove_file(dir.path().join("streams/ALL/sources.db")).unwrap();

    let (store, reports) = open(dir.path());
    assert_eq!(reports["ALL"].sources, SidecarRecovery::Missing);
    let all = store.stream("ALL").unwrap();
    assert_eq!(status(&all, "O > >").resume, SourceResume::AfterLastTime);
    publish(&store.stream("O").unwrap(), "o", 1).await;
    let got = next_msgs(&all, 5, 1).await;
    assert_eq!(header(&got[0])[1], "5");
    assert_eq!(sourced_set(&all), [("O".to_string(), 5)]);
    store.close();
}

#[tokio::test]
async fn backward_scan_resolves_a_source_named_only_by_pre_2_10_headers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    // The origin does not exist yet: the source waits for it.
    let all = store
        .create_stream(aggregate(vec![
            source("OLD", Some("old.*")),
            source("NEW", None),
        ]))
        .unwrap();
    assert!(status(&all, "OLD old.* >").waiting_for_origin);
    let mut legacy = Headers::new();
    legacy.insert("Nats-Stream-Source", "OLD 3");
    all.publish_internal("old.x", legacy, "from an old server")
        .await
        .unwrap();
    store.close();

    let (store, _) = open(dir.path());
    let all = store.stream("ALL").unwrap();
    let st = status(&all, "OLD old.* >");
    assert_eq!(
        (st.resume, st.resumed_after),
        (SourceResume::BackwardScan, 3)
    );
    assert_eq!(st.backward_scanned, 1);
    assert_eq!(status(&all, "NEW > >").resume, SourceResume::Start);
    let origin = store
        .create_stream(StreamConfig::new("OLD", ["old.*"]))
        .unwrap();
    publish(&origin, "old.y", 5).await;
    let got = next_msgs(&all, 2, 2).await;
    let seqs: Vec<String> = got.iter().map(|m| header(m)[1].clone()).collect();
    assert_eq!(seqs, ["4", "5"]);
    store.close();
}

#[tokio::test]
async fn changing_the_filter_makes_a_new_source() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let origin = store
        .create_stream(StreamConfig::new("O", ["o.*"]))
        .unwrap();
    let all = store
        .create_stream(aggregate(vec![source("O", Some("o.a"))]))
        .unwrap();
    publish(&origin, "o.a", 2).await;
    publish(&origin, "o.b", 1).await;
    next_msgs(&all, 1, 2).await;
    wait_status(&all, "O o.a >", |s| s.last_origin_seq == 2).await;

    store
        .update_stream(aggregate(vec![source("O", Some("o.*"))]))
        .await
        .unwrap();
    let st = status(&all, "O o.* >");
    assert_eq!(st.resume, SourceResume::Start);
    // Only a pre-2.10 header could place an unknown source: no scan of the stored messages.
    assert_eq!(st.backward_scanned, 0);
    assert_eq!(all.source_status().len(), 1);
    // The new source starts from the beginning under its own index name.
    let got = next_msgs(&all, 3, 3).await;
    let fields: Vec<(String, String)> = got
        .iter()
        .map(|m| (header(m)[1].clone(), header(m)[2].clone()))
        .collect();
    assert_eq!(
        fields,
        [
            ("1".into(), "o.*".into()),
            ("2".into(), "o.*".into()),
            ("3".into(), "o.*".into())
        ]
    );
    let positions = all.source_positions();
    assert_eq!(positions["O o.a >"].seq, 2);
    assert_eq!(positions["O o.* >"].seq, 3);
    store.close();

    // After a restart both are resolved by the index; the new one resumes after 3.
    let (store, _) = open(dir.path());
    let all = store.stream("ALL").unwrap();
    let st = status(&all, "O o.* >");
    assert_eq!((st.resume, st.resumed_after), (SourceResume::Index, 3));
    store.close();
}

#[tokio::test]
async fn recreated_origin_resets_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(dir.path());
    let (origin, all) = origin_and_aggregate(&store, aggregate(vec![source("O", None)]));
    publish(&origin, "o", 3).await;
    let old = next_msgs(&all, 1, 3).await;
    store.delete_stream("O").unwrap();
    let origin = store.create_stream(StreamConfig::new("O", ["o"])).unwrap();
    publish(&origin, "o", 2).await;
    let new = next_msgs(&all, 4, 2).await;
    let seqs: Vec<String> = new.iter().map(|m| header(m)[1].clone()).collect();
    assert_eq!(seqs, ["1", "2"]);
    assert_ne!(header(&old[0])[5], header(&new[0])[5], "the ident changes");
    assert_eq!(status(&all, "O > >").resets, 1);
    store.close();

    // Recreated while the store is closed: detected from the recorded ident on open.
    let (store, _) = open(dir.path());
    store.delete_stream("O").unwrap();
    store.close();
    let (store, _) = open(dir.path());
    let origin = store.create_stream(StreamConfig::new("O", ["o"])).unwrap();
    publish(&origin, "o", 1).await;
    let all = store.stream("ALL").unwrap();
    let got = next_msgs(&all, 6, 1).await;
    assert_eq!(header(&got[0])[1], "1");
    assert_eq!(status(&all, "O > >").resets, 1);
    store.close();
}

#[tokio::test]
async fn sourced_messages_obey_the_stream_limits() {
    let store = Store::in_memory(opts());
    let (origin, all) = origin_and_aggregate(
        &store,
        StreamConfig {
            max_msgs: 2,
            ..aggregate(vec![source("O", None)])
        },
    );
    publish(&origin, "o", 4).await;
    let got = next_msgs(&all, 3, 2).await;
    assert_eq!(header(&got[1])[1], "4");
    assert_eq!(
        all.info(None).state.msgs,
        2,
        "max_msgs applies to sourced messages"
    );
    assert_eq!(all.info(None).state.first_seq, 3);
    wait_status(&all, "O > >", |s| s.sourced == 4 && s.last_origin_seq == 4).await;
}

#[tokio::test]
async fn the_sourcing_stream_deduplicates_what_two_origins_share() {
    let store = Store::in_memory(opts());
    let a = store.create_stream(StreamConfig::new("A", ["a"])).unwrap();
    let b = store.create_stream(StreamConfig::new("B", ["b"])).unwrap();
    let all = store
        .create_stream(aggregate(vec![source("A", None), source("B", None)]))
        .unwrap();
    let with_id = || {
        let mut h = Headers::new();
        h.insert("Nats-Msg-Id", "same");
        h
    };
    a.publish("a", with_id(), "1").await.unwrap();
    next_msgs(&all, 1, 1).await;
    b.publish("b", with_id(), "2").await.unwrap();
    b.publish("b", Headers::new(), "3").await.unwrap();
    let got = next_msgs(&all, 2, 1).await;
    assert_eq!(got[0].payload, "3");
    wait_status(&all, "B > >", |s| s.duplicates == 1 && s.sourced == 1).await;
    assert_eq!(all.info(None).state.msgs, 2);
}

const CRASH_DIR_ENV: &str = "SLUICE_SOURCING_CRASH_DIR";

fn crash_opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Always,
        block_size: 16 << 10,
        ..StoreOptions::default()
    }
}

/// The child: opens the store (sourcing starts by itself), publishes a batch into the origin
/// and prints `AT <seq>` for every message the aggregate stores. Does nothing unless started by
/// the parent test.
#[test]
fn sourcing_crash_child() {
    let Ok(dir) = std::env::var(CRASH_DIR_ENV) else {
        return;
    };
    let (store, _) = Store::open(&dir, crash_opts()).unwrap();
    let origin = match store.stream("O") {
        Some(o) => o,
        None => store.create_stream(StreamConfig::new("O", ["o"])).unwrap(),
    };
    let all = match store.stream("ALL") {
        Some(a) => a,
        None => store
            .create_stream(aggregate(vec![source("O", None)]))
            .unwrap(),
    };
    let from = all.info(None).state.last_seq + 1;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let batch = (0..CRASH_BATCH)
            .map(|i| {
                (
                    "o".to_string(),
                    Headers::new(),
                    bytes::Bytes::from(format!("m{i}")),
                )
            })
            .collect();
        let publishing = origin.publish_batch(batch);
        let mut sub = std::pin::pin!(
            all.subscribe(from, FilterSet::new([">"]).unwrap())
                .map(|d| d.map(|d| d.message().expect("nothing lost")))
        );
        let mut publishing = std::pin::pin!(publishing);
        let mut published = false;
        loop {
            tokio::select! {
                r = &mut publishing, if !published => { r.unwrap(); published = true; }
                m = sub.next() => match m {
                    Some(m) => println!("AT {}", m.unwrap().seq),
                    None => return,
                },
            }
        }
    });
}

const CRASH_BATCH: u64 = 400;

/// Every live sequence of `s`, ascending (after a kill they jump past the sequence lease).
fn live_seqs(s: &StreamHandle) -> Vec<u64> {
    let everything = FilterSet::new([">"]).unwrap();
    let mut seqs = Vec::new();
    while let Some(m) = s
        .next_matching(seqs.last().map_or(1, |l| l + 1), &everything)
        .unwrap()
    {
        seqs.push(m.seq);
    }
    seqs
}

#[tokio::test]
async fn kill_9_while_sourcing_then_restart_sources_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // Messages the aggregate held at the end of the previous round.
    let mut before = 0;
    for round in 0..3u64 {
        let kill_after = 10 + (round * 7919 + 13) % 150;
        let seen = run_child_until_killed(
            "sourcing_crash_child",
            CRASH_DIR_ENV,
            dir.path(),
            "AT ",
            kill_after,
            |_| {},
        );
        assert!(seen >= kill_after, "round {round}: the child stopped early");

        let (store, _) = Store::open(dir.path(), crash_opts()).unwrap();
        let all = store.stream("ALL").unwrap();
        let st = status(&all, "O > >");
        assert_eq!(st.resume, SourceResume::Index, "round {round}");
        // Whatever the origin holds (its publishes may have been cut short) is sourced once.
        // Sourcing resumes as the store opens, so what the aggregate holds is only read once
        // the source caught up with the origin's last message (after the kill, sequences jump
        // past the sequence lease: read the live ones).
        let origin = live_seqs(&store.stream("O").unwrap());
        let last = origin.last().copied().unwrap_or(0);
        wait_status(&all, "O > >", |s| {
            s.last_origin_seq.max(s.resumed_after) == last
        })
        .await;
        let mut seqs: Vec<u64> = sourced_set(&all).into_iter().map(|(_, s)| s).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, origin, "round {round}");
        // The position the index resumed after covers what the child stored before the kill:
        // at least every message it saw.
        let stored_before_kill = seqs.iter().filter(|s| **s <= st.resumed_after).count() - before;
        assert!(
            stored_before_kill as u64 >= kill_after,
            "round {round}: {stored_before_kill} stored before the kill, {st:?}"
        );
        before = seqs.len();
        store.close();
    }
}

#[tokio::test]
async fn without_a_position_a_source_starts_at_opt_start_seq_or_opt_start_time() {
    let store = Store::in_memory(opts());
    let origin = store.create_stream(StreamConfig::new("O", ["o"])).unwrap();
    publish(&origin, "o", 5).await;
    let at_4 = origin.get(4).unwrap().unwrap().time;
    // Times never go back; two messages may share one, so the expected start is the first
    // message at that time.
    let first_at_4 = (1..=4)
        .find(|s| origin.get(*s).unwrap().unwrap().time >= at_4)
        .unwrap()
        .to_string();
    let by_seq = SourceConfig {
        opt_start_seq: Some(3),
        ..source("O", None)
    };
    let by_time = SourceConfig {
        opt_start_time: Some(at_4),
        ..source("O", None)
    };
    for (name, cfg, rule, first) in [
        ("S", by_seq, SourceResume::OptStartSeq, "3"),
        (
            "T",
            by_time,
            SourceResume::OptStartTime,
            first_at_4.as_str(),
        ),
    ] {
        let s = store
            .create_stream(StreamConfig {
                sources: vec![cfg],
                ..StreamConfig::new(name, Vec::<String>::new())
            })
            .unwrap();
        assert_eq!(status(&s, "O > >").resume, rule);
        let got = next_msgs(&s, 1, 1).await;
        assert_eq!(header(&got[0])[1], first, "{name}");
        wait_status(&s, "O > >", |st| st.last_origin_seq == 5).await;
        assert_eq!(s.info(None).state.msgs, 6 - first.parse::<u64>().unwrap());
    }
}

#[tokio::test]
async fn a_message_the_sourcing_stream_rejects_is_dropped_and_counted() {
    let store = Store::in_memory(opts());
    let (origin, all) = origin_and_aggregate(
        &store,
        StreamConfig {
            max_msg_size: 200,
            ..aggregate(vec![source("O", None)])
        },
    );
    origin
        .publish("o", Headers::new(), vec![b'x'; 500])
        .await
        .unwrap();
    origin.publish("o", Headers::new(), "small").await.unwrap();
    let got = next_msgs(&all, 1, 1).await;
    assert_eq!(header(&got[0])[1], "2");
    wait_status(&all, "O > >", |s| s.dropped == 1 && s.sourced == 1).await;
}
