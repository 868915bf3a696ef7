//! Security regressions over real loopback HTTP (the embedded backend): every refusal named in
//! the hardening checklist is exercised end to end — bad tokens, tokens in places that are not
//! configured, grants escalated with wildcards, SSE injection through payloads and topics, path
//! traversal through stream names, oversized bodies, and request framing that HTTP/1.1 forbids
//! (a missing or repeated `Host`, transfer codings the hub does not decode). Every error is the
//! hub's JSON `{code, description}`. Token verification itself is covered
//! in detail by `tests/auth.rs`; here the point is that the hub answers each case correctly and
//! does no work for it.

// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;

use common::{Embedded, HubFactory, TestHub, data, expect_event};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sluice_server::config::{Config, load_str};
use sluice_store::{Store, StoreOptions, StreamConfig};
use sluice_test_support::{HttpResponse, http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SUBSCRIBE_SECRET: &str = "subscribe-secret-0123456789abcdef0123456789";
const PUBLISH_SECRET: &str = "publish-secret-0123456789abcdef0123456789ab";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn sign(alg: Algorithm, secret: &str, claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes()).expect("HMAC key");
    jsonwebtoken::encode(&Header::new(alg), claims, &key).expect("sign")
}

/// A valid HS256 subscribe token for `filters`, expiring in ten minutes.
fn subscribe_token(filters: &[&str]) -> String {
    let claims = json!({ "exp": now() + 600, "sluice": { "subscribe": filters } });
    sign(Algorithm::HS256, SUBSCRIBE_SECRET, &claims)
}

/// Subscribe and publish each with their own secret; no cookie, no query parameter.
fn auth_config() -> Config {
    let text = format!(
        "[auth.subscribe]\nalgorithms = [\"HS256\"]\nleeway = 0\n\
         keys = [{{ type = \"hmac\", secret = \"{SUBSCRIBE_SECRET}\" }}]\n\
         [auth.publish]\nalgorithms = [\"HS256\"]\nleeway = 0\n\
         keys = [{{ type = \"hmac\", secret = \"{PUBLISH_SECRET}\" }}]\n"
    );
    load_str(&text, "security test", Vec::new(), &Default::default())
        .expect("auth config")
        .0
}

async fn get_with(hub: &TestHub, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    let mut headers = headers.to_vec();
    headers.push(("accept", "text/event-stream"));
    let request = http::request("GET".parse().unwrap(), &hub.url(path), &headers)
        .expect("request")
        .body(Default::default())
        .expect("body");
    http::send(request).await.expect("GET")
}

async fn publish_with(hub: &TestHub, body: &Value, headers: &[(&str, &str)]) -> HttpResponse {
    let mut headers = headers.to_vec();
    headers.push(("content-type", "application/json"));
    let request = http::request("POST".parse().unwrap(), &hub.url("/publish"), &headers)
        .expect("request")
        .body(body.to_string().into())
        .expect("body");
    http::send(request).await.expect("POST")
}

/// The `error` code of a `WWW-Authenticate: Bearer` challenge (`None` for the bare one).
fn challenge_error(response: &HttpResponse) -> Option<String> {
    let challenge = response.header("www-authenticate").expect("a challenge");
    assert!(
        challenge.starts_with("Bearer realm=\"sluice\""),
        "{challenge}"
    );
    let (_, rest) = challenge.split_once("error=\"")?;
    rest.split_once('"').map(|(code, _)| code.to_owned())
}

