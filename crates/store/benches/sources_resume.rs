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
//! fixture stays as built — checked after every variant.
//!
//! Variants, all timed from just before `Store::open` (warm page cache):
//! - `with_index`: sources.db current; open, then `source_positions()`.
//! - `index_deleted`: no sources.db; open (its recovery rebuilds the index by a forward scan of
//!   every sourced record), then `source_positions()`.
//! - `stale_index`: sources.db from `lag` messages earlier; open (forward scan from its stamp),
//!   then `source_positions()`.
//! - `backward_scan`: on a stream already open, `scan_sourced_back` until every configured source
//!   is found (A only at sequence 1: the full depth) — what resuming costs for sources the index
//!   does not resolve.
//!
//! Any source the index does not resolve is looked for with `scan_sourced_back`, so every variant
//! ends with all sources resolved (and says which way it went).
//!
//! `cargo bench -p sluice-store --bench sources_resume`; `SLUICE_BENCH_MAX_DEPTH=100000` skips
//! the deeper fixtures. Summary lines (medians) are printed before criterion runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_store::{
    Headers, RecoveryPath, RecoveryReport, SidecarRecovery, SourceConfig, Store, StoreOptions,
    StreamConfig, StreamHandle,
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
const FIXTURE_VERSION: u32 = 1;
const SOURCE_HEADER: &str = "Nats-Stream-Source";

fn max_depth() -> u64 {
    std::env::var("SLUICE_BENCH_MAX_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

fn depths() -> impl Iterator<Item = u64> {
    DEPTHS.into_iter().filter(|d| *d <= max_depth())
}

/// How far behind the end the stale sources.db was written.
fn stale_lag(depth: u64) -> u64 {
    (depth / 10).min(10_000)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
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
        for f in ["meta.inf", "meta.sum"] {
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

/// Every configured source's position: from the index, then by the backward scan for those it
/// does not resolve. Returns the positions and whether the scan ran.
fn resolve(s: &StreamHandle, use_index: bool) -> (BTreeMap<String, u64>, bool) {
    let wanted: Vec<String> = SOURCES.iter().map(|(n, _, _)| index_name(n)).collect();
    let mut found: BTreeMap<String, u64> = if use_index {
        s.source_positions()
            .into_iter()
            .filter(|(name, _)| wanted.contains(name))
            .map(|(name, pos)| (name, pos.seq))
            .collect()
    } else {
        BTreeMap::new()
    };
    let scanned = found.len() < wanted.len();
    if scanned {
        s.scan_sourced_back(|m| {
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
    }
    (found, scanned)
}

/// One measured resume.
struct Resume {
    open: Duration,
    resolve: Duration,
    scanned: bool,
    report: RecoveryReport,
}

impl Resume {
    fn total(&self) -> Duration {
        self.open + self.resolve
    }
}

/// Opens a working copy and resolves every source; checks the result; closes (not timed).
fn resume(fx: &Fixture, variant: Variant) -> Resume {
    let dir = fx.copy(variant.index());
    let t = Instant::now();
    let (store, mut reports) = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let s = store.stream(STREAM).unwrap();
    let opened = t.elapsed();
    let t = Instant::now();
    let (found, scanned) = resolve(&s, variant != Variant::BackwardScan);
    let resolved = t.elapsed();
    assert_eq!(found, fx.expected(), "{variant:?} resolved wrong positions");
    let report = reports.pop().unwrap();
    assert_eq!(
        report.path,
        RecoveryPath::Index,
        "fixture index.db not used"
    );
    assert!(report.is_clean(), "{:?}", report);
    let want = match variant.index() {
        Index::Current => SidecarRecovery::Current,
        Index::Deleted => SidecarRecovery::Missing,
        Index::Stale => SidecarRecovery::Stale,
    };
    assert_eq!(report.sources, want);
    store.close();
    Resume {
        open: opened,
        resolve: resolved,
        scanned,
        report,
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

    /// The measured time: open + resolve, or the scan alone for the backward scan.
    fn measured(self, r: &Resume) -> Duration {
        match self {
            Variant::BackwardScan => r.resolve,
            _ => r.total(),
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
        let runs = if fx.depth >= 10_000_000 { 3 } else { 5 };
        eprintln!(
            "depth {}: fixture {:.2} GiB, stale index {} messages behind",
            fx.depth,
            fx.bytes() as f64 / (1u64 << 30) as f64,
            stale_lag(fx.depth)
        );
        for v in VARIANTS {
            let rs: Vec<Resume> = (0..runs).map(|_| resume(fx, v)).collect();
            let last = rs.last().unwrap();
            let (scanned, blocks, how) = (
                last.scanned,
                last.report.per_message_blocks_scanned,
                last.report.sources,
            );
            let open = median(rs.iter().map(|r| r.open).collect());
            let res = median(rs.iter().map(|r| r.resolve).collect());
            let m = median(rs.iter().map(|r| v.measured(r)).collect());
            eprintln!(
                "  {:<14} {:>10.3?} median of {runs} (open {open:.3?}, resolve {res:.3?}; sources.db {how:?}, \
                 {blocks} blocks rescanned on open, backward scan {})",
                v.name(),
                m,
                if scanned { "ran" } else { "not needed" },
            );
            if v == Variant::WithIndex {
                with_index.push((fx.depth, m, open, res));
            }
        }
        fx.check_unchanged();
    }
    if let (Some(first), Some(last)) = (with_index.first(), with_index.last()) {
        eprintln!(
            "with index: {} → {}: {:.1}× open+resolve (goal ≤ 2×); open alone {:.1}×, resolve alone {:.1}×",
            first.0,
            last.0,
            last.1.as_secs_f64() / first.1.as_secs_f64(),
            last.2.as_secs_f64() / first.2.as_secs_f64(),
            last.3.as_secs_f64() / first.3.as_secs_f64(),
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
                b.iter_custom(|iters| (0..iters).map(|_| v.measured(&resume(fx, v))).sum())
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
