//! A stream's metadata files:
//!
//! - `meta.inf`: the configuration, creation time and incarnation as JSON;
//! - `meta.sum`: hex xxh3-64 of meta.inf, seeded by a hash of the stream name;
//! - `meta.bak`: the second copy — the same checksum line, `\n`, then meta.inf's bytes.
//!
//! Opening trusts meta.inf when meta.sum verifies it, else the copy when its checksum line
//! verifies it, and restores the damaged one from the other. When neither verifies the stream
//! is refused ([`MetaRefusal`]) and no file is touched: only `sluice stream repair` rewrites the
//! metadata of such a stream ([`repair`]).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::config::StreamConfig;
use crate::error::{Result, StoreError};
use crate::fsutil;
use crate::meta_refusal::{MetaDefect, MetaProblem, MetaRefusal};
use crate::time::{now_ns, timestamp};

/// The primary metadata file.
pub const META_INF: &str = "meta.inf";
/// The checksum of [`META_INF`].
pub const META_SUM: &str = "meta.sum";
/// The verified second copy of [`META_INF`] with its own checksum.
pub const META_BAK: &str = "meta.bak";

/// What `meta.inf` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The configuration.
    pub config: StreamConfig,
    /// Creation time.
    pub created: jiff::Timestamp,
    /// Incarnation identity.
    pub incarnation: u64,
}

/// The metadata a stream opens with, and what opening did to its files.
#[derive(Debug)]
pub struct Opened {
    /// The verified metadata.
    pub meta: Meta,
    /// A damaged or missing file restored, or a restore that failed, one line each.
    pub warnings: Vec<String>,
}

/// One of the two files a verified [`Meta`] can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaFile {
    /// `meta.inf`, verified by `meta.sum`.
    Inf,
    /// `meta.bak`, verified by its checksum line.
    Bak,
}

impl fmt::Display for MetaFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Inf => META_INF,
            Self::Bak => META_BAK,
        })
    }
}

/// What `sluice stream repair` wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaRepair {
    /// The stream.
    pub stream: String,
    /// The incarnation it has now.
    pub incarnation: u64,
    /// The verified file the incarnation and creation time were kept from; `None` when none
    /// verified and a new incarnation was picked.
    pub kept_from: Option<MetaFile>,
    /// True when the configuration is the declared one given to the repair, false when it was
    /// kept from [`MetaRepair::kept_from`].
    pub declared_config: bool,
}

/// Hex xxh3-64 of `bytes`, seeded by a hash of the stream name: the text of `meta.sum` and of
/// the checksum line of `meta.bak`.
pub fn checksum(name: &str, bytes: &[u8]) -> String {
    format!(
        "{:016x}",
        xxh3_64_with_seed(bytes, xxh3_64(name.as_bytes()))
    )
}

/// The bytes of `meta.bak` holding `json` (the bytes of `meta.inf`).
pub fn encode_copy(name: &str, json: &[u8]) -> Vec<u8> {
    let mut out = checksum(name, json).into_bytes();
    out.push(b'\n');
    out.extend_from_slice(json);
    out
}

/// Verifies `meta.inf` bytes against `meta.sum` bytes and decodes them. Never panics.
pub fn decode_primary(name: &str, inf: &[u8], sum: &[u8]) -> Result<Meta, MetaDefect> {
    if sum.trim_ascii() != checksum(name, inf).as_bytes() {
        return Err(MetaDefect::ChecksumMismatch(META_SUM));
    }
    parse(name, inf)
}

/// Verifies `meta.bak` bytes against their checksum line and decodes them; returns the
/// metadata and the meta.inf bytes the copy holds. Never panics.
pub fn decode_copy<'a>(name: &str, bak: &'a [u8]) -> Result<(Meta, &'a [u8]), MetaDefect> {
    let end = bak
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(MetaDefect::NoChecksumLine)?;
    let (sum, json) = (&bak[..end], &bak[end + 1..]);
    if sum != checksum(name, json).as_bytes() {
        return Err(MetaDefect::ChecksumMismatch("its checksum line"));
    }
    Ok((parse(name, json)?, json))
}

/// Decodes verified metadata JSON and checks it is of stream `name`.
fn parse(name: &str, json: &[u8]) -> Result<Meta, MetaDefect> {
    let meta: Meta =
        serde_json::from_slice(json).map_err(|e| MetaDefect::NotMeta(e.to_string()))?;
    if meta.config.name != name {
        return Err(MetaDefect::WrongStream(meta.config.name));
    }
    Ok(meta)
}

