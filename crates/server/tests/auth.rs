//! Authorization: real tokens signed with jsonwebtoken, real key files (tests/keys, made with the
//! openssl CLI, see tests/keys/README.md) and temp files for rotation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, encode};
use serde_json::{Value, json};
use sluice_server::auth::{
    AuthConfig, AuthConfigError, AuthError, Authenticator, Direction, TokenPlaces, TokenSource,
    extract_token,
};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef-subscribe";
const OTHER_SECRET: &[u8] = b"fedcba9876543210fedcba9876543210-elsewhere";
/// base64url of `{"alg":"none","typ":"JWT"}`.
const ALG_NONE_HEADER: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";

fn key_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/keys")
        .join(name)
}

fn key_file(name: &str) -> Vec<u8> {
    std::fs::read(key_path(name)).unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims granting `subscribe` filters for ten minutes.
fn claims(subscribe: &[&str]) -> Value {
    json!({ "sub": "alice", "exp": now() + 600, "sluice": { "subscribe": subscribe } })
}

fn sign_with(alg: Algorithm, key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).unwrap()
}

fn hs(secret: &[u8]) -> EncodingKey {
    EncodingKey::from_secret(secret).unwrap()
}

fn hs256(claims: &Value) -> String {
    sign_with(Algorithm::HS256, &hs(SECRET), None, claims)
}

fn rsa(name: &str) -> EncodingKey {
    EncodingKey::from_rsa_pem(&key_file(name)).unwrap()
}

fn config(text: &str) -> AuthConfig {
    toml::from_str(text).unwrap_or_else(|e| panic!("test config does not parse: {e}\n{text}"))
}

fn authenticator(text: &str) -> Authenticator {
    Authenticator::new(&config(text)).unwrap()
}

/// Subscribe auth with one inline HMAC secret, HS256 only, a cookie and default limits.
fn hmac_auth(extra: &str) -> Authenticator {
    authenticator(&format!(
        r#"
        [subscribe]
        algorithms = ["HS256"]
        cookie_name = "sluiceAuth"
        {extra}
        [[subscribe.keys]]
        type = "hmac"
        secret = "{}"
        "#,
        std::str::from_utf8(SECRET).unwrap()
    ))
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers
}

fn cookie(headers: &mut HeaderMap, value: &str) {
    headers.append(header::COOKIE, HeaderValue::from_str(value).unwrap());
}

fn subscribe(
    auth: &Authenticator,
    headers: &HeaderMap,
) -> Result<sluice_server::auth::Grant, AuthError> {
    auth.authenticate(Direction::Subscribe, headers, None)
}

fn subscribe_with(
    auth: &Authenticator,
    token: &str,
) -> Result<sluice_server::auth::Grant, AuthError> {
    subscribe(auth, &bearer(token))
}

// ---------------------------------------------------------------------------------------------
// Valid tokens for every key type

#[test]
fn valid_hs256_token_grants_exactly_its_subscribe_filters() {
    let auth = hmac_auth("");
    let grant = subscribe_with(&auth, &hs256(&claims(&["orders.>"]))).unwrap();
    assert!(grant.allows_subscribe("orders.created"));
    assert!(grant.allows_subscribe("orders.eu.*"));
    assert!(!grant.allows_subscribe("payments.created"));
    assert_eq!(grant.subject(), Some("alice"));
}

#[test]
fn rsa_ec_and_eddsa_tokens_verify_against_their_pem_keys() {
    let auth = authenticator(&format!(
        r#"
        [subscribe]
        algorithms = ["RS256", "RS512", "ES256", "ES384", "EdDSA"]
        [[subscribe.keys]]
        type = "rsa"
        pem_file = "{}"
        [[subscribe.keys]]
        type = "ec"
        pem_file = "{}"
        [[subscribe.keys]]
        type = "ec"
        pem_file = "{}"
        [[subscribe.keys]]
        type = "eddsa"
        pem_file = "{}"
        "#,
        key_path("rsa_a.pub.pem").display(),
        key_path("ec256.pub.pem").display(),
        key_path("ec384.pub.pem").display(),
        key_path("ed25519.pub.pem").display(),
    ));
    let c = claims(&["a.>"]);
    let tokens = [
        sign_with(Algorithm::RS256, &rsa("rsa_a.key.pem"), None, &c),
        sign_with(Algorithm::RS512, &rsa("rsa_a.key.pem"), None, &c),
        sign_with(
            Algorithm::ES256,
            &EncodingKey::from_ec_pem(&key_file("ec256.key.pem")).unwrap(),
            None,
            &c,
        ),
        sign_with(
            Algorithm::ES384,
            &EncodingKey::from_ec_pem(&key_file("ec384.key.pem")).unwrap(),
            None,
            &c,
        ),
        sign_with(
            Algorithm::EdDSA,
            &EncodingKey::from_ed_pem(&key_file("ed25519.key.pem")).unwrap(),
            None,
            &c,
        ),
    ];
    for token in tokens {
        let grant = subscribe_with(&auth, &token).unwrap();
        assert!(grant.allows_subscribe("a.b"));
    }
}

