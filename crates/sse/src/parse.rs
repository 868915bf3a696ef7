//! A strict, bounded, incremental Server-Sent Events parser.

use crate::builder::FrameBuilder;
use crate::{Frame, FrameRef};

/// Size limits that bound the parser's memory no matter what the server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest accepted line in bytes, without its line break.
    pub max_line_bytes: usize,
    /// Largest accepted frame in bytes: the sum of its lines, without line breaks.
    pub max_frame_bytes: usize,
}

impl Default for Limits {
    /// 1 MiB lines, 4 MiB frames.
    fn default() -> Self {
        Self {
            max_line_bytes: 1 << 20,
            max_frame_bytes: 4 << 20,
        }
    }
}

/// Why the parser stopped. After an error the parser keeps returning it: the stream is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A line grew past [`Limits::max_line_bytes`] before its line break arrived.
    #[error("SSE line longer than the limit of {limit} bytes")]
    LineTooLong {
        /// The limit in force.
        limit: usize,
    },
    /// A frame grew past [`Limits::max_frame_bytes`] before its blank line arrived.
    #[error("SSE frame larger than the limit of {limit} bytes")]
    FrameTooLarge {
        /// The limit in force.
        limit: usize,
    },
}

/// Incremental parser for a `text/event-stream` body, following the WHATWG event stream
/// interpretation rules:
///
/// - lines end at CRLF, LF or CR (a CRLF split across two [`Parser::feed`] calls counts once);
/// - one leading UTF-8 byte order mark is skipped; text is decoded as UTF-8 with replacement;
/// - `field: value` loses exactly one space after the colon; a line without a colon is a field
///   with an empty value; lines starting with `:` are comments;
/// - `id` containing NUL is ignored; `retry` that is not all ASCII digits is ignored; unknown
///   fields are ignored;
/// - a blank line ends the frame. A frame is returned when it contained at least one field
///   that took effect or a comment; frames without `data` are returned too (a browser would not
///   dispatch them, see [`Frame::dispatches_event`]).
#[derive(Debug, Default)]
pub struct Parser {
    limits: Limits,
    /// The start of a line whose line break has not arrived yet.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF starting the next chunk belongs to it.
    after_cr: bool,
    /// No line has been completed yet, so the current line may start with a byte order mark.
    first_line: bool,
    frame: FrameBuilder,
    failed: Option<ParseError>,
}

const BOM: &[u8] = "\u{feff}".as_bytes();

impl Parser {
    /// A parser with the default [`Limits`].
    pub fn new() -> Self {
        Self::with_limits(Limits::default())
    }

