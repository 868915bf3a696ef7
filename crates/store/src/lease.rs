//! `msgs/lease.db`: the sequence lease, a durable upper bound on every sequence the stream
//! may have handed out (the sidecar form, [`crate::sidecar`], with no entries and the bound
//! as its stamp).
//!
//! Before a batch whose sequences reach the bound is written, the bound is raised
//! [`STRIDE`] past them and the file replaced and fsynced; each snapshot (index.db, on close
//! too) sets it back to exactly the last sequence + 1. Recovery raises the last sequence to
//! the bound − 1, so whatever was cut from the end of a block after a crash, no sequence is
//! handed out twice within an incarnation; the positions between the last intact record and
//! the bound are reported as unconfirmed ([`crate::losses`]).

use std::path::Path;

use crate::decode::{FileDecodeError, MAX_SEQ};
use crate::error::Result;
use crate::sidecar;

/// The file's name in `msgs/`.
pub const FILE: &str = "lease.db";
/// Version of lease.db.
pub const LEASE_VERSION: u8 = 1;
/// How far past a batch the lease is raised: one fsynced file replacement per this many
/// sequences at most; after a crash, at most this many positions are unconfirmed.
pub const STRIDE: u64 = 1 << 16;

/// Writes the lease: every sequence handed out is below `bound`.
pub fn write(msgs_dir: &Path, bound: u64) -> Result<()> {
    sidecar::write(&msgs_dir.join(FILE), LEASE_VERSION, 0, bound, &[])
}

/// The bound of a lease.db's bytes; the error names what is wrong.
pub fn decode(bytes: &[u8]) -> std::result::Result<u64, FileDecodeError> {
    let s = sidecar::decode(bytes, LEASE_VERSION)?;
    if s.count != 0 || !s.body.is_empty() {
        return Err(FileDecodeError::UnexpectedEntries);
    }
    // Recovery raises the last sequence to the bound − 1 (found by the `store_open` target).
    if s.stamp > MAX_SEQ + 1 {
        return Err(FileDecodeError::PastHighestSequence {
            what: "bound",
            seq: s.stamp,
        });
    }
    Ok(s.stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_round_trips_and_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 70_000).unwrap();
        let mut bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        assert_eq!(decode(&bytes), Ok(70_000));
        bytes[3] ^= 1;
        assert_eq!(decode(&bytes), Err(FileDecodeError::Checksum));
        assert_eq!(decode(&[]), Err(FileDecodeError::TooShort { len: 0 }));
    }

    /// Found by the `store_open` fuzz target: a lease (with a valid checksum) at `u64::MAX`
    /// raised the last sequence so far that the next one overflowed.
    #[test]
    fn a_bound_past_the_highest_sequence_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), MAX_SEQ + 1).unwrap();
        let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        assert_eq!(decode(&bytes), Ok(MAX_SEQ + 1));
        write(dir.path(), MAX_SEQ + 2).unwrap();
        let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        assert_eq!(
            decode(&bytes),
            Err(FileDecodeError::PastHighestSequence {
                what: "bound",
                seq: MAX_SEQ + 2
            })
        );
    }
}