#[test]
fn jwks_keys_are_chosen_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let jwk = |name: &str, kid: &str| {
        let mut jwk = Jwk::from_encoding_key(&rsa(name), Algorithm::RS256).unwrap();
        jwk.common.key_id = Some(kid.to_owned());
        jwk
    };
    let set = JwkSet {
        keys: vec![jwk("rsa_a.key.pem", "key-a"), jwk("rsa_b.key.pem", "key-b")],
    };
    std::fs::write(&jwks, serde_json::to_vec(&set).unwrap()).unwrap();
    let auth = authenticator(&format!(
        r#"
        [subscribe]
        algorithms = ["RS256"]
        [[subscribe.keys]]
        type = "jwks"
        file = "{}"
        "#,
        jwks.display()
    ));
    let c = claims(&["a"]);
    for (key, kid) in [("rsa_a.key.pem", "key-a"), ("rsa_b.key.pem", "key-b")] {
        let token = sign_with(Algorithm::RS256, &rsa(key), Some(kid), &c);
        assert!(subscribe_with(&auth, &token).is_ok(), "{kid}");
    }
    // Signed by key b but naming key a: only key a is tried.
    let token = sign_with(Algorithm::RS256, &rsa("rsa_b.key.pem"), Some("key-a"), &c);
    assert_eq!(
        subscribe_with(&auth, &token).unwrap_err(),
        AuthError::BadSignature
    );
    // The JWKS entries say RS256: an RS512 token is refused even though RS512 is RSA too.
    let auth512 = authenticator(&format!(
        "[subscribe]\nalgorithms = [\"RS256\", \"RS512\"]\n[[subscribe.keys]]\ntype = \"jwks\"\nfile = \"{}\"\n",
        jwks.display()
    ));
    let token = sign_with(Algorithm::RS512, &rsa("rsa_a.key.pem"), Some("key-a"), &c);
    assert_eq!(
        subscribe_with(&auth512, &token).unwrap_err(),
        AuthError::BadSignature
    );
}

// ---------------------------------------------------------------------------------------------
// Time checks

#[test]
fn expired_token_is_refused() {
    let auth = hmac_auth("");
    let mut c = claims(&["a"]);
    c["exp"] = json!(now() - 60);
    let err = subscribe_with(&auth, &hs256(&c)).unwrap_err();
    assert_eq!(err, AuthError::Expired);
    assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(err.reason(), "expired");
}

#[test]
fn token_expired_within_the_leeway_is_accepted_until_exp_plus_leeway() {
    let mut c = claims(&["a"]);
    let exp = now() - 2;
    c["exp"] = json!(exp);
    let token = hs256(&c);
    let grant = subscribe_with(&hmac_auth("leeway = \"30s\""), &token).unwrap();
    assert_eq!(
        grant.expires_at(),
        Some(UNIX_EPOCH + Duration::from_secs(exp + 30))
    );
    assert_eq!(
        subscribe_with(&hmac_auth("leeway = 0"), &token).unwrap_err(),
        AuthError::Expired
    );
}

#[test]
fn not_yet_valid_token_is_refused_unless_within_the_leeway() {
    let mut c = claims(&["a"]);
    c["nbf"] = json!(now() + 60);
    assert_eq!(
        subscribe_with(&hmac_auth(""), &hs256(&c)).unwrap_err(),
        AuthError::NotYetValid
    );
    c["nbf"] = json!(now() + 2);
    assert!(subscribe_with(&hmac_auth("leeway = \"30s\""), &hs256(&c)).is_ok());
}

#[test]
fn token_without_exp_is_refused_unless_configured_otherwise() {
    let c = json!({ "sluice": { "subscribe": ["a"] } });
    let err = subscribe_with(&hmac_auth(""), &hs256(&c)).unwrap_err();
    assert_eq!(err.reason(), "invalid_token");
    let grant = subscribe_with(&hmac_auth("require_exp = false"), &hs256(&c)).unwrap();
    assert_eq!(grant.expires_at(), None);
    assert_eq!(grant.expires_in(), None);
}

#[test]
fn grant_expiry_is_exp_plus_leeway_so_a_stream_can_end_with_its_token() {
    let mut c = claims(&["a"]);
    let exp = now() + 100;
    c["exp"] = json!(exp);
    let grant = subscribe_with(&hmac_auth("leeway = \"5s\""), &hs256(&c)).unwrap();
    assert_eq!(
        grant.expires_at(),
        Some(UNIX_EPOCH + Duration::from_secs(exp + 5))
    );
    let left = grant.expires_in().unwrap();
    assert!(
        left <= Duration::from_secs(105) && left > Duration::from_secs(60),
        "{left:?}"
    );
}

