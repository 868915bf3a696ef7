//! Sourcing resume (issue 5, item 8): the time from `Store::open` to "ready to source the next
//! message" — every configured source's position resolved — for a sourcing stream of depth 1k,
//! 100k, 1M and 10M messages whose oldest source last delivered at the very beginning.
//!
//! Fixture per depth: stream `AGG` sourcing `A` and `B`. Sequence 1 is A's only sourced message;
//! the other depth − 1 messages come in runs of 100: 90 sourced from B (`publish_internal` with a
//! `Nats-Stream-Source` header), then 10 plain ones (one `publish_batch`). 128-byte payloads,
//! sync never, closed cleanly so index.db and sources.db are written. Each fixture is built once
//! and kept under `target/bench-fixtures/`, with a copy of sources.db taken `lag` messages before
//! the end (the stale index). Every measured open works on a copy: block files are hard-linked
//! (open never writes a clean block; index.db and the sidecars are replaced by rename), so the
//! fixture stays as built — checked after every variant. A series of measured opens makes all
//! its copies first and removes them after the last open, so no open pays for the kernel's
//! deferred work on the hundreds of links made and removed for its neighbours.
//!
//! "Ready to source" is the return of `Store::open`: it recovers the stream, then resumes every
//! source through the store's resume (the source index first, one backward scan only for
//! sources the index cannot place) and starts the sourcing threads. Each run checks through
//! `StreamHandle::source_status` that every source resumed from the index at the fixture's
//! positions with no backward scan (the origins do not exist, so the threads just wait).
//!
//! Variants (warm page cache):
//! - `with_index`: sources.db current; `Store::open`.
//! - `index_deleted`: no sources.db; `Store::open`, whose recovery rebuilds the index by a
//!   forward scan of every sourced record.
//! - `stale_index`: sources.db from `lag` messages earlier; `Store::open`, whose recovery brings
//!   it up to date by a forward scan from its stamp.
//! - `backward_scan`: on a stream already open, `scan_sourced_back` until every configured source
//!   is found (A only at sequence 1: the full depth) — the cost the index saves, and what the
//!   resume would pay for a source only a scan can place.
//!
//! `cargo bench -p sluice-store --bench sources_resume`; `SLUICE_BENCH_MAX_DEPTH=100000` skips
//! the deeper fixtures (`SLUICE_BENCH_MIN_DEPTH` the shallower ones). Summary lines (medians)
//! are printed before criterion runs.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::rt;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_store::{
    Headers, RecoveryPath, RecoveryReport, SidecarRecovery, SourceConfig, SourceResume, Store,
    StoreOptions, StreamConfig, StreamHandle,
};

const DEPTHS: [u64; 4] = [1_000, 100_000, 1_000_000, 10_000_000];
const STREAM: &str = "AGG";
/// Configured sources: (origin stream, subject of its messages, origin ident).
const SOURCES: [(&str, &str, &str); 2] = [
    ("A", "a.events", "a0a0a0a0a0a0a0a0"),
    ("B", "b.events", "b1b1b1b1b1b1b1b1"),
];
const PAYLOAD: [u8; 128] = [b'x'; 128];
/// Messages per run of the pattern, and how many of them are sourced from B.
const RUN: u64 = 100;
const SOURCED_PER_RUN: u64 = 90;
/// Fixture layout version: bump when the pattern changes so stale fixtures are rebuilt.
const FIXTURE_VERSION: u32 = 2;
const SOURCE_HEADER: &str = "Nats-Stream-Source";