/// Writes meta.inf, meta.sum and meta.bak, each atomically, in that order.
pub fn write(
    dir: &Path,
    config: &StreamConfig,
    created: jiff::Timestamp,
    incarnation: u64,
) -> Result<()> {
    let meta = Meta {
        config: config.clone(),
        created,
        incarnation,
    };
    let json =
        serde_json::to_vec_pretty(&meta).map_err(|e| StoreError::InvalidConfig(e.to_string()))?;
    write_primary(dir, &config.name, &json)?;
    write_copy(dir, &config.name, &json)
}

/// Writes meta.inf holding `json` and meta.sum, each atomically.
fn write_primary(dir: &Path, name: &str, json: &[u8]) -> Result<()> {
    fsutil::atomic_write(&dir.join(META_INF), json)?;
    fsutil::atomic_write(&dir.join(META_SUM), checksum(name, json).as_bytes())
}

/// Writes meta.bak holding `json`, atomically.
fn write_copy(dir: &Path, name: &str, json: &[u8]) -> Result<()> {
    fsutil::atomic_write(&dir.join(META_BAK), &encode_copy(name, json))
}

/// The bytes of a metadata file, or why it has none.
fn read_file(path: &Path) -> Result<Vec<u8>, MetaProblem> {
    std::fs::read(path).map_err(|e| MetaProblem {
        file: path.to_path_buf(),
        defect: match e.kind() {
            std::io::ErrorKind::NotFound => MetaDefect::Missing,
            _ => MetaDefect::Unreadable(e.to_string()),
        },
    })
}

/// meta.inf verified by meta.sum, with its bytes.
fn read_primary(dir: &Path, name: &str) -> Result<(Meta, Vec<u8>), MetaProblem> {
    let inf_path = dir.join(META_INF);
    let inf = read_file(&inf_path)?;
    let sum = read_file(&dir.join(META_SUM))?;
    let meta = decode_primary(name, &inf, &sum).map_err(|defect| MetaProblem {
        file: inf_path,
        defect,
    })?;
    Ok((meta, inf))
}

/// meta.bak verified by its checksum line, with the meta.inf bytes it holds.
fn read_copy(dir: &Path, name: &str) -> Result<(Meta, Vec<u8>), MetaProblem> {
    let path = dir.join(META_BAK);
    let bak = read_file(&path)?;
    let (meta, json) =
        decode_copy(name, &bak).map_err(|defect| MetaProblem { file: path, defect })?;
    Ok((meta, json.to_vec()))
}

/// The metadata stream `name` opens with from the files in `dir`: meta.inf when it verifies
/// (meta.bak rewritten from it when missing, damaged or older), else meta.bak (meta.inf and
/// meta.sum restored from it). Refused, touching nothing, when neither verifies. A restore that
/// fails is a warning: the verified metadata is still used.
pub fn open(dir: &Path, name: &str) -> Result<Opened, MetaRefusal> {
    match (read_primary(dir, name), read_copy(dir, name)) {
        (Ok((meta, json)), copy) => {
            let warnings = refresh_copy(dir, name, &json, copy).into_iter().collect();
            Ok(Opened { meta, warnings })
        }
        (Err(problem), Ok((meta, json))) => {
            let warning = restore_primary(dir, name, &json, &meta, &problem);
            Ok(Opened {
                meta,
                warnings: vec![warning],
            })
        }
        (Err(primary), Err(copy)) => Err(MetaRefusal {
            stream: name.to_owned(),
            problems: vec![primary, copy],
        }),
    }
}

/// Brings meta.bak in line with the verified meta.inf bytes `json`; a warning when the copy
/// was damaged or different, or could not be written. A missing copy (a stream written before
/// meta.bak existed) is written without one.
fn refresh_copy(
    dir: &Path,
    name: &str,
    json: &[u8],
    copy: Result<(Meta, Vec<u8>), MetaProblem>,
) -> Option<String> {
    let bak = dir.join(META_BAK);
    let found = match copy {
        Ok((_, copied)) if copied == json => return None,
        Ok(_) => format!("{} held older metadata than {META_INF}", bak.display()),
        Err(problem) if problem.defect == MetaDefect::Missing => String::new(),
        Err(problem) => problem.to_string(),
    };
    match (write_copy(dir, name, json), found.is_empty()) {
        (Ok(()), true) => None,
        (Ok(()), false) => Some(format!("{found}; rewritten from {META_INF}")),
        (Err(e), true) => Some(format!("cannot write {}: {e}", bak.display())),
        (Err(e), false) => Some(format!("{found}; rewriting it failed: {e}")),
    }
}

