//! JetStream API errors: an HTTP-like status, a stable numeric error code and a description.
//!
//! Codes, statuses and descriptions are JetStream's, so a client sees the same error whether
//! the embedded store or a NATS server answered. Serialised with JetStream's field names:
//! `{"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}`.

use std::fmt::Display;

use serde::{Deserialize, Serialize};

use crate::headers::HeaderError;
use crate::schedule::ScheduleError;
use crate::subject::SubjectError;
use crate::ttl::TtlError;

/// How [`ApiError::schedules_limit`]'s description begins.
const SCHEDULES_LIMIT: &str = "message schedules limit reached";

/// A JetStream API error. Displays as `description (code)`, as NATS does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[error("{description} ({code})")]
pub struct ApiError {
    /// HTTP-like status: 400 bad request, 404 not found, 500 internal, 503 unavailable.
    #[serde(rename = "code")]
    pub status: u16,
    /// The stable JetStream error code (100xx).
    #[serde(rename = "err_code")]
    pub code: u32,
    /// Human-readable description.
    pub description: String,
}

/// The JetStream error codes sluice produces. Those other crates match on [`ApiError::code`]
/// are public; the rest are reached through [`ApiError`]'s constructors.
pub mod codes {
    /// 10003: the request is malformed.
    pub const BAD_REQUEST: u32 = 10003;
    /// 10037: no message at the requested sequence or subject.
    pub(crate) const NO_MESSAGE_FOUND: u32 = 10037;
    /// 10049: stream creation failed.
    pub(crate) const STREAM_CREATE: u32 = 10049;
    /// 10050: stream deletion failed.
    pub(crate) const STREAM_DELETE: u32 = 10050;
    /// 10052: the stream configuration is invalid.
    pub(crate) const STREAM_INVALID_CONFIG: u32 = 10052;
    /// 10054: the message is larger than the stream's `max_msg_size`.
    pub(crate) const MESSAGE_EXCEEDS_MAXIMUM: u32 = 10054;
    /// 10057: deleting a message failed or is not permitted.
    pub const MSG_DELETE_FAILED: u32 = 10057;
    /// 10058: a stream of that name exists with a different configuration.
    pub(crate) const STREAM_NAME_EXIST: u32 = 10058;
    /// 10059: no stream of that name.
    pub const STREAM_NOT_FOUND: u32 = 10059;
    /// 10060: `Nats-Expected-Stream` names another stream.
    pub(crate) const STREAM_NOT_MATCH: u32 = 10060;
    /// 10065: the subjects overlap those of an existing stream.
    pub(crate) const STREAM_SUBJECT_OVERLAP: u32 = 10065;
    /// 10069: stream update failed.
    pub(crate) const STREAM_UPDATE: u32 = 10069;
    /// 10070: `Nats-Expected-Last-Msg-Id` does not match.
    pub(crate) const WRONG_LAST_MSG_ID: u32 = 10070;
    /// 10071: `Nats-Expected-Last-Sequence` or `Nats-Expected-Last-Subject-Sequence` does not match.
    pub const WRONG_LAST_SEQUENCE: u32 = 10071;
    /// 10077: the store refused the message (discard-new limits).
    pub(crate) const STREAM_STORE_FAILED: u32 = 10077;
    /// 10093: a consumer's filter matches no subject of its stream.
    pub(crate) const CONSUMER_FILTER_NOT_SUBSET: u32 = 10093;
    /// 10097: the header block is larger than 64 KiB.
    pub(crate) const HEADER_EXCEEDS_MAXIMUM: u32 = 10097;
    /// 10109: the stream is sealed.
    pub(crate) const STREAM_SEALED: u32 = 10109;
    /// 10110: purging failed or is not permitted.
    pub(crate) const STREAM_PURGE_FAILED: u32 = 10110;
    /// 10111: a rollup failed or is not permitted.
    pub(crate) const STREAM_ROLLUP_FAILED: u32 = 10111;
    /// 10128: the stream name contains a path separator.
    pub(crate) const STREAM_NAME_CONTAINS_PATH_SEPARATORS: u32 = 10128;
    /// 10165: the `Nats-TTL` header is invalid.
    pub const MESSAGE_TTL_INVALID: u32 = 10165;
    /// 10166: `Nats-TTL` was given but the stream does not allow per-message TTLs.
    pub(crate) const MESSAGE_TTL_DISABLED: u32 = 10166;
    /// 10188: `Nats-Schedule` was given but the stream does not allow schedules.
    pub(crate) const MESSAGE_SCHEDULES_DISABLED: u32 = 10188;
    /// 10189: the `Nats-Schedule` pattern (or its time zone) is invalid.
    pub(crate) const MESSAGE_SCHEDULES_PATTERN_INVALID: u32 = 10189;
    /// 10190: the `Nats-Schedule-Target` is missing or invalid.
    pub(crate) const MESSAGE_SCHEDULES_TARGET_INVALID: u32 = 10190;
    /// 10191: the `Nats-Schedule-TTL` is invalid.
    pub(crate) const MESSAGE_SCHEDULES_TTL_INVALID: u32 = 10191;
    /// 10192: the `Nats-Schedule-Rollup` is invalid.
    pub(crate) const MESSAGE_SCHEDULES_ROLLUP_INVALID: u32 = 10192;
    /// 10227: a client-supplied `Nats-Stream-Source` header.
    pub(crate) const STREAM_SOURCE_HEADER_NOT_ALLOWED: u32 = 10227;
}