#[test]
fn fractional_and_far_future_expiry_are_accepted_without_overflow() {
    let mut c = claims(&["a"]);
    let exp = now() + 600;
    c["exp"] = json!(exp as f64 + 0.5);
    let grant = subscribe_with(&hmac_auth("leeway = 0"), &hs256(&c)).unwrap();
    assert_eq!(
        grant.expires_at(),
        Some(UNIX_EPOCH + Duration::from_secs(exp) + Duration::from_millis(500))
    );
    c["exp"] = json!(u64::MAX);
    let grant = subscribe_with(&hmac_auth(""), &hs256(&c)).unwrap();
    assert_eq!(grant.expires_at(), None);
}

// ---------------------------------------------------------------------------------------------
// Keys and algorithms

#[test]
fn token_signed_with_another_key_is_refused() {
    let c = claims(&["a"]);
    let token = sign_with(Algorithm::HS256, &hs(OTHER_SECRET), None, &c);
    let err = subscribe_with(&hmac_auth(""), &token).unwrap_err();
    assert_eq!(err, AuthError::BadSignature);
    assert_eq!(err.reason(), "bad_signature");

    let rsa_auth = authenticator(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"{}\"\n",
        key_path("rsa_a.pub.pem").display()
    ));
    let token = sign_with(Algorithm::RS256, &rsa("rsa_b.key.pem"), None, &c);
    assert_eq!(
        subscribe_with(&rsa_auth, &token).unwrap_err(),
        AuthError::BadSignature
    );
}

#[test]
fn algorithm_outside_the_configured_list_is_refused_even_with_the_right_key() {
    let token = sign_with(Algorithm::HS512, &hs(SECRET), None, &claims(&["a"]));
    let err = subscribe_with(&hmac_auth(""), &token).unwrap_err();
    assert_eq!(err, AuthError::WrongAlgorithm);
    assert_eq!(err.reason(), "wrong_algorithm");
}

#[test]
fn alg_none_token_is_refused() {
    let auth = hmac_auth("");
    let signed = hs256(&claims(&[">"]));
    let payload = signed.split('.').nth(1).unwrap();
    for token in [
        format!("{ALG_NONE_HEADER}.{payload}."),
        format!("{ALG_NONE_HEADER}.{payload}"),
    ] {
        let err = subscribe_with(&auth, &token).unwrap_err();
        assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(err.reason(), "invalid_token", "{token}");
    }
}

#[test]
fn hs256_token_keyed_with_the_rsa_public_key_is_refused() {
    // The classic confusion: the attacker uses the (public) RSA key bytes as an HMAC secret.
    let auth = authenticator(&format!(
        r#"
        [subscribe]
        algorithms = ["HS256", "RS256"]
        [[subscribe.keys]]
        type = "hmac"
        secret = "{}"
        [[subscribe.keys]]
        type = "rsa"
        pem_file = "{}"
        "#,
        std::str::from_utf8(SECRET).unwrap(),
        key_path("rsa_a.pub.pem").display()
    ));
    let public_pem = key_file("rsa_a.pub.pem");
    let public_der = DecodingKey::from_rsa_pem(&public_pem)
        .unwrap()
        .try_get_as_bytes()
        .unwrap()
        .to_vec();
    let c = claims(&[">"]);
    for secret in [public_pem, public_der] {
        let token = sign_with(Algorithm::HS256, &hs(&secret), None, &c);
        assert_eq!(
            subscribe_with(&auth, &token).unwrap_err(),
            AuthError::BadSignature
        );
    }
    // Against an RSA-only configuration HS256 is not even an accepted algorithm.
    let rsa_only = authenticator(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"{}\"\n",
        key_path("rsa_a.pub.pem").display()
    ));
    let token = sign_with(Algorithm::HS256, &hs(&key_file("rsa_a.pub.pem")), None, &c);
    assert_eq!(
        subscribe_with(&rsa_only, &token).unwrap_err(),
        AuthError::WrongAlgorithm
    );
}

