//! What is wrong with a stream's metadata files, and the refusal to load a stream when neither
//! of them verifies. Kept apart from [`crate::meta`], which reads and writes the files, so that
//! the store's error type can carry a refusal without depending on the file code.

use std::fmt;
use std::path::PathBuf;

/// What is wrong with one metadata file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaDefect {
    /// The file does not exist.
    #[error("is missing")]
    Missing,
    /// The file exists but reading it failed.
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// The bytes do not match the checksum that guards them.
    #[error("does not match {0}")]
    ChecksumMismatch(&'static str),
    /// `meta.bak` has no line break ending its checksum line.
    #[error("has no checksum line")]
    NoChecksumLine,
    /// The checksum verifies but the bytes are not stream metadata JSON.
    #[error("is not stream metadata: {0}")]
    NotMeta(String),
    /// The metadata is of another stream.
    #[error("names stream {0:?}")]
    WrongStream(String),
}

/// One metadata file and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProblem {
    /// The file.
    pub file: PathBuf,
    /// What is wrong with it.
    pub defect: MetaDefect,
}

impl fmt::Display for MetaProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.file.display(), self.defect)
    }
}

/// A stream left unloaded because neither meta.inf nor meta.bak verifies. Every file of the
/// stream is left as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "stream {stream:?} refused: no metadata file can be trusted ({}); its files are left in place — run `sluice stream repair {stream}`",
    problem_list(.problems)
)]
pub struct MetaRefusal {
    /// The stream.
    pub stream: String,
    /// What is wrong with each metadata file (the primary, then the copy).
    pub problems: Vec<MetaProblem>,
}

fn problem_list(problems: &[MetaProblem]) -> String {
    let texts: Vec<String> = problems.iter().map(MetaProblem::to_string).collect();
    texts.join("; ")
}