/// Nothing was stored: the next publish (without auth) gets sequence 1.
async fn assert_nothing_stored(hub: &TestHub) {
    assert_eq!(hub.publish("canary", json!(1)).await["seq"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_early_forged_and_unsigned_tokens_are_401_invalid_token() {
    let hub = Embedded.start(auth_config()).await;
    let grant = json!({ "subscribe": ["orders.>"] });
    let claims = |extra: Value| {
        let mut claims = json!({ "exp": now() + 600, "sluice": grant });
        claims
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        claims
    };
    let signed = sign(Algorithm::HS256, SUBSCRIBE_SECRET, &claims(json!({})));
    // `alg: none` ({"alg":"none","typ":"JWT"}) on the claims of a valid token, unsigned.
    let payload = signed.split('.').nth(1).expect("claims part");
    let unsigned = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
    let cases = [
        (
            "expired",
            sign(
                Algorithm::HS256,
                SUBSCRIBE_SECRET,
                &claims(json!({ "exp": now() - 60 })),
            ),
        ),
        (
            "not_yet_valid",
            sign(
                Algorithm::HS256,
                SUBSCRIBE_SECRET,
                &claims(json!({ "nbf": now() + 300 })),
            ),
        ),
        // Signed with the publish direction's secret.
        (
            "bad_signature",
            sign(Algorithm::HS256, PUBLISH_SECRET, &claims(json!({}))),
        ),
        (
            "wrong_algorithm",
            sign(Algorithm::HS512, SUBSCRIBE_SECRET, &claims(json!({}))),
        ),
        ("invalid_token", unsigned),
    ];
    for (reason, token) in cases {
        let bearer = format!("Bearer {token}");
        let response = get_with(
            &hub,
            "/events?topic=orders.eu",
            &[("authorization", &bearer)],
        )
        .await;
        assert_eq!(response.status, 401, "{reason}: {}", response.text());
        assert_eq!(
            challenge_error(&response).as_deref(),
            Some("invalid_token"),
            "{reason}"
        );
        let counted = format!("sluice_connections_rejected_total{{reason=\"{reason}\"}}");
        assert_eq!(hub.metric(&counted), 1, "{counted}");
    }
    assert_eq!(
        hub.metric("sluice_active_connections"),
        0,
        "no stream was opened"
    );
    // The same claims, correctly signed, are let in.
    let bearer = format!("Bearer {signed}");
    let mut client = hub
        .subscribe_with("?topic=orders.eu", &[("authorization", &bearer)])
        .await;
    expect_event(&mut client, "connected")
        .await
        .expect("valid token");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_a_place_that_is_not_configured_is_not_used() {
    let hub = Embedded.start(auth_config()).await;
    let token = subscribe_token(&["orders.>"]);
    let path = "/events?topic=orders.eu";
    // No cookie and no query parameter is configured: both are ignored, so there is no token.
    for (what, path, headers) in [
        (
            "cookie",
            path.to_owned(),
            vec![("cookie", format!("sluiceAuthorization={token}"))],
        ),
        ("query", format!("{path}&access_token={token}"), vec![]),
        ("query", format!("{path}&authorization={token}"), vec![]),
        (
            "other header",
            path.to_owned(),
            vec![("x-access-token", token.clone())],
        ),
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let response = get_with(&hub, &path, &headers).await;
        assert_eq!(response.status, 401, "token in the {what}");
        assert_eq!(
            challenge_error(&response),
            None,
            "{what}: treated as no token"
        );
    }
    // The right header with another scheme is malformed, not absent.
    let basic = format!("Basic {token}");
    let response = get_with(&hub, path, &[("authorization", &basic)]).await;
    assert_eq!(response.status, 401);
    assert_eq!(
        challenge_error(&response).as_deref(),
        Some("invalid_request")
    );
    // A subscribe token is no publish token: the directions have their own keys.
    let bearer = format!("Bearer {}", subscribe_token(&["orders.>"]));
    let body = json!({ "topic": "orders.eu", "payload": 1 });
    let response = publish_with(&hub, &body, &[("authorization", &bearer)]).await;
    assert_eq!(response.status, 401, "{}", response.text());
    assert_eq!(challenge_error(&response).as_deref(), Some("invalid_token"));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_cannot_escalate_a_grant() {
    let hub = Embedded.start(auth_config()).await;
    let bearer = format!("Bearer {}", subscribe_token(&["orders.*"]));
    let auth = [("authorization", bearer.as_str())];
    for path in [
        "/events?topic=%3E",
        "/events?topic=orders.%3E",
        "/events?topic=*.eu",
        "/events?topic=*",
        "/events?topic=orders.eu.x",
        "/events?topic=orders",
        "/events?topic=orders.eu&topic=users.1",
        "/events/orders/eu/x",
    ] {
        let response = get_with(&hub, path, &auth).await;
        assert_eq!(response.status, 403, "{path}: {}", response.text());
        assert_eq!(
            challenge_error(&response).as_deref(),
            Some("insufficient_scope")
        );
    }
    let mut allowed = hub
        .subscribe_with("?topic=orders.*&topic=orders.eu", &auth)
        .await;
    expect_event(&mut allowed, "connected")
        .await
        .expect("inside the grant");

    // Publishing: a grant of `orders.*` covers one token below `orders`, nothing else.
    let claims = json!({ "exp": now() + 600, "sluice": { "publish": ["orders.*"] } });
    let bearer = format!("Bearer {}", sign(Algorithm::HS256, PUBLISH_SECRET, &claims));
    for topic in ["orders.eu.x", "orders", "users.1"] {
        let body = json!({ "topic": topic, "payload": 1 });
        let response = publish_with(&hub, &body, &[("authorization", &bearer)]).await;
        assert_eq!(response.status, 403, "{topic}: {}", response.text());
    }
    let body = json!({ "topic": "orders.eu", "payload": 1 });
    let stored = publish_with(&hub, &body, &[("authorization", &bearer)]).await;
    assert_eq!(stored.status, 200, "{}", stored.text());
    assert_eq!(
        stored.json().unwrap()["seq"],
        1,
        "the refusals stored nothing"
    );
    let message = expect_event(&mut allowed, "message").await.unwrap();
    assert_eq!(data(&message)["topic"], "orders.eu");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_breaks_and_nul_in_topics_are_refused_everywhere() {
    let hub = Embedded.start(Config::default()).await;
    let paths = [
        "/events?topic=a%0Db",
        "/events?topic=a%0D%0Aevent:%20x",
        "/events?topic=a%00b",
        "/events?topic=a%0A%0Adata:%20x",
        "/events/a%0Aevent:%20x",
        "/events/a%0D%0Adata:%20x/b",
    ];
    assert_refused(
        &hub,
        &paths,
        &["a\nb", "a\r\nevent: x", "a\0b", "a\u{2028}b"],
    )
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_cannot_forge_events_ids_or_retry() {
    let hub = Embedded.start(Config::default()).await;
    let mut client = hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    let forged = "x\r\rid: 999-1\rretry: 1\revent: token_expired\rdata: {}\r\r";
    let sent = hub.publish("t", json!(forged)).await;
    let again = hub
        .publish("t", json!({ "nested": "\u{85}\u{2028}\n\nid: 1" }))
        .await;
    let first = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(first.id.as_deref(), sent["id"].as_str());
    assert_eq!(first.retry, None, "no retry field was injected");
    assert_eq!(data(&first)["payload"], forged);
    let second = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(second.id.as_deref(), again["id"].as_str());
    assert_eq!(client.last_event_id(), again["id"].as_str().unwrap());
    hub.stop().await;
}

#[test]
fn stream_names_that_leave_the_data_directory_are_refused_in_the_config() {
    for name in ["../x", "..", "a/b", "a\\b", "/etc", ".hidden", "x\0"] {
        let name = toml::Value::String(name.to_owned()).to_string();
        let text = format!(
            "[embedded]\nstream = {name}\n[[embedded.streams]]\nname = {name}\nsubjects = [\">\"]\n"
        );
        let err = load_str(&text, "traversal", Vec::new(), &Default::default())
            .expect_err("a path is not a stream name")
            .to_string();
        assert!(err.contains("embedded.streams[0].name"), "{name}: {err}");
    }
    // The served stream must be declared, so it cannot name a path either.
    let text = "[embedded]\nstream = \"../sluice\"\n";
    let err = load_str(text, "traversal", Vec::new(), &Default::default())
        .expect_err("undeclared")
        .to_string();
    assert!(err.contains("embedded.stream"), "{err}");
}

#[test]
fn stream_lookups_and_creation_never_leave_the_data_directory() {
    let root = tempfile::tempdir().expect("tempdir");
    // A real stream `x` in a directory next to the data directory.
    let (outside, _) = Store::open(root.path(), StoreOptions::default()).expect("open");
    let config = |name: &str| StreamConfig::new(name, [">"]);
    outside.create_stream(config("x")).expect("sibling stream");
    outside.close();
    let before = std::fs::read_dir(root.path()).unwrap().count();

    let data = root.path().join("data");
    let (store, _) = Store::open(&data, StoreOptions::default()).expect("open");
    // What `sluice stream info ../x` and `purge ../x` look up.
    for name in ["../x", "../data/../x", "..", "/x", "x/../../x"] {
        assert!(store.stream(name).is_none(), "{name:?} found outside");
        assert!(
            store.create_stream(config(name)).is_err(),
            "{name:?} created"
        );
    }
    assert!(store.list().is_empty());
    store.close();
    // Nothing was created next to the data directory (only `data` itself is new).
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_in_event_paths_are_invalid_topics() {
    let hub = Embedded.start(Config::default()).await;
    let paths = [
        "/events/..%2F..",
        "/events/..%2F..%2Fetc%2Fpasswd",
        "/events/../../etc/passwd",
        "/events/%2E%2E/x",
        "/events/a/../b",
        "/events/a//b",
    ];
    assert_refused(&hub, &paths, &["../x", "a/../b", "..", "a..b"]).await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_publish_bodies_are_refused_before_authorization_or_storage() {
    let mut config = auth_config();
    config.limits.max_publish_body = 1024;
    let hub = Embedded.start(config).await;
    let claims = json!({ "exp": now() + 600, "sluice": { "publish": [">"] } });
    let bearer = format!("Bearer {}", sign(Algorithm::HS256, PUBLISH_SECRET, &claims));
    let big = json!({ "topic": "t", "payload": "x".repeat(4096) });
    let response = publish_with(&hub, &big, &[("authorization", &bearer)]).await;
    assert_eq!(response.status, 413, "{}", response.text());
    // Without a token the size is still what refuses it, or the missing token: never stored.
    let response = publish_with(&hub, &big, &[]).await;
    assert!(
        matches!(response.status.as_u16(), 401 | 413),
        "{}",
        response.status
    );
    // Exactly at the limit is fine.
    let payload = "y".repeat(1024 - json!({ "topic": "t", "payload": "" }).to_string().len());
    let fits = json!({ "topic": "t", "payload": payload });
    assert_eq!(fits.to_string().len(), 1024);
    let stored = publish_with(&hub, &fits, &[("authorization", &bearer)]).await;
    assert_eq!(stored.status, 200, "{}", stored.text());
    assert_eq!(
        stored.json().unwrap()["seq"],
        1,
        "the oversized bodies stored nothing"
    );
    hub.stop().await;
}

/// Every path is refused with 400, every publish of a topic too, and nothing was stored.
async fn assert_refused(hub: &TestHub, paths: &[&str], topics: &[&str]) {
    for path in paths {
        let response = hub.get(path).await;
        assert_eq!(response.status, 400, "{path}: {}", response.text());
    }
    for topic in topics {
        let response = hub
            .publish_raw(json!({ "topic": topic, "payload": 1 }))
            .await;
        assert_eq!(response.status, 400, "{topic:?}: {}", response.text());
    }
    assert_nothing_stored(hub).await;
}

/// Sends `request` on a new connection and reads until the hub closes it: the last answer's
/// `(status, JSON body)` (`Null` when the body is not JSON), and all that arrived.
async fn exchange(hub: &TestHub, request: &str) -> (u16, Value, String) {
    let mut socket = tokio::net::TcpStream::connect(hub.addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        socket.read_to_end(&mut answer),
    )
    .await
    .expect("the hub answers and closes")
    .expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    // The last status line (a description may name HTTP/1.1 too).
    let status_of = |text: &str| text.split(' ').nth(1)?.parse::<u16>().ok();
    let last = answer
        .match_indices("HTTP/1.")
        .map(|(at, _)| at)
        .filter(|&at| status_of(&answer[at..]).is_some())
        .last()
        .unwrap_or_else(|| panic!("no answer to {request:?}: {answer:?}"));
    let (head, body) = answer[last..]
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete answer to {request:?}: {answer:?}"));
    let status = status_of(head).expect("a status");
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    (status, body, answer)
}

/// Asserts the hub's JSON error shape with `status` as its code.
fn assert_json_error(status: u16, body: &Value, expected: u16, what: &str) {
    assert_eq!(status, expected, "{what}: {body}");
    assert_eq!(body["code"], expected, "{what}: {body}");
    assert!(body["description"].is_string(), "{what}: {body}");
}

/// HTTP/1.1 needs exactly one `Host` (RFC 9112 §3.2): without it, or with two, an event
/// stream (which the connection layer reads itself) and a request served by hyper are both a
/// JSON 400, counted; HTTP/1.0 may still leave it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_repeated_host_is_a_400_on_http_1_1() {
    let hub = Embedded.start(Config::default()).await;
    let stream = "GET /events?topic=t HTTP/1.1\r\nAccept: text/event-stream\r\n";
    let cases = [
        ("a stream without Host", format!("{stream}\r\n")),
        (
            "a stream with two",
            format!("{stream}Host: a\r\nHost: b\r\n\r\n"),
        ),
        (
            "a probe without Host",
            "GET /livez HTTP/1.1\r\n\r\n".to_owned(),
        ),
        (
            "a publish with two",
            "POST /publish HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}"
                .to_owned(),
        ),
        (
            "a stream after a first request, on hyper",
            format!("GET /livez HTTP/1.1\r\nHost: a\r\n\r\n{stream}\r\n"),
        ),
    ];
    for (what, request) in &cases {
        let (status, body, answer) = exchange(&hub, request).await;
        if what.ends_with("on hyper") {
            // The probe's answer comes first, on the same connection.
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        assert_json_error(status, &body, 400, what);
        assert!(
            body["description"].as_str().unwrap().contains("Host"),
            "{body}"
        );
    }
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"bad_request\"}"),
        5
    );
    let (status, body, _) = exchange(&hub, "GET /livez HTTP/1.0\r\n\r\n").await;
    assert_eq!((status, &body["status"]), (200, &json!("ok")), "HTTP/1.0");
    assert_nothing_stored(&hub).await;
    hub.stop().await;
}

/// A `Transfer-Encoding` other than exactly `chunked` is a JSON 501 and nothing is stored
/// (the hub decodes no other coding: `gzip, chunked` would be stored as if it were plain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_other_than_chunked_are_a_501() {
    let hub = Embedded.start(Config::default()).await;
    let body = r#"{"topic":"t","payload":"x"}"#;
    let request = |coding: &str| {
        format!(
            "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: {coding}\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        )
    };
    for coding in ["gzip, chunked", "identity, chunked", "deflate,chunked"] {
        let (status, answer, _) = exchange(&hub, &request(coding)).await;
        assert_json_error(status, &answer, 501, coding);
    }
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"transfer_encoding\"}"),
        3
    );
    assert_nothing_stored(&hub).await;
    let (status, answer, _) = exchange(&hub, &request("chunked")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["seq"], 2);
    hub.stop().await;
}

/// The path form's 400 for a topic that does not decode is the JSON error like every other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_topic_that_does_not_decode_is_a_json_400() {
    let hub = Embedded.start(Config::default()).await;
    for path in ["/events/chat.room%FF", "/events/a/%C3"] {
        let response = hub.get(path).await;
        let body = response.json().expect("a JSON error");
        assert_json_error(response.status.as_u16(), &body, 400, path);
    }
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"bad_request\"}"),
        2
    );
    hub.stop().await;
}

/// A body over `limits.max_publish_body` is a JSON 413, counted as `body_too_large`, whether
/// its `Content-Length` says so or its chunks pass the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_a_json_413_and_counted() {
    let mut config = Config::default();
    config.limits.max_publish_body = 1024;
    let hub = Embedded.start(config).await;
    let big = json!({ "topic": "t", "payload": "x".repeat(4096) });
    let response = hub.publish_raw(big.clone()).await;
    let body = response.json().expect("a JSON error");
    assert_json_error(response.status.as_u16(), &body, 413, "declared");
    let big = big.to_string();
    let chunked = format!(
        "POST /publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let (status, body, _) = exchange(&hub, &chunked).await;
    assert_json_error(status, &body, 413, "chunked");
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"body_too_large\"}"),
        2
    );
    assert_nothing_stored(&hub).await;
    hub.stop().await;
}