impl ApiError {
    /// An error with the given status, code and description.
    pub fn new(status: u16, code: u32, description: impl Into<String>) -> Self {
        Self {
            status,
            code,
            description: description.into(),
        }
    }

    /// The same error with `: <detail>` appended to its description, to name the offending
    /// value: `invalid per-message TTL: invalid Nats-TTL "0s": a TTL must be at least one second`.
    pub fn with_detail(mut self, detail: impl Display) -> Self {
        self.description = format!("{}: {detail}", self.description);
        self
    }

    /// The same error described by `description` instead of its fixed text, for answers that
    /// name more than JetStream's wording does: `stream "EVENTS" not found`.
    pub fn described(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// 400/10003 `bad request`.
    pub fn bad_request() -> Self {
        Self::new(400, codes::BAD_REQUEST, "bad request")
    }

    /// 404/10037 `no message found`.
    pub fn no_message_found() -> Self {
        Self::new(404, codes::NO_MESSAGE_FOUND, "no message found")
    }

    /// 400/10093 `filter` matches no subject of the stream, naming both.
    pub fn consumer_filter_not_subset(filter: &str, stream: &str, subjects: &[String]) -> Self {
        Self::new(
            400,
            codes::CONSUMER_FILTER_NOT_SUBSET,
            format!(
                "filter {filter:?} matches no subject of stream {stream:?} ({})",
                subjects.join(" ")
            ),
        )
    }

    /// 500/10049 stream creation failed, described by `err`.
    pub fn stream_create_failed(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_CREATE, err.to_string())
    }