#[test]
fn audience_and_issuer_are_checked_when_configured() {
    let auth = hmac_auth("audience = \"hub\"\nissuer = \"https://idp.example\"");
    let mut c = claims(&["a"]);
    c["aud"] = json!("hub");
    c["iss"] = json!("https://idp.example");
    assert!(subscribe_with(&auth, &hs256(&c)).is_ok());

    let mut wrong_aud = c.clone();
    wrong_aud["aud"] = json!("other");
    assert_eq!(
        subscribe_with(&auth, &hs256(&wrong_aud)).unwrap_err(),
        AuthError::WrongAudience
    );

    let mut wrong_iss = c.clone();
    wrong_iss["iss"] = json!("https://evil.example");
    assert_eq!(
        subscribe_with(&auth, &hs256(&wrong_iss)).unwrap_err(),
        AuthError::WrongIssuer
    );

    // Without a configured audience, `aud` is not checked at all.
    let mut any_aud = c.clone();
    any_aud["aud"] = json!("some-other-service");
    assert!(subscribe_with(&hmac_auth(""), &hs256(&any_aud)).is_ok());

    let mut no_aud = c.clone();
    no_aud.as_object_mut().unwrap().remove("aud");
    assert_eq!(
        subscribe_with(&auth, &hs256(&no_aud)).unwrap_err().reason(),
        "invalid_token"
    );
}

// ---------------------------------------------------------------------------------------------
// Where the token comes from

#[test]
fn token_in_the_query_is_ignored_unless_the_parameter_is_enabled() {
    let token = hs256(&claims(&["a"]));
    let query = format!("topic=a&access_token={token}");
    let disabled = hmac_auth("");
    assert_eq!(
        disabled
            .authenticate(Direction::Subscribe, &HeaderMap::new(), Some(&query))
            .unwrap_err(),
        AuthError::MissingToken
    );
    let enabled = hmac_auth("query_param = \"access_token\"");
    assert!(
        enabled
            .authenticate(Direction::Subscribe, &HeaderMap::new(), Some(&query))
            .is_ok()
    );
}

#[test]
fn cookie_carries_the_token_for_event_source() {
    let auth = hmac_auth("");
    let mut headers = HeaderMap::new();
    cookie(
        &mut headers,
        &format!("theme=dark; sluiceAuth={}; lang=en", hs256(&claims(&["a"]))),
    );
    assert!(subscribe(&auth, &headers).unwrap().allows_subscribe("a"));
}

#[test]
fn bearer_header_wins_over_cookie() {
    let auth = hmac_auth("");
    let mut headers = bearer(&hs256(&claims(&["from-header"])));
    cookie(
        &mut headers,
        &format!("sluiceAuth={}", hs256(&claims(&["from-cookie"]))),
    );
    let grant = subscribe(&auth, &headers).unwrap();
    assert!(grant.allows_subscribe("from-header"));
    assert!(!grant.allows_subscribe("from-cookie"));
}

#[test]
fn malformed_authorization_header_is_401_without_falling_back_to_the_cookie() {
    let auth = hmac_auth("");
    let valid = hs256(&claims(&["a"]));
    let malformed = [
        "Basic dXNlcjpwYXNz".to_owned(),
        "Bearer".to_owned(),
        "Bearer ".to_owned(),
        format!("Bearer {valid} extra"),
        format!("Bearer{valid}"),
        format!("Token {valid}"),
    ];
    for value in malformed {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&value).unwrap(),
        );
        cookie(&mut headers, &format!("sluiceAuth={valid}"));
        let err = subscribe(&auth, &headers).unwrap_err();
        assert_eq!(err, AuthError::MalformedHeader, "{value:?}");
        assert_eq!(err.status(), StatusCode::UNAUTHORIZED);
    }
    // Two Authorization headers are ambiguous: refused, even if both are valid.
    let mut headers = bearer(&valid);
    headers.append(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {valid}")).unwrap(),
    );
    assert_eq!(
        subscribe(&auth, &headers).unwrap_err(),
        AuthError::MalformedHeader
    );
}

#[test]
fn extraction_reports_the_source_and_accepts_a_lowercase_scheme() {
    let places = TokenPlaces {
        cookie_name: Some("c"),
        query_param: Some("t"),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("bearer abc.def.ghi"),
    );
    let found = extract_token(&headers, None, places).unwrap().unwrap();
    assert_eq!(
        (found.token, found.source),
        ("abc.def.ghi", TokenSource::Header)
    );

    let mut headers = HeaderMap::new();
    cookie(&mut headers, "other=1; c=\"x.y.z\"");
    let found = extract_token(&headers, Some("t=q.r.s"), places)
        .unwrap()
        .unwrap();
    assert_eq!((found.token, found.source), ("x.y.z", TokenSource::Cookie));

    let mut headers = HeaderMap::new();
    cookie(&mut headers, "c=");
    let found = extract_token(&headers, Some("t=&t=q.r.s"), places)
        .unwrap()
        .unwrap();
    assert_eq!((found.token, found.source), ("q.r.s", TokenSource::Query));

    assert_eq!(
        extract_token(&HeaderMap::new(), Some("x=1"), places),
        Ok(None)
    );
}

