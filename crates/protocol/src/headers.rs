//! NATS message headers and their `NATS/1.0` wire block.
//!
//! The block is `NATS/1.0[ <code>[ <description>]]\r\n`, then one `Name: value\r\n` line per
//! entry, then an empty `\r\n` line, exactly as NATS and JetStream store it.
//!
//! Names are visible ASCII (`!`..=`~`) without `:`. Values are UTF-8 without control characters
//! other than horizontal tab, and without leading or trailing space or tab (a reader trims them,
//! so they could not round-trip). [`Headers::try_append`], [`Headers::try_insert`] and
//! [`Headers::decode`] enforce this; [`Headers::append`] and [`Headers::insert`] are for names and
//! values already known to be valid (the constants below, values from a decoded block) and
//! [`Headers::validate`] checks a set built that way before it is trusted to [`Headers::encode`].

use std::fmt::Write as _;

use crate::quote::{shown, shown_bytes};

/// Deduplication id: a repeated id within the stream's duplicate window is acknowledged with the
/// original sequence instead of being stored again.
pub const NATS_MSG_ID: &str = "Nats-Msg-Id";
/// The publish is rejected (10060) unless it reaches the stream of this name.
pub const NATS_EXPECTED_STREAM: &str = "Nats-Expected-Stream";
/// The publish is rejected (10071) unless the stream's last sequence is this one.
pub const NATS_EXPECTED_LAST_SEQUENCE: &str = "Nats-Expected-Last-Sequence";
/// The publish is rejected (10071) unless the last sequence on its subject is this one.
pub const NATS_EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
/// The publish is rejected (10070) unless the stream's last message id is this one.
pub const NATS_EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";
/// Per-message time to live: a Go duration, integer seconds or `never`.
pub const NATS_TTL: &str = "Nats-TTL";
/// Why a subject delete marker was written: `MaxAge`, `Purge` or `Remove`.
pub const NATS_MARKER_REASON: &str = "Nats-Marker-Reason";
/// Rollup request: `sub` (purge the subject) or `all` (purge the stream) before storing.
pub const NATS_ROLLUP: &str = "Nats-Rollup";
/// A message schedule pattern (`@at`, `@every`, cron or a predefined `@daily`…).
pub const NATS_SCHEDULE: &str = "Nats-Schedule";
/// The subject a scheduled message is published to when it fires.
pub const NATS_SCHEDULE_TARGET: &str = "Nats-Schedule-Target";
/// The IANA time zone a cron schedule is evaluated in (UTC when absent).
pub const NATS_SCHEDULE_TIME_ZONE: &str = "Nats-Schedule-Time-Zone";
/// The `Nats-TTL` given to each message a schedule produces.
pub const NATS_SCHEDULE_TTL: &str = "Nats-Schedule-TTL";
/// On a message produced by a schedule: the subject of the schedule that produced it.
pub const NATS_SCHEDULER: &str = "Nats-Scheduler";
/// On a message produced by a schedule: the next fire time, or `purge` for a one-shot schedule.
pub const NATS_SCHEDULE_NEXT: &str = "Nats-Schedule-Next";
/// Set by the server on sourced messages; a client-supplied one is rejected (10227).
pub const NATS_STREAM_SOURCE: &str = "Nats-Stream-Source";
/// `Nats-Marker-Reason` of a marker written when `max_age` removed a subject's last message.
pub const MARKER_REASON_MAX_AGE: &str = "MaxAge";
/// `Nats-Marker-Reason` of a marker written when a purge removed a subject's last message.
pub const MARKER_REASON_PURGE: &str = "Purge";
/// `Nats-Marker-Reason` of a marker written when deleting a message removed a subject's last.
pub const MARKER_REASON_REMOVE: &str = "Remove";
/// `Nats-Rollup` value: replace every earlier message on the subject.
pub const ROLLUP_SUBJECT: &str = "sub";
/// `Nats-Schedule-Next` value on the message fired by a one-shot schedule.
pub const SCHEDULE_NEXT_PURGE: &str = "purge";
/// Prefix of the optimistic-concurrency headers; stripped from sourced messages.
pub const NATS_EXPECTED_PREFIX: &str = "Nats-Expected-";
/// Prefix of the batch publish headers; stripped from sourced messages.
pub const NATS_BATCH_PREFIX: &str = "Nats-Batch-";

/// The version line every header block starts with.
pub(crate) const VERSION_LINE: &str = "NATS/1.0";

