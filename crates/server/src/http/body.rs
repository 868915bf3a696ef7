//! Reading a request body within the hub's bounds: at most `limits.max_publish_body` bytes,
//! all of them within `limits.body_read_timeout` after the head (a trickle is not saved by a
//! byte now and then), and only while the hub-wide budget of buffered body bytes has room.
//!
//! The budget is [`BUDGET_BODIES`] × `limits.max_publish_body`. A body reserves its declared
//! `Content-Length` before a byte is read (a chunked body reserves as its chunks arrive) and
//! gives it back when the request is done; a body that finds no room is refused at once with
//! `503` and `Retry-After`, so slow bodies cannot make the hub hold more than the budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use prometheus_client::metrics::gauge::Gauge;

/// How many largest bodies the budget holds at once.
pub const BUDGET_BODIES: usize = 16;

/// The hub-wide count of body bytes held by requests being read or served.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    held: AtomicUsize,
    /// `sluice_request_body_bytes`: `held`, for the metrics.
    gauge: Gauge,
}

impl BodyBudget {
    /// A budget of [`BUDGET_BODIES`] bodies of `max_body` bytes, shown in `gauge`.
    pub fn for_max_body(max_body: usize, gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            limit: max_body.saturating_mul(BUDGET_BODIES),
            held: AtomicUsize::new(0),
            gauge,
        })
    }

    /// Takes `bytes` more, unless that would pass the limit or the budget is already full.
    fn take(&self, bytes: usize) -> bool {
        let taken = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                let after = held.checked_add(bytes)?;
                (held < self.limit && after <= self.limit).then_some(after)
            })
            .is_ok();
        if taken {
            self.gauge.inc_by(gauge_value(bytes));
        }
        taken
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
        self.gauge.dec_by(gauge_value(bytes));
    }
}

/// `bytes` as a gauge value (a budget never comes near `i64::MAX`).
fn gauge_value(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Bytes of the budget held by one body, given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Reservation {
    fn new(budget: &Arc<BodyBudget>, bytes: usize) -> Option<Self> {
        budget.take(bytes).then(|| Self {
            budget: budget.clone(),
            bytes,
        })
    }

    /// Holds at least `total` bytes, taking more from the budget if needed.
    fn cover(&mut self, total: usize) -> bool {
        let more = total.saturating_sub(self.bytes);
        if more == 0 || self.budget.take(more) {
            self.bytes += more;
            return true;
        }
        false
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// A body read whole, and its share of the budget (held as long as the body is).
#[derive(Debug)]
pub struct ReadBody {
    /// The body.
    pub bytes: Bytes,
    _reservation: Reservation,
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Declared or sent larger than the limit.
    #[error("request body larger than {limit} bytes")]
    TooLarge {
        /// `limits.max_publish_body`.
        limit: usize,
    },
    /// Not complete within `limits.body_read_timeout` after the head.
    #[error("no complete request body within {timeout:?} ({received} bytes received)")]
    Timeout {
        /// `limits.body_read_timeout`.
        timeout: Duration,
        /// Bytes received until then.
        received: usize,
    },
    /// The budget of buffered body bytes is full.
    #[error("too many request bodies are being received; retry later")]
    Budget,
    /// The client closed the connection, or sent a malformed chunked body.
    #[error("request body incomplete: {0}")]
    Incomplete(String),
}

impl BodyError {
    /// The label of `sluice_connections_rejected_total` and of the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "body_too_large",
            Self::Timeout { .. } => "body_timeout",
            Self::Budget => "body_budget",
            Self::Incomplete(_) => "body_incomplete",
        }
    }

    /// The answer's status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Budget => StatusCode::SERVICE_UNAVAILABLE,
            Self::Incomplete(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// The bounds a body is read within.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body in bytes.
    pub max: usize,
    /// Time for the whole body after the head.
    pub timeout: Duration,
}

/// Refuses at once a body whose declared `Content-Length` is over `max`, before anything
/// else looks at the request.
pub fn check_declared(headers: &HeaderMap, max: usize) -> Result<(), BodyError> {
    match declared_length(headers) {
        Some(len) if len > max => Err(BodyError::TooLarge { limit: max }),
        _ => Ok(()),
    }
}

/// Reads `body` whole within `limits`, holding its bytes in `budget`.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limits: BodyLimits,
    budget: &Arc<BodyBudget>,
) -> Result<ReadBody, BodyError> {
    check_declared(headers, limits.max)?;
    let declared = declared_length(headers).unwrap_or(0);
    let mut reservation = Reservation::new(budget, declared).ok_or(BodyError::Budget)?;
    let deadline = tokio::time::Instant::now() + limits.timeout;
    let mut buf = BytesMut::with_capacity(declared);
    let mut chunks = body.into_data_stream();
    loop {
        let next = tokio::time::timeout_at(deadline, chunks.next()).await;
        let chunk = match next {
            Err(_) => {
                return Err(BodyError::Timeout {
                    timeout: limits.timeout,
                    received: buf.len(),
                });
            }
            Ok(None) => break,
            Ok(Some(Err(err))) => return Err(BodyError::Incomplete(err.to_string())),
            Ok(Some(Ok(chunk))) => chunk,
        };
        let total = buf.len().saturating_add(chunk.len());
        if total > limits.max {
            return Err(BodyError::TooLarge { limit: limits.max });
        }
        if !reservation.cover(total) {
            return Err(BodyError::Budget);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(ReadBody {
        bytes: buf.freeze(),
        _reservation: reservation,
    })
}

/// The `Content-Length` of a request, when it has one (hyper has checked it is well formed).
fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_what_does_not_fit_and_gets_it_back() {
        let budget = BodyBudget::for_max_body(10, Gauge::default());
        let limit = 10 * BUDGET_BODIES;
        let mut first = Reservation::new(&budget, limit - 5).expect("fits");
        assert!(Reservation::new(&budget, 6).is_none(), "over the limit");
        let second = Reservation::new(&budget, 0).expect("room left");
        assert!(first.cover(limit), "grows up to the limit");
        assert!(
            Reservation::new(&budget, 0).is_none(),
            "a full budget takes none"
        );
        drop(first);
        drop(second);
        assert_eq!(budget.held.load(Ordering::Acquire), 0);
        assert_eq!(budget.gauge.get(), 0);
        assert!(Reservation::new(&budget, limit).is_some());
    }

    #[tokio::test]
    async fn reads_a_body_within_the_limits() {
        let budget = BodyBudget::for_max_body(8, Gauge::default());
        let limits = BodyLimits {
            max: 8,
            timeout: Duration::from_secs(5),
        };
        let headers = HeaderMap::new();
        let read_body = read(&headers, Body::from("12345678"), limits, &budget)
            .await
            .expect("fits");
        assert_eq!(&read_body.bytes[..], b"12345678");
        let err = read(&headers, Body::from("123456789"), limits, &budget)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), "body_too_large");
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, "9".parse().unwrap());
        assert!(check_declared(&declared, 8).is_err());
    }
}