// ---------------------------------------------------------------------------------------------
// Topics

#[test]
fn topic_outside_the_claim_is_forbidden_with_403() {
    let auth = hmac_auth("");
    let grant = subscribe_with(&auth, &hs256(&claims(&["orders.>", "news"]))).unwrap();
    assert_eq!(grant.check_subscribe(["orders.created", "news"]), Ok(()));
    let err = grant
        .check_subscribe(["orders.created", "payments.created"])
        .unwrap_err();
    assert_eq!(
        err,
        AuthError::ForbiddenTopic {
            topic: "payments.created".to_owned()
        }
    );
    assert_eq!(err.status(), StatusCode::FORBIDDEN);
    assert_eq!(err.reason(), "forbidden_topic");
}

#[test]
fn wildcard_requests_wider_than_the_grant_are_refused() {
    let auth = hmac_auth("");
    let wide = subscribe_with(&auth, &hs256(&claims(&["orders.>"]))).unwrap();
    assert!(wide.allows_subscribe("orders.*"));
    assert!(wide.allows_subscribe("orders.eu.>"));
    assert!(!wide.allows_subscribe(">"));
    assert!(!wide.allows_subscribe("*.created"));
    assert!(!wide.allows_subscribe("orders"));

    let narrow = subscribe_with(&auth, &hs256(&claims(&["orders.created"]))).unwrap();
    assert!(narrow.allows_subscribe("orders.created"));
    assert!(!narrow.allows_subscribe("orders.*"));
    assert!(!narrow.allows_subscribe("orders.>"));
    assert!(!narrow.allows_subscribe(">"));
}

#[test]
fn token_without_a_sluice_claim_is_granted_nothing() {
    let c = json!({ "exp": now() + 600 });
    let grant = subscribe_with(&hmac_auth(""), &hs256(&c)).unwrap();
    assert!(!grant.allows_subscribe("a"));
}

#[test]
fn malformed_sluice_claims_are_refused() {
    let auth = hmac_auth("");
    let bad = [
        json!({ "subscribe": ["orders..created"] }),
        json!({ "subscribe": [">.orders"] }),
        json!({ "subcribe": ["a"] }),
        json!({ "subscribe": 7 }),
        json!(["a"]),
    ];
    for sluice in bad {
        let c = json!({ "exp": now() + 600, "sluice": sluice });
        let err = subscribe_with(&auth, &hs256(&c)).unwrap_err();
        assert_eq!(err.reason(), "invalid_token", "{sluice}");
    }
    // A single string is a one-filter list.
    let c = json!({ "exp": now() + 600, "sluice": { "subscribe": "a.*" } });
    assert!(
        subscribe_with(&auth, &hs256(&c))
            .unwrap()
            .allows_subscribe("a.b")
    );
}

#[test]
fn publish_grants_come_from_the_publish_list_and_only_for_publishing() {
    let auth = authenticator(&format!(
        "[publish]\nalgorithms = [\"HS256\"]\n[[publish.keys]]\ntype = \"hmac\"\nsecret = \"{}\"\n",
        std::str::from_utf8(SECRET).unwrap()
    ));
    let c =
        json!({ "exp": now() + 600, "sluice": { "subscribe": [">"], "publish": ["orders.*"] } });
    let grant = auth
        .authenticate(Direction::Publish, &bearer(&hs256(&c)), None)
        .unwrap();
    assert!(grant.allows_publish("orders.created"));
    assert!(!grant.allows_publish("payments.created"));
    assert!(!grant.allows_subscribe("orders.created"));
    assert!(grant.check_publish("payments.created").is_err());
    // Subscribing is not configured: open to all, with or without a token.
    assert!(auth.is_enabled(Direction::Publish));
    assert!(!auth.is_enabled(Direction::Subscribe));
    let open = auth
        .authenticate(Direction::Subscribe, &HeaderMap::new(), None)
        .unwrap();
    assert!(open.allows_subscribe(">"));
    assert!(!open.allows_publish("orders.created"));
}

#[test]
fn anonymous_requests_get_the_anonymous_grant_but_bad_tokens_are_still_refused() {
    let auth = hmac_auth("anonymous = [\"public.>\"]");
    let grant = subscribe(&auth, &HeaderMap::new()).unwrap();
    assert!(grant.allows_subscribe("public.news"));
    assert!(!grant.allows_subscribe("private.news"));
    let forged = sign_with(Algorithm::HS256, &hs(OTHER_SECRET), None, &claims(&[">"]));
    assert_eq!(
        subscribe_with(&auth, &forged).unwrap_err(),
        AuthError::BadSignature
    );
    assert_eq!(
        subscribe(&hmac_auth(""), &HeaderMap::new()).unwrap_err(),
        AuthError::MissingToken
    );
}

