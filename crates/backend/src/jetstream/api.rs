//! Requests to the JetStream API, each within the request timeout.

use async_nats::jetstream::response::Response;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sluice_protocol::error::codes;

use super::Shared;
use super::error::{api_error, bounded, from_nats};
use crate::BackendError;
use crate::error::stream_not_found;

/// Sends one JetStream API request within the request timeout and reads its answer.
pub(super) async fn request<T: DeserializeOwned>(
    shared: &Shared,
    subject: String,
    body: Value,
) -> Result<T, BackendError> {
    shared.ensure_connected()?;
    let what = format!("requesting {subject}");
    let answer = bounded(shared.config.request_timeout, &what, async {
        shared
            .context
            .request::<_, _, Response<T>>(subject.clone(), &body)
            .await
            .map_err(|err| from_nats(&what, err))
    })
    .await?;
    match answer {
        Response::Ok(answer) => Ok(answer),
        Response::Err { error } => Err(api_error(&error).into()),
    }
}

/// A request about stream `name`: a missing stream is answered naming it, as the embedded
/// store does.
pub(super) async fn request_for<T: DeserializeOwned>(
    shared: &Shared,
    name: &str,
    subject: String,
    body: Value,
) -> Result<T, BackendError> {
    request(shared, subject, body)
        .await
        .map_err(|err| match err {
            BackendError::Api(api) if api.code == codes::STREAM_NOT_FOUND => {
                stream_not_found(name).into()
            }
            other => other,
        })
}

#[derive(Deserialize)]
struct GetAnswer {
    message: GotMessage,
}

#[derive(Deserialize)]
struct GotMessage {
    subject: String,
}

/// The subject of message `seq` of stream `name`; `None` when there is no such message.
pub(super) async fn message_subject(
    shared: &Shared,
    name: &str,
    seq: u64,
) -> Result<Option<String>, BackendError> {
    let got: Result<GetAnswer, _> = request_for(
        shared,
        name,
        format!("STREAM.MSG.GET.{name}"),
        json!({ "seq": seq }),
    )
    .await;
    match got {
        Ok(got) => Ok(Some(got.message.subject)),
        Err(BackendError::Api(_)) => Ok(None),
        Err(err) => Err(err),
    }
}
