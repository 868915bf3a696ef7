//! The first request head of a connection, both ways: `parse_head` never panics; an
//! accepted head is no longer than the input and the limit, and every shorter prefix of it is
//! incomplete (never an error, never another request); and a head built from valid parts (a
//! method token, an origin-form target, header lines) is accepted with exactly those parts.
//!
//! Input: a limit byte (× 64 bytes), a mode byte (odd: build a head from the rest), then the
//! raw head, or the parts of one separated by `\n`: method, target, then `name: value` lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_server::fuzzing::{HeadError, parse_head};

fuzz_target!(|data: &[u8]| {
    let [limit, mode, rest @ ..] = data else {
        return;
    };
    let max = usize::from(*limit).max(1) * 64;
    if mode & 1 == 1 {
        built_head_is_accepted(rest, max);
        return;
    }
    let Ok(Some(head)) = parse_head(rest, max) else {
        return;
    };
    assert!(head.head_len <= rest.len() && head.head_len <= max);
    for cut in [head.head_len / 2, head.head_len - 1] {
        assert!(
            matches!(parse_head(&rest[..cut], max), Ok(None)),
            "a prefix of an accepted head is not incomplete"
        );
    }
});

/// Valid ⇒ accepted: a head made of a token method, a `/`-target of visible ASCII and header
/// lines with token names and visible values parses back to the same parts.
fn built_head_is_accepted(rest: &[u8], max: usize) {
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let mut lines = text.split('\n');
    let (Some(method), Some(target)) = (lines.next(), lines.next()) else {
        return;
    };
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    // origin-form: "/" then RFC 3986 path and query characters (no '%', no '//' start).
    let uri_char = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?".contains(&b);
    if !token(method)
        || !target.starts_with('/')
        || target.starts_with("//")
        || !target.bytes().all(uri_char)
    {
        return;
    }
    let mut headers = Vec::new();
    for line in lines.take(16) {
        let Some((name, value)) = line.split_once(':') else {
            return;
        };
        let value = value.trim_matches(' ');
        if !token(name) || !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return;
        }
        headers.push((name, value));
    }
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (name, value) in &headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    match parse_head(head.as_bytes(), max) {
        Ok(Some(parsed)) => {
            assert_eq!(parsed.head_len, head.len());
            assert_eq!(parsed.request.method().as_str(), method);
            assert_eq!(parsed.request.uri().to_string(), *target);
            assert_eq!(parsed.request.headers().len(), headers.len());
            for (name, value) in &headers {
                assert!(
                    parsed
                        .request
                        .headers()
                        .get_all(*name)
                        .iter()
                        .any(|v| v == *value),
                    "header {name} lost"
                );
            }
        }
        Err(HeadError::TooLarge(_)) => assert!(head.len() > max),
        other => panic!("refused a valid head {head:?}: {other:?}"),
    }
}
