//! The embedded store's part of the configuration (`[embedded]`), owned here and composed
//! into the hub's configuration.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// Streams created (or updated) at start-up.
    pub streams: Vec<StreamDecl>,
}

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
    /// When not zero, removing a subject's last message by `max_age` leaves a delete marker
    /// with this TTL (JetStream's `subject_delete_marker_ttl`); markers reach no subscriber.
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
            streams: vec![StreamDecl::default_stream()],
        }
    }
}
