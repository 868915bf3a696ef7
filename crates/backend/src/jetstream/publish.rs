//! Publishing to the stream, and converting headers between sluice and async-nats.

use std::str::FromStr;

use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use sluice_protocol::headers::{Headers, NATS_SCHEDULE};

use super::Shared;
use super::error::{bounded, from_nats};
use super::filters::ServerVersion;
use super::known::Known;
use crate::{ApiError, BackendError, PublishAck, PublishRequest, Unavailable};

/// Publishes one message and waits for the stream's acknowledgement, each request within the
/// request timeout: one round trip, unless what is known of the stream must be read first or
/// the acknowledgement shows the stream was created again (see [`super::known`]).
pub(super) async fn publish(
    shared: &Shared,
    request: PublishRequest,
) -> Result<PublishAck, BackendError> {
    publish_one(shared, outgoing(request)?).await
}

async fn publish_one(shared: &Shared, outgoing: Outgoing) -> Result<PublishAck, BackendError> {
    shared.ensure_connected()?;
    let known = shared.known_stream().await?;
    check_schedule(shared, &known, &outgoing)?;
    let what = outgoing.what.clone();
    // The whole round trip within one request timeout.
    let ack = bounded(shared.config.request_timeout, &what, async {
        receive(shared, send(shared, outgoing).await?).await
    })
    .await?;
    judge(shared, &known, ack, &mut None).await
}

/// Publishes several messages pipelined: all are sent, then their acknowledgements are awaited
/// in order, each judged as a single publish's is against what was known when they were sent.
/// The stream assigns sequences in the order the messages were sent on the one connection.
/// Where what is known of the stream cannot be had, each message goes as a single publish,
/// which fails (or recovers) the same way.
pub(super) async fn publish_batch(
    shared: &Shared,
    requests: Vec<PublishRequest>,
) -> Vec<Result<PublishAck, BackendError>> {
    let outgoing: Vec<_> = requests.into_iter().map(outgoing).collect();
    let known = match shared.ensure_connected() {
        Ok(()) => shared.known_stream().await,
        Err(err) => Err(err),
    };
    let Ok(known) = known else {
        let mut answers = Vec::with_capacity(outgoing.len());
        for message in outgoing {
            answers.push(match message {
                Ok(message) => publish_one(shared, message).await,
                Err(err) => Err(err),
            });
        }
        return answers;
    };
    // Each send, then each acknowledgement, within the request timeout.
    let limit = shared.config.request_timeout;
    let mut sent = Vec::with_capacity(outgoing.len());
    for message in outgoing {
        let message =
            message.and_then(|message| check_schedule(shared, &known, &message).map(|()| message));
        sent.push(match message {
            Ok(message) => {
                let what = message.what.clone();
                bounded(limit, &what, send(shared, message)).await
            }
            Err(err) => Err(err),
        });
    }
    // The stream's incarnation read again when an acknowledgement showed it was created
    // again: read once per batch, not per message.
    let mut reread = None;
    let mut answers = Vec::with_capacity(sent.len());
    for pending in sent {
        let answer = match pending {
            Ok(pending) => {
                match bounded(limit, &pending.what.clone(), receive(shared, pending)).await {
                    Ok(ack) => judge(shared, &known, ack, &mut reread).await,
                    Err(err) => Err(err),
                }
            }
            Err(err) => Err(err),
        };
        answers.push(answer);
    }
    answers
}

/// A message ready to send.
struct Outgoing {
    /// What is published, for errors.
    what: String,
    subject: String,
    /// Whether it is a message schedule (carries `Nats-Schedule`).
    schedule: bool,
    message: jetstream::message::PublishMessage,
}

/// `request` as a message NATS can carry.
fn outgoing(request: PublishRequest) -> Result<Outgoing, BackendError> {
    let headers = to_nats(&request.headers)?;
    Ok(Outgoing {
        what: format!("publishing to {:?}", request.subject),
        schedule: request.headers.get(NATS_SCHEDULE).is_some(),
        subject: request.subject,
        message: jetstream::message::PublishMessage::build()
            .headers(headers)
            .payload(request.payload),
    })
}

/// Refuses a schedule for a stream that does not allow schedules, as nats-server 2.12 and
/// later do themselves (400/10188): an older server would store it as a plain message, which
/// would never fire and never reach a subscriber.
fn check_schedule(shared: &Shared, known: &Known, outgoing: &Outgoing) -> Result<(), BackendError> {
    if !outgoing.schedule || known.allow_msg_schedules {
        return Ok(());
    }
    Err(ApiError::schedules_disabled()
        .described(format!(
            "message schedules is disabled: stream {:?} does not set allow_msg_schedules \
             (nats-server {} or later is needed for schedules)",
            shared.config.stream,
            ServerVersion::SCHEDULES
        ))
        .into())
}

/// A message sent, its acknowledgement not awaited yet.
struct Pending {
    /// What was published, for errors.
    what: String,
    ack: jetstream::context::PublishAckFuture,
}

/// Sends one message.
async fn send(shared: &Shared, outgoing: Outgoing) -> Result<Pending, BackendError> {
    let Outgoing {
        what,
        subject,
        message,
        ..
    } = outgoing;
    let ack = shared
        .context
        .send_publish(subject, message)
        .await
        .map_err(|err| publish_error(&what, err))?;
    Ok(Pending { what, ack })
}

/// Awaits the acknowledgement of a sent message; a stream found missing makes what is known
/// of it forgotten.
async fn receive(
    shared: &Shared,
    pending: Pending,
) -> Result<jetstream::publish::PublishAck, BackendError> {
    let Pending { what, ack } = pending;
    ack.await
        .map_err(|err| publish_error(&what, err))
        .inspect_err(|err| {
            if matches!(err, BackendError::Unavailable(Unavailable::NoStream { .. })) {
                shared.known.forget();
            }
        })
}

/// The answer for `ack`, of a message sent while `known` was known: its incarnation is the
/// known one unless the sequence shows the stream was created again, then the one read from
/// the stream's info. `reread` keeps that one for the rest of a batch: its messages were sent
/// in order on one connection, so every one after a message stored in the new incarnation
/// was stored in it too, whatever its sequence.
async fn judge(
    shared: &Shared,
    known: &Known,
    ack: jetstream::publish::PublishAck,
    reread: &mut Option<u64>,
) -> Result<PublishAck, BackendError> {
    let stream = (ack.stream != shared.config.stream).then_some(ack.stream);
    let incarnation = if stream.is_some() {
        known.incarnation
    } else if let Some(now) = *reread {
        now
    } else if ack.duplicate || shared.known.acknowledged(known, ack.sequence) {
        known.incarnation
    } else {
        let now = shared
            .read_stream(shared.config.request_timeout)
            .await?
            .state
            .incarnation;
        if now != known.incarnation {
            tracing::info!(
                stream = shared.config.stream,
                was = format_args!("{:x}", known.incarnation),
                now = format_args!("{now:x}"),
                seq = ack.sequence,
                "the stream was created again; ids carry its new incarnation"
            );
        }
        *reread = Some(now);
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
