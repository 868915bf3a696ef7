//! The sidecar file form shared by `thw.db`, `sched.db` and `sources.db`:
//! `u8 version, u64 count, u64 stamp` (little-endian; stamp = the stream's last sequence + 1
//! when written), then the entries, then an xxh3-64 of everything before it. Written atomically.

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::decode::FileDecodeError;
use crate::error::Result;
use crate::fsutil::{self, Reader};

/// Header bytes.
pub const HEADER: usize = 17;

/// A decoded sidecar: its header and the entry bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar<'a> {
    /// Number of entries.
    pub count: u64,
    /// Last sequence + 1 when written: entries cover sequences below it.
    pub stamp: u64,
    /// The encoded entries.
    pub body: &'a [u8],
}

impl Sidecar<'_> {
    /// The entry count, refused when the body could not hold that many entries of at least
    /// `min_entry_bytes` each: a decoder allocates nothing for a count the file cannot back.
    pub fn entry_count(&self, min_entry_bytes: usize) -> Result<usize, FileDecodeError> {
        usize::try_from(self.count)
            .ok()
            .filter(|n| *n <= self.body.len() / min_entry_bytes)
            .ok_or(FileDecodeError::EntryCount)
    }
}

/// Encodes a sidecar file.
pub fn encode(version: u8, count: u64, stamp: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len() + 8);
    out.push(version);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&stamp.to_le_bytes());
    out.extend_from_slice(body);
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes a sidecar file of the expected version; the error names what is wrong.
pub fn decode(bytes: &[u8], version: u8) -> Result<Sidecar<'_>, FileDecodeError> {
    if bytes.len() < HEADER + 8 {
        return Err(FileDecodeError::TooShort { len: bytes.len() });
    }
    let (signed, sum) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(signed).to_le_bytes() != sum {
        return Err(FileDecodeError::Checksum);
    }
    let mut r = Reader::new(signed);
    let v = r.u8().unwrap_or_default();
    if v != version {
        return Err(FileDecodeError::Version {
            found: v,
            expected: Some(version),
        });
    }
    let count = r.u64().unwrap_or_default();
    let stamp = r.u64().unwrap_or_default();
    Ok(Sidecar {
        count,
        stamp,
        body: &signed[HEADER..],
    })
}

/// Writes a sidecar file atomically.
pub fn write(path: &Path, version: u8, count: u64, stamp: u64, body: &[u8]) -> Result<()> {
    fsutil::atomic_write(path, &encode(version, count, stamp, body))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn round_trip_and_garbage(count in any::<u64>(), stamp in any::<u64>(), body in proptest::collection::vec(any::<u8>(), 0..64), junk in proptest::collection::vec(any::<u8>(), 0..64)) {
            let enc = encode(1, count, stamp, &body);
            prop_assert_eq!(decode(&enc, 1), Ok(Sidecar { count, stamp, body: &body }));
            prop_assert!(decode(&enc, 2).is_err());
            let _ = decode(&junk, 1);
        }
    }
}
