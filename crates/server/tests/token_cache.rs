//! The cache of verified tokens over real loopback HTTP (the embedded backend): a publisher's
//! token is verified once and then taken from the cache, on `POST /publish` and on
//! `POST /.well-known/mercure`; a cached token still expires, a key reload drops it, and a
//! token one byte away from a cached one is verified (and refused) on its own.

#[allow(unused_macros, unused_imports)]
mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;
#[path = "mercure/harness.rs"]
mod harness;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use backends::Kind;
use common::{Embedded, HubFactory, TestHub};
use harness::{Harness, PUBLISHER_KEY, form};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sluice_server::config::{Config, load_str};
use sluice_test_support::{HttpResponse, eventually_async, http};

const PUBLISH_SECRET: &str = "publish-secret-0123456789abcdef0123456789ab";
const ROTATED_SECRET: &str = "rotated-secret-0123456789abcdef0123456789ab";
const HIT: &str = "sluice_token_cache_lookups_total{result=\"hit\"}";
const MISS: &str = "sluice_token_cache_lookups_total{result=\"miss\"}";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// An HS256 token signed with `secret` for `claims`.
fn sign(secret: &str, claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes()).expect("HMAC key");
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &key).expect("sign")
}

/// A token signed with `secret` granting publishing on `orders.>` until `exp`.
fn publish_token(secret: &str, exp: u64) -> String {
    sign(
        secret,
        &json!({ "exp": exp, "sluice": { "publish": ["orders.>"] } }),
    )
}

/// `[auth.publish]` with no leeway and `key` (an inline TOML table).
fn publish_auth(key: &str) -> Config {
    let text = format!("[auth.publish]\nalgorithms = [\"HS256\"]\nleeway = 0\nkeys = [{key}]\n");
    load_str(&text, "token cache test", Vec::new(), &Default::default())
        .expect("auth config")
        .0
}

fn inline_secret() -> Config {
    publish_auth(&format!(
        "{{ type = \"hmac\", secret = \"{PUBLISH_SECRET}\" }}"
    ))
}

fn secret_file(path: &Path) -> Config {
    publish_auth(&format!(
        "{{ type = \"hmac\", secret_file = \"{}\" }}",
        path.display()
    ))
}

/// `POST /publish` of one message on `orders.created` with `token`.
async fn publish(hub: &TestHub, token: &str) -> HttpResponse {
    let bearer = format!("Bearer {token}");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
    ];
    let body = json!({ "topic": "orders.created", "payload": 1 }).to_string();
    let request = http::request("POST".parse().unwrap(), &hub.url("/publish"), &headers)
        .expect("request")
        .body(body.into())
        .expect("body");
    http::send(request).await.expect("POST")
}

/// Asserts that `answer` is the 401 of `error_description` `detail`.
/// The first answer of `post` that is not a 200, polled until `what` happens (bounded).
async fn first_refusal(what: &str, mut post: impl AsyncFnMut() -> HttpResponse) -> HttpResponse {
    let mut refusal = None;
    eventually_async(what, async || {
        let answer = post().await;
        let refused = answer.status != 200;
        refusal = Some(answer);
        refused
    })
    .await;
    refusal.expect("an answer")
}

fn assert_refused(answer: &HttpResponse, detail: &str) {
    assert_eq!(answer.status, 401, "{}", answer.text());
    let challenge = answer.header("www-authenticate").expect("a challenge");
    assert!(
        challenge.contains(&format!("error_description=\"{detail}\"")),
        "{challenge}"
    );
}

