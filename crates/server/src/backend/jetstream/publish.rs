//! Publishing to the stream, and converting headers between sluice and async-nats.

use std::str::FromStr;

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use sluice_protocol::headers::Headers;

use super::Shared;
use super::error::{bounded, from_nats};
use crate::backend::{ApiError, BackendError, PublishAck, PublishRequest, Unavailable};

/// Publishes one message and waits for the stream's acknowledgement, each request within the
/// request timeout: one round trip, unless what is known of the stream must be read first or
/// the acknowledgement shows the stream was created again (see [`super::known`]).
pub(super) async fn publish(
    shared: &Shared,
    request: PublishRequest,
) -> Result<PublishAck, BackendError> {
    let limit = shared.config.request_timeout;
    let what = format!("publishing to {:?}", request.subject);
    let headers = to_nats(&request.headers)?;
    let message = jetstream::message::PublishMessage::build()
        .headers(headers)
        .payload(request.payload);
    shared.ensure_connected()?;
    let known = shared.known_stream().await?;
    let ack = bounded(limit, &what, async {
        let pending = shared
            .context
            .send_publish(request.subject.clone(), message)
            .await
            .map_err(|err| publish_error(&what, err))?;
        pending.await.map_err(|err| publish_error(&what, err))
    })
    .await
    .inspect_err(|err| {
        if matches!(err, BackendError::Unavailable(Unavailable::NoStream { .. })) {
            shared.known.forget();
        }
    })?;
    let stream = (ack.stream != shared.config.stream).then_some(ack.stream);
    let incarnation =
        if stream.is_some() || ack.duplicate || shared.known.acknowledged(&known, ack.sequence) {
            known.incarnation
        } else {
            let now = shared.read_stream(limit).await?.state.incarnation;
            if now != known.incarnation {
                tracing::info!(
                    stream = shared.config.stream,
                    was = format_args!("{:x}", known.incarnation),
                    now = format_args!("{now:x}"),
                    seq = ack.sequence,
                    "the stream was created again; ids carry its new incarnation"
                );
            }
            now
        };
    Ok(PublishAck {
        seq: ack.sequence,
        duplicate: ack.duplicate,
        stream,
        incarnation,
    })
}

fn publish_error(what: &str, err: jetstream::context::PublishError) -> BackendError {
    match err.kind() {
        PublishErrorKind::MaxPayloadExceeded => ApiError::message_exceeds_maximum()
            .described(err.to_string())
            .into(),
        PublishErrorKind::StreamNotFound => Unavailable::NoStream {
            what: what.to_owned(),
        }
        .into(),
        _ => from_nats(what, err),
    }
}

/// sluice headers as an async-nats header map; a name or value NATS cannot carry is a bad
/// request naming it.
pub(super) fn to_nats(headers: &Headers) -> Result<HeaderMap, ApiError> {
    let bad = |what: &str, text: &str| {
        ApiError::bad_request().described(format!("invalid header {what} {text:?}"))
    };
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        let name = HeaderName::from_str(name).map_err(|_| bad("name", name))?;
        let value = HeaderValue::from_str(value).map_err(|_| bad("value", value))?;
        map.append(name, value);
    }
    Ok(map)
}

/// An async-nats header map as sluice headers. Values of one name keep their order; names
/// are sorted, since the map does not remember their order.
pub(super) fn from_nats_headers(map: Option<&HeaderMap>) -> Headers {
    let mut headers = Headers::new();
    let Some(map) = map else { return headers };
    let mut entries: Vec<(&str, _)> = map
        .iter()
        .map(|(name, values)| (name.as_ref(), values))
        .collect();
    entries.sort_by_key(|(name, _)| *name);
    for (name, values) in entries {
        for value in values {
            headers.append(name, value.as_str());
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use sluice_protocol::error::codes;

    use super::*;

    #[test]
    fn headers_round_trip_keeping_value_order() {
        let mut headers = Headers::new();
        headers.append("Nats-Msg-Id", "m1");
        headers.append("X-Multi", "one");
        headers.append("X-Multi", "two");
        let back = from_nats_headers(Some(&to_nats(&headers).unwrap()));
        assert_eq!(back, headers);
    }

    #[test]
    fn headers_nats_cannot_carry_are_bad_requests() {
        let mut headers = Headers::new();
        headers.append("Bad Name:", "v");
        let ApiError {
            status,
            code,
            description,
        } = to_nats(&headers).unwrap_err();
        assert_eq!((status, code), (400, codes::BAD_REQUEST));
        assert!(description.contains("Bad Name:"), "{description}");
    }
}