    /// A parser with the given limits.
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits,
            first_line: true,
            ..Self::default()
        }
    }

    /// Feeds the next bytes of the stream and returns the frames they completed, in order.
    ///
    /// Frames completed before a limit is hit are never lost: when the bytes complete some
    /// frames and then exceed a limit, this call returns those frames and the parser is failed
    /// (see [`Parser::error`]), so the next call returns the error.
    ///
    /// # Errors
    /// A [`ParseError`] when a line or frame exceeds its limit and no frame completed before
    /// it in this call; every later call returns it too.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, ParseError> {
        let mut frames = Vec::new();
        match self.feed_with(bytes, |frame| frames.push(frame.into())) {
            Err(err) if frames.is_empty() => Err(err),
            _ => Ok(frames),
        }
    }

    /// Feeds the next bytes of the stream and hands each frame they complete to `on_frame`, in
    /// order, borrowed from the parser's buffers: the same frames as [`Parser::feed`] without
    /// allocating for them, for clients that look at a frame once.
    ///
    /// # Errors
    /// A [`ParseError`] when a line or frame exceeds its limit (the frames completed before it
    /// were handed out already), or when the parser failed before; every later call returns it
    /// too.
    pub fn feed_with(
        &mut self,
        mut bytes: &[u8],
        mut on_frame: impl FnMut(FrameRef<'_>),
    ) -> Result<(), ParseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while !bytes.is_empty() {
            let Some(end) = memchr::memchr2(b'\r', b'\n', bytes) else {
                self.check_line(bytes.len())?;
                self.line.extend_from_slice(bytes);
                break;
            };
            self.complete_line(&bytes[..end], &mut on_frame)?;
            let mut consumed = end + 1;
            if bytes[end] == b'\r' {
                match bytes.get(end + 1) {
                    Some(b'\n') => consumed += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            bytes = &bytes[consumed..];
        }
        Ok(())
    }

    /// The error that failed the parser, if a limit was exceeded. A caller that reaches the end
    /// of the stream checks it, since the error may have come with the last frames.
    pub fn error(&self) -> Option<&ParseError> {
        self.failed.as_ref()
    }

    /// The id a browser would report as `lastEventId`: the value of the last valid `id` field
    /// seen in any frame so far (it persists across frames; an empty `id` resets it).
    pub fn last_event_id(&self) -> &str {
        &self.frame.last_event_id
    }

    /// Whether bytes of an unfinished frame are buffered; at the end of the stream such a
    /// frame is discarded, as browsers do. A failed parser stopped inside the frame that broke
    /// a limit, so it always has one.
    pub fn has_partial_frame(&self) -> bool {
        self.failed.is_some() || !self.line.is_empty() || self.frame.bytes > 0
    }

    /// Fails the parser when the buffered line plus `more` bytes would break the line limit.
    fn check_line(&mut self, more: usize) -> Result<(), ParseError> {
        if self.line.len() + more > self.limits.max_line_bytes {
            return Err(self.fail(ParseError::LineTooLong {
                limit: self.limits.max_line_bytes,
            }));
        }
        Ok(())
    }

    /// A line break arrived after `tail`: the line is the buffered start plus `tail`. A line
    /// that arrived whole is read where it lies, without copying.
    fn complete_line(
        &mut self,
        tail: &[u8],
        on_frame: &mut impl FnMut(FrameRef<'_>),
    ) -> Result<(), ParseError> {
        self.check_line(tail.len())?;
        if self.line.is_empty() {
            return self.apply_line(tail, on_frame);
        }
        let mut line = std::mem::take(&mut self.line);
        line.extend_from_slice(tail);
        self.apply_line(&line, on_frame)?;
        // Reuse the allocation for the next line that spans chunks.
        line.clear();
        self.line = line;
        Ok(())
    }

    fn apply_line(
        &mut self,
        mut line: &[u8],
        on_frame: &mut impl FnMut(FrameRef<'_>),
    ) -> Result<(), ParseError> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.frame.dispatch(on_frame);
            return Ok(());
        }
        self.frame.bytes += line.len();
        if self.frame.bytes > self.limits.max_frame_bytes {
            return Err(self.fail(ParseError::FrameTooLarge {
                limit: self.limits.max_frame_bytes,
            }));
        }
        // Valid UTF-8 is read in place; only invalid bytes cost a copy with replacements.
        match std::str::from_utf8(line) {
            Ok(text) => self.frame.field(text),
            Err(_) => self.frame.field(&String::from_utf8_lossy(line)),
        }
        Ok(())
    }

    fn fail(&mut self, err: ParseError) -> ParseError {
        self.line = Vec::new();
        self.frame.clear();
        self.failed = Some(err.clone());
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &str) -> Vec<Frame> {
        Parser::new().feed(input.as_bytes()).expect("within limits")
    }

    #[test]
    fn parses_all_fields() {
        let frames = parse(": hi\nretry: 250\nid: 3\nevent: tick\ndata: a\ndata: b\n\n");
        assert_eq!(
            frames,
            vec![Frame {
                id: Some("3".into()),
                event: Some("tick".into()),
                data: Some("a\nb".into()),
                retry: Some(250),
                comment: Some("hi".into()),
            }]
        );
    }

    #[test]
    fn accepts_cr_lf_and_crlf_line_breaks() {
        for input in [
            "data: x\n\n",
            "data: x\r\r",
            "data: x\r\n\r\n",
            "data: x\r\n\n",
        ] {
            assert_eq!(parse(input), vec![Frame::data("x")], "{input:?}");
        }
    }

    #[test]
    fn crlf_split_across_feeds_is_one_line_break() {
        let mut parser = Parser::new();
        assert!(parser.feed(b"data: x\r").unwrap().is_empty());
        assert!(parser.feed(b"\n").unwrap().is_empty());
        assert_eq!(parser.feed(b"\r\n").unwrap(), vec![Frame::data("x")]);
    }

    #[test]
    fn frames_split_byte_by_byte_parse_the_same() {
        let input = "\u{feff}id: 1\r\ndata: é\r\n\r\n:c\rdata\r\r";
        let mut parser = Parser::new();
        let frames: Vec<Frame> = input
            .as_bytes()
            .iter()
            .flat_map(|b| parser.feed(std::slice::from_ref(b)).unwrap())
            .collect();
        assert_eq!(frames, parse(input));
        assert_eq!(
            frames,
            vec![
                Frame::data("é").with_id("1"),
                Frame::data("").with_comment("c")
            ]
        );
    }

    #[test]
    fn invalid_utf8_becomes_one_replacement_character_per_maximal_bad_sequence() {
        let mut parser = Parser::new();
        let frames = parser
            .feed(b"id: 1\xff\ndata: a\x80\x80b\xe2\x82\ndata: \xf0\x9f\x98c\n\n")
            .unwrap();
        assert_eq!(
            frames,
            vec![Frame::data("a\u{fffd}\u{fffd}b\u{fffd}\n\u{fffd}c").with_id("1\u{fffd}")]
        );
        assert_eq!(parser.last_event_id(), "1\u{fffd}");
    }

    #[test]
    fn lent_frames_do_not_keep_fields_of_earlier_frames() {
        let mut parser = Parser::new();
        let mut frames = Vec::new();
        let wire = b"retry: 5\nid: 1\nevent: e\n: c\ndata: a\n\ndata: b\n\n";
        parser
            .feed_with(wire, |frame| frames.push(Frame::from(frame)))
            .unwrap();
        let first = Frame::data("a")
            .with_id("1")
            .with_event("e")
            .with_comment("c")
            .with_retry(5);
        assert_eq!(frames, vec![first, Frame::data("b")]);
        assert_eq!(parser.last_event_id(), "1");
    }

    #[test]
    fn feed_with_hands_out_frames_then_reports_the_limit() {
        let limits = Limits {
            max_line_bytes: 10,
            max_frame_bytes: 100,
        };
        let mut parser = Parser::with_limits(limits);
        let mut data = Vec::new();
        let result = parser.feed_with(b"data: a\n\ndata: 0123456789\n\n", |frame| {
            data.push(frame.data.map(str::to_owned));
        });
        let err = ParseError::LineTooLong { limit: 10 };
        assert_eq!(result, Err(err.clone()));
        assert_eq!(data, vec![Some("a".to_owned())]);
        assert_eq!(
            parser.feed_with(b"data: b\n\n", |_| panic!("failed")),
            Err(err)
        );
    }

    #[test]
    fn skips_one_leading_bom_only() {
        assert_eq!(parse("\u{feff}data: x\n\n"), vec![Frame::data("x")]);
        // A second BOM is part of the field name, which is then unknown.
        assert!(parse("\u{feff}\u{feff}data: x\n\n").is_empty());
        assert!(parse("data: x\n\n\u{feff}data: y\n\n").len() == 1);
    }

    #[test]
    fn field_without_colon_has_empty_value() {
        assert_eq!(parse("data\ndata\n\n"), vec![Frame::data("\n")]);
        assert_eq!(
            parse("event\ndata: x\n\n"),
            vec![Frame::data("x").with_event("")]
        );
    }

    #[test]
    fn strips_exactly_one_space_after_colon() {
        assert_eq!(parse("data:x\n\n"), vec![Frame::data("x")]);
        assert_eq!(parse("data:  x\n\n"), vec![Frame::data(" x")]);
    }

    #[test]
    fn ignores_invalid_retry_nul_ids_and_unknown_fields() {
        assert!(parse("retry: 12a\nretry: -1\nretry:\nfoo: bar\nid: a\0b\n\n").is_empty());
        assert!(parse("retry: 99999999999999999999999\n\n").is_empty());
        assert_eq!(parse("retry: 10\n\n"), vec![Frame::retry(10)]);
    }

    #[test]
    fn last_event_id_persists_across_frames_and_resets_on_empty_id() {
        let mut parser = Parser::new();
        parser.feed(b"id: 5\ndata: a\n\ndata: b\n\n").unwrap();
        assert_eq!(parser.last_event_id(), "5");
        parser.feed(b"id\ndata: c\n\n").unwrap();
        assert_eq!(parser.last_event_id(), "");
    }

    #[test]
    fn reports_unfinished_frame() {
        let mut parser = Parser::new();
        parser.feed(b"data: x\n").unwrap();
        assert!(parser.has_partial_frame());
        parser.feed(b"\n").unwrap();
        assert!(!parser.has_partial_frame());
    }

    #[test]
    fn rejects_overlong_line_and_stays_failed() {
        let limits = Limits {
            max_line_bytes: 8,
            max_frame_bytes: 100,
        };
        let mut parser = Parser::with_limits(limits);
        assert!(parser.feed(b"data: 12").is_ok());
        let err = parser.feed(b"3").unwrap_err();
        assert_eq!(err, ParseError::LineTooLong { limit: 8 });
        assert_eq!(parser.feed(b"\n\n").unwrap_err(), err);
    }

    #[test]
    fn rejects_overlarge_frame() {
        let limits = Limits {
            max_line_bytes: 100,
            max_frame_bytes: 16,
        };
        let mut parser = Parser::with_limits(limits);
        let err = parser.feed(b"data: 12345\ndata: 67890\n").unwrap_err();
        assert_eq!(err, ParseError::FrameTooLarge { limit: 16 });
        // The budget is per frame: many small frames are fine.
        let mut parser = Parser::with_limits(limits);
        let frames = parser.feed(&b"data: 12345\n\n".repeat(10)).unwrap();
        assert_eq!(frames.len(), 10);
    }

    #[test]
    fn frames_completed_before_a_limit_error_come_first_then_the_error() {
        let limits = Limits {
            max_line_bytes: 10,
            max_frame_bytes: 100,
        };
        let mut parser = Parser::with_limits(limits);
        assert_eq!(parser.error(), None);
        let frames = parser.feed(b"data: a\n\ndata: b\n\ndata: 0123456789\n\n");
        assert_eq!(frames, Ok(vec![Frame::data("a"), Frame::data("b")]));
        let err = ParseError::LineTooLong { limit: 10 };
        assert_eq!(parser.error(), Some(&err));
        assert!(
            parser.has_partial_frame(),
            "the stream stopped inside a frame"
        );
        assert_eq!(parser.feed(b""), Err(err.clone()));
        assert_eq!(parser.feed(b"data: c\n\n"), Err(err));
    }

    #[test]
    fn frame_limit_error_after_completed_frames_also_comes_second() {
        let limits = Limits {
            max_line_bytes: 100,
            max_frame_bytes: 8,
        };
        let mut parser = Parser::with_limits(limits);
        let frames = parser.feed(b"data: a\n\ndata: b\ndata: c\n");
        assert_eq!(frames, Ok(vec![Frame::data("a")]));
        let err = ParseError::FrameTooLarge { limit: 8 };
        assert_eq!(parser.feed(b"\n"), Err(err.clone()));
        assert_eq!(parser.error(), Some(&err));
    }
}
