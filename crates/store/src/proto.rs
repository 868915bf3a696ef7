//! The slice of the JetStream vocabulary the store uses, in one place.
//!
//! Most of it comes from `sluice-protocol`; what that crate does not provide yet is shimmed here,
//! narrowly, so the store keeps compiling while it is being written. Each shim names the
//! protocol item that replaces it.

pub use sluice_protocol::headers::Headers;

/// Header names the store interprets.
pub mod names {
    /// Dedupe identifier.
    pub const MSG_ID: &str = "Nats-Msg-Id";
    /// Expected stream name.
    pub const EXPECTED_STREAM: &str = "Nats-Expected-Stream";
    /// Expected last stream sequence.
    pub const EXPECTED_LAST_SEQ: &str = "Nats-Expected-Last-Sequence";
    /// Expected last sequence on the message's subject.
    pub const EXPECTED_LAST_SUBJECT_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";
    /// Expected last message id.
    pub const EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";
    /// Per-message time to live.
    pub const TTL: &str = "Nats-TTL";
    /// Source stamp put on sourced messages.
    pub const STREAM_SOURCE: &str = "Nats-Stream-Source";
    /// Why a subject delete marker was written.
    pub const MARKER_REASON: &str = "Nats-Marker-Reason";
    /// Rollup directive.
    pub const ROLLUP: &str = "Nats-Rollup";
}

const HEADER_LINE: &[u8] = b"NATS/1.0\r\n";

/// Encodes headers as a `NATS/1.0` block (empty when there are none).
/// Shim for `sluice_protocol::headers::Headers::encode`.
pub fn encode_headers(headers: &Headers) -> Vec<u8> {
    if headers.is_empty() {
        return Vec::new();
    }
    let mut out = HEADER_LINE.to_vec();
    for (name, value) in headers.iter() {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Decodes a `NATS/1.0` header block; `None` when it is malformed.
/// Shim for `sluice_protocol::headers::Headers::decode`.
pub fn decode_headers(block: &[u8]) -> Option<Headers> {
    let mut headers = Headers::new();
    if block.is_empty() {
        return Some(headers);
    }
    let text = std::str::from_utf8(block).ok()?;
    let mut lines = text.split("\r\n");
    let first = lines.next()?;
    if !first.starts_with("NATS/1.0") {
        return None;
    }
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':')?;
        headers.append(name.trim(), value.trim());
    }
    Some(headers)
}

/// Whether `subject` (a literal) matches the NATS `filter` (`*` one token, `>` the rest).
/// Shim for `sluice_protocol::subject::filter_matches`.
pub fn filter_matches(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

fn valid_tokens(subject: &str, wildcards: bool) -> bool {
    if subject.is_empty() || subject.len() > 4096 {
        return false;
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    let last = tokens.len() - 1;
    tokens.iter().enumerate().all(|(i, t)| {
        !t.is_empty()
            && !t.chars().any(|c| c.is_whitespace() || c.is_control())
            && match *t {
                "*" => wildcards,
                ">" => wildcards && i == last,
                _ => true,
            }
    })
}

/// Validates a literal subject (no wildcards). Shim for `sluice_protocol::subject::validate_subject`.
pub fn validate_subject(subject: &str) -> Result<(), String> {
    if valid_tokens(subject, false) {
        Ok(())
    } else {
        Err(format!("invalid subject {subject:?}"))
    }
}

/// Validates a subject filter. Shim for `sluice_protocol::subject::validate_filter`.
pub fn validate_filter(filter: &str) -> Result<(), String> {
    if valid_tokens(filter, true) {
        Ok(())
    } else {
        Err(format!("invalid subject filter {filter:?}"))
    }
}

/// A set of subject filters; an empty set matches every subject.
/// Shim for `sluice_protocol::subject::FilterSet`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterSet {
    filters: Vec<String>,
}

impl FilterSet {
    /// A set matching every subject.
    pub fn all() -> Self {
        Self::default()
    }

    /// A set of validated filters.
    pub fn new<I, S>(filters: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let filters: Vec<String> = filters.into_iter().map(Into::into).collect();
        for f in &filters {
            validate_filter(f)?;
        }
        Ok(Self { filters })
    }

    /// Whether `subject` matches one of the filters (or the set is empty).
    pub fn matches(&self, subject: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| filter_matches(f, subject))
    }

    /// The filters (empty = everything).
    pub fn filters(&self) -> &[String] {
        &self.filters
    }

    /// The single literal subject this set matches, if it is exactly one literal.
    pub fn literal(&self) -> Option<&str> {
        match self.filters.as_slice() {
            [one] if !one.split('.').any(|t| t == "*" || t == ">") => Some(one),
            _ => None,
        }
    }
}

