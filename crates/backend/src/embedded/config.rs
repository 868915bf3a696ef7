//! The embedded store's part of the configuration (`[embedded]`), owned here and composed
//! into the hub's configuration.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_protocol::config_error::InvalidSetting;
use sluice_protocol::subject::validate_filter;

use sluice_protocol::config_duration;

/// The embedded store (`[embedded]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddedConfig {
    /// Directory holding the streams.
    pub data_dir: PathBuf,
    /// The stream the hub serves; it must be one of `streams`.
    pub stream: String,
    /// When writes are fsynced: `always` (an acknowledged publish is on disk), `never`
    /// (left to the OS), or a duration such as `1s` (at most that far apart).
    pub sync: String,
    /// How often a changed stream rewrites its snapshots (index.db, the sequence lease and the
    /// sidecars): shorter opens faster after a crash, longer writes less.
    #[serde(with = "config_duration")]
    pub snapshot_interval: Duration,
    /// Bytes of memory each stream's index may keep for the messages of the blocks it has
    /// read or written (about 120 bytes a message); past it, the least recently used blocks
    /// let go of theirs and are read again from their files on next need.
    pub index_memory: u64,
    /// Streams created (or updated) at start-up.
    pub streams: Vec<StreamDecl>,
}

/// The shortest and longest `snapshot_interval`.
const SNAPSHOT_INTERVAL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(3600);

/// A stream of the embedded store declared in the configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamDecl {
    /// The stream's name; it names its directory, so it must be a safe path component.
    pub name: String,
    /// Subject filters the stream captures.
    pub subjects: Vec<String>,
    /// Most messages kept; 0 means unlimited.
    #[serde(default)]
    pub max_msgs: u64,
    /// Most bytes kept; 0 means unlimited.
    #[serde(default)]
    pub max_bytes: u64,
    /// Oldest message kept; 0 means forever.
    #[serde(default, with = "config_duration")]
    pub max_age: Duration,
    /// Largest message accepted in bytes; 0 means unlimited.
    #[serde(default)]
    pub max_msg_size: u64,
    /// Most messages kept per subject; 0 means unlimited.
    #[serde(default)]
    pub max_msgs_per_subject: u64,
    /// Window in which a repeated `Nats-Msg-Id` is a duplicate.
    #[serde(default = "default_duplicate_window", with = "config_duration")]
    pub duplicate_window: Duration,
    /// Accept per-message TTLs (`Nats-TTL`, the `ttl` of `POST /publish`).
    #[serde(default = "yes")]
    pub allow_msg_ttl: bool,
    /// Accept message schedules (`Nats-Schedule` with `Nats-Schedule-Target`).
    #[serde(default)]
    pub allow_msg_schedules: bool,
    /// Most message schedules in force at once; a new one beyond it is refused. 0 means
    /// unlimited.
    #[serde(default = "default_max_msg_schedules")]
    pub max_msg_schedules: u64,
    /// When not zero, removing a subject's last message (by `max_age`, a purge of subjects or
    /// a delete) leaves a delete marker with this TTL (JetStream's `subject_delete_marker_ttl`);
    /// subscribers of the subject get it as a `deleted` event.
    #[serde(default, with = "config_duration")]
    pub subject_delete_marker_ttl: Duration,
    /// Declared streams this one copies messages from (`[[embedded.streams.sources]]`): `name`,
    /// and optionally `opt_start_seq`, `opt_start_time`, `filter_subject`,
    /// `subject_transforms = [{ src, dest }]`.
    #[serde(default)]
    pub sources: Vec<sluice_store::SourceConfig>,
}

fn yes() -> bool {
    true
}

/// The default bound on schedules in force: each may fire every second.
pub const DEFAULT_MAX_MSG_SCHEDULES: u64 = 1000;

fn default_max_msg_schedules() -> u64 {
    DEFAULT_MAX_MSG_SCHEDULES
}

fn default_duplicate_window() -> Duration {
    Duration::from_secs(120)
}

/// The name of the stream created when none is declared.
pub const DEFAULT_STREAM: &str = "sluice";

impl StreamDecl {
    /// The default stream: named [`DEFAULT_STREAM`], capturing every subject.
    pub fn default_stream() -> Self {
        Self {
            name: DEFAULT_STREAM.to_owned(),
            subjects: vec![">".to_owned()],
            max_msgs: 0,
            max_bytes: 0,
            max_age: Duration::ZERO,
            max_msg_size: 0,
            max_msgs_per_subject: 0,
            duplicate_window: default_duplicate_window(),
            allow_msg_ttl: true,
            allow_msg_schedules: false,
            max_msg_schedules: DEFAULT_MAX_MSG_SCHEDULES,
            subject_delete_marker_ttl: Duration::ZERO,
            sources: Vec::new(),
        }
    }
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./sluice-data"),
            stream: DEFAULT_STREAM.to_owned(),
            sync: "always".to_owned(),
            snapshot_interval: Duration::from_secs(30),
            index_memory: 64 << 20,
            streams: vec![StreamDecl::default_stream()],
        }
    }
}

