//! SSE frames: every frame the encoder accepts parses back, through the strict parser, to the
//! same frame (with line breaks in `data` and the comment normalised to `\n`), and the encoder
//! rejects exactly the `id`/`event` values containing CR, LF or NUL.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use sluice_sse::{Frame, Parser};

fn frame(u: &mut Unstructured<'_>) -> Result<Frame> {
    Ok(Frame {
        id: u.arbitrary()?,
        event: u.arbitrary()?,
        data: u.arbitrary()?,
        retry: u.arbitrary()?,
        comment: u.arbitrary()?,
    })
}

/// What a parser gives back for multi-line text: CRLF, CR and LF all become `\n`.
fn normalised(text: &Option<String>) -> Option<String> {
    text.as_ref()
        .map(|t| t.replace("\r\n", "\n").replace('\r', "\n"))
}

fn single_line(value: &Option<String>) -> bool {
    value
        .as_ref()
        .is_none_or(|v| !v.contains(['\r', '\n', '\0']))
}

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = frame(&mut Unstructured::new(data)) else {
        return;
    };
    let encodable = single_line(&frame.id) && single_line(&frame.event);
    let Ok(bytes) = frame.encode() else {
        assert!(!encodable, "rejected an encodable frame: {frame:?}");
        return;
    };
    assert!(
        encodable,
        "accepted a frame with a multi-line id or event: {frame:?}"
    );
    let frames = Parser::new()
        .feed(&bytes)
        .expect("an encoded frame is within the default limits");
    if frame.is_empty() {
        assert!(bytes.is_empty() && frames.is_empty());
        return;
    }
    let expected = Frame {
        data: normalised(&frame.data),
        comment: normalised(&frame.comment),
        ..frame
    };
    assert_eq!(frames, vec![expected]);
});
