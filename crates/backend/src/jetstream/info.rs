//! Reading the stream's description and state from the server, and the stream's incarnation.

use std::time::Duration;

use async_nats::jetstream::{self, response::Response, stream};

use super::error::{api_error, bounded, from_nats};
use crate::{BackendError, StreamState};

/// What the backend needs to know about the stream at one moment.
#[derive(Debug, Clone)]
pub(super) struct StreamFacts {
    /// The state in the backend's terms.
    pub state: StreamState,
    /// The stream's own limit on consumers' inactivity, if it sets one.
    pub inactive_threshold_limit: Option<Duration>,
    /// Whether the stream accepts message schedules (`allow_msg_schedules`, nats-server 2.12
    /// and later; older servers know no such setting and store a schedule as a plain message).
    pub allow_msg_schedules: bool,
}

/// Asks the server for the stream's info, bounded by `limit`.
pub(super) async fn fetch(
    context: &jetstream::Context,
    stream: &str,
    limit: Duration,
) -> Result<StreamFacts, BackendError> {
    let what = format!("reading stream {stream:?}");
    let response = bounded(limit, &what, async {
        context
            .request::<_, _, Response<stream::Info>>(
                format!("STREAM.INFO.{stream}"),
                &serde_json::json!({}),
            )
            .await
            .map_err(|err| from_nats(&what, err))
    })
    .await?;
    match response {
        Response::Ok(info) => Ok(facts(&info)),
        Response::Err { error } => Err(api_error(&error).into()),
    }
}

fn facts(info: &stream::Info) -> StreamFacts {
    let state = &info.state;
    let first_time = (state.messages > 0)
        .then(|| timestamp(state.first_timestamp))
        .flatten();
    let inactive_threshold_limit = info
        .config
        .consumer_limits
        .as_ref()
        .map(|limits| limits.inactive_threshold)
        .filter(|limit| !limit.is_zero());
    let first_seq = first_retained(state.first_sequence, state.last_sequence);
    StreamFacts {
        state: StreamState {
            first_seq,
            // The server does not say why messages went: every removed position counts.
            expired_below: first_seq,
            last_seq: state.last_sequence,
            messages: state.messages,
            bytes: state.bytes,
            first_time,
            incarnation: incarnation(info.created),
            subjects: info.config.subjects.clone(),
        },
        inactive_threshold_limit,
        allow_msg_schedules: info.config.allow_message_schedules,
    }
}

/// The first retained sequence from the server's `first_seq` and `last_seq`: JetStream reports
/// first = last + 1 for an emptied stream, but 0 for a new one; this is last + 1 for both.
pub(super) fn first_retained(first: u64, last: u64) -> u64 {
    first.max(1).min(last + 1)
}

/// A server time as a [`jiff::Timestamp`]; `None` when out of jiff's range.
pub(super) fn timestamp(time: async_nats::datetime::DateTime) -> Option<jiff::Timestamp> {
    jiff::Timestamp::from_nanosecond(time.unix_timestamp_nanos()).ok()
}

/// The stream's incarnation: a stable hash of its creation time, so a stream deleted and
/// created again under the same name gets another incarnation. FNV-1a over the creation time in
/// nanoseconds (little-endian), fixed forever because incarnations are stored in clients' cursors.
pub(super) fn incarnation(created: async_nats::datetime::DateTime) -> u64 {
    incarnation_of_nanos(created.unix_timestamp_nanos())
}

/// [`incarnation`] of a creation time given in nanoseconds since the Unix epoch.
pub(super) fn incarnation_of_nanos(created: i128) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    created.to_le_bytes().iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnation_is_stable_and_tells_creation_times_apart() {
        let created =
            async_nats::datetime::DateTime::from_unix_timestamp_nanos(1_780_000_000_123_456_789)
                .unwrap();
        let later = created + Duration::from_nanos(1);
        // Pinned: a different value would invalidate every cursor clients hold.
        assert_eq!(incarnation(created), 0xfe1c_26a0_7ac1_1749);
        assert_ne!(incarnation(created), incarnation(later));
    }
}
