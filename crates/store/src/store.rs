//! [`Store`]: a data directory of streams (or a purely in-memory set of streams).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::Duration;

use tokio::sync::watch;

use crate::block::{Blocks, DEFAULT_BLOCK_SIZE};
use crate::config::{StorageType, StreamConfig, SyncPolicy, validate_stream_name};
use crate::error::{ApiError, Result, StoreError};
use crate::fsutil;
use crate::meta::{self, Meta, MetaRepair};
use crate::meta_refusal::MetaRefusal;
use crate::recovery::{self, Recovered};
use crate::sourcing::{self, Catalog, Sourcing};
use crate::state::State;
use crate::stream::StreamHandle;
use crate::time::{now_ns, timestamp};
use crate::types::RecoveryReport;
use crate::writer::{self, Shared, Writer};

/// Store-wide options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// When appends are fsynced.
    pub sync: SyncPolicy,
    /// Block size before rollover.
    pub block_size: u64,
    /// How often a changed stream rewrites index.db and its sidecars.
    pub flush_interval: Duration,
    /// About how many bytes of memory a file stream's table may keep for the messages of the
    /// blocks it has read or written (about [`INDEX_BYTES_PER_MESSAGE`] each); past it, the
    /// least recently used sealed blocks let go of theirs and are read again on next need.
    pub index_memory: u64,
    /// How long the messages of a block stay in memory after its last use, whatever
    /// `index_memory`: readers going through old blocks keep theirs.
    pub index_idle: Duration,
}

/// What the table keeps in memory per message of a block it holds: the message's entry and
/// its place in the block's per-subject index (measured: docs/BENCHMARKS.md, "Memory of the
/// store's index").
pub const INDEX_BYTES_PER_MESSAGE: u64 = 120;

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            sync: SyncPolicy::default(),
            block_size: DEFAULT_BLOCK_SIZE,
            flush_interval: Duration::from_secs(30),
            index_memory: 64 << 20,
            index_idle: Duration::from_secs(10),
        }
    }
}

struct Inner {
    dir: Option<PathBuf>,
    /// Holds the data directory's exclusive lock for the store's lifetime.
    _lock: Option<fs::File>,
    opts: StoreOptions,
    /// The streams; shared with the sourcing threads (which must not keep the store alive).
    catalog: Arc<Catalog>,
    /// The sourcing threads of each stream with sources.
    sourcing: Mutex<BTreeMap<String, Sourcing>>,
    /// The streams on disk left unloaded because no metadata file of theirs verifies.
    refused: Mutex<BTreeMap<String, MetaRefusal>>,
}

