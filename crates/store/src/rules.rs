//! The publish path: JetStream's checks (with their error codes), then the append, the dedupe
//! and TTL bookkeeping and the limits.

use bytes::Bytes;

use crate::error::{ApiError, Result, StoreError};
use crate::limits;
use crate::proto::{self, Headers, MsgTtl, names};
use crate::record::{self, flags};
use crate::schedule;
use crate::sources;
use crate::state::State;
use crate::types::PubAck;
use sluice_protocol::headers::MAX_HEADER_BLOCK_LEN;

/// One message to store.
#[derive(Debug, Clone)]
pub struct Publish {
    /// Subject.
    pub subject: String,
    /// Headers.
    pub headers: Headers,
    /// Body.
    pub payload: Bytes,
    /// Stored by sluice itself (sourcing, markers, schedules): may carry `Nats-Stream-Source`
    /// and skips the subject capture check.
    pub internal: bool,
}

/// The largest message (subject + headers + payload) any stream accepts: what fits a record.
pub const MAX_MESSAGE: usize = record::MAX_RECORD - 1024;

fn parse_seq(value: &str, last: u64) -> Result<u64, ApiError> {
    value
        .trim()
        .parse()
        .map_err(|_| ApiError::wrong_last_sequence(last))
}

/// JetStream's preconditions (`Nats-Expected-Stream`, `-Last-Sequence`,
/// `-Last-Subject-Sequence`, `-Last-Msg-Id`), with their error codes.
fn check_expectations(st: &mut State, p: &Publish) -> Result<()> {
    let h = &p.headers;
    let c = &st.config;
    if let Some(v) = h.get(names::EXPECTED_STREAM)
        && v != c.name
    {
        return Err(ApiError::expected_stream_mismatch().into());
    }
    if let Some(v) = h.get(names::EXPECTED_LAST_SEQ)
        && parse_seq(v, st.table.last_seq)? != st.table.last_seq
    {
        return Err(ApiError::wrong_last_sequence(st.table.last_seq).into());
    }
    if let Some(v) = h.get(names::EXPECTED_LAST_SUBJECT_SEQ) {
        let last = st
            .table
            .last_for_subject(&p.subject, u64::MAX)?
            .unwrap_or(0);
        if parse_seq(v, last)? != last {
            return Err(ApiError::wrong_last_sequence(last).into());
        }
    }
    if let Some(v) = h.get(names::EXPECTED_LAST_MSG_ID) {
        let last = st.last_msg_id.as_deref().unwrap_or("");
        if v != last {
            return Err(ApiError::wrong_last_msg_id(last).into());
        }
    }
    Ok(())
}

/// The message's encoded headers, once the stream takes it at all: not sealed, a valid
/// subject it captures (unless internal), no forged `Nats-Stream-Source`, and within the
/// header and message size limits.
fn encode_admitted(st: &State, p: &Publish) -> Result<Vec<u8>> {
    let c = &st.config;
    let h = &p.headers;
    if c.sealed {
        return Err(ApiError::stream_sealed().into());
    }
    proto::validate_subject(&p.subject).map_err(|e| StoreError::InvalidSubject(e.to_string()))?;
    if !p.internal {
        if !c.captures(&p.subject) {
            return Err(crate::proto::bad_request(format!(
                "subject {:?} is not captured by stream {:?}",
                p.subject, c.name
            ))
            .into());
        }
        if h.get(names::STREAM_SOURCE).is_some() {
            return Err(ApiError::stream_source_header_not_allowed().into());
        }
    }
    let hdrs = proto::encode_headers(h);
    // What the record format (and a header decoder) can hold is a hard limit on every stream.
    if hdrs.len() > MAX_HEADER_BLOCK_LEN {
        return Err(ApiError::header_exceeds_maximum().into());
    }
    let size = p.subject.len() + hdrs.len() + p.payload.len();
    if (c.max_msg_size > 0 && size > c.max_msg_size as usize) || size > MAX_MESSAGE {
        return Err(ApiError::message_exceeds_maximum().into());
    }
    Ok(hdrs)
}

