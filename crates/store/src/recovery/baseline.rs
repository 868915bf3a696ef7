//! Phase 1 of recovery: where the block scan starts. index.db, when it still matches the
//! blocks, gives the table and every block but the tail of the last one; otherwise recovery
//! starts from an empty table and scans every block.

use std::fs;
use std::path::Path;

use crate::block::{block_path, list_block_files};
use crate::error::{Result, StoreError};
use crate::index;
use crate::lease;
use crate::table::Table;
use crate::types::{RecoveryPath, RecoveryReport};

/// What the scan starts from.
pub struct Baseline {
    /// The table index.db holds (empty without one).
    pub table: Table,
    /// The last message id index.db holds.
    pub last_msg_id: Option<String>,
    /// Block sizes as index.db claims them.
    pub sizes: Vec<(u32, u64)>,
    /// The checksum of the last record index.db covers.
    pub last_checksum: u64,
    /// The block ids present, ascending.
    pub ids: Vec<u32>,
    /// Where the scan starts; `None` when there is no block.
    pub scan_from: Option<ScanFrom>,
    /// Sequences a readable index.db that no longer matches the blocks proves existed, as
    /// `(first, last)` ranges.
    pub stale_claims: Vec<(u64, u64)>,
}

/// A block and the offset in it where the scan starts.
#[derive(Debug, Clone, Copy)]
pub struct ScanFrom {
    /// Block id.
    pub block: u32,
    /// Byte offset in that block.
    pub offset: u64,
}

/// Why index.db was not used.
#[derive(Debug, thiserror::Error)]
enum Rejected {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Listing(StoreError),
    #[error("{0}")]
    Malformed(crate::FileDecodeError),
    #[error("it lists different blocks than the directory holds")]
    OtherBlocks,
    #[error("block {block} is {len} bytes, index.db says {claimed}")]
    LastBlockShort { block: u32, len: u64, claimed: u64 },
    #[error("the last record's checksum does not match")]
    LastChecksum,
}

/// An index.db that matches the blocks.
struct Matching {
    snapshot: index::Snapshot,
    scan_from: Option<ScanFrom>,
    ids: Vec<u32>,
}

/// The baseline of the stream in `msgs_dir`: index.db's when it matches the blocks, else an
/// empty one (recorded in `report`, with a warning when index.db was missing or unusable while blocks are there).
pub fn load(msgs_dir: &Path, report: &mut RecoveryReport) -> Result<Baseline> {
    match matching_index(msgs_dir) {
        Ok(Some(m)) => {
            report.path = RecoveryPath::Index;
            Ok(Baseline {
                sizes: m.snapshot.blocks.iter().map(|b| (b.id, b.size)).collect(),
                table: m.snapshot.table,
                last_msg_id: m.snapshot.last_msg_id,
                last_checksum: m.snapshot.last_checksum,
                ids: m.ids,
                scan_from: m.scan_from,
                stale_claims: Vec::new(),
            })
        }
        Ok(None) => {
            report.path = RecoveryPath::Rebuild;
            let base = from_blocks(msgs_dir, Vec::new())?;
            // A stream that never wrote a block has nothing to rebuild and nothing to say.
            if !base.ids.is_empty() {
                let blocks = base.ids.len();
                report.warn(format!(
                    "index.db missing; rebuilding from {blocks} block file(s)"
                ));
            }
            Ok(base)
        }
        Err(why) => {
            report.path = RecoveryPath::Rebuild;
            let base = from_blocks(msgs_dir, stale_claims(msgs_dir))?;
            report.warn(format!("index.db ignored: {why}; rebuilding from blocks"));
            Ok(base)
        }
    }
}

/// An empty baseline: every block present is scanned from its start.
fn from_blocks(msgs_dir: &Path, stale_claims: Vec<(u64, u64)>) -> Result<Baseline> {
    let ids = list_block_files(msgs_dir)?;
    Ok(Baseline {
        table: Table::default(),
        last_msg_id: None,
        sizes: Vec::new(),
        last_checksum: 0,
        scan_from: ids.first().map(|&block| ScanFrom { block, offset: 0 }),
        ids,
        stale_claims,
    })
}