/// The largest header block [`Headers::decode`] accepts, in bytes (JetStream's 64 KiB limit).
pub const MAX_HEADER_BLOCK_LEN: usize = 64 * 1024;

/// Why a header name, value or block was rejected. Every variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The block is larger than [`MAX_HEADER_BLOCK_LEN`].
    #[error("header block is {len} bytes, more than the maximum of {MAX_HEADER_BLOCK_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The block does not start with `NATS/1.0`.
    #[error("header block does not start with \"NATS/1.0\": {start}")]
    BadVersion {
        /// The first bytes of the block, escaped.
        start: String,
    },
    /// The status line has something other than a 3-digit code and a description after `NATS/1.0`.
    #[error("header status line {line} is not \"NATS/1.0[ <3-digit code>[ <description>]]\"")]
    BadStatusLine {
        /// The status line, escaped.
        line: String,
    },
    /// A status code outside 0..=999 was given to [`Headers::set_status`].
    #[error("header status code {code} is not a 3-digit number")]
    BadStatusCode {
        /// The rejected code.
        code: u16,
    },
    /// The status description has a control character or leading or trailing whitespace.
    #[error("header status description {description} is not allowed: {reason}")]
    BadStatusDescription {
        /// The rejected description, escaped.
        description: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A line is not terminated by `\r\n`, or the final empty line is missing.
    #[error("header block is not terminated by an empty \"\\r\\n\" line (after byte {at})")]
    Unterminated {
        /// Byte offset where the unterminated part starts.
        at: usize,
    },
    /// Bytes follow the terminating empty line.
    #[error("header block has {count} bytes after its terminating empty line at byte {at}")]
    TrailingBytes {
        /// Byte offset of the first trailing byte.
        at: usize,
        /// How many trailing bytes.
        count: usize,
    },
    /// A header line has no `:`.
    #[error("header line {line} at byte {at} has no ':'")]
    MissingColon {
        /// The line, escaped.
        line: String,
        /// Its byte offset.
        at: usize,
    },
    /// A header line is not valid UTF-8.
    #[error("header line {line} at byte {at} is not valid UTF-8")]
    NotUtf8 {
        /// The line, escaped.
        line: String,
        /// Its byte offset.
        at: usize,
    },
    /// A header name is empty or has a character outside visible ASCII, or a `:`.
    #[error("header name {name} is not allowed: {reason}")]
    InvalidName {
        /// The rejected name, escaped.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A header value has a control character or leading or trailing whitespace.
    #[error("value {value} of header {name} is not allowed: {reason}")]
    InvalidValue {
        /// The header name, escaped.
        name: String,
        /// The rejected value, escaped.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Checks a header name: non-empty visible ASCII without `:`.
pub fn validate_name(name: &str) -> Result<(), HeaderError> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.contains(':') {
        "it contains ':'"
    } else if !name.bytes().all(|b| b.is_ascii_graphic()) {
        "only visible ASCII characters are allowed (no whitespace or control characters)"
    } else {
        return Ok(());
    };
    Err(HeaderError::InvalidName {
        name: shown(name),
        reason,
    })
}

/// Checks text that must survive a `\r\n`-terminated, whitespace-trimmed line.
fn line_text_problem(text: &str) -> Option<&'static str> {
    if text.chars().any(|c| c.is_control() && c != '\t') {
        Some("control characters (including CR and LF) are not allowed")
    } else if text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']) {
        Some("leading or trailing spaces and tabs are not allowed")
    } else {
        None
    }
}

/// Checks a header value (of header `name`, for the error message).
pub fn validate_value(name: &str, value: &str) -> Result<(), HeaderError> {
    match line_text_problem(value) {
        None => Ok(()),
        Some(reason) => Err(HeaderError::InvalidValue {
            name: shown(name),
            value: shown(value),
            reason,
        }),
    }
}

/// Checks a status: a code of at most three digits and an optional non-empty description that
/// survives a trimmed line.
fn validate_status(code: u16, description: Option<&str>) -> Result<(), HeaderError> {
    if code > 999 {
        return Err(HeaderError::BadStatusCode { code });
    }
    if let Some(text) = description
        && let Some(reason) = line_text_problem(text).or(text.is_empty().then_some("it is empty"))
    {
        return Err(HeaderError::BadStatusDescription {
            description: shown(text),
            reason,
        });
    }
    Ok(())
}

