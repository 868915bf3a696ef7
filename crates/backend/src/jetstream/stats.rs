//! The served stream's counts for `/metrics`, from its `STREAM.INFO`: async-nats's stream
//! state leaves out what the server says it lost, so the answer is read here into fields of
//! its own.

use async_nats::jetstream::response::Response;
use serde::Deserialize;

use super::Shared;
use super::error::{api_error, bounded, from_nats};
use super::info::first_retained;
use crate::{BackendError, StreamStats};

#[derive(Deserialize)]
struct Info {
    state: State,
}

#[derive(Deserialize)]
struct State {
    messages: u64,
    bytes: u64,
    first_seq: u64,
    last_seq: u64,
    #[serde(default)]
    lost: Option<Lost>,
}

/// The server's `LostStreamData`: the sequences it lost (and their bytes, not read here).
#[derive(Deserialize)]
struct Lost {
    #[serde(default)]
    msgs: Option<Vec<u64>>,
}

/// The served stream's counts and positions, within the request timeout.
pub(super) async fn served_stream(shared: &Shared) -> Result<StreamStats, BackendError> {
    shared.ensure_connected()?;
    let stream = &shared.config.stream;
    let what = format!("reading stream {stream:?} for metrics");
    let response = bounded(shared.config.request_timeout, &what, async {
        shared
            .context
            .request::<_, _, Response<Info>>(
                format!("STREAM.INFO.{stream}"),
                &serde_json::json!({}),
            )
            .await
            .map_err(|err| from_nats(&what, err))
    })
    .await?;
    let state = match response {
        Response::Ok(info) => info.state,
        Response::Err { error } => return Err(api_error(&error).into()),
    };
    let lost = state.lost.and_then(|lost| lost.msgs).unwrap_or_default();
    Ok(StreamStats {
        name: stream.clone(),
        served: true,
        messages: state.messages,
        bytes: state.bytes,
        first_seq: first_retained(state.first_seq, state.last_seq),
        last_seq: state.last_seq,
        lost_messages: u64::try_from(lost.len()).unwrap_or(u64::MAX),
    })
}
