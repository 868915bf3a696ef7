//! Public value types: acks, messages, purge requests, stream info, recovery reports.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use bytes::Bytes;

use crate::config::StreamConfig;
use crate::proto::Headers;

/// The acknowledgement of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubAck {
    /// The sequence stored at (the original one for a duplicate).
    pub seq: u64,
    /// True when the message was a duplicate within the dedupe window and not stored again.
    pub duplicate: bool,
}

/// A message read from a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Stream sequence.
    pub seq: u64,
    /// Subject.
    pub subject: String,
    /// When the stream stored it.
    pub time: jiff::Timestamp,
    /// Headers (empty when none).
    pub headers: Headers,
    /// Body.
    pub payload: Bytes,
}

/// What a subscription yields, in sequence order.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// A stored message.
    Message(StoredMessage),
    /// Positions the stream cannot deliver (see [`crate::LossCause`]).
    Lost(crate::Lost),
    /// Positions whose messages of the reader's subjects were removed (a delete, a purge of
    /// those subjects, the per-subject limit) before it read them.
    Removed(crate::Removed),
}

impl Delivery {
    /// The message, if this is one.
    pub fn message(self) -> Option<StoredMessage> {
        match self {
            Self::Message(m) => Some(m),
            Self::Lost(_) | Self::Removed(_) => None,
        }
    }

    /// The last position this delivery accounts for: a reader goes on after it.
    pub fn last_seq(&self) -> u64 {
        match self {
            Self::Message(m) => m.seq,
            Self::Lost(lost) => lost.last,
            Self::Removed(removed) => removed.last,
        }
    }
}

/// What a purge removes. All fields empty = every message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Only messages whose subject matches this filter.
    pub filter: Option<String>,
    /// Keep this many of the newest (matching) messages.
    pub keep: Option<u64>,
    /// Remove only (matching) messages with a sequence below this one.
    pub up_to_seq: Option<u64>,
}

/// Where a stream's retained messages begin, and in which incarnation
/// ([`StreamHandle::retained_from`](crate::StreamHandle::retained_from)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The first retained sequence; the last + 1 when the stream holds no messages.
    pub first_seq: u64,
    /// Positions below this one were removed by a limit or a purge: a reader that asked for
    /// them is told they expired. Those from here to `first_seq` went by their own TTL (not a
    /// loss), or by a delete, a purge of some subjects or the per-subject limit (told to the
    /// readers of their subjects as [`Delivery::Removed`]). At most `first_seq`.
    pub expired_below: u64,
    /// The stream's incarnation (changes when it is deleted and created again).
    pub incarnation: u64,
}

/// A stream's state at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    /// Live messages.
    pub msgs: u64,
    /// Bytes of live messages (encoded records).
    pub bytes: u64,
    /// First live sequence; `last_seq + 1` when empty.
    pub first_seq: u64,
    /// Positions below this one were removed by a limit or a purge (readers asking for them
    /// are told they expired); those from here to `first_seq` went by their own TTL, or were
    /// removed with their subjects known (told as [`Delivery::Removed`]). At most `first_seq`.
    /// Not part of JetStream's state.
    pub expired_below: u64,
    /// Time of the first live message.
    pub first_time: Option<jiff::Timestamp>,
    /// Last sequence ever assigned (0 = none).
    pub last_seq: u64,
    /// Time of the last stored message.
    pub last_time: Option<jiff::Timestamp>,
    /// Deleted sequences between first and last.
    pub num_deleted: u64,
    /// Distinct subjects with live messages.
    pub num_subjects: u64,
    /// Message schedules in force. Not part of JetStream's state.
    pub num_schedules: u64,
    /// Per-subject live counts, when asked for.
    pub subjects: Option<BTreeMap<String, u64>>,
    /// What the stream knows it lost (JetStream's `lost`).
    pub lost: LostState,
}

/// The positions a stream knows it cannot deliver: damaged records found by recovery or by
/// reading a block, and unconfirmed positions after a crash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostState {
    /// Damaged messages (found so far: a block's damage is found when it is read).
    pub msgs: u64,
    /// Bytes of damaged records recovery stepped over or cut.
    pub bytes: u64,
    /// The damaged positions, as inclusive ranges, ascending.
    pub damaged: Vec<(u64, u64)>,
    /// The unconfirmed positions, as inclusive ranges, ascending.
    pub unconfirmed: Vec<(u64, u64)>,
}

/// Write-path counters, to observe group commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Batches written (one write call each).
    pub batches: u64,
    /// fsync calls on block files.
    pub fsyncs: u64,
    /// Messages stored.
    pub msgs_stored: u64,
}

/// How a stream's writes are going: what `/readyz` and the metrics of the hub report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteHealth {
    /// While writes of messages to the block files fail (a full disk, say): the latest error.
    /// `None` again once a write succeeds.
    pub failing: Option<String>,
    /// Failed writes of message batches since open (each batch counts once, however many
    /// requests it answered).
    pub write_errors: u64,
    /// Failed writes of index.db or a sidecar since open.
    pub snapshot_errors: u64,
}