/// The status carried on a header block's first line, as in `NATS/1.0 503 No Responders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The 3-digit status code.
    pub code: u16,
    /// The description after the code, if any.
    pub description: Option<String>,
}

/// An ordered multimap of message headers; names compare case-sensitively, as NATS does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    status: Option<Status>,
    entries: Vec<(String, String)>,
}

impl Headers {
    /// An empty header set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when there are no headers and no status.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.status.is_none()
    }

    /// How many entries (values) there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.entries
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Adds a value, keeping any earlier ones. For a name and value known to be valid; use
    /// [`Headers::try_append`] for anything that comes from outside.
    pub fn append(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.entries.push((name.into(), value.into()));
    }

    /// Replaces every value of `name` with `value`. For a name and value known to be valid; use
    /// [`Headers::try_insert`] for anything that comes from outside.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        self.remove(&name);
        self.entries.push((name, value.into()));
    }

    /// Validates, then adds a value, keeping any earlier ones.
    pub fn try_append(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), HeaderError> {
        let (name, value) = (name.into(), value.into());
        validate_name(&name)?;
        validate_value(&name, &value)?;
        self.append(name, value);
        Ok(())
    }

    /// Validates, then replaces every value of `name` with `value`.
    pub fn try_insert(
        &mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), HeaderError> {
        let (name, value) = (name.into(), value.into());
        validate_name(&name)?;
        validate_value(&name, &value)?;
        self.insert(name, value);
        Ok(())
    }

    /// Removes every value of `name`.
    pub fn remove(&mut self, name: &str) {
        self.entries.retain(|(n, _)| n != name);
    }

    /// Removes every header whose name starts with `prefix` (e.g. [`NATS_EXPECTED_PREFIX`]).
    pub fn remove_prefixed(&mut self, prefix: &str) {
        self.entries.retain(|(n, _)| !n.starts_with(prefix));
    }

    /// All entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The status from the block's first line, if it had one.
    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    /// Sets the status written on the block's first line.
    pub fn set_status(&mut self, code: u16, description: Option<&str>) -> Result<(), HeaderError> {
        validate_status(code, description)?;
        self.status = Some(Status {
            code,
            description: description.map(str::to_owned),
        });
        Ok(())
    }

    /// Checks every name, value and the status, as [`Headers::decode`] would.
    pub fn validate(&self) -> Result<(), HeaderError> {
        if let Some(status) = &self.status {
            validate_status(status.code, status.description.as_deref())?;
        }
        for (name, value) in &self.entries {
            validate_name(name)?;
            validate_value(name, value)?;
        }
        Ok(())
    }

    /// The `NATS/1.0` header block. It decodes back to an equal set when [`Headers::validate`]
    /// passes, which holds for any set built by `decode` and the `try_` methods.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::with_capacity(self.encoded_len());
        out.push_str(VERSION_LINE);
        if let Some(status) = &self.status {
            let _ = write!(out, " {:03}", status.code);
            if let Some(description) = &status.description {
                out.push(' ');
                out.push_str(description);
            }
        }
        out.push_str("\r\n");
        for (name, value) in &self.entries {
            out.push_str(name);
            out.push_str(": ");
            out.push_str(value);
            out.push_str("\r\n");
        }
        out.push_str("\r\n");
        out.into_bytes()
    }

    /// The length of [`Headers::encode`]'s output, without building it.
    pub fn encoded_len(&self) -> usize {
        let status = self
            .status
            .as_ref()
            .map_or(0, |s| 4 + s.description.as_ref().map_or(0, |d| 1 + d.len()));
        let entries: usize = self
            .entries
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum();
        VERSION_LINE.len() + status + 2 + entries + 2
    }

    /// Parses a complete `NATS/1.0` header block, strictly: the version line, an optional
    /// 3-digit status and description, `Name: value` lines each ending in `\r\n`, and a final
    /// empty line that must be the end of `block`. Leading and trailing spaces and tabs around a
    /// value are trimmed. Blocks over [`MAX_HEADER_BLOCK_LEN`] are rejected before any work.
    pub fn decode(block: &[u8]) -> Result<Headers, HeaderError> {
        if block.len() > MAX_HEADER_BLOCK_LEN {
            return Err(HeaderError::TooLong { len: block.len() });
        }
        if !block.starts_with(VERSION_LINE.as_bytes()) {
            return Err(HeaderError::BadVersion {
                start: shown_bytes(&block[..block.len().min(VERSION_LINE.len() + 8)]),
            });
        }
        let mut headers = Headers::new();
        let (status_line, mut pos) = next_line(block, 0)?;
        headers.status = parse_status(status_line)?;
        loop {
            let (line, next) = next_line(block, pos)?;
            if line.is_empty() {
                if next < block.len() {
                    return Err(HeaderError::TrailingBytes {
                        at: next,
                        count: block.len() - next,
                    });
                }
                return Ok(headers);
            }
            let text = std::str::from_utf8(line).map_err(|_| HeaderError::NotUtf8 {
                line: shown_bytes(line),
                at: pos,
            })?;
            let Some((name, value)) = text.split_once(':') else {
                return Err(HeaderError::MissingColon {
                    line: shown(text),
                    at: pos,
                });
            };
            let value = value.trim_matches([' ', '\t']);
            headers.try_append(name, value)?;
            pos = next;
        }
    }
}