impl EmbeddedConfig {
    /// Checks every value of the section and every stream declared in it. Whether the served
    /// stream is one of them is the hub's check: it depends on `backend`.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let embedded = self;
        if embedded.data_dir.as_os_str().is_empty() {
            return Err(InvalidSetting::new(
                "embedded.data_dir",
                "",
                "must not be empty",
            ));
        }
        if !matches!(embedded.sync.as_str(), "always" | "never") {
            let interval =
                sluice_protocol::config_duration::parse(&embedded.sync).map_err(|err| {
                    InvalidSetting::new(
                        "embedded.sync",
                        &embedded.sync,
                        format!("{err}; use always, never or a duration"),
                    )
                })?;
            if interval.is_zero() {
                return Err(InvalidSetting::new(
                    "embedded.sync",
                    &embedded.sync,
                    "an interval must be positive; use always or never",
                ));
            }
        }
        if !SNAPSHOT_INTERVAL_RANGE.contains(&embedded.snapshot_interval) {
            return Err(InvalidSetting::new(
                "embedded.snapshot_interval",
                format!("{:?}", embedded.snapshot_interval),
                "must be from 10ms to 1h",
            ));
        }
        if embedded.index_memory < 1 << 20 {
            return Err(InvalidSetting::new(
                "embedded.index_memory",
                embedded.index_memory,
                "must be at least 1048576 (1 MiB)",
            ));
        }
        let mut names = HashSet::new();
        for (index, stream) in embedded.streams.iter().enumerate() {
            stream_decl(&format!("embedded.streams[{index}]"), stream)?;
            if !names.insert(stream.name.as_str()) {
                return Err(InvalidSetting::new(
                    format!("embedded.streams[{index}].name"),
                    &stream.name,
                    "is declared twice",
                ));
            }
        }
        for (index, stream) in embedded.streams.iter().enumerate() {
            for (at, source) in stream.sources.iter().enumerate() {
                if !names.contains(source.name.as_str()) {
                    return Err(InvalidSetting::new(
                        format!("embedded.streams[{index}].sources[{at}].name"),
                        &source.name,
                        "is not one of the streams declared in `embedded.streams`",
                    ));
                }
            }
        }
        Ok(())
    }
}

fn stream_decl(key: &str, stream: &StreamDecl) -> Result<(), InvalidSetting> {
    stream_name(&format!("{key}.name"), &stream.name)?;
    if stream.subjects.is_empty() && stream.sources.is_empty() {
        return Err(InvalidSetting::new(
            format!("{key}.subjects"),
            "[]",
            "a stream needs at least one subject or one source",
        ));
    }
    for (index, source) in stream.sources.iter().enumerate() {
        source.validate(&stream.name).map_err(|err| {
            InvalidSetting::new(
                format!("{key}.sources[{index}]"),
                &source.name,
                err.to_string(),
            )
        })?;
    }
    if stream.max_msg_size > i32::MAX as u64 {
        return Err(InvalidSetting::new(
            format!("{key}.max_msg_size"),
            stream.max_msg_size,
            "must be below 2 GiB",
        ));
    }
    for (field, value) in [
        ("max_msgs", stream.max_msgs),
        ("max_bytes", stream.max_bytes),
        ("max_msgs_per_subject", stream.max_msgs_per_subject),
    ] {
        if value > i64::MAX as u64 {
            return Err(InvalidSetting::new(
                format!("{key}.{field}"),
                value,
                "is too large",
            ));
        }
    }
    for (index, subject) in stream.subjects.iter().enumerate() {
        validate_filter(subject).map_err(|err| {
            InvalidSetting::new(format!("{key}.subjects[{index}]"), subject, err.to_string())
        })?;
    }
    delete_markers(key, stream)
}

/// Subject delete markers, as JetStream takes them: a TTL of at least a second, on a stream
/// that allows per-message TTLs (a marker carries one).
fn delete_markers(key: &str, stream: &StreamDecl) -> Result<(), InvalidSetting> {
    let ttl = stream.subject_delete_marker_ttl;
    if ttl.is_zero() {
        return Ok(());
    }
    let field = format!("{key}.subject_delete_marker_ttl");
    if ttl < Duration::from_secs(1) {
        return Err(InvalidSetting::new(
            field,
            sluice_protocol::config_duration::format(ttl),
            "must be at least 1s, or 0 for no markers",
        ));
    }
    if !stream.allow_msg_ttl {
        return Err(InvalidSetting::new(
            field,
            sluice_protocol::config_duration::format(ttl),
            "delete markers carry a TTL: they need allow_msg_ttl = true",
        ));
    }
    Ok(())
}

/// Stream names become directory names: no path separators, dots, wildcards or whitespace.
fn stream_name(key: &str, name: &str) -> Result<(), InvalidSetting> {
    let bad = name.is_empty()
        || name.len() > 255
        || name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        });
    if bad {
        return Err(InvalidSetting::new(
            key,
            name,
            "a stream name is 1 to 255 characters without whitespace, `.`, `*`, `>`, `/` or `\\`",
        ));
    }
    Ok(())
}
