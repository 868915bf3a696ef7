//! Property tests: encoding round-trips through the parser, the parser survives any input, and
//! the frames it lends are the frames it returns.

use proptest::prelude::*;
use sluice_sse::{Frame, Limits, Parser};

/// Text with plenty of line breaks, spaces, colons and non-ASCII characters.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('\r'),
            Just('\n'),
            Just(' '),
            Just(':'),
            Just('\0'),
            Just('\u{feff}'),
            any::<char>(),
        ],
        0..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// Text that is a valid `id` or `event` value.
fn single_line() -> impl Strategy<Value = String> {
    text().prop_map(|text| text.replace(['\r', '\n', '\0'], "_"))
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        prop::option::of(single_line()),
        prop::option::of(single_line()),
        prop::option::of(text()),
        prop::option::of(any::<u64>()),
        prop::option::of(text()),
    )
        .prop_map(|(id, event, data, retry, comment)| Frame {
            id,
            event,
            data,
            retry,
            comment,
        })
}

/// What the parser gives back for `frame`: line breaks in data and comments become `\n`.
fn normalised(frame: &Frame) -> Frame {
    let lines = |text: &String| text.replace("\r\n", "\n").replace('\r', "\n");
    Frame {
        id: frame.id.clone(),
        event: frame.event.clone(),
        data: frame.data.as_ref().map(lines),
        retry: frame.retry,
        comment: frame.comment.as_ref().map(lines),
    }
}

/// Bytes that look like an event stream: field names, colons, line breaks and bytes that are
/// not UTF-8 (a lone continuation byte, a truncated sequence, a byte order mark).
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data".to_vec()),
        Just(b"id".to_vec()),
        Just(b"event".to_vec()),
        Just(b"retry: 7".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(vec![0x80]),
        Just(vec![0xe2, 0x82]),
        Just("\u{feff}".as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..4),
    ];
    prop::collection::vec(piece, 0..48).prop_map(|pieces| pieces.concat())
}

/// How the frames are taken from the parser.
#[derive(Clone, Copy)]
enum Take {
    /// [`Parser::feed`]: owned frames.
    Owned,
    /// [`Parser::feed_with`]: lent frames, made owned.
    Lent,
}

/// Feeds `pieces` in order: every frame returned, and the error that stopped the parser, if any.
fn feed_all<'a>(
    limits: Limits,
    pieces: impl Iterator<Item = &'a [u8]>,
    take: Take,
) -> (Vec<Frame>, Option<sluice_sse::ParseError>) {
    let mut parser = Parser::with_limits(limits);
    let mut frames = Vec::new();
    for piece in pieces {
        let fed = match take {
            Take::Owned => parser.feed(piece).map(|more| frames.extend(more)),
            Take::Lent => parser.feed_with(piece, |frame| frames.push(frame.into())),
        };
        if let Err(err) = fed {
            return (frames, Some(err));
        }
    }
    (frames, parser.error().cloned())
}

/// `wire` cut at `cuts`.
fn pieces<'a>(wire: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(wire.len() + 1)).collect();
    cuts.push(wire.len());
    cuts.sort_unstable();
    cuts.iter()
        .scan(0, |from, &to| Some(&wire[std::mem::replace(from, to)..to]))
        .collect()
}

proptest! {
    #[test]
    fn lent_frames_are_the_frames_feed_returns(
        wire in stream_bytes(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        max_line_bytes in 1..48usize,
        max_frame_bytes in 1..96usize,
    ) {
        let limits = Limits { max_line_bytes, max_frame_bytes };
        let pieces = pieces(&wire, &cuts);
        prop_assert_eq!(
            feed_all(limits, pieces.iter().copied(), Take::Lent),
            feed_all(limits, pieces.iter().copied(), Take::Owned)
        );
    }

    #[test]
    fn encoded_frames_parse_back(frames in prop::collection::vec(frame(), 0..8), split in any::<prop::sample::Index>()) {
        let mut wire = Vec::new();
        for frame in &frames {
            wire.extend_from_slice(&frame.encode().expect("valid id and event"));
        }
        // Feeding in two arbitrary pieces must not matter.
        let at = split.index(wire.len() + 1);
        let mut parser = Parser::new();
        let mut parsed = parser.feed(&wire[..at]).expect("within limits");
        parsed.extend(parser.feed(&wire[at..]).expect("within limits"));
        let expected: Vec<Frame> = frames.iter().filter(|f| !f.is_empty()).map(normalised).collect();
        prop_assert_eq!(parsed, expected);
        prop_assert!(!parser.has_partial_frame());
    }

    #[test]
    fn id_and_event_with_line_breaks_are_rejected(value in text()) {
        let breaks = value.contains(['\r', '\n', '\0']);
        prop_assert_eq!(Frame::data("x").with_id(value.clone()).encode().is_err(), breaks);
        prop_assert_eq!(Frame::data("x").with_event(value).encode().is_err(), breaks);
    }

    #[test]
    fn chunking_never_changes_the_frames_or_the_error(
        frames in prop::collection::vec(frame(), 0..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        max_line_bytes in 1..48usize,
        max_frame_bytes in 1..96usize,
    ) {
        let mut wire = Vec::new();
        for frame in &frames {
            wire.extend_from_slice(&frame.encode().expect("valid id and event"));
        }
        let limits = Limits { max_line_bytes, max_frame_bytes };
        let pieces = pieces(&wire, &cuts);
        // Frames that completed before a limit error are returned whatever the chunking.
        prop_assert_eq!(
            feed_all(limits, pieces.iter().copied(), Take::Owned),
            feed_all(limits, std::iter::once(&wire[..]), Take::Owned)
        );
    }

    #[test]
    fn parser_never_panics_and_stays_bounded(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16)) {
        let limits = Limits { max_line_bytes: 32, max_frame_bytes: 64 };
        let mut parser = Parser::with_limits(limits);
        for chunk in &chunks {
            match parser.feed(chunk) {
                Ok(frames) => for frame in frames {
                    let size = [&frame.id, &frame.event, &frame.data, &frame.comment]
                        .into_iter().flatten().map(String::len).sum::<usize>();
                    // Replacement characters may grow invalid UTF-8 up to 3x.
                    prop_assert!(size <= 3 * limits.max_frame_bytes);
                },
                Err(_) => break,
            }
        }
    }
}
