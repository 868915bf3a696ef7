//! The slice of `sluice-protocol` the store uses, with the few adaptations it needs.

pub use sluice_protocol::error::ApiError;
pub use sluice_protocol::headers::Headers;
pub use sluice_protocol::subject::{FilterSet, filter_matches, validate_filter, validate_subject};
pub use sluice_protocol::ttl::MsgTtl;

use sluice_protocol::error::codes;
pub use sluice_protocol::subject::is_literal;

/// Header names the store interprets.
pub mod names {
    pub use sluice_protocol::headers::{
        MARKER_REASON_MAX_AGE, MARKER_REASON_PURGE, MARKER_REASON_REMOVE,
        NATS_EXPECTED_LAST_MSG_ID as EXPECTED_LAST_MSG_ID,
        NATS_EXPECTED_LAST_SEQUENCE as EXPECTED_LAST_SEQ,
        NATS_EXPECTED_LAST_SUBJECT_SEQUENCE as EXPECTED_LAST_SUBJECT_SEQ,
        NATS_EXPECTED_STREAM as EXPECTED_STREAM, NATS_MARKER_REASON as MARKER_REASON,
        NATS_MSG_ID as MSG_ID, NATS_ROLLUP as ROLLUP, NATS_SCHEDULE as SCHEDULE,
        NATS_SCHEDULE_NEXT as SCHEDULE_NEXT, NATS_SCHEDULE_TARGET as SCHEDULE_TARGET,
        NATS_SCHEDULE_TIME_ZONE as SCHEDULE_TIME_ZONE, NATS_SCHEDULE_TTL as SCHEDULE_TTL,
        NATS_SCHEDULER as SCHEDULER, NATS_STREAM_SOURCE as STREAM_SOURCE, NATS_TTL as TTL,
        ROLLUP_SUBJECT, SCHEDULE_NEXT_PURGE,
    };
}

/// The header block stored for `headers`: empty when there are none.
pub fn encode_headers(headers: &Headers) -> Vec<u8> {
    if headers.is_empty() {
        Vec::new()
    } else {
        headers.encode()
    }
}

/// Decodes a stored header block (empty = no headers); `None` when it is malformed.
pub fn decode_headers(block: &[u8]) -> Option<Headers> {
    if block.is_empty() {
        Some(Headers::new())
    } else {
        Headers::decode(block).ok()
    }
}

/// The one literal subject a filter set matches, if that is all it matches.
pub fn literal(filter: &FilterSet) -> Option<&str> {
    match filter.as_slice() {
        [one] if is_literal(one) => Some(one),
        _ => None,
    }
}

/// Whether a filter set matches every subject.
pub fn matches_everything(filter: &FilterSet) -> bool {
    filter.iter().any(|f| f == ">")
}

/// A 400 bad request with a description naming the bad value.
pub fn bad_request(description: impl Into<String>) -> ApiError {
    ApiError::new(400, codes::BAD_REQUEST, description)
}

/// 400/10165 naming the rejected TTL.
pub fn invalid_ttl(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(400, codes::MESSAGE_TTL_INVALID, e.to_string())
}
