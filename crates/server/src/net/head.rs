//! Reading a connection's first request head: a small buffer that grows only up to
//! `limits.max_header_bytes`, parsed with `httparse`. The caller bounds the time
//! (`limits.header_read_timeout`).

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Uri, Version};
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// First read size: a browser's request head fits.
const INITIAL_BUFFER: usize = 1024;
/// Most header lines in a request head.
const MAX_HEADERS: usize = 64;

/// Why no request head could be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// The client closed the connection (or it failed) before a complete head.
    #[error("connection closed after {0} bytes of a request head")]
    Closed(usize),
    /// The head is larger than `limits.max_header_bytes`, or has too many header lines.
    #[error("request head larger than {0} bytes or with more than 64 header lines")]
    TooLarge(usize),
    /// Not HTTP/1.x.
    #[error("malformed request head: {0}")]
    Malformed(String),
}

/// A parsed first request.
#[derive(Debug)]
pub struct Head {
    /// The request, with an empty body.
    pub request: Request<Body>,
    /// Length of the head in `bytes`.
    pub head_len: usize,
}

/// Reads into `buf` until it holds a complete head of at most `max` bytes.
pub async fn read(
    stream: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    max: usize,
) -> Result<Head, HeadError> {
    loop {
        if let Some(head) = parse(buf, max)? {
            return Ok(head);
        }
        if buf.len() > max {
            return Err(HeadError::TooLarge(max));
        }
        let room = buf.capacity() - buf.len();
        if room == 0 {
            buf.reserve(buf.len().max(INITIAL_BUFFER).min(max + 1 - buf.len()));
        }
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(HeadError::Closed(buf.len())),
            Ok(_) => {}
        }
    }
}

/// HTTP/2's connection preface (RFC 9113 §3.4): what a cleartext client with prior knowledge
/// sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// True when `buf`, which [`parse`] refused, is the start of the HTTP/2 preface: as far as
/// it goes, and at least up to the version the parser stopped at.
pub fn is_h2_preface(buf: &[u8]) -> bool {
    let len = buf.len().min(H2_PREFACE.len());
    len >= b"PRI * HTTP/2".len() && buf[..len] == H2_PREFACE[..len]
}

/// A fresh buffer for [`read`].
pub fn buffer() -> BytesMut {
    BytesMut::with_capacity(INITIAL_BUFFER)
}

/// Parses the request head at the start of `buf` (at most `max` bytes); `Ok(None)` while it
/// is incomplete. Public for the `http_head` fuzz target.
pub fn parse(buf: &[u8], max: usize) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= max => len,
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => {
            return Err(HeadError::TooLarge(max));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(err) => return Err(HeadError::Malformed(err.to_string())),
    };
    let malformed = |what: &str| HeadError::Malformed(what.to_owned());
    let method = Method::from_bytes(parsed.method.unwrap_or_default().as_bytes())
        .map_err(|_| malformed("method"))?;
    let uri: Uri = parsed
        .path
        .unwrap_or_default()
        .parse()
        .map_err(|_| malformed("request target"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .version(version)
        .body(Body::empty())
        .map_err(|err| HeadError::Malformed(err.to_string()))?;
    let map = request.headers_mut();
    for header in parsed.headers.iter() {
        let name =
            HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| malformed("header name"))?;
        let value = HeaderValue::from_bytes(header.value).map_err(|_| malformed("header value"))?;
        map.append(name, value);
    }
    Ok(Some(Head { request, head_len }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_complete_head_and_waits_for_more() {
        let text = b"GET /events?topic=a HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
        assert!(parse(&text[..20], 1024).unwrap().is_none());
        let head = parse(text, 1024).unwrap().expect("complete");
        assert_eq!(head.head_len, text.len());
        assert_eq!(head.request.uri().query(), Some("topic=a"));
        assert_eq!(head.request.headers()["accept"], "text/event-stream");
        assert_eq!(head.request.version(), Version::HTTP_11);
    }

    #[test]
    fn refuses_oversized_and_malformed_heads() {
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2000));
        assert!(matches!(
            parse(big.as_bytes(), 1024),
            Err(HeadError::TooLarge(1024))
        ));
        let many: String = (0..70).map(|i| format!("X{i}: 1\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(
            parse(many.as_bytes(), 16384),
            Err(HeadError::TooLarge(_))
        ));
        assert!(matches!(
            parse(b"\x01\x02 nonsense\r\n\r\n", 1024),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn knows_the_http2_preface_from_where_the_parser_stops() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04";
        assert!(matches!(parse(preface, 1024), Err(HeadError::Malformed(_))));
        assert!(is_h2_preface(preface));
        assert!(is_h2_preface(b"PRI * HTTP/2"));
        assert!(!is_h2_preface(b"PRI * HTTP/1.1\r\n\r\n"));
        assert!(!is_h2_preface(b"PRI * HTTP/2.0\r\nHost: x\r\n\r\n"));
    }
}