    /// 500/10050 stream deletion failed, described by `err`.
    pub fn stream_delete_failed(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_DELETE, err.to_string())
    }

    /// 500/10052 invalid stream configuration, described by `err` (which should name the field
    /// and value).
    pub fn invalid_stream_config(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_INVALID_CONFIG, err.to_string())
    }

    /// 400/10054 `message size exceeds maximum allowed`.
    pub fn message_exceeds_maximum() -> Self {
        Self::new(
            400,
            codes::MESSAGE_EXCEEDS_MAXIMUM,
            "message size exceeds maximum allowed",
        )
    }

    /// 500/10057 deleting a message failed, described by `err`.
    pub fn msg_delete_failed(err: impl Display) -> Self {
        Self::new(500, codes::MSG_DELETE_FAILED, err.to_string())
    }

    /// 500/10057 `message delete not permitted` (the stream denies deletes).
    pub fn msg_delete_not_permitted() -> Self {
        Self::msg_delete_failed("message delete not permitted")
    }

    /// 400/10058 `stream name already in use with a different configuration`.
    pub fn stream_name_in_use() -> Self {
        Self::new(
            400,
            codes::STREAM_NAME_EXIST,
            "stream name already in use with a different configuration",
        )
    }

    /// 404/10059 `stream not found`.
    pub fn stream_not_found() -> Self {
        Self::new(404, codes::STREAM_NOT_FOUND, "stream not found")
    }

    /// 400/10060 `expected stream does not match`.
    pub fn expected_stream_mismatch() -> Self {
        Self::new(
            400,
            codes::STREAM_NOT_MATCH,
            "expected stream does not match",
        )
    }

    /// 400/10065 `subjects overlap with an existing stream`.
    pub fn subject_overlap() -> Self {
        Self::new(
            400,
            codes::STREAM_SUBJECT_OVERLAP,
            "subjects overlap with an existing stream",
        )
    }

    /// 500/10069 stream update failed, described by `err`.
    pub fn stream_update_failed(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_UPDATE, err.to_string())
    }

    /// 400/10070 `wrong last msg ID: <last_id>`, naming the stream's actual last id.
    pub fn wrong_last_msg_id(last_id: &str) -> Self {
        Self::new(
            400,
            codes::WRONG_LAST_MSG_ID,
            format!("wrong last msg ID: {last_id}"),
        )
    }

    /// 400/10071 `wrong last sequence: <last_seq>`, naming the actual last sequence (of the
    /// stream, or of the subject for `Nats-Expected-Last-Subject-Sequence`).
    pub fn wrong_last_sequence(last_seq: u64) -> Self {
        Self::new(
            400,
            codes::WRONG_LAST_SEQUENCE,
            format!("wrong last sequence: {last_seq}"),
        )
    }

    /// 503/10077 store failure, described by `err`.
    pub fn store_failed(err: impl Display) -> Self {
        Self::new(503, codes::STREAM_STORE_FAILED, err.to_string())
    }

    /// 503/10077 `maximum messages exceeded` (discard new, `max_msgs` reached).
    pub fn max_messages_exceeded() -> Self {
        Self::store_failed("maximum messages exceeded")
    }

    /// 503/10077 `maximum bytes exceeded` (discard new, `max_bytes` reached).
    pub fn max_bytes_exceeded() -> Self {
        Self::store_failed("maximum bytes exceeded")
    }

    /// 503/10077 `maximum messages per subject exceeded` (discard new per subject).
    pub fn max_messages_per_subject_exceeded() -> Self {
        Self::store_failed("maximum messages per subject exceeded")
    }

    /// 400/10097 `header size exceeds maximum allowed of 64k`.
    pub fn header_exceeds_maximum() -> Self {
        Self::new(
            400,
            codes::HEADER_EXCEEDS_MAXIMUM,
            "header size exceeds maximum allowed of 64k",
        )
    }

    /// 400/10109 `invalid operation on sealed stream`.
    pub fn stream_sealed() -> Self {
        Self::new(
            400,
            codes::STREAM_SEALED,
            "invalid operation on sealed stream",
        )
    }

    /// 500/10110 purge failed, described by `err`.
    pub fn purge_failed(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_PURGE_FAILED, err.to_string())
    }

    /// 500/10110 `stream purge not permitted` (the stream denies purges).
    pub fn purge_not_permitted() -> Self {
        Self::purge_failed("stream purge not permitted")
    }

    /// 500/10111 rollup failed, described by `err`.
    pub fn rollup_failed(err: impl Display) -> Self {
        Self::new(500, codes::STREAM_ROLLUP_FAILED, err.to_string())
    }

    /// 400/10128 `Stream name can not contain path separators`.
    pub fn stream_name_contains_path_separators() -> Self {
        Self::new(
            400,
            codes::STREAM_NAME_CONTAINS_PATH_SEPARATORS,
            "Stream name can not contain path separators",
        )
    }

    /// 400/10165 `invalid per-message TTL`.
    pub fn invalid_msg_ttl() -> Self {
        Self::new(400, codes::MESSAGE_TTL_INVALID, "invalid per-message TTL")
    }

    /// 400/10166 `per-message TTL is disabled`.
    pub fn msg_ttl_disabled() -> Self {
        Self::new(
            400,
            codes::MESSAGE_TTL_DISABLED,
            "per-message TTL is disabled",
        )
    }

    /// 400/10188 `message schedules is disabled`.
    pub fn schedules_disabled() -> Self {
        Self::new(
            400,
            codes::MESSAGE_SCHEDULES_DISABLED,
            "message schedules is disabled",
        )
    }

    /// 400/10189 `message schedules pattern is invalid`.
    pub fn invalid_schedule() -> Self {
        Self::new(
            400,
            codes::MESSAGE_SCHEDULES_PATTERN_INVALID,
            "message schedules pattern is invalid",
        )
    }

    /// 400/10190 `message schedules target is invalid`.
    pub fn invalid_schedule_target() -> Self {
        Self::new(
            400,
            codes::MESSAGE_SCHEDULES_TARGET_INVALID,
            "message schedules target is invalid",
        )
    }

    /// 400/400 `message schedules limit reached: …`: the stream holds its `max_msg_schedules`
    /// (sluice's own limit, so its code is its status, as for the hub's own refusals).
    pub fn schedules_limit(held: usize, max: i64) -> Self {
        Self::new(
            400,
            400,
            format!("{SCHEDULES_LIMIT}: the stream holds {held}, max_msg_schedules is {max}"),
        )
    }

    /// Whether this is [`ApiError::schedules_limit`]'s refusal.
    pub fn is_schedules_limit(&self) -> bool {
        self.status == 400 && self.code == 400 && self.description.starts_with(SCHEDULES_LIMIT)
    }

    /// 400/10191 `message schedules invalid per-message TTL`.
    pub fn invalid_schedule_ttl() -> Self {
        Self::new(
            400,
            codes::MESSAGE_SCHEDULES_TTL_INVALID,
            "message schedules invalid per-message TTL",
        )
    }

    /// 400/10192 `message schedules invalid rollup`.
    pub fn invalid_schedule_rollup() -> Self {
        Self::new(
            400,
            codes::MESSAGE_SCHEDULES_ROLLUP_INVALID,
            "message schedules invalid rollup",
        )
    }

    /// 400/10227 `message stream source header is not allowed` (a forged `Nats-Stream-Source`).
    pub fn stream_source_header_not_allowed() -> Self {
        Self::new(
            400,
            codes::STREAM_SOURCE_HEADER_NOT_ALLOWED,
            "message stream source header is not allowed",
        )
    }
}

