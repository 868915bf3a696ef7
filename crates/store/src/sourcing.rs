//! Sourcing: one thread per source of a stream copies the origin stream's messages, in origin
//! order, into the sourcing stream.
//!
//! - Each thread drives one async loop with [`block_on`] (the store needs no tokio runtime):
//!   it reads the origin through its per-subject index, waits on the origin's visible-sequence
//!   watch for new messages (no polling), and stores batches through the sourcing stream's
//!   writer as internal publishes, so the stream's limits and dedupe window apply.
//! - Every stored message carries `Nats-Stream-Source: <origin> <origin seq> <filter> <dest>
//!   <original subject> <ident>`, the ident being the origin's incarnation in hex; incoming
//!   `Nats-Stream-Source`, `Nats-Expected-*` and `Nats-Batch-*` headers are stripped first.
//! - Exactly once: a source only reads origin sequences above its recorded position, and that
//!   position is the source index, which the writer updates with the very message it stores
//!   (so a crash can never leave a stored message unrecorded after recovery).
//! - Resume ([`resume`], once per start, before the threads): the index first (also when the
//!   stream is empty after a purge); one backward scan of stored sourced messages for the
//!   sources the index does not resolve — only when a pre-2.10 header of their origin was ever
//!   stored, the one thing the index cannot place; the start rule for the rest.
//! - An origin that does not exist (yet) is waited for: the thread sleeps on the store's
//!   catalogue watch and starts when a stream of that name is created. An origin whose
//!   incarnation differs from the recorded ident was deleted and recreated: the position
//!   resets (warning logged, `resets` counted) and the start rule applies.
//! - A batch the sourcing stream cannot write (a full disk) is not dropped: the source stops
//!   and copies it again from its recorded position when the origin next changes.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use futures::executor::block_on;
use futures::future::select;
use sluice_protocol::headers::{NATS_BATCH_PREFIX, NATS_EXPECTED_PREFIX};
use sluice_protocol::transform::{SubjectTransform, apply_first};
use tokio::sync::watch;

use crate::config::SourceConfig;
use crate::error::{Result, StoreError};
use crate::proto::{FilterSet, names};
use crate::rules::Publish;
use crate::sources::parse_header;
use crate::stream::StreamHandle;
use crate::types::{SourceResume, SourceStatus, StoredMessage};

/// Most origin messages stored per writer request.
const BATCH: usize = 256;

/// The store's stream catalogue as the sourcing threads see it: the streams by name and a
/// watch bumped whenever a stream is created or deleted.
pub struct Catalog {
    /// Streams by name.
    pub streams: Mutex<BTreeMap<String, StreamHandle>>,
    /// Bumped on every create and delete.
    pub changed: watch::Sender<u64>,
}

impl Catalog {
    /// An empty catalogue.
    pub fn new() -> Self {
        Self {
            streams: Mutex::new(BTreeMap::new()),
            changed: watch::channel(0).0,
        }
    }

    fn get(&self, name: &str) -> Option<StreamHandle> {
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.get(name).cloned()
    }

