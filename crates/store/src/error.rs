//! The store's error type.

use std::path::PathBuf;

use crate::meta_refusal::MetaRefusal;
pub use crate::proto::ApiError;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A JetStream-coded rejection (status + code + description), e.g. 400/10071.
    #[error("{0}")]
    Api(ApiError),
    /// A stream name that could escape the data directory or is otherwise unusable.
    #[error("invalid stream name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An invalid stream configuration.
    #[error("invalid stream configuration: {0}")]
    InvalidConfig(String),
    /// An invalid subject or filter.
    #[error("{0}")]
    InvalidSubject(String),
    /// The stream does not exist (any more).
    #[error("stream {0:?} not found")]
    StreamNotFound(String),
    /// The stream was closed (or deleted), or a failed write could not be undone; reopen the
    /// store.
    #[error("stream {0:?} is closed")]
    Closed(String),
    /// Writing the stream's block files failed — the disk is full, a quota is exhausted, or
    /// another I/O error. Nothing of the request was stored and the stream stays open: a later
    /// request is tried again (see [`StoreError::is_storage_full`]).
    #[error("writing {path} failed: {source}")]
    WriteFailed {
        /// The file being written or synced.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An fsync of the stream's block files failed. The kernel may have dropped the data it
    /// could not write and will not report it again (the "fsyncgate" lesson), so nothing of the
    /// batch was acknowledged and the stream accepts no more writes until the process restarts
    /// and recovers what the disk holds (see [`StoreError::Fenced`]).
    #[error(
        "syncing {path} failed: {source}; the stream accepts no writes until sluice restarts and recovers what the disk holds"
    )]
    SyncFailed {
        /// The file being synced.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A write refused because an fsync of the stream's files failed earlier (the stream's
    /// reads go on): restart to recover what the disk holds.
    #[error("stream {stream:?} accepts no writes since {cause}")]
    Fenced {
        /// The stream.
        stream: String,
        /// The failed fsync, as [`StoreError::SyncFailed`] described it.
        cause: String,
    },
    /// Another store (in this or another process) has the data directory open.
    #[error("data directory {0} is in use by another sluice store")]
    Locked(PathBuf),
    /// A stored record failed verification when read.
    #[error("corrupt record for sequence {seq} in {path}")]
    Corrupt {
        /// The sequence being read.
        seq: u64,
        /// The file holding it.
        path: PathBuf,
    },
    /// Positions before the next match cannot be delivered (damaged records, or an
    /// unconfirmed run after a crash); a reader resumes after `lost.last`.
    #[error("stream {stream:?}: sequences {}..={} cannot be delivered ({:?})", lost.first, lost.last, lost.cause)]
    Lost {
        /// The stream.
        stream: String,
        /// The positions.
        lost: crate::Lost,
    },
    /// The stream's directory is on disk but no metadata file of it verifies: it is not loaded,
    /// and cannot be created again over its files.
    #[error(transparent)]
    Refused(#[from] MetaRefusal),
    /// A stream would be created where a directory this store did not load already is.
    #[error(
        "stream {name:?}: {} exists but holds no stream this store loaded; it is left in place — run `sluice stream repair {name}`, or move it away",
        dir.display()
    )]
    DirectoryInUse {
        /// The stream.
        name: String,
        /// Its directory.
        dir: PathBuf,
    },
    /// `sluice stream repair` found no verified configuration and was given none.
    #[error(
        "stream {0:?}: no verified copy of its configuration survives; give the configuration that declares it (`sluice stream repair {0} --config <file>`)"
    )]
    RepairNeedsConfig(String),
    /// An I/O failure, with the path it concerned.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The JetStream API error, if this is a coded rejection.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) => Some(e),
            _ => None,
        }
    }

    /// Whether this is an I/O error for want of space: a full disk (`ENOSPC`) or an exhausted
    /// quota (`EDQUOT`).
    pub fn is_storage_full(&self) -> bool {
        let (Self::WriteFailed { source, .. }
        | Self::SyncFailed { source, .. }
        | Self::Io { source, .. }) = self
        else {
            return false;
        };
        matches!(
            source.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    }

    pub(crate) fn write_failed(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::WriteFailed { path, source }
    }

    /// An I/O error met on the write path as a [`StoreError::WriteFailed`]; others unchanged.
    pub(crate) fn into_write_failure(self) -> Self {
        match self {
            Self::Io { path, source } => Self::WriteFailed { path, source },
            other => other,
        }
    }

    /// This error as the failure of a write batch, copied for each request the batch failed: the
    /// OS error code is kept, so [`StoreError::is_storage_full`] holds for every copy. (A batch
    /// fails only on writing or syncing a file; anything else is copied as its message.)
    pub(crate) fn copy_as_write_failure(&self) -> Self {
        match self {
            Self::WriteFailed { path, source } | Self::Io { path, source } => Self::WriteFailed {
                path: path.clone(),
                source: copy_io_error(source),
            },
            Self::SyncFailed { path, source } => Self::SyncFailed {
                path: path.clone(),
                source: copy_io_error(source),
            },
            other => Self::WriteFailed {
                path: PathBuf::new(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

/// A copy of an I/O error with its OS error code (or its kind and message when it has none).
pub(crate) fn copy_io_error(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

impl From<ApiError> for StoreError {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

/// Short for `Result<T, StoreError>`.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
