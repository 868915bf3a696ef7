//! What is wrong with a configuration: one error type every part's validation answers with,
//! naming the key, the value and where it came from.

use std::path::PathBuf;

use sluice_backend::jetstream::JetStreamConfigError;
use sluice_protocol::config_error::InvalidSetting;

/// A configuration that cannot be used; the message names the key and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The configuration file that could not be read.
        path: PathBuf,
        /// What the operating system reported.
        reason: String,
    },
    /// The file is not valid TOML, or a value has the wrong type or an unknown key.
    #[error("{origin}: {message}")]
    Syntax {
        /// Where the value came from: the file's name, `environment variable SLUICE_…` or
        /// `flag --…`.
        origin: String,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A key has a value that is well-typed but not acceptable.
    #[error("invalid `{key}` = {value}: {reason}")]
    Invalid {
        /// The dotted key, e.g. `sse.heartbeat`.
        key: String,
        /// The offending value, quoted as written.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A value of the `[jetstream]` section is not acceptable.
    #[error(transparent)]
    JetStream(#[from] JetStreamConfigError),
    /// A value an environment variable or a flag set is not acceptable.
    #[error("{by}: {error}")]
    Given {
        /// `environment variable SLUICE_…` or `flag --…`.
        by: String,
        /// What is wrong with the value.
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    pub(crate) fn invalid(
        key: impl Into<String>,
        value: impl std::fmt::Debug,
        reason: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            key: key.into(),
            value: format!("{value:?}"),
            reason: reason.into(),
        }
    }
}

/// A section's own check names the key, the value and why, as [`ConfigError::Invalid`] does.
impl From<InvalidSetting> for ConfigError {
    fn from(err: InvalidSetting) -> Self {
        let InvalidSetting { key, value, reason } = err;
        Self::Invalid { key, value, reason }
    }
}