fn env_depth(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

/// The depths to run: `SLUICE_BENCH_MAX_DEPTH` / `SLUICE_BENCH_MIN_DEPTH` bound them.
fn depths() -> impl Iterator<Item = u64> {
    let max = env_depth("SLUICE_BENCH_MAX_DEPTH").unwrap_or(u64::MAX);
    let min = env_depth("SLUICE_BENCH_MIN_DEPTH").unwrap_or(0);
    DEPTHS.into_iter().filter(move |d| (min..=max).contains(d))
}

/// How far behind the end the stale sources.db was written.
fn stale_lag(depth: u64) -> u64 {
    (depth / 10).min(10_000)
}

/// Source index name of a source without filter or transform.
fn index_name(origin: &str) -> String {
    format!("{origin} > >")
}

fn config() -> StreamConfig {
    let mut c = StreamConfig::new(STREAM, ["agg.>"]);
    c.sources = SOURCES
        .iter()
        .map(|(name, _, _)| SourceConfig {
            name: name.to_string(),
            opt_start_seq: None,
            opt_start_time: None,
            filter_subject: None,
            subject_transforms: vec![],
        })
        .collect();
    c
}

fn sourced_headers(source: usize, origin_seq: u64) -> Headers {
    let (name, subject, ident) = SOURCES[source];
    let mut h = Headers::new();
    h.insert(
        SOURCE_HEADER,
        format!("{name} {origin_seq} > > {subject} {ident}"),
    );
    h
}

/// A message's place in the pattern: sourced from B, or plain.
fn is_b(seq: u64) -> bool {
    (seq - 2) % RUN < SOURCED_PER_RUN
}

type Pending = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Appends the fixture's messages `from + 1 ..= to` (never sequence 1), up to 1000 requests in
/// flight; returns B's last origin sequence.
async fn append(s: &StreamHandle, from: u64, to: u64, mut b_seq: u64) -> u64 {
    let payload = Bytes::from_static(&PAYLOAD);
    let mut pending = futures::stream::FuturesUnordered::<Pending>::new();
    let mut seq = from + 1;
    while seq <= to {
        if is_b(seq) {
            b_seq += 1;
            let f = s.publish_internal(SOURCES[1].1, sourced_headers(1, b_seq), payload.clone());
            pending.push(Box::pin(async move {
                f.await.unwrap();
            }));
            seq += 1;
        } else {
            let mut batch = Vec::new();
            while seq <= to && !is_b(seq) {
                batch.push(("agg.plain".to_string(), Headers::new(), payload.clone()));
                seq += 1;
            }
            let f = s.publish_batch(batch);
            pending.push(Box::pin(async move {
                for ack in f.await.unwrap() {
                    ack.unwrap();
                }
            }));
        }
        if pending.len() >= 1000 {
            pending.next().await;
        }
    }
    while pending.next().await.is_some() {}
    b_seq
}

/// A built fixture: `<root>/data` (the store), `<root>/sources.db.stale`, `<root>/READY`.
struct Fixture {
    depth: u64,
    root: PathBuf,
    /// B's last origin sequence (A's is 1).
    b_last: u64,
    /// (path, len, mtime) of every fixture file, to check that no run changed them.
    files: Vec<(PathBuf, u64, SystemTime)>,
}

fn fixtures_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("bench-fixtures")
}

fn file_list(dir: &Path, out: &mut Vec<(PathBuf, u64, SystemTime)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        if md.is_dir() {
            file_list(&e.path(), out);
        } else {
            out.push((e.path(), md.len(), md.modified().unwrap()));
        }
    }
    out.sort();
}

/// Which sources.db a working copy gets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Index {
    Current,
    Deleted,
    Stale,
}

impl Fixture {
    fn stream_dir(&self) -> PathBuf {
        self.root.join("data/streams").join(STREAM)
    }

