//! The source index: for each source of a sourcing stream (by index name
//! `<origin> <filter or '>'> <transform dest or '>'>`), the last origin sequence stored and the
//! origin's incarnation ident. Updated with every stored sourced message, persisted as
//! `sources.db` at the stream root (so a purge keeps it) in the shared sidecar form, and brought
//! up to date on open by the combined forward scan from its stamp.

use std::collections::BTreeMap;
use std::path::Path;

use crate::decode::FileDecodeError;
use crate::error::Result;
use crate::fsutil::{Reader, put_uvarint};
use crate::sidecar;

/// The file's name at the stream root.
pub const FILE: &str = "sources.db";
/// Version of sources.db.
pub const SOURCES_VERSION: u8 = 1;

/// Where a source stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// Last origin sequence stored (0 = none yet).
    pub seq: u64,
    /// The origin stream's incarnation ident when that message was sourced (may be empty).
    pub ident: String,
}

/// Source index name → position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceIndex {
    entries: BTreeMap<String, SourcePosition>,
}

/// Parses a `Nats-Stream-Source` value into (index name, origin seq, ident). Accepts the current
/// form `<name> <seq> <filter> <dest> <subject> [<ident>]` and the pre-2.10 form `<name> <seq>`.
pub fn parse_header(value: &str) -> Option<(String, u64, String)> {
    let t: Vec<&str> = value.split_whitespace().collect();
    match t.as_slice() {
        [name, seq] => Some((format!("{name} > >"), seq.parse().ok()?, String::new())),
        [name, seq, filter, dest, _subject, rest @ ..] if rest.len() <= 1 => {
            let ident = rest.first().map_or(String::new(), |s| s.to_string());
            Some((format!("{name} {filter} {dest}"), seq.parse().ok()?, ident))
        }
        _ => None,
    }
}

impl SourceIndex {
    /// Records a stored sourced message (positions only move forward within one ident).
    pub fn record(&mut self, iname: &str, seq: u64, ident: &str) {
        let pos = self
            .entries
            .entry(iname.to_string())
            .or_insert(SourcePosition {
                seq: 0,
                ident: ident.to_string(),
            });
        if pos.ident != ident || seq > pos.seq {
            *pos = SourcePosition {
                seq,
                ident: ident.to_string(),
            };
        }
    }

    /// All positions.
    pub fn positions(&self) -> &BTreeMap<String, SourcePosition> {
        &self.entries
    }

    /// Writes `sources.db` with `stamp` = last sequence + 1.
    pub fn write(&self, path: &Path, stamp: u64) -> Result<()> {
        let mut body = Vec::new();
        for (name, pos) in &self.entries {
            put_uvarint(&mut body, name.len() as u64);
            body.extend_from_slice(name.as_bytes());
            put_uvarint(&mut body, pos.seq);
            put_uvarint(&mut body, pos.ident.len() as u64);
            body.extend_from_slice(pos.ident.as_bytes());
        }
        sidecar::write(
            path,
            SOURCES_VERSION,
            self.entries.len() as u64,
            stamp,
            &body,
        )
    }

    /// Decodes entries of a verified sidecar; the count is capped by the bytes that remain
    /// (an entry takes at least 3 bytes), entries with sequence 0 are accepted.
    pub fn decode(s: &sidecar::Sidecar<'_>) -> Result<Self, FileDecodeError> {
        let mut r = Reader::new(s.body);
        let n = s.entry_count(3)?;
        let mut idx = Self::default();
        for _ in 0..n {
            let name = r.string().ok_or(FileDecodeError::Malformed("name"))?;
            let seq = r.uvarint().ok_or(FileDecodeError::Malformed("sequence"))?;
            let ident = r.string().ok_or(FileDecodeError::Malformed("ident"))?;
            idx.entries.insert(
                name.to_string(),
                SourcePosition {
                    seq,
                    ident: ident.to_string(),
                },
            );
        }
        if r.remaining() != 0 {
            return Err(FileDecodeError::Trailing);
        }
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn header_forms() {
        assert_eq!(
            parse_header("ORDERS 12 orders.* > orders.eu abc"),
            Some(("ORDERS orders.* >".into(), 12, "abc".into()))
        );
        assert_eq!(
            parse_header("ORDERS 12 > > x"),
            Some(("ORDERS > >".into(), 12, String::new()))
        );
        assert_eq!(
            parse_header("OLD 7"),
            Some(("OLD > >".into(), 7, String::new()))
        );
        assert_eq!(parse_header("bad"), None);
        assert_eq!(parse_header("X notanumber"), None);
    }

    proptest! {
        #[test]
        fn sources_db_round_trips_and_never_panics(
            entries in proptest::collection::btree_map("[a-z >.*]{1,20}", (any::<u64>(), "[a-f0-9]{0,16}"), 0..8),
            junk in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut idx = SourceIndex::default();
            for (name, (seq, ident)) in &entries {
                idx.entries.insert(name.clone(), SourcePosition { seq: *seq, ident: ident.clone() });
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sources.db");
            idx.write(&path, 42).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let s = sidecar::decode(&bytes, SOURCES_VERSION).unwrap();
            prop_assert_eq!(s.stamp, 42);
            prop_assert_eq!(SourceIndex::decode(&s).unwrap(), idx);
            // Arbitrary entry bytes under a valid header: an error or an index, never a panic.
            let forged = sidecar::encode(SOURCES_VERSION, u64::MAX, 1, &junk);
            let s = sidecar::decode(&forged, SOURCES_VERSION).unwrap();
            prop_assert!(SourceIndex::decode(&s).is_err());
            let s2 = sidecar::Sidecar { count: 3, stamp: 1, body: &junk };
            let _ = SourceIndex::decode(&s2);
        }
    }
}
