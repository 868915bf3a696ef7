//! What `/metrics` reports of each stream, read from the backend at every scrape.

/// One stream's counts and positions at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStats {
    /// The stream's name.
    pub name: String,
    /// Whether this is the stream the hub serves.
    pub served: bool,
    /// Messages it holds.
    pub messages: u64,
    /// Bytes of the messages it holds, as the backend counts them.
    pub bytes: u64,
    /// First retained sequence; `last_seq + 1` when it holds no messages.
    pub first_seq: u64,
    /// Last sequence ever assigned; 0 when nothing was ever stored.
    pub last_seq: u64,
    /// Messages the backend knows it lost (damaged or missing records).
    pub lost_messages: u64,
}
