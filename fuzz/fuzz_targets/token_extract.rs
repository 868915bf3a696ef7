//! Token extraction: `extract_token` never panics on any headers and query string; what it
//! finds is a non-empty piece of the place it names, an `Authorization` header always decides
//! alone, and a header token is a well-formed token68; and, the other way, every token68 sent
//! as `Bearer <token>` (scheme in any case) is found as is.
//!
//! Input: byte 0 turns on the cookie (bit 0) and the query parameter (bit 1); the rest is
//! `\n`-separated lines, `A<value>` an `Authorization` header, `C<value>` a `Cookie` header,
//! `Q<text>` the query string (the last one wins); other lines are ignored.
#![no_main]

use axum::http::{HeaderMap, HeaderValue, header};
use libfuzzer_sys::fuzz_target;
use sluice_server::auth::{TokenPlaces, TokenSource, extract_token};

fn is_token68(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// Valid ⇒ accepted: `rest` mapped onto the token68 alphabet, sent as a bearer token.
fn check_valid_bearer(flags: u8, rest: &[u8]) {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/";
    let mut token: String = rest
        .iter()
        .take(64)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    if token.is_empty() {
        return;
    }
    token.push_str(&"=".repeat(usize::from(flags >> 6)));
    let scheme = if flags & 4 == 4 { "bEaReR" } else { "Bearer" };
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("{scheme} {token}")).expect("ASCII");
    headers.insert(header::AUTHORIZATION, value);
    let found = extract_token(&headers, None, TokenPlaces::default())
        .expect("a well-formed bearer token is accepted")
        .expect("and found");
    assert_eq!(
        (found.token, found.source),
        (token.as_str(), TokenSource::Header)
    );
}

fuzz_target!(|data: &[u8]| {
    let [flags, rest @ ..] = data else {
        return;
    };
    check_valid_bearer(*flags, rest);
    let mut headers = HeaderMap::new();
    let mut query = None;
    for line in rest.split(|&b| b == b'\n') {
        match line.split_first() {
            Some((b'A', value)) => {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    headers.append(header::AUTHORIZATION, value);
                }
            }
            Some((b'C', value)) => {
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    headers.append(header::COOKIE, value);
                }
            }
            Some((b'Q', text)) => query = std::str::from_utf8(text).ok(),
            _ => {}
        }
    }
    let places = TokenPlaces {
        cookie_name: (flags & 1 == 1).then_some("token"),
        query_param: (flags & 2 == 2).then_some("access_token"),
    };
    let authorization = headers.get_all(header::AUTHORIZATION).iter().count();
    let Ok(found) = extract_token(&headers, query, places) else {
        return;
    };
    let Some(found) = found else {
        assert_eq!(authorization, 0, "an Authorization header was ignored");
        return;
    };
    assert!(!found.token.is_empty());
    match found.source {
        TokenSource::Header => {
            assert_eq!(authorization, 1);
            assert!(is_token68(found.token), "{:?}", found.token);
            let value = headers[header::AUTHORIZATION].as_bytes();
            assert!(
                value
                    .windows(found.token.len())
                    .any(|w| w == found.token.as_bytes())
            );
        }
        TokenSource::Cookie => {
            assert_eq!(authorization, 0);
            assert!(places.cookie_name.is_some());
            assert!(headers.get_all(header::COOKIE).iter().any(|v| {
                v.as_bytes()
                    .windows(found.token.len())
                    .any(|w| w == found.token.as_bytes())
            }));
        }
        TokenSource::Query => {
            assert_eq!(authorization, 0);
            assert!(places.query_param.is_some());
            let query = query.expect("found in the query");
            assert!(query.contains(&format!("access_token={}", found.token)));
        }
    }
});
