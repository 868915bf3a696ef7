//! Phase 4 of recovery: per-message state — TTL expiries, schedules in force, source
//! positions. Each comes from its sidecar (thw.db, sched.db, sources.db), whose stamp says up
//! to which sequence it is complete; ONE forward scan from the oldest stamp then reads only the
//! blocks whose counters show TTL'd, scheduled or sourced messages at or above the matching
//! stamp.

use std::fs;
use std::path::Path;

use crate::block::Blocks;
use crate::error::Result;
use crate::proto::{self, Headers, MsgTtl, names};
use crate::record::{self, flags};
use crate::schedule::{self, Schedules};
use crate::sidecar::{self, Sidecar};
use crate::sources::{self, SOURCES_VERSION, SourceIndex};
use crate::table::{MsgMeta, Table};
use crate::time::nanos;
use crate::ttl::TtlWheel;
use crate::types::{RecoveryReport, SidecarRecovery};
use crate::{sched, thw};

/// Per-message state, recovered.
pub struct PerMessage {
    /// TTL expiries.
    pub ttl: TtlWheel,
    /// Schedules in force.
    pub schedules: Schedules,
    /// Source positions.
    pub sources: SourceIndex,
}

/// Where each sidecar's entries end: the scan recovers the messages at or above it.
struct Stamps {
    ttl: u64,
    sched: u64,
    sources: u64,
}

/// Recovers the per-message state of the stream in `msgs_dir` (whose root holds sources.db).
pub fn recover(
    msgs_dir: &Path,
    table: &mut Table,
    blocks: &Blocks,
    report: &mut RecoveryReport,
) -> Result<PerMessage> {
    let (mut state, stamps) = load_sidecars(msgs_dir, table, report);
    scan_messages(table, blocks, &stamps, &mut state, report)?;
    // The schedules' fire times from the newest fires stored, not from the older snapshot.
    let read = |m: &MsgMeta| read_headers(blocks, m);
    if let Err(e) = sched::catch_up(&mut state.schedules, table, stamps.sched, read) {
        report.warn(format!("schedules not brought up to their last fires: {e}"));
    }
    Ok(state)
}

/// Reads the three sidecars; one missing or refused contributes nothing and stamp 0 (its
/// state comes entirely from the scan).
fn load_sidecars(
    msgs_dir: &Path,
    table: &mut Table,
    report: &mut RecoveryReport,
) -> (PerMessage, Stamps) {
    let last = table.last_seq;
    let ttl = load_sidecar(
        &msgs_dir.join(thw::FILE),
        thw::THW_VERSION,
        last,
        report,
        |s| thw::decode(s, table),
    );
    let schedules = load_sidecar(
        &msgs_dir.join(sched::FILE),
        sched::SCHED_VERSION,
        last,
        report,
        |s| sched::decode(s, table),
    );
    let sources_path = msgs_dir.parent().unwrap_or(msgs_dir).join(sources::FILE);
    let sources = load_sidecar(
        &sources_path,
        SOURCES_VERSION,
        last,
        report,
        SourceIndex::decode,
    );
    report.sources = sources.how;
    let stamps = Stamps {
        ttl: ttl.stamp,
        sched: schedules.stamp,
        sources: sources.stamp,
    };
    let state = PerMessage {
        ttl: ttl.value,
        schedules: schedules.value,
        sources: sources.value,
    };
    (state, stamps)
}

/// One sidecar, read.
struct Loaded<T> {
    /// Its entries (empty when missing or refused).
    value: T,
    /// Its stamp (0 when missing or refused: scan everything).
    stamp: u64,
    /// How it went.
    how: SidecarRecovery,
}

