//! The kinds of hub the generator can drive, and the little that differs between them: the
//! URLs, what a successful answer looks like, and how a subscriber knows it is subscribed.
//! Everything else — the schedule, the clients, the checks — is the same for every kind.

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, StatusCode};

use crate::http::Target;
use crate::mercure;

/// Where a Mercure hub is served.
const MERCURE_PATH: &str = "/.well-known/mercure";
/// The media type of a Mercure publish.
const FORM: &str = "application/x-www-form-urlencoded";

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
    /// `sluice serve` with `[mercure]` on, driven as a Mercure hub: `POST /.well-known/mercure`
    /// with the form `topic`, `data` and a publisher's token (`--mercure-publisher-key`),
    /// `GET /.well-known/mercure?topic=…` (with `sluice_gaps=1`, so losses arrive as `gap`
    /// events). The data is the published document verbatim; the stream has no `connected`
    /// frame (the response head is the sign of a subscription: the hub fixes the start before
    /// answering), and the hub-made ids `#<seq>-<incarnation>` give the order of the stream.
    Mercure,
}

impl Hub {
    /// The request that tells whether this kind of hub answers at `target`: for nchan, a
    /// channel's status at the publisher location (`404` while the channel does not exist);
    /// for Mercure, a publish with the publisher's `authorization` and an empty form, which a
    /// hub serving Mercure and accepting the token refuses for its missing topic (and stores
    /// nothing).
    pub(crate) fn liveness_request(
        self,
        target: &Target,
        topic: &str,
        authorization: Option<&HeaderValue>,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let request = match self {
            Self::Sluice => target.request(Method::GET, "/livez"),
            Self::Nchan => target.request(Method::GET, &format!("/pub?topic={topic}")),
            Self::Mercure => with_authorization(
                target
                    .request(Method::POST, MERCURE_PATH)
                    .header(CONTENT_TYPE, FORM),
                authorization,
            ),
        };
        request.body(Full::default()).context("liveness request")
    }

    /// Whether `status`, the answer to [`Hub::liveness_request`], says this kind of hub is up.
    pub(crate) fn is_alive(self, status: StatusCode) -> bool {
        match self {
            Self::Sluice => status.is_success(),
            Self::Nchan => status.is_success() || status == StatusCode::NOT_FOUND,
            Self::Mercure => status == StatusCode::BAD_REQUEST,
        }
    }

    /// What an answer `status` to [`Hub::liveness_request`] that is not
    /// [`alive`](Hub::is_alive) most likely means, when this kind of hub tells.
    pub(crate) fn liveness_hint(self, status: StatusCode) -> &'static str {
        match (self, status) {
            (Self::Mercure, StatusCode::NOT_FOUND) => " (is the hub's [mercure] enabled?)",
            (Self::Mercure, StatusCode::UNAUTHORIZED) => {
                " (is --mercure-publisher-key the hub's mercure.publisher_jwt_key, HS256?)"
            }
            _ => "",
        }
    }

    /// The path and query of a subscription to `topic`.
    pub(crate) fn events_path(self, topic: &str) -> String {
        match self {
            Self::Sluice => format!("/events?topic={topic}"),
            Self::Nchan => format!("/sub?topic={topic}"),
            Self::Mercure => format!("{MERCURE_PATH}?topic={topic}&sluice_gaps=1"),
        }
    }

    /// The publish of `message` — the JSON document `{"topic":…,"payload":…}` that a sluice
    /// hub takes as it is — on `topic`. nchan stores the body as the message, and a Mercure
    /// publish (with the publisher's `authorization`) carries it as the update's data, so the
    /// same document is what their subscribers receive.
    pub(crate) fn publish_request(
        self,
        target: &Target,
        topic: &str,
        message: String,
        authorization: Option<&HeaderValue>,
    ) -> anyhow::Result<Request<Full<Bytes>>> {
        let (path, content_type, body) = match self {
            Self::Sluice => ("/publish".to_owned(), "application/json", message),
            Self::Nchan => (format!("/pub?topic={topic}"), "application/json", message),
            Self::Mercure => (
                MERCURE_PATH.to_owned(),
                FORM,
                mercure::form(topic, &message),
            ),
        };
        let request = target
            .request(Method::POST, &path)
            .header(CONTENT_TYPE, content_type);
        with_authorization(request, authorization)
            .body(Full::new(Bytes::from(body)))
            .context("publish request")
    }

    /// Whether a stream is subscribed as soon as its response head arrives (nchan, Mercure),
    /// rather than when its `connected` frame does (sluice).
    pub(crate) fn subscribed_by_head(self) -> bool {
        matches!(self, Self::Nchan | Self::Mercure)
    }

    /// The stream sequence in an event id, when the id is one the hub made: `<seq>` of
    /// `<seq>-<incarnation>` (or a bare `<seq>`) for sluice, behind a `#` for Mercure, whose
    /// other ids are custom ones (`Ok(None)`: the bench publishes none). `Err` when the id is
    /// neither.
    pub(crate) fn sequence(self, id: &str) -> Result<Option<u64>, ()> {
        let position = match self {
            Self::Mercure => match id.strip_prefix('#') {
                Some(position) => position,
                None if id.is_empty() => return Err(()),
                None => return Ok(None),
            },
            Self::Sluice | Self::Nchan => id,
        };
        let seq = position.split_once('-').map_or(position, |(seq, _)| seq);
        seq.parse().map(Some).map_err(|_| ())
    }

    /// Whether the order of a stream is read from the messages' own `n` (nchan, whose event
    /// ids are its own) rather than from the stream sequence in the event id (sluice).
    pub(crate) fn orders_by_payload(self) -> bool {
        self == Self::Nchan
    }
}

