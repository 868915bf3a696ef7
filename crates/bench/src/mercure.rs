//! What publishing to a Mercure hub needs beyond the shared run: the publisher's token, made
//! from the key given on the command line, and the publish form.

use std::fmt;

use anyhow::Context;
use hyper::header::HeaderValue;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// The HMAC secret the hub checks publishers' tokens with (its `mercure.publisher_jwt_key`,
/// `HS256`). Shown by no `Debug` or error message.
#[derive(Clone, PartialEq, Eq)]
pub struct PublisherKey(String);

impl PublisherKey {
    /// The key `secret`.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
}

impl fmt::Debug for PublisherKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PublisherKey(<redacted>)")
    }
}

/// The `Authorization` value of a publisher allowed every topic: `Bearer` and a token whose
/// `mercure` claim is `{"publish":["*"]}`, signed with `key`. Marked sensitive, so its `Debug`
/// hides it and HTTP/2 never puts it in the header compression table.
///
/// # Errors
/// When `key` is empty.
pub(crate) fn authorization(key: &PublisherKey) -> anyhow::Result<HeaderValue> {
    let secret = jsonwebtoken::EncodingKey::from_secret(key.0.as_bytes())
        .context("--mercure-publisher-key must not be empty")?;
    let claims = serde_json::json!({ "mercure": { "publish": ["*"] } });
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let token = jsonwebtoken::encode(&header, &claims, &secret)
        .context("cannot sign the Mercure publisher token")?;
    let mut value = HeaderValue::try_from(format!("Bearer {token}"))
        .context("the Mercure publisher token is no header value")?;
    value.set_sensitive(true);
    Ok(value)
}

/// The publish form of an update on `topic` whose data is `data` (`topic=…&data=…`).
pub(crate) fn form(topic: &str, data: &str) -> String {
    let encode = |text| utf8_percent_encode(text, NON_ALPHANUMERIC);
    format!("topic={}&data={}", encode(topic), encode(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_never_shown() {
        let key = PublisherKey::new("very-secret-key");
        assert_eq!(format!("{key:?}"), "PublisherKey(<redacted>)");
        let value = authorization(&key).unwrap();
        assert!(value.is_sensitive());
        assert!(!format!("{value:?}").contains("Bearer"), "{value:?}");
        assert!(value.to_str().unwrap().starts_with("Bearer ey"));
        let err = authorization(&PublisherKey::new("")).unwrap_err();
        assert_eq!(err.to_string(), "--mercure-publisher-key must not be empty");
    }

    #[test]
    fn the_token_grants_publishing_everywhere_signed_with_the_key() {
        let value = authorization(&PublisherKey::new("k3y")).unwrap();
        let token = value.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        validation.required_spec_claims.clear();
        let decoded = jsonwebtoken::decode::<serde_json::Value>(
            token,
            &jsonwebtoken::DecodingKey::from_secret(b"k3y").unwrap(),
            &validation,
        )
        .unwrap();
        assert_eq!(
            decoded.claims,
            serde_json::json!({ "mercure": { "publish": ["*"] } })
        );
    }

    #[test]
    fn the_form_encodes_both_fields() {
        assert_eq!(
            form("bench.0", r#"{"a":1} &="#),
            "topic=bench%2E0&data=%7B%22a%22%3A1%7D%20%26%3D"
        );
    }
}
