//! Turning async-nats errors into [`BackendError`]s, and the time bound every NATS call runs
//! under.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use async_nats::jetstream;
use sluice_protocol::error::ApiError;

use crate::{BackendError, Unavailable};

/// Runs `call` for at most `limit`; past it the call is abandoned and reported as unavailable,
/// naming `what` was asked.
pub(super) async fn bounded<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(Unavailable::Timeout {
            what: what.to_owned(),
            limit,
        }
        .into())
    })
}

/// A JetStream API error as the backend reports it.
pub(super) fn api_error(error: &jetstream::Error) -> ApiError {
    // async-nats keeps the description private; its serialised form carries it.
    let description = serde_json::to_value(error)
        .ok()
        .and_then(|value| value.get("description")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| error.to_string());
    ApiError::new(
        u16::try_from(error.code()).unwrap_or(500),
        u32::try_from(error.error_code().0).unwrap_or(0),
        description,
    )
}

/// Maps any async-nats error: a JetStream API error anywhere in its source chain becomes
/// [`BackendError::Api`]; everything else means the server could not be reached or answered
/// nothing useful, and becomes [`Unavailable::Request`] for `what`.
pub(super) fn from_nats(what: &str, error: impl StdError + Send + Sync + 'static) -> BackendError {
    let mut current: Option<&(dyn StdError + 'static)> = Some(&error);
    while let Some(err) = current {
        if let Some(api) = err.downcast_ref::<jetstream::Error>() {
            return api_error(api).into();
        }
        current = err.source();
    }
    Unavailable::Request {
        what: what.to_owned(),
        source: Box::new(error),
    }
    .into()
}

/// True when repeating the request cannot help: the server answered with an API error other
/// than "unavailable", the connection is closed for good, or the failure was not the server's.
pub(super) fn is_permanent(error: &BackendError) -> bool {
    match error {
        BackendError::Api(api) => api.status != 503,
        BackendError::Unavailable(Unavailable::ConnectionClosed) => true,
        BackendError::Unavailable(_) => false,
        _ => true,
    }
}