/// A browser sends a cookie with the requests other sites make, a `text/plain` form `POST`
/// included: a token in a cookie publishes and administers only from the hub's own origin or
/// a trusted one (`[cors] allowed_origins`), and a request that names no origin is refused.
/// A token in the `Authorization` header is never sent by a browser on its own, so it is not
/// checked; nothing refused is stored or purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_publishes_and_administers_only_from_the_hubs_own_or_a_trusted_origin() {
    let text = format!(
        "[cors]\nallowed_origins = [\"https://app.example\", \"*\"]\n\
         [auth.publish]\nalgorithms = [\"HS256\"]\ncookie_name = \"pub\"\n\
         keys = [{{ type = \"hmac\", secret = \"{PUBLISH_SECRET}\" }}]\n\
         [auth.admin]\nalgorithms = [\"HS256\"]\ncookie_name = \"adm\"\n\
         keys = [{{ type = \"hmac\", secret = \"{SUBSCRIBE_SECRET}\" }}]\n"
    );
    let config = load_str(&text, "cookie test", Vec::new(), &Default::default())
        .expect("config")
        .0;
    let hub = Embedded.start(config).await;
    let publisher = sign(
        Algorithm::HS256,
        PUBLISH_SECRET,
        &json!({ "exp": now() + 600, "sluice": { "publish": [">"] } }),
    );
    let admin = sign(
        Algorithm::HS256,
        SUBSCRIBE_SECRET,
        &json!({ "exp": now() + 600, "sluice": { "admin": true } }),
    );
    let own = format!("http://{}", hub.addr);
    let publish = |from: &str, credentials: &str| {
        let body = r#"{"topic":"t","payload":1}"#;
        format!(
            "POST /publish HTTP/1.1\r\nHost: {}\r\n{from}{credentials}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            hub.addr,
            body.len()
        )
    };
    let cookie = format!("Cookie: pub={publisher}");
    let bearer = format!("Authorization: Bearer {publisher}");
    let mut stored = 0;
    for (from, credentials, expected) in [
        ("Origin: https://evil.example\r\n", &cookie, 403),
        ("Referer: https://evil.example/form.html\r\n", &cookie, 403),
        ("Origin: null\r\n", &cookie, 403),
        ("", &cookie, 403),
        // `*` in [cors] grants no credentials, so it trusts no origin for a cookie.
        ("Origin: https://other.example\r\n", &cookie, 403),
        ("Origin: https://app.example\r\n", &cookie, 200),
        (&format!("Origin: {own}\r\n"), &cookie, 200),
        ("Origin: https://evil.example\r\n", &bearer, 200),
    ] {
        let (status, body, answer) = exchange(&hub, &publish(from, credentials)).await;
        if expected == 200 {
            assert_eq!(status, 200, "{from}{credentials}: {answer}");
            stored += 1;
            assert_eq!(body["seq"], stored, "{answer}");
        } else {
            assert_json_error(status, &body, 403, from);
            let description = body["description"].as_str().unwrap_or("");
            assert!(description.contains("cookie"), "{description}");
        }
    }
    let purge = |from: &str| {
        format!(
            "POST /admin/streams/sluice/purge HTTP/1.1\r\nHost: {}\r\n{from}Cookie: adm={admin}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            hub.addr
        )
    };
    let (status, body, _) = exchange(&hub, &purge("Origin: https://evil.example\r\n")).await;
    assert_json_error(status, &body, 403, "a cross-site purge");
    let (_, body, answer) = exchange(&hub, &publish("", &bearer)).await;
    assert_eq!(body["seq"], stored + 1, "nothing purged: {answer}");
    let (status, _, answer) = exchange(&hub, &purge(&format!("Origin: {own}\r\n"))).await;
    assert_eq!(status, 200, "{answer}");
}