// ---------------------------------------------------------------------------------------------
// Limits

#[test]
fn oversized_token_is_refused_before_any_decoding() {
    let auth = hmac_auth("max_token_bytes = 1024");
    // Not even a JWT: the size check must come first to answer too_large.
    let garbage = "x".repeat(1025);
    assert_eq!(
        subscribe_with(&auth, &garbage).unwrap_err(),
        AuthError::TooLarge {
            what: "token",
            limit: 1024
        }
    );
    let filters: Vec<String> = (0..60).map(|i| format!("topic.number.{i}")).collect();
    let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
    let big = hs256(&claims(&filters));
    assert!(big.len() > 1024);
    let err = subscribe_with(&auth, &big).unwrap_err();
    assert_eq!(err.reason(), "too_large");
    assert!(subscribe_with(&hmac_auth(""), &big).is_ok());
}

#[test]
fn claim_with_too_many_filters_is_refused() {
    let filters: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
    let token = hs256(&claims(&filters));
    assert_eq!(
        subscribe_with(&hmac_auth("max_filters = 4"), &token).unwrap_err(),
        AuthError::TooLarge {
            what: "sluice claim",
            limit: 4
        }
    );
    assert!(subscribe_with(&hmac_auth("max_filters = 5"), &token).is_ok());
}

// ---------------------------------------------------------------------------------------------
// HTTP answers

#[test]
fn refusals_carry_a_bearer_challenge_naming_nothing_secret() {
    let missing = AuthError::MissingToken.into_response();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        missing.headers()[header::WWW_AUTHENTICATE],
        "Bearer realm=\"sluice\""
    );

    let expired = AuthError::Expired.www_authenticate();
    let expired = expired.to_str().unwrap();
    assert!(
        expired.starts_with("Bearer realm=\"sluice\", error=\"invalid_token\""),
        "{expired}"
    );
    assert!(
        expired.contains("error_description=\"the token has expired\""),
        "{expired}"
    );

    let forbidden = AuthError::ForbiddenTopic {
        topic: "secret\".plans".to_owned(),
    }
    .into_response();
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    let challenge = forbidden.headers()[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap();
    assert_eq!(
        challenge,
        "Bearer realm=\"sluice\", error=\"insufficient_scope\""
    );
}

// ---------------------------------------------------------------------------------------------
// Key rotation

fn secret_file_auth(path: &std::path::Path) -> Authenticator {
    authenticator(&format!(
        "[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"hmac\"\nsecret_file = \"{}\"\n",
        path.display()
    ))
}

#[test]
fn reload_picks_up_a_rotated_key_and_keeps_the_old_one_when_the_new_is_bad() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, [SECRET, b"\n"].concat()).unwrap();
    let auth = secret_file_auth(&secret);
    let old = hs256(&claims(&["a"]));
    let new = sign_with(Algorithm::HS256, &hs(OTHER_SECRET), None, &claims(&["a"]));
    assert!(subscribe_with(&auth, &old).is_ok());
    assert_eq!(
        subscribe_with(&auth, &new).unwrap_err(),
        AuthError::BadSignature
    );

    std::fs::write(&secret, OTHER_SECRET).unwrap();
    auth.reload().unwrap();
    assert!(subscribe_with(&auth, &new).is_ok());
    assert_eq!(
        subscribe_with(&auth, &old).unwrap_err(),
        AuthError::BadSignature
    );

    // A broken rotation is reported and changes nothing.
    std::fs::write(&secret, "").unwrap();
    assert!(matches!(auth.reload(), Err(AuthConfigError::BadKey { .. })));
    assert!(subscribe_with(&auth, &new).is_ok());
}

#[test]
fn reload_picks_up_a_rotated_pem_key() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("signer.pub.pem");
    std::fs::copy(key_path("rsa_a.pub.pem"), &pem).unwrap();
    let auth = authenticator(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"{}\"\n",
        pem.display()
    ));
    let token_b = sign_with(
        Algorithm::RS256,
        &rsa("rsa_b.key.pem"),
        None,
        &claims(&["a"]),
    );
    assert_eq!(
        subscribe_with(&auth, &token_b).unwrap_err(),
        AuthError::BadSignature
    );
    std::fs::copy(key_path("rsa_b.pub.pem"), &pem).unwrap();
    auth.reload().unwrap();
    assert!(subscribe_with(&auth, &token_b).is_ok());
}

/// Polls until `token` is accepted.
async fn wait_until_accepted(auth: &Authenticator, token: &str, what: &str) {
    sluice_test_support::eventually(&format!("{what} to reload the keys"), || {
        subscribe_with(auth, token).is_ok()
    })
    .await;
}