impl Inner {
    /// Stops every sourcing thread, then every writer after writing its snapshots.
    fn shut_down(&self) {
        let sourcing =
            std::mem::take(&mut *self.sourcing.lock().unwrap_or_else(|e| e.into_inner()));
        sourcing.into_values().for_each(Sourcing::stop);
        let streams = std::mem::take(
            &mut *self
                .catalog
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for handle in streams.values() {
            handle.stop(true);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A set of streams under one data directory. Cloning shares it; the last clone dropped (or
/// [`Store::close`]) stops every writer after writing index.db and the sidecars.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// Takes the exclusive lock on `<dir>/LOCK`, so two processes never write one data directory.
fn lock_dir(dir: &Path) -> Result<fs::File> {
    let path = dir.join("LOCK");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(StoreError::io(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::Locked(dir.to_path_buf())),
        Err(fs::TryLockError::Error(e)) => Err(StoreError::Io { path, source: e }),
    }
}

impl Store {
    /// Opens (creating if needed) the data directory `dir` and recovers every stream in
    /// `dir/streams`. Returns one report per stream recovered.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<(Store, Vec<RecoveryReport>)> {
        let dir = dir.as_ref().to_path_buf();
        let streams_dir = dir.join("streams");
        fsutil::create_dir_durable(&streams_dir)?;
        let lock = lock_dir(&dir)?;
        let store = Store::new(Some(dir), Some(lock), opts);
        let mut reports = Vec::new();
        for (name, path) in stream_dirs(&streams_dir)? {
            reports.push(store.load(name, &path)?);
        }
        // IMPORTANT: every stream is loaded before any source looks for its origin.
        store.start_all_sourcing(&mut reports);
        Ok((store, reports))
    }

    /// A store with no data directory: every stream lives in memory, whatever its storage type.
    pub fn in_memory(opts: StoreOptions) -> Store {
        Store::new(None, None, opts)
    }

    fn new(dir: Option<PathBuf>, lock: Option<fs::File>, opts: StoreOptions) -> Store {
        Store {
            inner: Arc::new(Inner {
                dir,
                _lock: lock,
                opts,
                catalog: Arc::new(Catalog::new()),
                sourcing: Mutex::new(BTreeMap::new()),
                refused: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Loads the stream in `path` from its meta files and recovers it. A stream none of whose
    /// meta files verifies is refused: left unloaded with every file in place, remembered (so
    /// that it is not created again over its files), and its report says why.
    fn load(&self, name: String, path: &Path) -> Result<RecoveryReport> {
        let opened = match meta::open(path, &name) {
            Ok(opened) => opened,
            Err(refusal) => {
                let mut report = RecoveryReport::new(name.clone());
                report.warn(refusal.to_string());
                self.refused().insert(name, refusal);
                return Ok(report);
            }
        };
        let Started { handle, mut report } = self.start(opened.meta, false)?;
        opened.warnings.into_iter().rev().for_each(|warning| {
            tracing::warn!(stream = %name, "{warning}");
            report.warnings.insert(0, warning);
        });
        self.refused().remove(&name);
        self.streams().insert(name, handle);
        Ok(report)
    }

    fn refused(&self) -> MutexGuard<'_, BTreeMap<String, MetaRefusal>> {
        self.inner.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The streams found on disk but not loaded because none of their metadata files
    /// verifies, by name. Creating one fails until `sluice stream repair` rebuilds its meta.
    pub fn refused_streams(&self) -> Vec<MetaRefusal> {
        self.refused().values().cloned().collect()
    }

    /// Rebuilds the metadata files of stream `name`, whose directory is on disk but not loaded
    /// (refused), then loads it: the configuration is `declared` when given, else that of a
    /// verified meta.inf or meta.bak; the incarnation is kept from a verified file, else a new
    /// one is picked. No message file is touched. `None` when the stream is loaded already
    /// (nothing to repair).
    pub fn repair_stream(
        &self,
        name: &str,
        declared: Option<StreamConfig>,
    ) -> Result<Option<MetaRepair>> {
        validate_stream_name(name)?;
        if self.stream(name).is_some() {
            return Ok(None);
        }
        let dir = self
            .stream_dir(name)
            .filter(|dir| dir.is_dir())
            .ok_or_else(|| StoreError::StreamNotFound(name.to_owned()))?;
        let repair = meta::repair(&dir, name, declared)?;
        self.load(name.to_owned(), &dir)?;
        if let Some(refusal) = self.refused().get(name) {
            return Err(refusal.clone().into());
        }
        self.inner.catalog.bump();
        self.restart_sourcing(name)?;
        Ok(Some(repair))
    }

    /// Starts the sourcing threads of every stream; a stream whose sources cannot start gets
    /// a warning in its report.
    fn start_all_sourcing(&self, reports: &mut [RecoveryReport]) {
        for name in self.list() {
            if let Err(e) = self.restart_sourcing(&name) {
                // One stream's sources must not keep the others from opening.
                let msg = format!("sourcing not started: {e}");
                tracing::warn!(stream = %name, "{msg}");
                if let Some(r) = reports.iter_mut().find(|r| r.stream == name) {
                    r.warnings.push(msg);
                }
            }
        }
    }

    fn streams(&self) -> MutexGuard<'_, BTreeMap<String, StreamHandle>> {
        self.inner
            .catalog
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// (Re)starts the sourcing threads of a stream from its current configuration.
    fn restart_sourcing(&self, name: &str) -> Result<()> {
        self.stop_sourcing(name);
        let Some(handle) = self.stream(name) else {
            return Ok(());
        };
        if let Some(s) = sourcing::start(&handle, &self.inner.catalog)? {
            self.inner
                .sourcing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.to_string(), s);
        }
        Ok(())
    }

    fn stop_sourcing(&self, name: &str) {
        let running = self
            .inner
            .sourcing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        if let Some(s) = running {
            s.stop();
        }
    }

    /// Creates a stream; creating an existing one with the identical config returns it,
    /// with a different config fails with 10058.
    pub fn create_stream(&self, config: StreamConfig) -> Result<StreamHandle> {
        config.validate()?;
        let mut streams = self.streams();
        if let Some(h) = streams.get(&config.name) {
            return if h.shared.lock().config == config {
                Ok(h.clone())
            } else {
                Err(ApiError::stream_name_in_use().into())
            };
        }
        if let Some(refusal) = self.refused().get(&config.name) {
            return Err(refusal.clone().into());
        }
        check_sources_and_subjects(&streams, &config)?;
        let created = timestamp(now_ns());
        let meta = Meta {
            incarnation: meta::new_incarnation(&config.name, created),
            config,
            created,
        };
        let name = meta.config.name.clone();
        let Started { handle, .. } = self.start(meta, true)?;
        streams.insert(name.clone(), handle.clone());
        drop(streams);
        self.inner.catalog.bump();
        self.restart_sourcing(&name)?;
        Ok(handle)
    }

    /// Replaces a stream's configuration (name and storage cannot change); applies new limits.
    pub async fn update_stream(&self, config: StreamConfig) -> Result<StreamHandle> {
        let handle = self
            .stream(&config.name)
            .ok_or_else(|| StoreError::StreamNotFound(config.name.clone()))?;
        let sources_changed = handle.config().sources != config.sources;
        check_sources_and_subjects(&self.streams(), &config)?;
        let cfg = Box::new(config);
        handle
            .request(move |tx| writer::Op::Update(cfg, tx))
            .await?;
        if sources_changed {
            self.restart_sourcing(handle.name())?;
        }
        Ok(handle)
    }

    /// Deletes a stream and its files; its subscribers end with an error.
    pub fn delete_stream(&self, name: &str) -> Result<()> {
        self.stop_sourcing(name);
        let handle = self
            .streams()
            .remove(name)
            .ok_or_else(|| StoreError::StreamNotFound(name.to_string()))?;
        handle.stop(false);
        self.inner.catalog.bump();
        if let Some(dir) = self.stream_dir(name) {
            fs::remove_dir_all(&dir).map_err(StoreError::io(&dir))?;
        }
        Ok(())
    }

    /// A stream by name.
    pub fn stream(&self, name: &str) -> Option<StreamHandle> {
        self.streams().get(name).cloned()
    }

    /// The stream whose subjects capture `subject`, if any (subjects of two streams never
    /// overlap, so there is at most one).
    pub fn stream_for_subject(&self, subject: &str) -> Option<StreamHandle> {
        self.streams()
            .values()
            .find(|h| h.captures(subject))
            .cloned()
    }

    /// The subjects messages of stream `name` may carry: its own, and what each source can
    /// bring in — a transform's output filter, else the source's filter, else (recursively)
    /// everything its origin may carry. `None` when the stream does not exist.
    pub fn reachable_subjects(&self, name: &str) -> Option<Vec<String>> {
        let streams = self.streams();
        let config_of = |n: &str| streams.get(n).map(|h| h.shared.lock().config.clone());
        let mut out: Vec<String> = Vec::new();
        let mut visited = std::collections::BTreeSet::new();
        let mut pending = vec![config_of(name)?];
        while let Some(config) = pending.pop() {
            if !visited.insert(config.name.clone()) {
                continue;
            }
            out.extend(config.effective_subjects());
            for source in &config.sources {
                if !source.subject_transforms.is_empty() {
                    out.extend(source.subject_transforms.iter().filter_map(|t| {
                        sluice_protocol::transform::SubjectTransform::new(&t.src, &t.dest)
                            .ok()
                            .map(|t| t.output_filter())
                    }));
                } else if let Some(filter) = &source.filter_subject {
                    out.push(filter.clone());
                } else if let Some(origin) = config_of(&source.name) {
                    pending.push(origin);
                }
            }
        }
        out.sort();
        out.dedup();
        Some(out)
    }

    /// Every stream's name, sorted.
    pub fn list(&self) -> Vec<String> {
        self.streams().keys().cloned().collect()
    }

    /// Stops every writer after writing index.db and the sidecars.
    pub fn close(self) {
        self.inner.shut_down();
    }

    fn stream_dir(&self, name: &str) -> Option<PathBuf> {
        self.inner
            .dir
            .as_ref()
            .map(|d| d.join("streams").join(name))
    }

    /// Starts a stream: its directory (made first when `fresh`), its state recovered from the
    /// files (or empty in memory), its writer thread.
    fn start(&self, meta: Meta, fresh: bool) -> Result<Started> {
        let name = meta.config.name.clone();
        let opts = &self.inner.opts;
        let mut report = RecoveryReport::new(name.clone());
        let dir = self.stream_dir(&name);
        if let Some(dir) = &dir
            && fresh
        {
            make_stream_dir(dir, &meta)?;
        }
        let file_dir = dir.filter(|_| meta.config.storage == StorageType::File);
        let recovered = match &file_dir {
            Some(dir) => {
                let settings = recovery::Settings {
                    block_size: opts.block_size,
                    dedupe_window: meta.config.dedupe_window(),
                    raise_to_lease: true,
                };
                recovery::recover(&dir.join("msgs"), &settings, &mut report)?
            }
            None => empty_in_memory(opts.block_size),
        };
        let mut state = stream_state(meta, file_dir, recovered);
        state.index_budget = opts.index_memory / INDEX_BYTES_PER_MESSAGE;
        state.index_idle = opts.index_idle;
        let handle = spawn_writer(state, opts)?;
        Ok(Started { handle, report })
    }
}

/// A stream started: its handle and how its state was recovered.
struct Started {
    handle: StreamHandle,
    report: RecoveryReport,
}

/// The stream directories under `streams_dir`, by name, sorted. Directories whose name is not a
/// valid stream name are skipped with a warning.
fn stream_dirs(streams_dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut entries: Vec<_> = fs::read_dir(streams_dir)
        .map_err(StoreError::io(streams_dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let mut dirs = Vec::new();
    for entry in entries {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if validate_stream_name(&name).is_err() {
            tracing::warn!(dir = %entry.path().display(), "ignoring a directory that is not a valid stream name");
            continue;
        }
        dirs.push((name, entry.path()));
    }
    Ok(dirs)
}

/// Makes the directory of a new stream and writes its meta files. A directory already there
/// (one that appeared after the store opened, or a delete cut short) is refused, never moved or
/// written over: it may hold messages.
fn make_stream_dir(dir: &Path, meta: &Meta) -> Result<()> {
    if let Some(parent) = dir.parent() {
        fsutil::create_dir_durable(parent)?;
    }
    fs::create_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => StoreError::DirectoryInUse {
            name: meta.config.name.clone(),
            dir: dir.to_path_buf(),
        },
        _ => StoreError::Io {
            path: dir.to_path_buf(),
            source: e,
        },
    })?;
    // IMPORTANT: the new directory's name is durable before anything is written in it.
    if let Some(parent) = dir.parent() {
        fsutil::sync_dir(parent)?;
    }
    // The meta files come before anything else: open loads a directory as a stream only
    // through them.
    meta::write(dir, &meta.config, meta.created, meta.incarnation)
}

/// The parts of a stream that lives in memory: nothing to recover.
fn empty_in_memory(block_size: u64) -> Recovered {
    Recovered {
        table: Default::default(),
        blocks: Blocks::memory(block_size),
        last_msg_id: None,
        ttl: Default::default(),
        schedules: Default::default(),
        sources: Default::default(),
        dedupe: Default::default(),
        index_current: true,
        lease: 0,
    }
}

/// A stream's state from its meta and its recovered parts.
fn stream_state(meta: Meta, dir: Option<PathBuf>, r: Recovered) -> State {
    State {
        config: meta.config,
        created: meta.created,
        incarnation: meta.incarnation,
        dir,
        visible: r.table.last_seq,
        table: r.table,
        blocks: r.blocks,
        dedupe: r.dedupe,
        last_msg_id: r.last_msg_id,
        ttl: r.ttl,
        schedules: r.schedules,
        sources: r.sources,
        closed: false,
        fenced: None,
        health: Default::default(),
        stats: Default::default(),
        dirty: !r.index_current,
        purge_to: None,
        expired_to: None,
        lease: r.lease,
        index_budget: u64::MAX,
        index_idle: Duration::ZERO,
    }
}

/// Starts the writer thread of a stream in `state`; returns its handle.
fn spawn_writer(state: State, opts: &StoreOptions) -> Result<StreamHandle> {
    let name = state.config.name.clone();
    let (visible_tx, _) = watch::channel(state.visible);
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new(Shared {
        name: name.clone(),
        state: Mutex::new(state),
        visible: visible_tx,
        sync: opts.sync,
        sourcing: Mutex::new(BTreeMap::new()),
        writer: Mutex::new(Writer::new(rx, opts.flush_interval)),
        thread: OnceLock::new(),
        wanted: Default::default(),
        queued: Default::default(),
    });
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name(format!(
            "sluice-writer-{}",
            name.chars().take(12).collect::<String>()
        ))
        .spawn(move || writer::run(thread_shared))
        .map_err(StoreError::io(format!("writer thread for {name}")))?;
    // IMPORTANT: before the handle exists, so no request is queued without a thread to wake.
    let _ = shared.thread.set(thread.thread().clone());
    Ok(StreamHandle {
        shared,
        ops: tx,
        writer: Arc::new(Mutex::new(Some(thread))),
    })
}

/// A path `A → B → … → A` when `config` (new or replacing its namesake) would make a stream
/// source itself through other streams: every message would be copied round forever.
/// Refuses a configuration whose sources would form a cycle, or whose subjects overlap
/// another stream's (10065, as JetStream: a subject belongs to at most one stream).
fn check_sources_and_subjects(
    streams: &BTreeMap<String, StreamHandle>,
    config: &StreamConfig,
) -> Result<()> {
    if let Some(cycle) = source_cycle(streams, config) {
        return Err(StoreError::InvalidConfig(format!(
            "sources form a cycle: {cycle}"
        )));
    }
    let ours = config.effective_subjects();
    for (name, handle) in streams.iter().filter(|(name, _)| **name != config.name) {
        let theirs = handle.shared.lock().config.effective_subjects();
        let clash = ours.iter().find(|a| {
            theirs
                .iter()
                .any(|b| sluice_protocol::subject::filters_overlap(a, b))
        });
        if let Some(subject) = clash {
            tracing::warn!(stream = %config.name, other = %name, %subject, "subjects overlap");
            return Err(ApiError::subject_overlap().into());
        }
    }
    Ok(())
}

fn source_cycle(streams: &BTreeMap<String, StreamHandle>, config: &StreamConfig) -> Option<String> {
    let origins_of = |name: &str| -> Vec<String> {
        let sources = if name == config.name {
            config.sources.clone()
        } else {
            streams
                .get(name)
                .map(|h| h.shared.lock().config.sources.clone())
                .unwrap_or_default()
        };
        sources.into_iter().map(|s| s.name).collect()
    };
    // Depth-first from the stream itself; each stream is expanded once.
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![vec![config.name.clone()]];
    while let Some(path) = stack.pop() {
        let last = path.last().cloned().unwrap_or_default();
        for origin in origins_of(&last) {
            let mut next = path.clone();
            next.push(origin.clone());
            if origin == config.name {
                return Some(next.join(" → "));
            }
            if seen.insert(origin) {
                stack.push(next);
            }
        }
    }
    None
}
