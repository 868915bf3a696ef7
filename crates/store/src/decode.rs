//! Why one of the store's own files — `index.db`, the sidecars (`thw.db`, `sched.db`,
//! `sources.db`, `lost.db`) and `lease.db` — did not decode. Recovery sets such a file aside
//! or rebuilds what it held, and says why in its report; every variant names what is wrong
//! and none carries the file's bytes.

/// The highest last sequence a stream file may name (2^63 − 1). Recovery refuses a record,
/// marker, lease or index.db above it: the store never wrote one (2^63 messages at a billion
/// a second take 292 years), and from one near `u64::MAX` the next sequence, or the lease
/// raised past it, would overflow.
pub const MAX_SEQ: u64 = i64::MAX as u64;

/// What is wrong with a file of the store's own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileDecodeError {
    /// Shorter than its fixed parts.
    #[error("too short ({len} bytes)")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// Its checksum does not match its bytes.
    #[error("checksum mismatch")]
    Checksum,
    /// It does not start with its file kind's magic bytes.
    #[error("bad magic")]
    BadMagic,
    /// A version this store does not read.
    #[error("unknown version {found}{}", expected.map(|v| format!(" (expected {v})")).unwrap_or_default())]
    Version {
        /// The version it says.
        found: u8,
        /// The one expected, where a single one is.
        expected: Option<u8>,
    },
    /// A part that does not parse.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// An entry count larger than the file could hold.
    #[error("entry count exceeds the file")]
    EntryCount,
    /// Bytes after the last part.
    #[error("trailing bytes")]
    Trailing,
    /// Entries where the file kind has none.
    #[error("unexpected entries")]
    UnexpectedEntries,
    /// A sequence past the highest one a stream may hand out (`MAX_SEQ`), which would leave no
    /// next one.
    #[error("{what} {seq} is past the highest sequence")]
    PastHighestSequence {
        /// What holds it (`last sequence`, `bound`, `lost run`).
        what: &'static str,
        /// The sequence.
        seq: u64,
    },
    /// A block whose description contradicts the others or itself.
    #[error("block {block} {problem}")]
    Block {
        /// The block's id.
        block: u32,
        /// What is wrong.
        problem: BlockProblem,
    },
    /// Positions recorded as expired that reach past the first message.
    #[error("expired positions up to {expired} reach past the first message, {first}")]
    ExpiredPastFirst {
        /// Where the expired positions end.
        expired: u64,
        /// The first message's sequence.
        first: u64,
    },
    /// A subject described twice.
    #[error("subject {subject:?} listed twice")]
    SubjectTwice {
        /// The subject.
        subject: String,
    },
    /// The subjects' message counts do not add up to the blocks'.
    #[error("subjects hold {subjects} messages, blocks {blocks}")]
    CountsDisagree {
        /// Messages the subjects count.
        subjects: u64,
        /// Messages the blocks count.
        blocks: u64,
    },
    /// A kind of loss this store does not know.
    #[error("unknown loss kind {0}")]
    LossKind(u8),
    /// A message the file names could not be read from its block.
    #[error("reading a message it names: {0}")]
    Read(String),
}

/// What is wrong with a block's description in `index.db`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BlockProblem {
    /// Its id is not above the previous block's.
    #[error("out of order")]
    OutOfOrder,
    /// It holds sequences past the stream's last.
    #[error("goes past the last sequence")]
    PastLastSequence,
    /// Its sequences overlap an earlier block's.
    #[error("overlaps an earlier one")]
    Overlaps,
    /// Its counters contradict its sequence range.
    #[error("counters contradict its sequences")]
    CountsContradict,
}