/// Applies one publish to the state (not yet durable).
pub fn publish(st: &mut State, p: &Publish) -> Result<PubAck> {
    let now = st.next_ts();
    publish_at(st, p, now)
}

/// [`publish`] with the store time `now` (ns), taken from [`State::next_ts`] by the caller: a
/// schedule's fire is stored with the time its next fire is counted from.
pub fn publish_at(st: &mut State, p: &Publish, now: i64) -> Result<PubAck> {
    let c = &st.config;
    let h = &p.headers;
    let hdrs = encode_admitted(st, p)?;
    let msg_id = h.get(names::MSG_ID).filter(|id| !id.is_empty());
    if let Some(id) = msg_id {
        st.dedupe
            .expire(now.saturating_sub(crate::time::nanos(c.dedupe_window())));
        if let Some(seq) = st.dedupe.get(id) {
            return Ok(PubAck {
                seq,
                duplicate: true,
            });
        }
    }
    check_expectations(st, p)?;
    let c = &st.config;
    let mut fl = 0;
    let ttl = match h.get(names::TTL) {
        Some(_) if !c.allow_msg_ttl && !p.internal => {
            return Err(ApiError::msg_ttl_disabled().into());
        }
        Some(v) => Some(MsgTtl::parse(v).map_err(proto::invalid_ttl)?),
        None => None,
    };
    match ttl {
        Some(MsgTtl::Never) => fl |= flags::TTL | flags::TTL_NEVER,
        Some(MsgTtl::After(_)) => fl |= flags::TTL,
        None => {}
    }
    if msg_id.is_some() {
        fl |= flags::MSG_ID;
    }
    let schedule = schedule::validate(c.allow_msg_schedules, &p.subject, h, now)?;
    if schedule.is_some() && !h.get(names::SCHEDULE_TARGET).is_some_and(|t| c.captures(t)) {
        // The fired messages must land in this stream.
        return Err(ApiError::invalid_schedule_target().into());
    }
    if schedule.is_some() {
        check_schedule_room(st, &p.subject)?;
        fl |= flags::SCHEDULE;
    }
    if h.get(names::STREAM_SOURCE).is_some() {
        fl |= flags::SOURCED;
    }
    let record_len = (record::RecordRef {
        kind: record::Kind::Msg,
        flags: if hdrs.is_empty() { 0 } else { flags::HEADERS },
        seq: 0,
        ts: 0,
        subject: p.subject.as_bytes(),
        headers: &hdrs,
        payload: &p.payload,
    })
    .encoded_len() as u64;
    limits::check_discard_new(st, &p.subject, record_len)?;

    let seq = st.append_msg(&p.subject, &hdrs, &p.payload, fl, now)?;
    if let Some(id) = msg_id {
        st.dedupe.insert(id, seq, now);
    }
    st.last_msg_id = msg_id.map(str::to_string);
    if let Some(MsgTtl::After(d)) = ttl {
        st.ttl
            .insert(seq, now.saturating_add(crate::time::nanos(d)));
    }
    if let Some(v) = schedule {
        st.schedules.insert(&p.subject, seq, v.first);
    }
    if let Some((iname, origin_seq, ident)) =
        h.get(names::STREAM_SOURCE).and_then(sources::parse_header)
    {
        st.sources.record(&iname, origin_seq, &ident);
    }
    limits::enforce(st, Some(&p.subject))?;
    Ok(PubAck {
        seq,
        duplicate: false,
    })
}

/// Refuses a schedule on `subject` that would put more than `max_msg_schedules` in force (one
/// replacing the subject's own schedule takes no more room).
fn check_schedule_room(st: &State, subject: &str) -> Result<()> {
    let max = st.config.max_msg_schedules;
    let held = st.schedules.len();
    if max > 0 && usize::try_from(max).is_ok_and(|max| held >= max) && !st.schedules.has(subject) {
        return Err(ApiError::schedules_limit(held, max).into());
    }
    Ok(())
}