/// 400/10165 naming the rejected `Nats-TTL`.
impl From<TtlError> for ApiError {
    fn from(err: TtlError) -> Self {
        ApiError::invalid_msg_ttl().with_detail(err)
    }
}

/// 400/10189 naming the rejected `Nats-Schedule` or `Nats-Schedule-Time-Zone`.
impl From<ScheduleError> for ApiError {
    fn from(err: ScheduleError) -> Self {
        ApiError::invalid_schedule().with_detail(err)
    }
}

/// 400/10003 naming the rejected subject or filter.
impl From<SubjectError> for ApiError {
    fn from(err: SubjectError) -> Self {
        ApiError::bad_request().with_detail(err)
    }
}

/// 400/10003 naming the rejected header.
impl From<HeaderError> for ApiError {
    fn from(err: HeaderError) -> Self {
        ApiError::bad_request().with_detail(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_constructor_has_jetstreams_status_code_and_text() {
        let cases = [
            (ApiError::bad_request(), 400, 10003, "bad request"),
            (ApiError::no_message_found(), 404, 10037, "no message found"),
            (
                ApiError::consumer_filter_not_subset("b.*", "S", &["a.>".into(), "c".into()]),
                400,
                10093,
                "filter \"b.*\" matches no subject of stream \"S\" (a.> c)",
            ),
            (ApiError::stream_create_failed("boom"), 500, 10049, "boom"),
            (ApiError::stream_delete_failed("boom"), 500, 10050, "boom"),
            (
                ApiError::invalid_stream_config("max_msgs -2"),
                500,
                10052,
                "max_msgs -2",
            ),
            (
                ApiError::message_exceeds_maximum(),
                400,
                10054,
                "message size exceeds maximum allowed",
            ),
            (
                ApiError::msg_delete_not_permitted(),
                500,
                10057,
                "message delete not permitted",
            ),
            (
                ApiError::stream_name_in_use(),
                400,
                10058,
                "stream name already in use with a different configuration",
            ),
            (ApiError::stream_not_found(), 404, 10059, "stream not found"),
            (
                ApiError::expected_stream_mismatch(),
                400,
                10060,
                "expected stream does not match",
            ),
            (
                ApiError::subject_overlap(),
                400,
                10065,
                "subjects overlap with an existing stream",
            ),
            (ApiError::stream_update_failed("boom"), 500, 10069, "boom"),
            (
                ApiError::wrong_last_msg_id("m-7"),
                400,
                10070,
                "wrong last msg ID: m-7",
            ),
            (
                ApiError::wrong_last_sequence(42),
                400,
                10071,
                "wrong last sequence: 42",
            ),
            (
                ApiError::max_messages_exceeded(),
                503,
                10077,
                "maximum messages exceeded",
            ),
            (
                ApiError::max_bytes_exceeded(),
                503,
                10077,
                "maximum bytes exceeded",
            ),
            (
                ApiError::max_messages_per_subject_exceeded(),
                503,
                10077,
                "maximum messages per subject exceeded",
            ),
            (
                ApiError::header_exceeds_maximum(),
                400,
                10097,
                "header size exceeds maximum allowed of 64k",
            ),
            (
                ApiError::stream_sealed(),
                400,
                10109,
                "invalid operation on sealed stream",
            ),
            (
                ApiError::purge_not_permitted(),
                500,
                10110,
                "stream purge not permitted",
            ),
            (
                ApiError::rollup_failed("rollup not permitted"),
                500,
                10111,
                "rollup not permitted",
            ),
            (
                ApiError::stream_name_contains_path_separators(),
                400,
                10128,
                "Stream name can not contain path separators",
            ),
            (
                ApiError::invalid_msg_ttl(),
                400,
                10165,
                "invalid per-message TTL",
            ),
            (
                ApiError::msg_ttl_disabled(),
                400,
                10166,
                "per-message TTL is disabled",
            ),
            (
                ApiError::schedules_disabled(),
                400,
                10188,
                "message schedules is disabled",
            ),
            (
                ApiError::invalid_schedule(),
                400,
                10189,
                "message schedules pattern is invalid",
            ),
            (
                ApiError::invalid_schedule_target(),
                400,
                10190,
                "message schedules target is invalid",
            ),
            (
                ApiError::invalid_schedule_ttl(),
                400,
                10191,
                "message schedules invalid per-message TTL",
            ),
            (
                ApiError::invalid_schedule_rollup(),
                400,
                10192,
                "message schedules invalid rollup",
            ),
            (
                ApiError::stream_source_header_not_allowed(),
                400,
                10227,
                "message stream source header is not allowed",
            ),
        ];
        for (err, status, code, description) in cases {
            assert_eq!(
                (err.status, err.code, err.description.as_str()),
                (status, code, description)
            );
            assert_eq!(err.to_string(), format!("{description} ({code})"));
        }
    }

    #[test]
    fn described_keeps_status_and_code() {
        let err = ApiError::stream_not_found().described("stream \"S\" not found");
        assert_eq!(
            (err.status, err.code, err.description.as_str()),
            (404, 10059, "stream \"S\" not found")
        );
    }

    #[test]
    fn parse_errors_convert_naming_the_value() {
        let ttl: ApiError = crate::ttl::MsgTtl::parse("0s").unwrap_err().into();
        assert_eq!((ttl.status, ttl.code), (400, 10165));
        assert_eq!(
            ttl.description,
            "invalid per-message TTL: invalid Nats-TTL \"0s\": a TTL must be at least one second"
        );
        let schedule: ApiError = crate::schedule::Schedule::parse("@every 1ms")
            .unwrap_err()
            .into();
        assert_eq!((schedule.status, schedule.code), (400, 10189));
        assert!(
            schedule.description.starts_with(
                "message schedules pattern is invalid: invalid schedule \"@every 1ms\""
            )
        );
        let subject: ApiError = crate::subject::validate_subject("a..b").unwrap_err().into();
        assert_eq!((subject.status, subject.code), (400, 10003));
        assert!(
            subject
                .description
                .starts_with("bad request: subject \"a..b\"")
        );
        let header: ApiError = crate::headers::validate_name("a b").unwrap_err().into();
        assert_eq!((header.status, header.code), (400, 10003));
        assert!(
            header
                .description
                .starts_with("bad request: header name \"a b\"")
        );
    }

    #[test]
    fn serialises_with_jetstream_field_names() {
        let json = serde_json::to_string(&ApiError::wrong_last_sequence(5)).unwrap();
        assert_eq!(
            json,
            r#"{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}"#
        );
        let back: ApiError = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ApiError::wrong_last_sequence(5));
    }
}