/// Loads one sidecar with `decode`. A missing file gives stamp 0 (scan everything); a bad one,
/// however far it read, is ignored whole: deleted with a warning, and also stamp 0.
fn load_sidecar<T: Default>(
    path: &Path,
    version: u8,
    last_seq: u64,
    report: &mut RecoveryReport,
    decode: impl FnOnce(&Sidecar<'_>) -> Result<T, crate::FileDecodeError>,
) -> Loaded<T> {
    let Ok(bytes) = fs::read(path) else {
        return Loaded {
            value: T::default(),
            stamp: 0,
            how: SidecarRecovery::Missing,
        };
    };
    match sidecar::decode(&bytes, version).and_then(|s| Ok((decode(&s)?, s.stamp))) {
        Ok((value, stamp)) => Loaded {
            value,
            stamp,
            how: if stamp > last_seq {
                SidecarRecovery::Current
            } else {
                SidecarRecovery::Stale
            },
        },
        Err(why) => {
            report.warn(format!("{} ignored: {why}; rescanning", path.display()));
            let _ = fs::remove_file(path);
            Loaded {
                value: T::default(),
                stamp: 0,
                how: SidecarRecovery::Rejected,
            }
        }
    }
}

/// What one message must be read for.
struct Wanted {
    seq: u64,
    meta: MsgMeta,
    ttl: bool,
    sched: bool,
    source: bool,
}

/// The forward scan: from the oldest stamp, over the blocks whose counters show TTL'd,
/// scheduled or sourced messages at or above the matching stamp, reads each such message's
/// headers into `state`.
fn scan_messages(
    table: &mut Table,
    blocks: &Blocks,
    stamps: &Stamps,
    state: &mut PerMessage,
    report: &mut RecoveryReport,
) -> Result<()> {
    let oldest = stamps.ttl.min(stamps.sched).min(stamps.sources);
    let relevant: Vec<(u64, u64)> = table
        .blocks()
        .map(|(_, b)| &b.stats)
        .filter(|s| {
            (s.ttl > 0 && s.last >= stamps.ttl)
                || (s.sched > 0 && s.last >= stamps.sched)
                || (s.sourced > 0 && s.last >= stamps.sources)
        })
        .map(|s| (s.first.max(oldest), s.last))
        .collect();
    for (from, upto) in relevant {
        report.per_message_blocks_scanned += 1;
        let mut wanted = Vec::new();
        table.walk(from, upto, |seq, m| {
            let w = Wanted {
                seq,
                meta: m.clone(),
                ttl: m.flags & flags::TTL != 0
                    && m.flags & flags::TTL_NEVER == 0
                    && seq >= stamps.ttl,
                sched: m.flags & flags::SCHEDULE != 0 && seq >= stamps.sched,
                source: m.flags & flags::SOURCED != 0 && seq >= stamps.sources,
            };
            if w.ttl || w.sched || w.source {
                wanted.push(w);
            }
            true
        })?;
        for w in wanted {
            if let Some(h) = read_headers(blocks, &w.meta) {
                state.apply(&w, &h);
            }
        }
    }
    Ok(())
}

/// The headers of a message, if its record reads and decodes.
fn read_headers(blocks: &Blocks, meta: &MsgMeta) -> Option<Headers> {
    let bytes = blocks.read(meta.loc).ok()?;
    let (rec, _, _) = record::decode(&bytes).ok()?;
    proto::decode_headers(rec.headers)
}

impl PerMessage {
    /// Recovers what message `w` (with headers `h`) says for the state it was read for.
    fn apply(&mut self, w: &Wanted, h: &Headers) {
        let m = &w.meta;
        if let Some(MsgTtl::After(d)) = h
            .get(names::TTL)
            .and_then(|v| MsgTtl::parse(v).ok())
            .filter(|_| w.ttl)
        {
            self.ttl.insert(w.seq, m.ts.saturating_add(nanos(d)));
        }
        if let Ok(Some(v)) =
            schedule::validate(w.sched, &m.subject, h, m.ts).map(|v| v.filter(|_| w.sched))
        {
            self.schedules.insert(&m.subject, w.seq, v.first);
        }
        if let Some((iname, origin, ident)) = h
            .get(names::STREAM_SOURCE)
            .filter(|_| w.source)
            .and_then(sources::parse_header)
        {
            self.sources.record(&iname, origin, &ident);
        }
    }
}
