//! `meta.inf` (the stream's configuration, creation time and incarnation as JSON) and
//! `meta.sum` (hex xxh3-64 of meta.inf, seeded by a hash of the stream name).

use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::config::StreamConfig;
use crate::error::{Result, StoreError};
use crate::fsutil;

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

fn checksum(name: &str, bytes: &[u8]) -> String {
    format!(
        "{:016x}",
        xxh3_64_with_seed(bytes, xxh3_64(name.as_bytes()))
    )
}

/// Writes meta.inf then meta.sum, each atomically.
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
    fsutil::atomic_write(&dir.join("meta.inf"), &json)?;
    fsutil::atomic_write(
        &dir.join("meta.sum"),
        checksum(&config.name, &json).as_bytes(),
    )
}

/// Reads and verifies the meta files of the stream `name`.
pub fn read(dir: &Path, name: &str) -> Result<Meta> {
    let inf = dir.join("meta.inf");
    let json = std::fs::read(&inf).map_err(StoreError::io(&inf))?;
    let sum_path = dir.join("meta.sum");
    let sum = std::fs::read(&sum_path).map_err(StoreError::io(&sum_path))?;
    if sum.trim_ascii() != checksum(name, &json).as_bytes() {
        return Err(StoreError::InvalidConfig(format!(
            "{} does not match {}",
            inf.display(),
            sum_path.display()
        )));
    }
    let meta: Meta = serde_json::from_slice(&json)
        .map_err(|e| StoreError::InvalidConfig(format!("{}: {e}", inf.display())))?;
    if meta.config.name != name {
        return Err(StoreError::InvalidConfig(format!(
            "{} names stream {:?}",
            inf.display(),
            meta.config.name
        )));
    }
    Ok(meta)
}

/// A fresh incarnation identity: a hash of the creation time, the name and process entropy.
pub fn new_incarnation(name: &str, created: jiff::Timestamp) -> u64 {
    let entropy = std::collections::hash_map::RandomState::new();
    let salt = std::hash::BuildHasher::hash_one(&entropy, (name, created.as_nanosecond()));
    xxh3_64_with_seed(name.as_bytes(), salt ^ created.as_nanosecond() as u64).max(1)
}