/// The sequences a readable index.db proves existed even though it no longer matches the
/// blocks: its live ranges and its last sequence.
fn stale_claims(msgs_dir: &Path) -> Vec<(u64, u64)> {
    let Some(snap) = fs::read(msgs_dir.join(index::FILE))
        .ok()
        .and_then(|b| index::decode(&b, msgs_dir.to_path_buf()).ok())
    else {
        return Vec::new();
    };
    let last = snap.table.last_seq;
    let mut live = snap.table.live_ranges();
    live.push((last, last));
    live
}

/// Loads index.db if it matches the blocks (`None` when there is none).
///
/// Blocks are deleted only after an index.db that no longer names them is on disk, and new
/// blocks take the next id, so when no block follows index.db's last one and nothing was
/// published after it (the lease is as the snapshot settled it), the blocks are exactly those
/// it names and the directory is not listed (a listing costs O(blocks)). Otherwise (blocks may
/// have been started after the snapshot) the directory is listed and must match.
fn matching_index(msgs_dir: &Path) -> Result<Option<Matching>, Rejected> {
    let bytes = match fs::read(msgs_dir.join(index::FILE)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let snapshot = index::decode(&bytes, msgs_dir.to_path_buf()).map_err(Rejected::Malformed)?;
    let claimed: Vec<u32> = snapshot.blocks.iter().map(|b| b.id).collect();
    let last_claimed = claimed.last().copied();
    // IMPORTANT: `<last + 1>.blk` missing proves nothing after a crash: blocks begun after the
    // snapshot may be there with that one deleted. Only a lease settled at the snapshot's last
    // sequence (nothing published since) lets the listing be skipped.
    let followed = last_claimed
        .and_then(|l| l.checked_add(1))
        .is_none_or(|next| block_path(msgs_dir, next).exists())
        || !lease_settled_at(msgs_dir, snapshot.table.last_seq);
    let ids = if followed {
        let ids = list_block_files(msgs_dir).map_err(Rejected::Listing)?;
        let listed_then: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|id| last_claimed.is_some_and(|l| *id <= l))
            .collect();
        if listed_then != claimed {
            return Err(Rejected::OtherBlocks);
        }
        ids
    } else {
        claimed
    };
    check_last_block(msgs_dir, &snapshot)?;
    let scan_from = match snapshot.blocks.last() {
        Some(last) => Some(ScanFrom {
            block: last.id,
            offset: last.size,
        }),
        None => ids.first().map(|&block| ScanFrom { block, offset: 0 }),
    };
    Ok(Some(Matching {
        snapshot,
        scan_from,
        ids,
    }))
}

/// Whether lease.db verifies and is exactly `last_seq + 1`: as the snapshot of `last_seq`
/// left it, so no message was published after it (the first one raises the lease).
fn lease_settled_at(msgs_dir: &Path, last_seq: u64) -> bool {
    fs::read(msgs_dir.join(lease::FILE))
        .ok()
        .and_then(|b| lease::decode(&b).ok())
        .is_some_and(|bound| Some(bound) == last_seq.checked_add(1))
}

/// Checks the last block against index.db: at least the size it claims, ending (at that size)
/// in the record checksum it claims. Sealed blocks are checked (size, every record) when first
/// read, so open stays O(blocks); the last block is checked now because appends after the
/// snapshot continue it.
fn check_last_block(msgs_dir: &Path, snapshot: &index::Snapshot) -> Result<(), Rejected> {
    let Some(last) = snapshot.blocks.last() else {
        return Ok(());
    };
    let file = fs::File::open(block_path(msgs_dir, last.id))?;
    let len = file.metadata()?.len();
    if len < last.size {
        return Err(Rejected::LastBlockShort {
            block: last.id,
            len,
            claimed: last.size,
        });
    }
    if last.size >= 8 {
        let mut sum = [0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut sum, last.size - 8)?;
        if u64::from_le_bytes(sum) != snapshot.last_checksum {
            return Err(Rejected::LastChecksum);
        }
    }
    Ok(())
}