#[tokio::test]
async fn a_changed_key_file_is_reloaded_by_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let auth = Arc::new(secret_file_auth(&secret));
    assert_eq!(auth.key_files(), vec![secret.clone()]);
    let watcher = auth.reload_on_change(Duration::from_millis(20));
    // Rotate the way deploy tools do: write a new file, rename it into place.
    let rotated = [OTHER_SECRET, b"-rotated"].concat();
    let staged = dir.path().join("secret.new");
    std::fs::write(&staged, &rotated).unwrap();
    std::fs::rename(&staged, &secret).unwrap();
    let new = sign_with(Algorithm::HS256, &hs(&rotated), None, &claims(&["a"]));
    wait_until_accepted(&auth, &new, "a file change").await;
    assert_eq!(
        subscribe_with(&auth, &hs256(&claims(&["a"]))).unwrap_err(),
        AuthError::BadSignature
    );
    watcher.abort();
}

#[tokio::test]
async fn sighup_reloads_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let auth = Arc::new(secret_file_auth(&secret));
    let reloader = auth.reload_on_sighup().unwrap();
    let new = sign_with(Algorithm::HS256, &hs(OTHER_SECRET), None, &claims(&["a"]));
    std::fs::write(&secret, OTHER_SECRET).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until_accepted(&auth, &new, "SIGHUP").await;
    reloader.abort();
}

// ---------------------------------------------------------------------------------------------
// Configuration

fn config_error(text: &str) -> String {
    match toml::from_str::<AuthConfig>(text) {
        Err(e) => e.to_string(),
        Ok(config) => Authenticator::new(&config)
            .err()
            .expect("config accepted")
            .to_string(),
    }
}

#[test]
fn bad_configurations_are_refused_naming_key_and_value() {
    let hmac =
        "[[subscribe.keys]]\ntype = \"hmac\"\nsecret = \"0123456789abcdef0123456789abcdef\"\n";
    let cases = [
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\nleeway_secs = 5\n{hmac}"), "leeway_secs"),
        (format!("[subscribe]\nalgorithms = [\"none\"]\n{hmac}"), "none"),
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\nleeway = \"15m\"\n{hmac}"), "auth.subscribe.leeway = 15m"),
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\nleeway = \"1500ms\"\n{hmac}"), "must be whole seconds"),
        (format!("[subscribe]\n{hmac}"), "auth.subscribe.algorithms"),
        (format!("[subscribe]\nalgorithms = [\"RS256\"]\n{hmac}"), "auth.subscribe.algorithms = RS256"),
        ("[subscribe]\nalgorithms = [\"HS256\"]\n".to_owned(), "auth.subscribe.keys"),
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\ncookie_name = \"a b\"\n{hmac}"), "auth.subscribe.cookie_name = \"a b\""),
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\nanonymous = [\"a..b\"]\n{hmac}"), "auth.subscribe.anonymous[0] = \"a..b\""),
        (format!("[subscribe]\nalgorithms = [\"HS256\"]\nmax_token_bytes = 10\n{hmac}"), "auth.subscribe.max_token_bytes = 10"),
        ("[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"hmac\"\n".to_owned(), "auth.subscribe.keys[0].secret"),
        ("[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"hmac\"\nsecret = \"x\"\nsecret_file = \"/x\"\n".to_owned(), "auth.subscribe.keys[0].secret_file"),
        ("[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"hmac\"\nsecret = \"x\"\npem_file = \"/x\"\n".to_owned(), "pem_file"),
        ("[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"/nonexistent/key.pem\"\n".to_owned(), "auth.subscribe.keys[0]: cannot read /nonexistent/key.pem"),
    ];
    for (text, expected) in cases {
        let message = config_error(&text);
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}\n{text}"
        );
    }
}

#[test]
fn key_files_that_hold_no_key_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let message = config_error(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"{}\"\n",
        not_pem.display()
    ));
    assert!(message.contains("not a usable RSA public key"), "{message}");
    let empty_jwks = dir.path().join("jwks.json");
    std::fs::write(&empty_jwks, "{\"keys\": []}").unwrap();
    let message = config_error(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"jwks\"\nfile = \"{}\"\n",
        empty_jwks.display()
    ));
    assert!(message.contains("not a usable JWKS"), "{message}");
}