/// Restores meta.inf and meta.sum from the verified copy `json`; the warning saying what was
/// wrong and what was done.
fn restore_primary(
    dir: &Path,
    name: &str,
    json: &[u8],
    meta: &Meta,
    problem: &MetaProblem,
) -> String {
    let opened = format!(
        "{problem}; opened from {} (incarnation {:x})",
        dir.join(META_BAK).display(),
        meta.incarnation
    );
    match write_primary(dir, name, json) {
        Ok(()) => format!("{opened}, and {META_INF} and {META_SUM} restored from it"),
        Err(e) => format!("{opened}, but restoring {META_INF} and {META_SUM} failed: {e}"),
    }
}

/// The verified metadata in `dir` (meta.inf first, then meta.bak) and the file it came from.
fn read_verified(dir: &Path, name: &str) -> Option<(Meta, MetaFile)> {
    read_primary(dir, name)
        .map(|(meta, _)| (meta, MetaFile::Inf))
        .or_else(|_| read_copy(dir, name).map(|(meta, _)| (meta, MetaFile::Bak)))
        .ok()
}

/// Rewrites all three metadata files of stream `name` in `dir`, touching no other file. The
/// configuration is `declared` when given, else the one of a verified meta.inf or meta.bak;
/// the creation time and incarnation are kept from a verified file, else a new incarnation is
/// picked (so ids of the old one are seen as another incarnation's, never as this one's).
pub fn repair(dir: &Path, name: &str, declared: Option<StreamConfig>) -> Result<MetaRepair> {
    let verified = read_verified(dir, name);
    let declared_config = declared.is_some();
    let config = match (declared, &verified) {
        (Some(config), _) => config,
        (None, Some((meta, _))) => meta.config.clone(),
        (None, None) => return Err(StoreError::RepairNeedsConfig(name.to_owned())),
    };
    if config.name != name {
        return Err(StoreError::InvalidConfig(format!(
            "repairing stream {name:?} with the configuration of stream {:?}",
            config.name
        )));
    }
    config.validate()?;
    let (created, incarnation, kept_from) = match verified {
        Some((meta, file)) => (meta.created, meta.incarnation, Some(file)),
        None => {
            let created = timestamp(now_ns());
            (created, new_incarnation(name, created), None)
        }
    };
    write(dir, &config, created, incarnation)?;
    Ok(MetaRepair {
        stream: name.to_owned(),
        incarnation,
        kept_from,
        declared_config,
    })
}

/// A fresh incarnation identity: a hash of the creation time, the name and process entropy.
pub fn new_incarnation(name: &str, created: jiff::Timestamp) -> u64 {
    let entropy = std::collections::hash_map::RandomState::new();
    let salt = std::hash::BuildHasher::hash_one(&entropy, (name, created.as_nanosecond()));
    xxh3_64_with_seed(name.as_bytes(), salt ^ created.as_nanosecond() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn json(name: &str) -> Vec<u8> {
        let meta = Meta {
            config: StreamConfig::new(name, ["a"]),
            created: jiff::Timestamp::UNIX_EPOCH,
            incarnation: 7,
        };
        serde_json::to_vec_pretty(&meta).unwrap()
    }

    #[test]
    fn a_copy_decodes_to_the_bytes_it_was_made_from() {
        let json = json("S");
        let bak = encode_copy("S", &json);
        let (meta, inner) = decode_copy("S", &bak).unwrap();
        assert_eq!((meta.incarnation, inner), (7, &json[..]));
    }

    #[test]
    fn a_copy_of_another_stream_is_refused_by_its_seeded_checksum() {
        let json = json("S");
        let bak = encode_copy("S", &json);
        assert_eq!(
            decode_copy("T", &bak).unwrap_err(),
            MetaDefect::ChecksumMismatch("its checksum line")
        );
    }

    #[test]
    fn a_checksum_line_alone_is_not_metadata() {
        let bak = encode_copy("S", b"");
        assert!(matches!(
            decode_copy("S", &bak),
            Err(MetaDefect::NotMeta(_))
        ));
        assert_eq!(
            decode_copy("S", b"no line break"),
            Err(MetaDefect::NoChecksumLine)
        );
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(inf in any::<Vec<u8>>(), sum in any::<Vec<u8>>()) {
            let _ = decode_primary("S", &inf, &sum);
            let _ = decode_copy("S", &inf);
        }

        #[test]
        fn one_flipped_bit_anywhere_in_a_copy_is_refused(at in any::<usize>(), bit in 0u8..8) {
            let mut bak = encode_copy("S", &json("S"));
            let at = at % bak.len();
            bak[at] ^= 1 << bit;
            prop_assert!(decode_copy("S", &bak).is_err());
        }
    }
}