    /// Loads the fixture of `depth`, building it first if absent.
    fn get(depth: u64, rt: &tokio::runtime::Runtime) -> Fixture {
        let root = fixtures_dir().join(format!("sources-v{FIXTURE_VERSION}-{depth}"));
        let ready = root.join("READY");
        if !ready.exists() {
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            let t = Instant::now();
            let b_last = Self::build(&root, depth, rt);
            std::fs::write(&ready, b_last.to_string()).unwrap();
            eprintln!(
                "built fixture {} ({depth} messages) in {:.1?}",
                root.display(),
                t.elapsed()
            );
        }
        // Working copies left by an interrupted run.
        for e in std::fs::read_dir(&root).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("run-") {
                std::fs::remove_dir_all(e.path()).unwrap();
            }
        }
        let b_last = std::fs::read_to_string(&ready)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut files = Vec::new();
        file_list(&root.join("data/streams"), &mut files);
        Fixture {
            depth,
            root,
            b_last,
            files,
        }
    }

    fn build(root: &Path, depth: u64, rt: &tokio::runtime::Runtime) -> u64 {
        let (store, _) = Store::open(root.join("data"), StoreOptions::default()).unwrap();
        let s = store.create_stream(config()).unwrap();
        let stale_at = depth - stale_lag(depth);
        let b_last = rt.block_on(async {
            let payload = Bytes::from_static(&PAYLOAD);
            s.publish_internal(SOURCES[0].1, sourced_headers(0, 1), payload)
                .await
                .unwrap();
            let b = append(&s, 1, stale_at, 0).await;
            s.flush().await.unwrap();
            std::fs::copy(
                root.join("data/streams").join(STREAM).join("sources.db"),
                root.join("sources.db.stale"),
            )
            .unwrap();
            append(&s, stale_at, depth, b).await
        });
        assert_eq!(s.info(None).state.last_seq, depth);
        store.close();
        b_last
    }

    /// A working copy of the data directory with the chosen sources.db, inside the fixture
    /// directory (hard links need one file system).
    fn copy(&self, index: Index) -> tempfile::TempDir {
        let tmp = tempfile::Builder::new()
            .prefix("run-")
            .tempdir_in(&self.root)
            .unwrap();
        let to = tmp.path().join("streams").join(STREAM);
        std::fs::create_dir_all(to.join("msgs")).unwrap();
        let from = self.stream_dir();
        for f in ["meta.inf", "meta.sum", "meta.bak"] {
            std::fs::hard_link(from.join(f), to.join(f)).unwrap();
        }
        for e in std::fs::read_dir(from.join("msgs")).unwrap() {
            let e = e.unwrap();
            std::fs::hard_link(e.path(), to.join("msgs").join(e.file_name())).unwrap();
        }
        match index {
            Index::Current => std::fs::hard_link(from.join("sources.db"), to.join("sources.db")),
            Index::Stale => {
                std::fs::hard_link(self.root.join("sources.db.stale"), to.join("sources.db"))
            }
            Index::Deleted => Ok(()),
        }
        .unwrap();
        tmp
    }

    /// Panics if a run changed any fixture file.
    fn check_unchanged(&self) {
        let mut now = Vec::new();
        file_list(&self.root.join("data/streams"), &mut now);
        assert_eq!(now, self.files, "a run modified the fixture");
    }

    fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.1).sum()
    }

    /// What a resume must find: every source's last origin sequence.
    fn expected(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([(index_name("A"), 1), (index_name("B"), self.b_last)])
    }
}

/// The backward scan for sources the index does not resolve: `scan_sourced_back` until every
/// configured source is found. Returns the positions found and the sourced messages visited.
fn backward_scan(s: &StreamHandle) -> (BTreeMap<String, u64>, u64) {
    let wanted: Vec<String> = SOURCES.iter().map(|(n, _, _)| index_name(n)).collect();
    let mut found = BTreeMap::new();
    let mut visited = 0;
    s.scan_sourced_back(|m| {
        visited += 1;
        // `<origin> <seq> <filter> <dest> <subject> [<ident>]`
        let fields: Vec<&str> = m
            .headers
            .get(SOURCE_HEADER)
            .map(|v| v.split_whitespace().collect())
            .unwrap_or_default();
        if let [origin, seq, filter, dest, ..] = fields.as_slice() {
            let name = format!("{origin} {filter} {dest}");
            if wanted.contains(&name) && !found.contains_key(&name) {
                found.insert(name, seq.parse().unwrap());
            }
        }
        found.len() < wanted.len()
    })
    .unwrap();
    (found, visited)
}

/// One measured resume.
struct Resume {
    /// `Store::open` (recovery, then the sourcing resume and the start of the sourcing
    /// threads), or the backward scan alone.
    time: Duration,
    report: RecoveryReport,
    /// Sourced messages the backward scan visited (`backward_scan` only).
    visited: u64,
}

/// `runs` measured resumes of `variant`, each on a working copy of its own. The copies are all
/// made before the first is opened and removed after the last: making one (hundreds of hard
/// links at depth 10M) and removing the one before leaves the kernel deferred work on
/// directory entries and inodes that would otherwise land in the next measured open.
fn resumes(fx: &Fixture, variant: Variant, runs: u64) -> Vec<Resume> {
    let copies: Vec<tempfile::TempDir> = (0..runs).map(|_| fx.copy(variant.index())).collect();
    copies
        .iter()
        .map(|dir| resume(fx, variant, dir.path()))
        .collect()
}