#[test]
fn key_sets_and_key_files_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::write(&huge, vec![b'A'; 64 * 1024 + 1]).unwrap();
    let message = config_error(&format!(
        "[subscribe]\nalgorithms = [\"RS256\"]\n[[subscribe.keys]]\ntype = \"rsa\"\npem_file = \"{}\"\n",
        huge.display()
    ));
    assert!(message.contains("larger than 65536 bytes"), "{message}");

    let jwks_of = |count: usize| {
        let keys = (0..count)
            .map(|i| {
                let secret = format!("secret-number-{i:04}-0123456789abcdef");
                let mut jwk =
                    Jwk::from_encoding_key(&hs(secret.as_bytes()), Algorithm::HS256).unwrap();
                jwk.common.key_id = Some(format!("k{i}"));
                jwk
            })
            .collect();
        serde_json::to_vec(&JwkSet { keys }).unwrap()
    };
    let jwks = dir.path().join("jwks.json");
    let text = format!(
        "[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"jwks\"\nfile = \"{}\"\n",
        jwks.display()
    );
    std::fs::write(&jwks, jwks_of(64)).unwrap();
    assert!(Authenticator::new(&config(&text)).is_ok());
    std::fs::write(&jwks, jwks_of(65)).unwrap();
    let message = config_error(&text);
    assert!(
        message.contains("auth.subscribe.keys = 65 keys"),
        "{message}"
    );
}

#[test]
fn jwks_encryption_keys_are_never_used_for_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let mut jwk = Jwk::from_encoding_key(&hs(SECRET), Algorithm::HS256).unwrap();
    jwk.common.public_key_use = Some(jsonwebtoken::jwk::PublicKeyUse::Encryption);
    std::fs::write(
        &jwks,
        serde_json::to_vec(&JwkSet { keys: vec![jwk] }).unwrap(),
    )
    .unwrap();
    let message = config_error(&format!(
        "[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"jwks\"\nfile = \"{}\"\n",
        jwks.display()
    ));
    assert!(
        message.contains("no signature verification key"),
        "{message}"
    );
}

#[test]
fn secrets_never_appear_in_debug_or_serialized_output() {
    let text = "[subscribe]\nalgorithms = [\"HS256\"]\n[[subscribe.keys]]\ntype = \"hmac\"\nsecret = \"hunter2-hunter2-hunter2-hunter2!\"\n";
    let parsed = config(text);
    let debug = format!("{parsed:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    let written = toml::to_string(&parsed).unwrap();
    assert!(!written.contains("hunter2"), "{written}");
    assert!(written.contains("(redacted)"), "{written}");
}

#[test]
fn configuration_without_inline_secrets_round_trips_through_toml() {
    let text = format!(
        r#"
        [subscribe]
        algorithms = ["RS256", "HS256"]
        cookie_name = "sluiceAuth"
        leeway = "10s"
        audience = "hub"
        anonymous = ["public.>"]
        [[subscribe.keys]]
        type = "rsa"
        id = "k1"
        pem_file = "{}"
        [[subscribe.keys]]
        type = "hmac"
        secret_file = "/etc/sluice/secret"
        "#,
        key_path("rsa_a.pub.pem").display()
    );
    let parsed = config(&text);
    let written = toml::to_string(&parsed).unwrap();
    assert_eq!(config(&written), parsed, "{written}");
    assert_eq!(toml::to_string(&AuthConfig::default()).unwrap(), "");
}

// ---------------------------------------------------------------------------------------------
// Any input

mod properties {
    use proptest::prelude::*;

    use super::*;

    const BASE64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    proptest! {
        #[test]
        fn extraction_never_panics_and_header_tokens_are_token68(
            authorization in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)),
            cookies in proptest::collection::vec(any::<u8>(), 0..200),
            query in ".{0,200}",
        ) {
            let mut headers = HeaderMap::new();
            if let Some(Ok(value)) = authorization.as_deref().map(HeaderValue::from_bytes) {
                headers.insert(header::AUTHORIZATION, value);
            }
            if let Ok(value) = HeaderValue::from_bytes(&cookies) {
                headers.insert(header::COOKIE, value);
            }
            let places = TokenPlaces { cookie_name: Some("c"), query_param: Some("t") };
            if let Ok(Some(found)) = extract_token(&headers, Some(&query), places) {
                prop_assert!(!found.token.is_empty());
                if found.source == TokenSource::Header {
                    prop_assert!(found.token.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)));
                }
            }
        }

        #[test]
        fn arbitrary_text_is_never_a_valid_token(token in "[A-Za-z0-9_.=-]{1,300}") {
            prop_assert!(subscribe_with(&hmac_auth(""), &token).is_err());
        }

        #[test]
        fn a_token_with_any_one_character_changed_is_refused(
            position in any::<prop::sample::Index>(),
            replacement in prop::sample::select(BASE64URL),
        ) {
            let token = hs256(&claims(&["a"]));
            let i = position.index(token.len());
            prop_assume!(token.as_bytes()[i] != b'.' && token.as_bytes()[i] != replacement);
            let mut tampered = token.into_bytes();
            tampered[i] = replacement;
            let tampered = String::from_utf8(tampered).unwrap();
            prop_assert!(subscribe_with(&hmac_auth(""), &tampered).is_err(), "{}", tampered);
        }
    }
}
