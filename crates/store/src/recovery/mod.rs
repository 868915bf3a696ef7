//! Recovery on open, as a chain of phases ([`recover`]), each in its own module:
//!
//! 1. [`baseline`]: index.db when it matches the blocks, else an empty table;
//! 2. [`scan`]: the forward scan of what index.db does not cover (only what was appended after
//!    it, or every block), verifying every record. A bad record cuts its block there;
//! 3. the sequences lost to a cut are worked out from the records that survive beyond it,
//!    reported, and never reused;
//! 4. [`per_message`]: TTL, schedules and source positions from their sidecars, brought up to
//!    date by one forward scan from the sidecar stamps over the blocks whose counters say they
//!    matter;
//! 5. [`dedupe`]: the dedupe window from the newest messages carrying an id.

mod baseline;
mod dedupe;
mod losses;
mod per_message;
mod scan;

use std::path::Path;
use std::time::Duration;

use crate::block::Blocks;
use crate::dedupe::Dedupe;
use crate::error::Result;
use crate::schedule::Schedules;
use crate::sources::SourceIndex;
use crate::table::Table;
use crate::ttl::TtlWheel;
use crate::types::{RecoveryPath, RecoveryReport, SidecarRecovery};

use self::per_message::PerMessage;
use self::scan::Scanned;

/// The recovered parts of a file stream.
pub struct Recovered {
    /// Message index.
    pub table: Table,
    /// Block files, ready for appends.
    pub blocks: Blocks,
    /// Last message id.
    pub last_msg_id: Option<String>,
    /// Pending TTL expiries.
    pub ttl: TtlWheel,
    /// Schedules in force.
    pub schedules: Schedules,
    /// Source positions.
    pub sources: SourceIndex,
    /// The dedupe window.
    pub dedupe: Dedupe,
    /// index.db and the sidecars describe the stream exactly (nothing to rewrite on close).
    pub index_current: bool,
    /// The sequence lease on disk (0: none).
    pub lease: u64,
}

/// What recovery needs to know of the stream's configuration.
pub struct Settings {
    /// Block size before rollover.
    pub block_size: u64,
    /// The dedupe window.
    pub dedupe_window: Duration,
    /// Raise the last sequence to the sequence lease (opening after a stop or a crash), or not
    /// (undoing a batch whose write failed: its sequences were never acknowledged, so the next
    /// batch takes them again).
    pub raise_to_lease: bool,
}

/// Recovers the stream whose messages are in `msgs_dir`, recording in `report` what was found
/// and repaired.
pub fn recover(
    msgs_dir: &Path,
    settings: &Settings,
    report: &mut RecoveryReport,
) -> Result<Recovered> {
    crate::fsutil::create_dir_durable(msgs_dir)?;
    let base = baseline::load(msgs_dir, report)?;
    let Scanned {
        mut table,
        last_msg_id,
        sizes,
        last_checksum,
        evidence,
        bytes_scanned,
        damaged_bytes,
    } = scan::scan(msgs_dir, base, report)?;
    // IMPORTANT: the lost and unconfirmed sequences raise the table's last sequence before the
    // sidecars are judged against it (a sidecar is current when its stamp is above it) and
    // before anything is appended, so no sequence is handed out twice.
    let lease = losses::settle(
        msgs_dir,
        settings,
        &evidence,
        damaged_bytes,
        &mut table,
        report,
    )?;
    // Judged before the later phases add their warnings: a refused sidecar is accounted for
    // below, a dedupe window that could not be rebuilt changes nothing on disk.
    let blocks_current =
        report.path == RecoveryPath::Index && bytes_scanned == 0 && report.is_clean();
    let mut blocks = Blocks::file(msgs_dir.to_path_buf(), settings.block_size, &sizes)?;
    blocks.set_last_checksum(last_checksum);
    let PerMessage {
        ttl,
        schedules,
        sources,
    } = per_message::recover(msgs_dir, &mut table, &blocks, report)?;
    let sources_current = match report.sources {
        SidecarRecovery::Current => true,
        SidecarRecovery::Missing => sources.positions().is_empty(),
        SidecarRecovery::Stale | SidecarRecovery::Rejected => false,
    };
    let index_current = blocks_current && sources_current && report.per_message_blocks_scanned == 0;
    let dedupe = dedupe::rebuild(&mut table, &blocks, settings.dedupe_window).unwrap_or_else(|e| {
        report.warn(format!("dedupe window not rebuilt: {e}"));
        Dedupe::default()
    });
    Ok(Recovered {
        table,
        blocks,
        last_msg_id,
        ttl,
        schedules,
        sources,
        dedupe,
        index_current,
        lease,
    })
}