/// Every refusal of a token is the hub's JSON error, on each endpoint that checks one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_refusals_are_json_errors_everywhere() {
    let hub = Embedded.start(auth_config()).await;
    for request in [
        "GET /events?topic=t HTTP/1.1\r\nAccept: text/event-stream\r\n",
        "GET /stream?topic=t HTTP/1.1\r\n",
        "POST /publish HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n",
    ] {
        let body = if request.starts_with("POST") {
            "{}"
        } else {
            ""
        };
        let request = format!(
            "{request}Host: {}\r\nConnection: close\r\n\r\n{body}",
            hub.addr
        );
        let (status, body, answer) = exchange(&hub, &request).await;
        assert_json_error(status, &body, 401, &request);
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{answer}"
        );
    }
}

/// `admin.loopback` lets an operator on the hub's machine in without a token, and nobody
/// else: not a request forwarded by a proxy on the same machine, not a page whose name was
/// rebound to 127.0.0.1 (its `Host` is its own name), not another site's page in a local
/// browser (its `Origin` names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loopback_admin_api_answers_only_a_local_operator() {
    let mut config = Config::default();
    config.admin.loopback = true;
    let hub = Embedded.start(config).await;
    hub.publish("t", json!(1)).await;
    let port = hub.addr.port();
    let request = |method: &str, path: &str, extra: &str| {
        format!("{method} {path} HTTP/1.1\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let local = format!("Host: 127.0.0.1:{port}\r\n");
    for (extra, expected) in [
        (local.clone(), 200),
        (format!("Host: localhost:{port}\r\n"), 200),
        (format!("Host: [::1]:{port}\r\n"), 200),
        (format!("Host: rebound.example:{port}\r\n"), 404),
        (format!("{local}X-Forwarded-For: 203.0.113.7\r\n"), 404),
        (format!("{local}Forwarded: for=203.0.113.7\r\n"), 404),
    ] {
        let (status, body, answer) =
            exchange(&hub, &request("GET", "/admin/streams", &extra)).await;
        assert_eq!(status, expected, "{extra}: {answer}");
        if expected == 404 {
            assert_json_error(status, &body, 404, &extra);
        }
    }
    let purge = "/admin/streams/sluice/purge";
    let cross_site = format!("{local}Origin: https://evil.example\r\n");
    let (status, _, answer) = exchange(&hub, &request("POST", purge, &cross_site)).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(hub.publish("t", json!(2)).await["seq"], 2, "nothing purged");
    let own_page = format!("{local}Origin: http://127.0.0.1:{port}\r\n");
    let (status, body, answer) = exchange(&hub, &request("POST", purge, &own_page)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(body["purged"], 2);
}
