//! The SSE parser: arbitrary bytes in arbitrary chunkings never panic, the chunking never
//! changes the result (the frames, or the error), `feed_with` lends the frames `feed` returns,
//! and nothing returned outgrows the limits.
//!
//! Input: byte 0 picks `max_line_bytes`, byte 1 `max_frame_bytes` (both 1..=256, small so the
//! limits are hit), byte 2 seeds the chunk sizes; the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sse::{Frame, Limits, ParseError, Parser};

/// Feeds `chunks` in order, collecting frames until the first error (which may come with the
/// last frames, then it is the parser's remembered error) — owned from `feed`, or lent by
/// `feed_with` and made owned when `lent`.
fn run<'a>(
    limits: Limits,
    chunks: impl Iterator<Item = &'a [u8]>,
    lent: bool,
) -> (Vec<Frame>, Option<ParseError>) {
    let mut parser = Parser::with_limits(limits);
    let mut frames = Vec::new();
    for chunk in chunks {
        let fed = if lent {
            parser.feed_with(chunk, |frame| frames.push(Frame::from(frame)))
        } else {
            parser.feed(chunk).map(|more| frames.extend(more))
        };
        if let Err(err) = fed {
            // A failed parser stays failed.
            assert_eq!(parser.feed(b"data: x\n\n"), Err(err.clone()));
            return (frames, Some(err));
        }
        // The remembered id comes from one line, so it is bounded by the line limit (a byte
        // may grow to a 3-byte replacement character when the line is not UTF-8).
        assert!(parser.last_event_id().len() <= 3 * limits.max_line_bytes);
    }
    let err = parser.error().cloned();
    if let Some(err) = &err {
        assert!(parser.has_partial_frame(), "failed without a partial frame");
        assert_eq!(parser.feed(b""), Err(err.clone()));
    }
    (frames, err)
}

fuzz_target!(|data: &[u8]| {
    let [line, frame, seed, stream @ ..] = data else {
        return;
    };
    let limits = Limits {
        max_line_bytes: usize::from(*line) + 1,
        max_frame_bytes: usize::from(*frame) + 1,
    };
    let whole = run(limits, std::iter::once(stream), false);
    // Chunk sizes cycle through 0..=7 starting at the seed, so empty chunks and a CRLF split
    // across two chunks both occur.
    let mut chunks = Vec::new();
    let (mut rest, mut size) = (stream, usize::from(*seed));
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at((size % 8).min(rest.len()));
        chunks.push(chunk);
        rest = tail;
        size += 1;
    }
    let chunked = run(limits, chunks.iter().copied(), false);
    // Lent frames are the frames `feed` returns.
    assert_eq!(
        run(limits, chunks.iter().copied(), true),
        chunked,
        "feed_with lent other frames"
    );
    // Frames completed before a limit error are handed out first, so the frames and the error
    // never depend on the chunking.
    assert_eq!(whole, chunked, "the chunking changed the result");
    for frame in &whole.0 {
        let text: usize = [&frame.id, &frame.event, &frame.data, &frame.comment]
            .into_iter()
            .flatten()
            .map(String::len)
            .sum();
        // Each field's text is at most its lines' bytes (a joining `\n` replaces a `data`
        // or `:` prefix), times 3 for replacement characters.
        assert!(
            text <= 3 * limits.max_frame_bytes,
            "{text} bytes in {frame:?} with {limits:?}"
        );
        assert!(!frame.is_empty(), "returned an empty frame");
    }
});
