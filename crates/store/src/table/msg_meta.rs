//! What the table keeps of one live message.

use std::sync::Arc;

use crate::block::Loc;

/// One live message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgMeta {
    /// Its subject (shared with the subject index).
    pub subject: Arc<str>,
    /// Store time, ns since the epoch.
    pub ts: i64,
    /// Where its record lives.
    pub loc: Loc,
    /// Record flags.
    pub flags: u8,
}