/// `token` with the byte at `at` replaced by another base64url character.
fn one_byte_off(token: &str, at: usize) -> String {
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ASCII")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_token_is_verified_once_and_then_taken_from_the_cache() {
    let hub = Embedded.start(inline_secret()).await;
    let token = publish_token(PUBLISH_SECRET, now() + 600);
    for _ in 0..3 {
        let answer = publish(&hub, &token).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!((hub.metric(MISS), hub.metric(HIT)), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_token_is_refused_once_it_expires() {
    let hub = Embedded.start(inline_secret()).await;
    let token = publish_token(PUBLISH_SECRET, now() + 2);
    for _ in 0..2 {
        let answer = publish(&hub, &token).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!(hub.metric(HIT), 1, "the second use came from the cache");
    let refusal = first_refusal("the cached token to expire", async || {
        publish(&hub, &token).await
    })
    .await;
    // Refused exactly as an expired token that was never cached: status, reason and metric.
    assert_refused(&refusal, "the token has expired");
    assert_eq!(
        hub.metric("sluice_publishes_total{result=\"unauthorized\"}"),
        1
    );
    assert_refused(&publish(&hub, &token).await, "the token has expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reload_drops_the_tokens_verified_with_the_old_key() {
    let dir = sluice_test_support::tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("publish.secret");
    std::fs::write(&path, PUBLISH_SECRET).expect("write the secret");
    let hub = Embedded.start(secret_file(&path)).await;
    let old = publish_token(PUBLISH_SECRET, now() + 600);
    for _ in 0..2 {
        assert_eq!(publish(&hub, &old).await.status, 200);
    }
    assert_eq!(hub.metric(HIT), 1, "the old token is cached");

    std::fs::write(&path, ROTATED_SECRET).expect("rotate the secret");
    hub.hub.auth().reload().expect("reload");
    assert_refused(
        &publish(&hub, &old).await,
        "the token's signature does not verify",
    );
    let new = publish_token(ROTATED_SECRET, now() + 600);
    assert_eq!(publish(&hub, &new).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_one_byte_off_a_cached_one_is_refused() {
    let hub = Embedded.start(inline_secret()).await;
    let token = publish_token(PUBLISH_SECRET, now() + 600);
    for _ in 0..2 {
        assert_eq!(publish(&hub, &token).await.status, 200);
    }
    assert_eq!(hub.metric(HIT), 1, "the token is cached");
    // The last byte of the signature, and one in the claims (which a forger would change).
    let signature_at = token.len() - 2;
    let claims_at = token.find('.').expect("three parts") + 5;
    for at in [signature_at, claims_at] {
        let answer = publish(&hub, &one_byte_off(&token, at)).await;
        assert_eq!(answer.status, 401, "byte {at}: {}", answer.text());
    }
    assert_eq!(hub.metric(HIT), 1, "neither forgery was a cache hit");
    assert_eq!(publish(&hub, &token).await.status, 200);
}

/// A Mercure publisher's token granting every topic, with `exp` when given.
fn mercure_publisher(exp: Option<u64>) -> String {
    let mut claims = json!({ "mercure": { "publish": ["*"] } });
    if let Some(exp) = exp {
        claims["exp"] = json!(exp);
    }
    sign(PUBLISHER_KEY, &claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mercure_publisher_token_is_verified_once_and_forgeries_are_refused() {
    let hub = Harness::start(Kind::Embedded, harness::config("")).await;
    let body = form(&[("topic", "https://example.com/books/1"), ("data", "x")]);
    let token = mercure_publisher(None);
    for _ in 0..3 {
        let answer = hub.post(&body, Some(&token)).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!((hub.hub().metric(MISS), hub.hub().metric(HIT)), (1, 2));
    let forged = one_byte_off(&token, token.len() - 2);
    assert_eq!(hub.post(&body, Some(&forged)).await.status, 401);
    assert_eq!(hub.hub().metric(HIT), 2, "the forgery was not a cache hit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_mercure_token_is_refused_once_it_expires() {
    let hub = Harness::start(Kind::Embedded, harness::config("")).await;
    let body = form(&[("topic", "https://example.com/books/1"), ("data", "x")]);
    // Mercure's leeway is 5 s: this token is refused from `exp` + 6 s on.
    let token = mercure_publisher(Some(now() + 1));
    for _ in 0..2 {
        let answer = hub.post(&body, Some(&token)).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!(
        hub.hub().metric(HIT),
        1,
        "the second use came from the cache"
    );
    let refusal = first_refusal("the cached Mercure token to expire", async || {
        hub.post(&body, Some(&token)).await
    })
    .await;
    assert_refused(&refusal, "the token has expired");
    assert_eq!(
        hub.hub()
            .metric("sluice_publish_refusals_total{reason=\"expired\"}"),
        1
    );
}
