//! Open of a 1M-message stream with index.db deleted (every record verified): clean, and with
//! one byte flipped in a record in the middle of the middle block, where recovery steps over
//! the bad record to the next one that verifies (`record::resync`). Goal (issue 12): the
//! damaged rebuild within 2× of the clean one. Open with index.db current for reference.
//!
//! `cargo bench -p sluice-store --bench rebuild_damage`; `SLUICE_BENCH_DEPTH` (default
//! 1,000,000) sets the depth. The stream (64-byte payloads, 8 MiB blocks, sync never) is built
//! once per run; each measured open is `Store::open` alone (the close that rewrites index.db
//! is not timed), after deleting index.db and lost.db, so every sample does the same work.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_store::{
    Headers, RecoveryPath, RecoveryReport, Store, StoreOptions, StreamConfig, SyncPolicy,
};

const PAYLOAD: [u8; 64] = [b'x'; 64];

fn depth() -> u64 {
    std::env::var("SLUICE_BENCH_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Never,
        ..StoreOptions::default()
    }
}

fn msgs(dir: &Path) -> PathBuf {
    dir.join("streams/R/msgs")
}

/// `depth()` messages on `r.a` / `r.b`, published in batches of 1000, then closed.
fn build(dir: &Path) {
    let (store, _) = Store::open(dir, opts()).unwrap();
    let s = store
        .create_stream(StreamConfig::new("R", ["r.*"]))
        .unwrap();
    let payload = bytes::Bytes::from_static(&PAYLOAD);
    futures::executor::block_on(async {
        let mut pending = futures::stream::FuturesOrdered::new();
        for i in 0..depth() / 1000 {
            let subject = if i % 2 == 0 { "r.a" } else { "r.b" };
            let batch = (0..1000)
                .map(|_| (subject.to_string(), Headers::new(), payload.clone()))
                .collect();
            pending.push_back(s.publish_batch(batch));
            if pending.len() >= 2 {
                for r in pending.next().await.unwrap().unwrap() {
                    r.unwrap();
                }
            }
        }
        while let Some(rs) = pending.next().await {
            for r in rs.unwrap() {
                r.unwrap();
            }
        }
    });
    assert_eq!(s.info(None).state.msgs, depth());
    store.close();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "LOCK" {
            fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Flips one payload byte of the record nearest the middle of the middle block; returns the
/// block and the record's offset.
fn damage_middle(dir: &Path) -> (u32, usize) {
    let mut ids: Vec<u32> = fs::read_dir(msgs(dir))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_suffix(".blk")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    let id = ids[ids.len() / 2];
    let path = msgs(dir).join(format!("{id}.blk"));
    let mut bytes = fs::read(&path).unwrap();
    let mut off = 0;
    while off < bytes.len() / 2 {
        off += 4 + u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
    }
    // Past length, kind, flags, sequence, time and subject: inside the payload.
    bytes[off + 4 + 1 + 1 + 8 + 8 + 2 + 3 + 10] ^= 0x40;
    fs::write(&path, bytes).unwrap();
    (id, off)
}

/// `Store::open` alone, after removing what a previous open wrote (index.db, lost.db) when
/// `rebuild`; the store is closed untimed.
fn open_once(dir: &Path, rebuild: bool) -> (Duration, RecoveryReport) {
    if rebuild {
        for f in ["index.db", "lost.db"] {
            let _ = fs::remove_file(msgs(dir).join(f));
        }
    }
    let t = Instant::now();
    let (store, mut reports) = Store::open(dir, opts()).unwrap();
    let took = t.elapsed();
    store.close();
    (took, reports.pop().unwrap())
}

fn rebuild(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let (clean, damaged) = (root.path().join("clean"), root.path().join("damaged"));
    let t = Instant::now();
    build(&clean);
    let built = t.elapsed();
    copy_dir(&clean, &damaged);
    let (block, offset) = damage_middle(&damaged);

    // What each open does, checked once.
    let (_, report) = open_once(&clean, true);
    assert_eq!(report.path, RecoveryPath::Rebuild);
    assert!(report.is_clean(), "{:?}", report.warnings);
    let (_, report) = open_once(&damaged, true);
    assert_eq!(report.path, RecoveryPath::Rebuild);
    assert_eq!(report.lost.len(), 1, "one record lost: {:?}", report.lost);
    assert_eq!(report.damaged.len(), 1, "{:?}", report.damaged);
    assert!(report.truncated.is_empty(), "nothing cut");
    let (_, report) = open_once(&clean, false);
    assert_eq!(report.path, RecoveryPath::Index);
    println!(
        "rebuild_damage: {} messages built in {built:.2?}; block {block} damaged at offset {offset} ({} bytes stepped over)",
        depth(),
        report_damage(&damaged)
    );

    // Summary medians, printed before criterion's own runs.
    let median = |dir: &Path, rebuild: bool| {
        let mut v: Vec<Duration> = (0..7).map(|_| open_once(dir, rebuild).0).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (a, b, i) = (
        median(&clean, true),
        median(&damaged, true),
        median(&clean, false),
    );
    let per_msg = |d: Duration| d.as_nanos() as f64 / depth() as f64;
    println!(
        "rebuild_damage: clean rebuild {a:.2?} ({:.0} ns/msg), damaged rebuild {b:.2?} ({:.0} ns/msg), ratio {:.2}; open with index.db {i:.2?}",
        per_msg(a),
        per_msg(b),
        b.as_secs_f64() / a.as_secs_f64()
    );

    let mut g = c.benchmark_group(format!("rebuild_{}", depth()));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    let cases = [
        ("open_rebuild_clean", &clean, true),
        ("open_rebuild_one_damaged_record", &damaged, true),
        ("open_with_index", &clean, false),
    ];
    for (name, dir, rebuild) in cases {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| open_once(dir, rebuild).0).sum())
        });
    }
    g.finish();
}

/// Bytes the last open of `dir` stepped over (from a fresh rebuild's report).
fn report_damage(dir: &Path) -> u64 {
    let (_, report) = open_once(dir, true);
    report.damaged.iter().map(|d| d.bytes_dropped).sum()
}

criterion_group!(benches, rebuild);
criterion_main!(benches);