/// Everything known about a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamInfo {
    /// Its configuration.
    pub config: StreamConfig,
    /// When it was created.
    pub created: jiff::Timestamp,
    /// Identity of this incarnation: differs for a deleted and recreated stream of the same name.
    pub incarnation: u64,
    /// Current state.
    pub state: StreamState,
    /// Write-path counters since open.
    pub stats: WriteStats,
}

/// How a stream's state was recovered on open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryPath {
    /// From `msgs/index.db`, checked against the blocks, plus a scan of anything newer.
    Index,
    /// By reading and verifying every block record.
    Rebuild,
}

/// How a sidecar file's state was recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SidecarRecovery {
    /// No file: the state was rebuilt by the forward scan from the start.
    #[default]
    Missing,
    /// The file covered every stored message.
    Current,
    /// The file was older than the last message: the scan brought it up to date from its stamp.
    Stale,
    /// The file was corrupt or of an unknown version: deleted, state rebuilt by the scan.
    Rejected,
}

/// A block file cut at a bad record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// The block file.
    pub path: PathBuf,
    /// Offset of the first bad byte (for a cut tail, the new file length).
    pub offset: u64,
    /// Bytes cut, or stepped over.
    pub bytes_dropped: u64,
}

/// What recovery found and did for one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The stream.
    pub stream: String,
    /// How its state was rebuilt.
    pub path: RecoveryPath,
    /// Block tails cut because no valid record followed their first bad one; the cut bytes
    /// are kept in `<block>.damaged-<ns>`.
    pub truncated: Vec<Truncation>,
    /// Damaged byte ranges inside blocks that recovery stepped over (left in place).
    pub damaged: Vec<Truncation>,
    /// Sequences that existed (by the evidence that survived) but are gone: in a region that was
    /// cut, or in a block that lost its end. A torn record at the tail after a crash appears here
    /// too, even though it was never acknowledged. These sequences are never reused.
    pub lost: Vec<RangeInclusive<u64>>,
    /// Positions between the last intact record and the sequence lease after a crash or a cut
    /// tail: handed out and lost, or never used. The last sequence is raised past them.
    pub unconfirmed: Option<RangeInclusive<u64>>,
    /// Blocks read by the per-message (TTL, schedule, source) recovery scan; blocks whose
    /// counters show nothing to recover, or that lie below the sidecar stamps, are skipped.
    pub per_message_blocks_scanned: u64,
    /// How the source index (`sources.db`) was recovered.
    pub sources: SidecarRecovery,
    /// Other problems found and handled (a bad index or sidecar file, …).
    pub warnings: Vec<String>,
}

impl RecoveryReport {
    /// A report of nothing found yet for `stream`.
    pub(crate) fn new(stream: String) -> Self {
        Self {
            stream,
            path: RecoveryPath::Rebuild,
            truncated: vec![],
            damaged: vec![],
            lost: vec![],
            unconfirmed: None,
            per_message_blocks_scanned: 0,
            sources: SidecarRecovery::default(),
            warnings: vec![],
        }
    }

    /// Logs a problem found and handled, and records it.
    pub(crate) fn warn(&mut self, msg: String) {
        tracing::warn!(stream = %self.stream, "{msg}");
        self.warnings.push(msg);
    }

    /// True when nothing was lost or repaired.
    pub fn is_clean(&self) -> bool {
        self.truncated.is_empty()
            && self.damaged.is_empty()
            && self.lost.is_empty()
            && self.unconfirmed.is_none()
            && self.warnings.is_empty()
    }
}

/// How a source's starting position was found when its sourcing task started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceResume {
    /// From the source index (`sources.db` plus the recovery scan), without reading messages.
    Index,
    /// From a backward scan of stored sourced messages (the index did not know the source,
    /// e.g. only pre-2.10 `<origin> <seq>` headers name it).
    BackwardScan,
    /// No recorded position: the source's `opt_start_seq`.
    OptStartSeq,
    /// No recorded position: the first origin message at or after `opt_start_time`.
    OptStartTime,
    /// No recorded position and the sourcing stream was purged: the first origin message at
    /// or after the sourcing stream's last message time.
    AfterLastTime,
    /// No recorded position: the origin's first message.
    Start,
}

/// What one source of a stream is doing (see [`crate::StreamHandle::source_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source's index name (`<origin> <filter or '>'> <dest or '>'>`).
    pub index_name: String,
    /// The origin stream.
    pub origin: String,
    /// How the starting position was found (after an origin reset: the start rule applied then).
    pub resume: SourceResume,
    /// The recorded origin sequence the task resumed after (0 = none).
    pub resumed_after: u64,
    /// Sourced messages the stream's resume backward scan read (0: no scan ran; one scan
    /// serves every unresolved source of the stream, so they all show its count).
    pub backward_scanned: u64,
    /// The last origin sequence handled (stored, deduplicated or dropped).
    pub last_origin_seq: u64,
    /// The origin is not there (yet, or any more): the task waits for a stream of that name.
    pub waiting_for_origin: bool,
    /// Messages stored since the task started.
    pub sourced: u64,
    /// Messages the sourcing stream's dedupe window recognised as duplicates (not stored).
    pub duplicates: u64,
    /// Messages the sourcing stream rejected (limits, sizes, sealed); each is logged.
    pub dropped: u64,
    /// Times the origin turned out to be a new incarnation and the position was reset.
    pub resets: u64,
}