/// The line starting at `from` without its `\r\n`, and the offset after it.
fn next_line(block: &[u8], from: usize) -> Result<(&[u8], usize), HeaderError> {
    let rest = &block[from..];
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok((&rest[..end], from + end + 2)),
        None => Err(HeaderError::Unterminated { at: from }),
    }
}

/// Parses the first line: `NATS/1.0`, `NATS/1.0 503` or `NATS/1.0 503 No Responders`.
fn parse_status(line: &[u8]) -> Result<Option<Status>, HeaderError> {
    let bad = || HeaderError::BadStatusLine {
        line: shown_bytes(line),
    };
    let rest = &line[VERSION_LINE.len()..];
    if rest.is_empty() {
        return Ok(None);
    }
    let rest = rest.strip_prefix(b" ").ok_or_else(bad)?;
    let text = std::str::from_utf8(rest).map_err(|_| bad())?;
    let (code, description) = match text.split_once(' ') {
        Some((code, description)) => (code, Some(description)),
        None => (text, None),
    };
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let code: u16 = code.parse().map_err(|_| bad())?;
    let description = description
        .map(|d| d.trim_matches([' ', '\t']))
        .filter(|d| !d.is_empty());
    validate_status(code, description)?;
    Ok(Some(Status {
        code,
        description: description.map(str::to_owned),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_nats_block() {
        let mut h = Headers::new();
        h.append(NATS_MSG_ID, "abc");
        h.append("X-Multi", "1");
        h.append("X-Multi", "2");
        let block = h.encode();
        assert_eq!(
            block,
            b"NATS/1.0\r\nNats-Msg-Id: abc\r\nX-Multi: 1\r\nX-Multi: 2\r\n\r\n"
        );
        assert_eq!(block.len(), h.encoded_len());
        assert_eq!(Headers::decode(&block), Ok(h));
        assert_eq!(Headers::new().encode(), b"NATS/1.0\r\n\r\n");
    }

    #[test]
    fn decodes_status_lines() {
        let h = Headers::decode(b"NATS/1.0 503\r\n\r\n").unwrap();
        assert_eq!(
            h.status(),
            Some(&Status {
                code: 503,
                description: None
            })
        );
        let h =
            Headers::decode(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n")
                .unwrap();
        let status = h.status().unwrap();
        assert_eq!(
            (status.code, status.description.as_deref()),
            (408, Some("Request Timeout"))
        );
        assert_eq!(h.get("Nats-Pending-Messages"), Some("1"));
        assert_eq!(Headers::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn decode_trims_values_and_keeps_order() {
        let h = Headers::decode(b"NATS/1.0\r\nA:x\r\nB: \t y z \r\nA:  \r\n\r\n").unwrap();
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            [("A", "x"), ("B", "y z"), ("A", "")]
        );
        assert_eq!(h.get_all("A").collect::<Vec<_>>(), ["x", ""]);
        assert_eq!(h.len(), 3);
        assert_eq!(Headers::new().len(), 0);
    }

    #[test]
    fn decode_errors_name_the_problem() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"HTTP/1.1\r\n\r\n",
                "header block does not start with \"NATS/1.0\": \"HTTP/1.1\\r\\n\\r\\n\"",
            ),
            (
                b"NATS/1.0 5x3\r\n\r\n",
                "header status line \"NATS/1.0 5x3\"",
            ),
            (b"NATS/1.0x\r\n\r\n", "header status line \"NATS/1.0x\""),
            (b"NATS/1.0 12\r\n\r\n", "header status line \"NATS/1.0 12\""),
            (
                b"NATS/1.0 1234\r\n\r\n",
                "header status line \"NATS/1.0 1234\"",
            ),
            (
                b"NATS/1.0\r\nA: b\r\n",
                "header block is not terminated by an empty \"\\r\\n\" line (after byte 16)",
            ),
            (
                b"NATS/1.0\r\nA: b\n\r\n",
                "value \"b\\n\" of header \"A\" is not allowed",
            ),
            (
                b"NATS/1.0\r\n\r\nxyz",
                "header block has 3 bytes after its terminating empty line at byte 12",
            ),
            (
                b"NATS/1.0\r\nNoColon\r\n\r\n",
                "header line \"NoColon\" at byte 10 has no ':'",
            ),
            (
                b"NATS/1.0\r\nBad Name: v\r\n\r\n",
                "header name \"Bad Name\" is not allowed",
            ),
            (
                b"NATS/1.0\r\n: v\r\n\r\n",
                "header name \"\" is not allowed: it is empty",
            ),
            (
                b"NATS/1.0\r\nA: v\x00w\r\n\r\n",
                "value \"v\\0w\" of header \"A\" is not allowed: control",
            ),
            (
                b"NATS/1.0\r\nA: \xff\r\n\r\n",
                "header line \"A: \u{fffd}\" at byte 10 is not valid UTF-8",
            ),
        ];
        for (block, message) in cases {
            let err = Headers::decode(block).unwrap_err().to_string();
            assert!(
                err.starts_with(message),
                "{:?}: {err}",
                String::from_utf8_lossy(block)
            );
        }
    }

    #[test]
    fn bad_version_quotes_only_the_start() {
        let err = Headers::decode(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "header block does not start with \"NATS/1.0\": \"HTTP/1.1 200 OK\\r\""
        );
    }

    #[test]
    fn decode_accepts_blocks_up_to_64_kib() {
        let mut h = Headers::new();
        h.append("X", "y".repeat(MAX_HEADER_BLOCK_LEN - 17));
        let block = h.encode();
        assert_eq!(block.len(), 65_536);
        assert_eq!(Headers::decode(&block), Ok(h));
    }

    #[test]
    fn decode_rejects_oversized_block_before_parsing() {
        let block = vec![b'x'; MAX_HEADER_BLOCK_LEN + 1];
        assert_eq!(
            Headers::decode(&block),
            Err(HeaderError::TooLong {
                len: MAX_HEADER_BLOCK_LEN + 1
            })
        );
    }

    #[test]
    fn try_methods_validate_names_and_values() {
        let mut h = Headers::new();
        let err = h.try_append("A", "x\r\nB: injected").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("value \"x\\r\\nB: injected\" of header \"A\""),
            "{err}"
        );
        let err = h.try_insert("A:B", "x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "header name \"A:B\" is not allowed: it contains ':'"
        );
        let err = h.try_append("A", " x").unwrap_err();
        assert!(
            err.to_string()
                .ends_with("leading or trailing spaces and tabs are not allowed")
        );
        assert!(h.is_empty());
        h.try_append("A", "1").unwrap();
        h.try_insert("A", "2").unwrap();
        assert_eq!(h.iter().collect::<Vec<_>>(), [("A", "2")]);
        h.append("Bad Name", "x");
        assert!(h.validate().is_err());
    }

    #[test]
    fn status_setter_validates() {
        let mut h = Headers::new();
        assert_eq!(
            h.set_status(1000, None),
            Err(HeaderError::BadStatusCode { code: 1000 })
        );
        assert!(h.set_status(404, Some("a\nb")).is_err());
        assert!(h.set_status(404, Some("")).is_err());
        h.set_status(404, Some("No Messages")).unwrap();
        assert_eq!(h.encode(), b"NATS/1.0 404 No Messages\r\n\r\n");
        assert!(!h.is_empty());
    }

    #[test]
    fn remove_prefixed_strips_a_family() {
        let mut h = Headers::new();
        h.append(NATS_EXPECTED_LAST_SEQUENCE, "3");
        h.append(NATS_EXPECTED_STREAM, "s");
        h.append(NATS_MSG_ID, "m");
        h.remove_prefixed(NATS_EXPECTED_PREFIX);
        assert_eq!(h.iter().collect::<Vec<_>>(), [(NATS_MSG_ID, "m")]);
    }
}
