//! An update: what a publisher sends and a subscriber receives.

/// One update, as published and as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The topics, never empty: the first is canonical, the others alternates; the update
    /// reaches subscribers of any of them.
    pub topics: Vec<String>,
    /// The content, exactly as published (any number of lines, possibly empty).
    pub data: String,
    /// Whether only subscribers authorized for one of the topics may receive it.
    pub private: bool,
    /// The publisher's own id; `None` when the hub makes one from the stream position
    /// (see [`crate::mapping::LastEventId`]).
    pub id: Option<String>,
    /// The SSE event type (`event:`); `None` for the default (`message`).
    pub event_type: Option<String>,
    /// The reconnection delay in milliseconds the event carries (`retry:`).
    pub retry: Option<u64>,
}

impl Update {
    /// The topics as string slices, for [`crate::SelectorSet::matches_any`].
    pub fn topic_refs(&self) -> Vec<&str> {
        self.topics.iter().map(String::as_str).collect()
    }
}