/// `request` with an `Authorization` header when one is given.
fn with_authorization(
    request: hyper::http::request::Builder,
    authorization: Option<&HeaderValue>,
) -> hyper::http::request::Builder {
    match authorization {
        Some(value) => request.header(AUTHORIZATION, value.clone()),
        None => request,
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
            .publish_request(
                &target(),
                "bench.7",
                r#"{"topic":"bench.7"}"#.to_owned(),
                None,
            )
            .unwrap();
        assert_eq!(publish.method(), Method::POST);
        assert_eq!(publish.uri(), "/base/publish");
        assert_eq!(publish.headers()[CONTENT_TYPE], "application/json");
        let live = hub.liveness_request(&target(), "bench.0", None).unwrap();
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
            .publish_request(&target(), "bench.7", "{}".to_owned(), None)
            .unwrap();
        assert_eq!(publish.method(), Method::POST);
        assert_eq!(publish.uri(), "/base/pub?topic=bench.7");
        let live = hub.liveness_request(&target(), "bench.0", None).unwrap();
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

    #[test]
    fn mercure_urls_are_the_well_known_hub_with_the_publishers_token() {
        let hub = Hub::Mercure;
        assert_eq!(
            hub.events_path("bench.7"),
            "/.well-known/mercure?topic=bench.7&sluice_gaps=1"
        );
        let bearer = HeaderValue::from_static("Bearer t0ken");
        let publish = hub
            .publish_request(&target(), "bench.7", r#"{"n":1}"#.to_owned(), Some(&bearer))
            .unwrap();
        assert_eq!(publish.method(), Method::POST);
        assert_eq!(publish.uri(), "/base/.well-known/mercure");
        assert_eq!(publish.headers()[CONTENT_TYPE], FORM);
        assert_eq!(publish.headers()[AUTHORIZATION], "Bearer t0ken");
        let live = hub
            .liveness_request(&target(), "bench.0", Some(&bearer))
            .unwrap();
        assert_eq!(live.method(), Method::POST);
        assert_eq!(live.uri(), "/base/.well-known/mercure");
        assert_eq!(live.headers()[AUTHORIZATION], "Bearer t0ken");
        // An empty form with an accepted token is refused for its missing topic; 404 is a hub
        // without Mercure, 401 a key that is not the hub's.
        assert!(hub.is_alive(StatusCode::BAD_REQUEST));
        for status in [
            StatusCode::OK,
            StatusCode::NOT_FOUND,
            StatusCode::UNAUTHORIZED,
        ] {
            assert!(!hub.is_alive(status), "{status}");
        }
        assert!(
            hub.liveness_hint(StatusCode::NOT_FOUND)
                .contains("[mercure]")
        );
        let hint = hub.liveness_hint(StatusCode::UNAUTHORIZED);
        assert!(hint.contains("--mercure-publisher-key"), "{hint}");
        assert!(hub.subscribed_by_head());
        assert!(!hub.orders_by_payload());
    }

    #[test]
    fn mercure_orders_by_its_hub_made_ids_and_leaves_custom_ids_unplaced() {
        assert_eq!(Hub::Mercure.sequence("#42-18c3f0a1b2"), Ok(Some(42)));
        assert_eq!(Hub::Mercure.sequence("urn:uuid:1"), Ok(None));
        assert_eq!(Hub::Mercure.sequence("42-18c3f0a1b2"), Ok(None));
        for broken in ["", "#", "#x-1", "#-1"] {
            assert_eq!(Hub::Mercure.sequence(broken), Err(()), "{broken:?}");
        }
        assert_eq!(Hub::Sluice.sequence("42-18c3f0a1b2"), Ok(Some(42)));
        assert_eq!(Hub::Sluice.sequence("7"), Ok(Some(7)));
        assert_eq!(Hub::Sluice.sequence("#42-1"), Err(()));
    }
}
