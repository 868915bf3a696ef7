//! The Server-Sent Events wire format, as the WHATWG HTML standard defines it
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html>).
//!
//! - [`Frame`] is one event block: `id`, `event`, `data`, `retry` and a comment.
//!   [`Frame::encode`] never produces bytes that break framing: multi-line `data` and comments
//!   are split into several lines (CR, LF and CRLF all count as line breaks), and an `id` or
//!   `event` that contains CR, LF or NUL is **rejected** with an [`EncodeError`] naming the field
//!   and the value (it is never silently rewritten).
//! - [`Parser`] is strict and incremental: feed it bytes as they arrive and it returns the
//!   complete frames ([`Parser::feed_with`] lends them instead, without allocating). It accepts CR, LF and CRLF line endings, a leading byte order mark,
//!   comments, `retry`, and fields without a colon. Line and frame sizes are bounded by
//!   [`Limits`], so a hostile server cannot make it allocate without bound.
//!
//! Pure code: no I/O, no async.

mod builder;
mod encode;
mod frame;
mod parse;

pub use encode::EncodeError;
pub use frame::{Frame, FrameRef};
pub use parse::{Limits, ParseError, Parser};
