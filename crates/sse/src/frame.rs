//! One Server-Sent Events frame.

/// One event block of a Server-Sent Events stream: the lines up to a blank line.
///
/// Every field is optional. The parser fills a field only when the block contained it:
/// `data` lines are joined with `\n`, comment lines likewise; `id` is the last valid `id` line
/// of the block (see [`Parser::last_event_id`](crate::Parser::last_event_id) for the id a
/// browser would report, which persists across blocks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// The `id:` field: the position a client resumes from with `Last-Event-ID`.
    pub id: Option<String>,
    /// The `event:` field: the event type; none (or empty) means the default `message` type.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`. A browser dispatches an event only when it is present.
    pub data: Option<String>,
    /// The `retry:` field: the reconnection delay in milliseconds the client should use.
    pub retry: Option<u64>,
    /// Comment lines (`: text`) joined with `\n`; clients ignore them (used for heartbeats).
    pub comment: Option<String>,
}

impl Frame {
    /// A frame carrying `data` with the default event type.
    pub fn data(data: impl Into<String>) -> Self {
        Self {
            data: Some(data.into()),
            ..Self::default()
        }
    }

    /// A comment-only frame, e.g. a heartbeat that keeps proxies from closing an idle stream.
    pub fn comment(text: impl Into<String>) -> Self {
        Self {
            comment: Some(text.into()),
            ..Self::default()
        }
    }

    /// A frame that only tells the client its reconnection delay in milliseconds.
    pub fn retry(millis: u64) -> Self {
        Self {
            retry: Some(millis),
            ..Self::default()
        }
    }

    /// Sets the `id` field.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets the `event` field (the event type).
    pub fn with_event(mut self, event: impl Into<String>) -> Self {
        self.event = Some(event.into());
        self
    }

    /// Sets the `data` field.
    pub fn with_data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// Sets the `retry` field (milliseconds).
    pub fn with_retry(mut self, millis: u64) -> Self {
        self.retry = Some(millis);
        self
    }

    /// Sets the comment.
    pub fn with_comment(mut self, text: impl Into<String>) -> Self {
        self.comment = Some(text.into());
        self
    }

    /// The frame's fields, borrowed.
    pub fn view(&self) -> FrameRef<'_> {
        FrameRef {
            id: self.id.as_deref(),
            event: self.event.as_deref(),
            data: self.data.as_deref(),
            retry: self.retry,
            comment: self.comment.as_deref(),
        }
    }

    /// Whether a browser's `EventSource` would dispatch this frame as an event (it has data).
    pub fn dispatches_event(&self) -> bool {
        self.view().dispatches_event()
    }

    /// The event type a browser would dispatch this frame as: the `event` field, or `message`.
    pub fn event_type(&self) -> &str {
        self.view().event_type()
    }

    /// Whether no field is set; such a frame encodes to nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A [`Frame`] whose text fields are borrowed, e.g. from the parser's buffers (see
/// [`Parser::feed_with`](crate::Parser::feed_with)); the fields mean what they mean in
/// [`Frame`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The `id:` field.
    pub id: Option<&'a str>,
    /// The `event:` field.
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `\n`.
    pub data: Option<&'a str>,
    /// The `retry:` field in milliseconds.
    pub retry: Option<u64>,
    /// Comment lines joined with `\n`.
    pub comment: Option<&'a str>,
}

impl<'a> FrameRef<'a> {
    /// Whether a browser's `EventSource` would dispatch this frame as an event (it has data).
    pub fn dispatches_event(&self) -> bool {
        self.data.is_some()
    }

    /// The event type a browser would dispatch this frame as: the `event` field, or `message`.
    pub fn event_type(&self) -> &'a str {
        match self.event {
            Some(event) if !event.is_empty() => event,
            _ => "message",
        }
    }
}

impl From<FrameRef<'_>> for Frame {
    fn from(frame: FrameRef<'_>) -> Self {
        Self {
            id: frame.id.map(str::to_owned),
            event: frame.event.map(str::to_owned),
            data: frame.data.map(str::to_owned),
            retry: frame.retry,
            comment: frame.comment.map(str::to_owned),
        }
    }
}