/// Opens the working copy `dir` — `Store::open` resumes every source before it returns — and
/// checks that every source resumed from the index at the fixture's positions; for
/// `backward_scan`, then times the scan. Closes (not timed).
fn resume(fx: &Fixture, variant: Variant, dir: &Path) -> Resume {
    let t = Instant::now();
    let (store, mut reports) = Store::open(dir, StoreOptions::default()).unwrap();
    let mut time = t.elapsed();
    let s = store.stream(STREAM).unwrap();
    let resumed: BTreeMap<String, u64> = s
        .source_status()
        .into_iter()
        .map(|st| {
            assert_eq!(st.resume, SourceResume::Index, "{variant:?}: {st:?}");
            assert_eq!(st.backward_scanned, 0, "{variant:?}: {st:?}");
            (st.index_name, st.resumed_after)
        })
        .collect();
    assert_eq!(
        resumed,
        fx.expected(),
        "{variant:?} resumed at wrong positions"
    );
    let report = reports.pop().unwrap();
    assert_eq!(
        report.path,
        RecoveryPath::Index,
        "fixture index.db not used"
    );
    assert!(report.is_clean(), "{report:?}");
    let want = match variant.index() {
        Index::Current => SidecarRecovery::Current,
        Index::Deleted => SidecarRecovery::Missing,
        Index::Stale => SidecarRecovery::Stale,
    };
    assert_eq!(report.sources, want);
    let mut visited = 0;
    if variant == Variant::BackwardScan {
        let t = Instant::now();
        let found;
        (found, visited) = backward_scan(&s);
        time = t.elapsed();
        assert_eq!(
            found,
            fx.expected(),
            "the backward scan found wrong positions"
        );
    }
    store.close();
    Resume {
        time,
        report,
        visited,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    WithIndex,
    IndexDeleted,
    StaleIndex,
    BackwardScan,
}

const VARIANTS: [Variant; 4] = [
    Variant::WithIndex,
    Variant::IndexDeleted,
    Variant::StaleIndex,
    Variant::BackwardScan,
];

impl Variant {
    fn index(self) -> Index {
        match self {
            Variant::WithIndex | Variant::BackwardScan => Index::Current,
            Variant::IndexDeleted => Index::Deleted,
            Variant::StaleIndex => Index::Stale,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::WithIndex => "with_index",
            Variant::IndexDeleted => "index_deleted",
            Variant::StaleIndex => "stale_index",
            Variant::BackwardScan => "backward_scan",
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn summary(fixtures: &[Fixture]) {
    let mut with_index = Vec::new();
    for fx in fixtures {
        eprintln!(
            "depth {}: fixture {:.2} GiB, stale index {} messages behind",
            fx.depth,
            fx.bytes() as f64 / (1u64 << 30) as f64,
            stale_lag(fx.depth)
        );
        for v in VARIANTS {
            // The linear variants take seconds at depth 10M; the others are cheap to repeat.
            let runs = match v {
                Variant::WithIndex | Variant::StaleIndex => 11,
                _ if fx.depth >= 10_000_000 => 3,
                _ => 5,
            };
            let rs = resumes(fx, v, runs);
            let last = rs.last().unwrap();
            let m = median(rs.iter().map(|r| r.time).collect());
            let what = match v {
                Variant::BackwardScan => {
                    format!("scan alone, {} sourced messages visited", last.visited)
                }
                _ => format!(
                    "Store::open; sources.db {:?}, {} blocks rescanned by recovery, every source resumed from the index",
                    last.report.sources, last.report.per_message_blocks_scanned
                ),
            };
            eprintln!("  {:<14} {m:>10.3?} median of {runs} ({what})", v.name());
            if v == Variant::WithIndex {
                with_index.push((fx.depth, m));
            }
        }
        fx.check_unchanged();
    }
    if let [first, .., last] = with_index.as_slice() {
        eprintln!(
            "with index: depth {} takes {:.1}× depth {} (goal ≤ 2×)",
            last.0,
            last.1.as_secs_f64() / first.1.as_secs_f64(),
            first.0,
        );
    }
}

fn resume_bench(c: &mut Criterion, fixtures: &[Fixture]) {
    for fx in fixtures {
        let mut g = c.benchmark_group(format!("sources_resume_{}", fx.depth));
        g.sample_size(10).sampling_mode(SamplingMode::Flat);
        if fx.depth >= 1_000_000 {
            g.warm_up_time(Duration::from_millis(1))
                .measurement_time(Duration::from_secs(10));
        }
        for v in VARIANTS {
            g.bench_function(v.name(), |b| {
                b.iter_custom(|iters| resumes(fx, v, iters).iter().map(|r| r.time).sum())
            });
        }
        g.finish();
        fx.check_unchanged();
    }
}

fn all(c: &mut Criterion) {
    let rt = rt();
    let fixtures: Vec<Fixture> = depths().map(|d| Fixture::get(d, &rt)).collect();
    drop(rt);
    summary(&fixtures);
    resume_bench(c, &fixtures);
}

criterion_group!(benches, all);
criterion_main!(benches);