    /// Wakes threads waiting for an origin.
    pub fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The running sourcing threads of one stream.
pub struct Sourcing {
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Sourcing {
    /// Signals every thread and waits for them (each finishes the batch it is storing).
    pub fn stop(self) {
        self.stop.send_replace(true);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A source, ready to run: its config, how to select and rename origin messages.
struct Source {
    config: SourceConfig,
    index_name: String,
    /// What the origin is read with: the filter, or the transforms' srcs.
    read_filter: FilterSet,
    transforms: Vec<SubjectTransform>,
    /// The `<filter> <dest>` fields of the header (the index name without the origin).
    header_fields: String,
}

impl Source {
    fn new(config: &SourceConfig) -> Result<Self> {
        let invalid =
            |e: String| StoreError::InvalidConfig(format!("source {:?}: {e}", config.name));
        let transforms = config
            .subject_transforms
            .iter()
            .map(|t| SubjectTransform::new(&t.src, &t.dest).map_err(|e| invalid(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        let filters: Vec<String> = if transforms.is_empty() {
            vec![config.filter_subject.clone().unwrap_or_else(|| ">".into())]
        } else {
            transforms.iter().map(|t| t.src().to_string()).collect()
        };
        let read_filter = FilterSet::new(filters).map_err(|e| invalid(e.to_string()))?;
        let index_name = config.index_name();
        let header_fields = index_name
            .split_once(' ')
            .map_or(String::new(), |(_, rest)| rest.to_string());
        Ok(Self {
            config: config.clone(),
            index_name,
            read_filter,
            transforms,
            header_fields,
        })
    }

    /// The subject stored for an origin subject (`None`: no transform takes it).
    fn map(&self, subject: &str) -> Option<String> {
        if self.transforms.is_empty() {
            Some(subject.to_string())
        } else {
            apply_first(&self.transforms, subject)
        }
    }

    /// The message stored for origin message `m`.
    fn publish(&self, m: &StoredMessage, ident: &str) -> Option<Publish> {
        let subject = self.map(&m.subject)?;
        let mut headers = m.headers.clone();
        headers.remove(names::STREAM_SOURCE);
        headers.remove_prefixed(NATS_EXPECTED_PREFIX);
        headers.remove_prefixed(NATS_BATCH_PREFIX);
        headers.insert(
            names::STREAM_SOURCE,
            format!(
                "{} {} {} {} {ident}",
                self.config.name, m.seq, self.header_fields, m.subject
            ),
        );
        Some(Publish {
            subject,
            headers,
            payload: m.payload.clone(),
            internal: true,
        })
    }
}

/// The ident of an origin incarnation as written in `Nats-Stream-Source`.
pub fn ident(incarnation: u64) -> String {
    format!("{incarnation:016x}")
}

/// Where a source starts: a recorded position (origin seq, ident) and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    how: SourceResume,
    recorded: Option<(u64, String)>,
}

/// Finds every source's starting point: the index, then ONE backward scan for the sources it
/// does not resolve and a scan could (stopping as soon as all are found), then the start rule.
/// Also returns how many stored messages the backward scan visited.
fn resume(target: &StreamHandle, sources: &[Source]) -> Result<(Vec<Start>, u64)> {
    let positions = target.source_positions();
    let mut starts: Vec<Option<Start>> = sources
        .iter()
        .map(|s| {
            positions.get(&s.index_name).map(|p| Start {
                how: SourceResume::Index,
                recorded: Some((p.seq, p.ident.clone())),
            })
        })
        .collect();
    // Every stored current-form header is in the index (the writer records it, recovery
    // rebuilds what sources.db missed), so a scan can only find more through headers that name
    // just the origin — pre-2.10 `<origin> <seq>` — which the index keeps as `<origin> > >`
    // without ident. Without such an entry for an unresolved source's origin, skip the scan.
    let legacy_origin = |origin: &str| {
        positions
            .get(&format!("{origin} > >"))
            .is_some_and(|p| p.ident.is_empty())
    };
    let scan = sources
        .iter()
        .zip(&starts)
        .any(|(src, start)| start.is_none() && legacy_origin(&src.config.name));
    let mut scanned = 0;
    if scan && target.holds_sourced_messages() {
        target.scan_sourced_back(|m| {
            scanned += 1;
            let Some(value) = m.headers.get(names::STREAM_SOURCE) else {
                return true;
            };
            // A pre-2.10 `<origin> <seq>` header names only the origin: it resolves every
            // source of that origin (a stream could source an origin once then).
            let legacy = value.split(' ').count() == 2;
            if let Some((iname, seq, id)) = parse_header(value) {
                for (src, start) in sources.iter().zip(starts.iter_mut()) {
                    let hit = if legacy {
                        iname.split(' ').next() == Some(src.config.name.as_str())
                    } else {
                        iname == src.index_name
                    };
                    if hit && start.is_none() {
                        *start = Some(Start {
                            how: SourceResume::BackwardScan,
                            recorded: Some((seq, id.clone())),
                        });
                    }
                }
            }
            starts.iter().any(Option::is_none)
        })?;
    }
    let starts = starts
        .into_iter()
        .zip(sources)
        .map(|(start, src)| {
            start.unwrap_or(Start {
                how: start_rule(&src.config, target, true),
                recorded: None,
            })
        })
        .collect();
    Ok((starts, scanned))
}

/// The rule for a source without a recorded position; `after_purge` allows the purged-stream
/// rule (not after an origin reset: a new origin's messages are all new).
fn start_rule(cfg: &SourceConfig, target: &StreamHandle, after_purge: bool) -> SourceResume {
    if cfg.opt_start_seq.is_some_and(|s| s > 0) {
        SourceResume::OptStartSeq
    } else if cfg.opt_start_time.is_some() {
        SourceResume::OptStartTime
    } else if after_purge && {
        let st = target.info(None).state;
        st.first_seq > 1 && st.last_time.is_some()
    } {
        SourceResume::AfterLastTime
    } else {
        SourceResume::Start
    }
}

/// The first origin sequence to read under a start rule; `last_time` is the sourcing stream's
/// last message time when the sourcing resumed (for `AfterLastTime`).
fn first_seq(
    rule: SourceResume,
    cfg: &SourceConfig,
    last_time: Option<jiff::Timestamp>,
    origin: &StreamHandle,
) -> Result<u64> {
    let by_time = |t: jiff::Timestamp| {
        let ns = i64::try_from(t.as_nanosecond()).unwrap_or(i64::MAX);
        origin.first_seq_at_or_after(ns)
    };
    match rule {
        SourceResume::OptStartSeq => Ok(cfg.opt_start_seq.unwrap_or(1).max(1)),
        SourceResume::OptStartTime => cfg.opt_start_time.map_or(Ok(1), by_time),
        SourceResume::AfterLastTime => last_time.map_or(Ok(1), by_time),
        _ => Ok(1),
    }
}

/// Starts one thread per source of `target`'s configuration.
pub fn start(target: &StreamHandle, catalog: &Arc<Catalog>) -> Result<Option<Sourcing>> {
    let config = target.config();
    if config.sources.is_empty() {
        target.set_source_status(BTreeMap::new());
        return Ok(None);
    }
    let sources = config
        .sources
        .iter()
        .map(Source::new)
        .collect::<Result<Vec<_>>>()?;
    let (starts, scanned) = resume(target, &sources)?;
    let statuses = sources
        .iter()
        .zip(&starts)
        .map(|(src, start)| {
            let status = SourceStatus {
                index_name: src.index_name.clone(),
                origin: src.config.name.clone(),
                resume: start.how,
                resumed_after: start.recorded.as_ref().map_or(0, |r| r.0),
                backward_scanned: scanned,
                last_origin_seq: 0,
                waiting_for_origin: true,
                sourced: 0,
                duplicates: 0,
                dropped: 0,
                resets: 0,
            };
            (src.index_name.clone(), status)
        })
        .collect();
    target.set_source_status(statuses);
    // Taken once, before any source stores a message: a source whose thread starts later must
    // not see the time of what another source copied meanwhile (it would skip past origin
    // messages stored before that copy).
    let resumed_last_time = starts
        .iter()
        .any(|s| s.how == SourceResume::AfterLastTime)
        .then(|| target.info(None).state.last_time)
        .flatten();
    let (stop, _) = watch::channel(false);
    let mut threads = Vec::new();
    for (src, start) in sources.into_iter().zip(starts) {
        let task = Task {
            target: target.clone(),
            catalog: catalog.clone(),
            stop: stop.subscribe(),
            src,
            start,
            resumed_last_time,
        };
        let name = format!(
            "sluice-source-{}",
            task.src.config.name.chars().take(12).collect::<String>()
        );
        let t = thread::Builder::new()
            .name(name)
            .spawn(move || block_on(task.run()))
            .map_err(StoreError::io("sourcing thread"))?;
        threads.push(t);
    }
    Ok(Some(Sourcing { stop, threads }))
}

/// One source's loop.
struct Task {
    target: StreamHandle,
    catalog: Arc<Catalog>,
    stop: watch::Receiver<bool>,
    src: Source,
    start: Start,
    /// The sourcing stream's last message time when the sourcing resumed.
    resumed_last_time: Option<jiff::Timestamp>,
}

impl Task {
    fn stopped(&self) -> bool {
        // A dropped stop sender also means stop (and keeps `wait` from spinning).
        *self.stop.borrow() || self.stop.has_changed().is_err()
    }

    fn status(&self, f: impl FnOnce(&mut SourceStatus)) {
        self.target.update_source_status(&self.src.index_name, f);
    }

    async fn run(mut self) {
        let mut catalog = self.catalog.changed.subscribe();
        while !self.stopped() {
            catalog.borrow_and_update();
            let origin = self
                .catalog
                .get(&self.src.config.name)
                .filter(|o| !o.is_closed());
            let Some(origin) = origin else {
                self.status(|s| s.waiting_for_origin = true);
                let mut stop = self.stop.clone();
                wait(&mut stop, &mut catalog).await;
                continue;
            };
            self.status(|s| s.waiting_for_origin = false);
            if let Err(e) = self.follow(&origin).await {
                if matches!(e, StoreError::Closed(ref n) if *n == self.target.name()) {
                    return;
                }
                tracing::warn!(stream = %self.target.name(), source = %self.src.index_name, error = %e, "sourcing interrupted; retrying when the origin changes");
                let mut stop = self.stop.clone();
                let mut visible = origin.shared.visible.subscribe();
                wait(&mut stop, &mut visible).await;
            }
        }
    }

    /// Copies `origin`'s messages until the origin closes or the task is stopped.
    async fn follow(&mut self, origin: &StreamHandle) -> Result<()> {
        let origin_ident = ident(origin.incarnation());
        let next = match &self.start.recorded {
            Some((seq, id)) if id.is_empty() || *id == origin_ident => seq + 1,
            Some((seq, id)) => {
                tracing::warn!(stream = %self.target.name(), source = %self.src.index_name, recorded_ident = %id, origin_ident = %origin_ident, last_seq = seq, "origin stream was recreated; source position reset");
                let rule = start_rule(&self.src.config, &self.target, false);
                self.status(|s| {
                    s.resets += 1;
                    s.resume = rule;
                });
                first_seq(rule, &self.src.config, self.resumed_last_time, origin)?
            }
            None => first_seq(
                self.start.how,
                &self.src.config,
                self.resumed_last_time,
                origin,
            )?,
        };
        self.start = Start {
            how: self.start.how,
            recorded: Some((next - 1, origin_ident.clone())),
        };
        let mut next = next;
        let mut visible = origin.shared.visible.subscribe();
        loop {
            visible.borrow_and_update();
            if self.stopped() || origin.is_closed() {
                return Ok(());
            }
            let mut batch = Vec::new();
            let mut seqs = Vec::new();
            while batch.len() < BATCH {
                let m = match origin.next_matching(next, &self.src.read_filter) {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(StoreError::Lost { lost, .. }) => {
                        // Damaged origin records cannot be copied; they count as dropped.
                        tracing::warn!(stream = %self.target.name(), source = %self.src.index_name, first = lost.first, last = lost.last, "origin positions cannot be read; not sourced");
                        self.status(|s| s.dropped += lost.last - lost.first + 1);
                        next = lost.last + 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                next = m.seq + 1;
                if let Some(p) = self.src.publish(&m, &origin_ident) {
                    batch.push(p);
                    seqs.push(m.seq);
                }
            }
            if batch.is_empty() {
                let mut stop = self.stop.clone();
                wait(&mut stop, &mut visible).await;
                continue;
            }
            let acks = self.target.publish_many(batch).await?;
            for (seq, ack) in seqs.iter().zip(acks) {
                match ack {
                    Ok(a) if a.duplicate => self.status(|s| s.duplicates += 1),
                    Ok(_) => self.status(|s| s.sourced += 1),
                    Err(StoreError::Closed(n)) => return Err(StoreError::Closed(n)),
                    // Nothing of the batch was stored (a full disk, a failed fsync): copied
                    // again from the last position recorded, not dropped.
                    Err(
                        e @ (StoreError::WriteFailed { .. }
                        | StoreError::SyncFailed { .. }
                        | StoreError::Fenced { .. }),
                    ) => return Err(e),
                    Err(e) => {
                        tracing::warn!(stream = %self.target.name(), source = %self.src.index_name, origin_seq = seq, error = %e, "sourced message rejected by the sourcing stream; dropped");
                        self.status(|s| s.dropped += 1);
                    }
                }
            }
            let last = next - 1;
            self.start.recorded = Some((last, origin_ident.clone()));
            self.status(|s| s.last_origin_seq = last);
        }
    }
}

/// Waits until `stop` or `other` changes (or a sender is gone).
async fn wait<T>(stop: &mut watch::Receiver<bool>, other: &mut watch::Receiver<T>) {
    let a = pin!(stop.changed());
    let b = pin!(other.changed());
    // Either wakes the caller, which looks again at everything.
    let _ = select(a, b).await;
}
