//! The kinds of hub the generator can drive, and the little that differs between them: the
//! URLs, what a successful answer looks like, and how a subscriber knows it is subscribed.
//! Everything else — the schedule, the clients, the checks — is the same for every kind.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, StatusCode};

use crate::http::Target;

/// What answers at the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hub {
    /// `sluice serve`: `POST /publish` with `{"topic":…,"payload":…}`, `GET /events?topic=…`,
    /// `GET /livez`. A stream starts with a `connected` frame once it is subscribed, and event
    /// ids are `<seq>-<incarnation>`, which give the order of the stream.
    Sluice,
    /// nginx with nchan (`docs/BENCHMARKS.md`, "Per-topic workload", has the configuration):
    /// `POST /pub?topic=…` with the message as body, `GET /sub?topic=…` as an `EventSource`.
    /// The stream carries the body verbatim and has no `connected` frame, so the response head
    /// is the sign of a subscription, and the order is read from the message's own `n`.
    Nchan,
}

impl Hub {
    /// The request that tells whether this kind of hub answers at `target`: for nchan, a
    /// channel's status at the publisher location (`404` while the channel does not exist).
    pub(crate) fn liveness_request(
        self,
        target: &Target,
        topic: &str,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let path = match self {
            Self::Sluice => "/livez".to_owned(),
            Self::Nchan => format!("/pub?topic={topic}"),
        };
        target
            .request(Method::GET, &path)
            .body(Full::default())
            .context("liveness request")
    }

    /// Whether `status`, the answer to [`Hub::liveness_request`], says this kind of hub is up.
    pub(crate) fn is_alive(self, status: StatusCode) -> bool {
        match self {
            Self::Sluice => status.is_success(),
            Self::Nchan => status.is_success() || status == StatusCode::NOT_FOUND,
        }
    }

    /// The path and query of a subscription to `topic`.
    pub(crate) fn events_path(self, topic: &str) -> String {
        match self {
            Self::Sluice => format!("/events?topic={topic}"),
            Self::Nchan => format!("/sub?topic={topic}"),
        }
    }

    /// The publish of `message` — the JSON document `{"topic":…,"payload":…}` that a sluice
    /// hub takes as it is — on `topic`. nchan stores the body as the message, so the same
    /// document is what its subscribers receive.
    pub(crate) fn publish_request(
        self,
        target: &Target,
        topic: &str,
        message: String,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let path = match self {
            Self::Sluice => "/publish".to_owned(),
            Self::Nchan => format!("/pub?topic={topic}"),
        };
        target
            .request(Method::POST, &path)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(message)))
            .context("publish request")
    }

    /// Whether a stream is subscribed as soon as its response head arrives (nchan), rather
    /// than when its `connected` frame does (sluice).
    pub(crate) fn subscribed_by_head(self) -> bool {
        self == Self::Nchan
    }

    /// Whether the order of a stream is read from the messages' own `n` (nchan, whose event
    /// ids are its own) rather than from the stream sequence in the event id (sluice).
    pub(crate) fn orders_by_payload(self) -> bool {
        self == Self::Nchan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target::parse("http://127.0.0.1:9/base", crate::Protocol::Http1, None).unwrap()
    }

    #[test]
    fn sluice_urls_are_the_hubs_api() {
        let hub = Hub::Sluice;
        assert_eq!(hub.events_path("bench.7"), "/events?topic=bench.7");
        let publish = hub
            .publish_request(&target(), "bench.7", r#"{"topic":"bench.7"}"#.to_owned())
            .unwrap();
        assert_eq!(publish.method(), Method::POST);
        assert_eq!(publish.uri(), "/base/publish");
        assert_eq!(publish.headers()[CONTENT_TYPE], "application/json");
        let live = hub.liveness_request(&target(), "bench.0").unwrap();
        assert_eq!(live.uri(), "/base/livez");
        assert!(hub.is_alive(StatusCode::OK));
        assert!(!hub.is_alive(StatusCode::NOT_FOUND));
        assert!(!hub.subscribed_by_head());
        assert!(!hub.orders_by_payload());
    }

    #[test]
    fn nchan_urls_carry_the_topic_as_channel_id() {
        let hub = Hub::Nchan;
        assert_eq!(hub.events_path("bench.7"), "/sub?topic=bench.7");
        let publish = hub
            .publish_request(&target(), "bench.7", "{}".to_owned())
            .unwrap();
        assert_eq!(publish.method(), Method::POST);
        assert_eq!(publish.uri(), "/base/pub?topic=bench.7");
        let live = hub.liveness_request(&target(), "bench.0").unwrap();
        assert_eq!(live.method(), Method::GET);
        assert_eq!(live.uri(), "/base/pub?topic=bench.0");
        // nchan answers a channel's status with 200 once it exists and 404 before; a
        // server without nchan there answers something else.
        assert!(hub.is_alive(StatusCode::OK));
        assert!(hub.is_alive(StatusCode::NOT_FOUND));
        assert!(!hub.is_alive(StatusCode::FORBIDDEN));
        assert!(!hub.is_alive(StatusCode::BAD_GATEWAY));
        assert!(hub.subscribed_by_head());
        assert!(hub.orders_by_payload());
    }
}