/// A parsed `Nats-TTL` value. Shim for `sluice_protocol::ttl::MsgTtl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgTtl {
    /// Never expires, not even by `max_age`.
    Never,
    /// Expires this many nanoseconds after being stored.
    After(u64),
}

impl MsgTtl {
    /// Parses `never`, integer seconds or a Go duration of at least one second.
    pub fn parse(value: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::invalid_ttl(value);
        let v = value.trim();
        if v.eq_ignore_ascii_case("never") {
            return Ok(Self::Never);
        }
        let nanos = if let Ok(secs) = v.parse::<u64>() {
            secs.checked_mul(1_000_000_000).ok_or_else(bad)?
        } else {
            parse_go_duration(v).ok_or_else(bad)?
        };
        if nanos < 1_000_000_000 {
            return Err(bad());
        }
        Ok(Self::After(nanos))
    }
}

/// Parses a Go duration (`1h30m`, `1.5s`, `250ms`) into nanoseconds.
/// Shim for `sluice_protocol::duration`.
pub fn parse_go_duration(v: &str) -> Option<u64> {
    let mut rest = v;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        let n: f64 = num.parse().ok()?;
        let add = n * scale;
        if !add.is_finite() || add > u64::MAX as f64 {
            return None;
        }
        total = total.checked_add(add as u64)?;
        rest = tail;
    }
    Some(total)
}

/// A JetStream API error: HTTP-like status, JetStream code, description.
/// Shim for `sluice_protocol::error::ApiError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP-like status (400, 404, 503).
    pub status: u16,
    /// JetStream error code.
    pub code: u32,
    /// Human-readable description.
    pub description: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (status {}, code {})",
            self.description, self.status, self.code
        )
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    fn new(status: u16, code: u32, description: impl Into<String>) -> Self {
        Self {
            status,
            code,
            description: description.into(),
        }
    }
    /// 10059 stream not found.
    pub fn stream_not_found() -> Self {
        Self::new(404, 10059, "stream not found")
    }
    /// 10058 stream name already in use with a different configuration.
    pub fn stream_name_exists() -> Self {
        Self::new(
            400,
            10058,
            "stream name already in use with a different configuration",
        )
    }
    /// 10060 expected stream does not match.
    pub fn stream_not_match() -> Self {
        Self::new(400, 10060, "expected stream does not match")
    }
    /// 10071 wrong last sequence.
    pub fn wrong_last_sequence(last: u64) -> Self {
        Self::new(400, 10071, format!("wrong last sequence: {last}"))
    }
    /// 10070 wrong last msg id.
    pub fn wrong_last_msg_id(last: &str) -> Self {
        Self::new(400, 10070, format!("wrong last msg ID: {last}"))
    }
    /// 10054 message size exceeds maximum allowed.
    pub fn message_too_large() -> Self {
        Self::new(400, 10054, "message size exceeds maximum allowed")
    }
    /// 10077 maximum messages / bytes / per-subject exceeded (discard new).
    pub fn store_failed(what: &str) -> Self {
        Self::new(503, 10077, format!("maximum {what} exceeded"))
    }
    /// 10109 stream is sealed.
    pub fn sealed() -> Self {
        Self::new(400, 10109, "invalid operation on sealed stream")
    }
    /// 10227 a client may not set the source header.
    pub fn source_header_not_allowed() -> Self {
        Self::new(400, 10227, "message stream source header is not allowed")
    }
    /// 10165 invalid per-message TTL.
    pub fn invalid_ttl(value: &str) -> Self {
        Self::new(400, 10165, format!("invalid per-message TTL: {value:?}"))
    }
    /// 10166 per-message TTL is disabled.
    pub fn ttl_disabled() -> Self {
        Self::new(400, 10166, "per-message TTL is disabled")
    }
    /// 10188 message schedules are disabled.
    pub fn schedules_disabled() -> Self {
        Self::new(400, 10188, "message schedules is disabled")
    }
    /// 10189 invalid message schedule pattern.
    pub fn invalid_schedule(value: &str) -> Self {
        Self::new(
            400,
            10189,
            format!("message schedules pattern is invalid: {value:?}"),
        )
    }
    /// 10052 a generic bad request with a named cause.
    pub fn bad_request(description: impl Into<String>) -> Self {
        Self::new(400, 10052, description)
    }
    /// 10008 deletes are denied on this stream.
    pub fn delete_denied() -> Self {
        Self::new(400, 10008, "message delete not permitted")
    }
    /// 10008 purges are denied on this stream.
    pub fn purge_denied() -> Self {
        Self::new(400, 10008, "stream purge not permitted")
    }
    /// 10037 no message found.
    pub fn no_message_found() -> Self {
        Self::new(404, 10037, "no message found")
    }
}
