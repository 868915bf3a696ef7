//! Why a request was refused, as an HTTP answer and as a metric label.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sluice_core::reader::{Denial, Refusal};

/// The realm named in every `WWW-Authenticate` challenge.
pub const REALM: &str = "sluice";

/// Why a request was not let in. Messages describe the rule broken and name nothing secret
/// (no key, no claim value, no grant).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token in any accepted place, and anonymous access is not allowed.
    #[error("a token is required")]
    MissingToken,
    /// The `Authorization` header is present but not `Bearer <token>`.
    #[error("the Authorization header must be `Bearer <token>`")]
    MalformedHeader,
    /// The token or its claim is over a configured limit.
    #[error("the {what} is over the limit of {limit}")]
    TooLarge {
        /// What is too large: `token` (bytes) or `sluice claim` (filters).
        what: &'static str,
        /// The configured limit it exceeds.
        limit: usize,
    },
    /// The token is not a well-formed JWT or its claims have the wrong shape.
    #[error("the token is malformed: {0}")]
    InvalidToken(&'static str),
    /// The token's `exp` is past (beyond the leeway).
    #[error("the token has expired")]
    Expired,
    /// The token's `nbf` is in the future (beyond the leeway).
    #[error("the token is not valid yet")]
    NotYetValid,
    /// The token's algorithm is not allowed, or no configured key can verify it.
    #[error("the token's signature algorithm is not accepted")]
    WrongAlgorithm,
    /// No configured key verifies the token's signature.
    #[error("the token's signature does not verify")]
    BadSignature,
    /// The token's `aud` does not name this hub.
    #[error("the token is meant for another audience")]
    WrongAudience,
    /// The token's `iss` is not the configured issuer.
    #[error("the token comes from another issuer")]
    WrongIssuer,
    /// The token is valid for the admin API's keys but its `sluice` claim lacks `"admin": true`.
    #[error("the token does not grant stream administration")]
    NotAdmin,
    /// A token sent in a cookie, on a state-changing request from an origin that is neither
    /// the hub's own nor trusted (or that names no origin).
    #[error(
        "a token in a cookie publishes or administers only from the hub's own origin or a trusted one (its Origin or Referer must be listed)"
    )]
    CrossSiteCookie,
    /// The token is valid but does not grant this topic.
    #[error("topic {topic:?} is not granted")]
    ForbiddenTopic {
        /// The topic or filter the client asked for (its own input, not a grant).
        topic: String,
    },
}

impl AuthError {
    /// How the credentials fall short.
    pub fn denial(&self) -> Denial {
        match self {
            AuthError::MissingToken => Denial::Missing,
            AuthError::MalformedHeader => Denial::Malformed,
            AuthError::ForbiddenTopic { .. } | AuthError::NotAdmin | AuthError::CrossSiteCookie => {
                Denial::Insufficient
            }
            _ => Denial::Invalid,
        }
    }

    /// 403 when the token does not grant the request, 401 for everything else.
    pub fn status(&self) -> StatusCode {
        denial_status(self.denial())
    }

    /// A short, stable label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::MissingToken => "missing_token",
            AuthError::MalformedHeader => "malformed_header",
            AuthError::TooLarge { .. } => "too_large",
            AuthError::InvalidToken(_) => "invalid_token",
            AuthError::Expired => "expired",
            AuthError::NotYetValid => "not_yet_valid",
            AuthError::WrongAlgorithm => "wrong_algorithm",
            AuthError::BadSignature => "bad_signature",
            AuthError::WrongAudience => "wrong_audience",
            AuthError::WrongIssuer => "wrong_issuer",
            AuthError::ForbiddenTopic { .. } => "forbidden_topic",
            AuthError::NotAdmin => "not_admin",
            AuthError::CrossSiteCookie => "cross_site_cookie",
        }
    }

    /// The RFC 6750 `WWW-Authenticate` challenge for this refusal.
    pub fn www_authenticate(&self) -> HeaderValue {
        challenge(self.denial(), &self.to_string())
    }
}

/// A reader turned away by its credentials, as the hub core types it.
impl From<AuthError> for Refusal {
    fn from(err: AuthError) -> Self {
        Refusal::Denied {
            denial: err.denial(),
            reason: err.reason(),
            detail: err.to_string(),
        }
    }
}

/// 403 when credentials that verify do not grant the request, 401 otherwise.
pub(crate) fn denial_status(denial: Denial) -> StatusCode {
    match denial {
        Denial::Insufficient => StatusCode::FORBIDDEN,
        Denial::Missing | Denial::Malformed | Denial::Invalid => StatusCode::UNAUTHORIZED,
    }
}

/// The RFC 6750 `WWW-Authenticate` challenge for a refusal of credentials described by
/// `detail` (an [`AuthError`]'s fixed text).
///
/// Missing credentials get the bare challenge; other refusals add an `error` code, and bad
/// ones an `error_description`.
pub(crate) fn challenge(denial: Denial, detail: &str) -> HeaderValue {
    let challenge = match denial {
        Denial::Missing => format!("Bearer realm=\"{REALM}\""),
        Denial::Insufficient => format!("Bearer realm=\"{REALM}\", error=\"insufficient_scope\""),
        Denial::Malformed => format!(
            "Bearer realm=\"{REALM}\", error=\"invalid_request\", error_description=\"{detail}\""
        ),
        Denial::Invalid => format!(
            "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{detail}\""
        ),
    };
    // Built only from fixed ASCII text without quotes or control characters.
    HeaderValue::from_str(&challenge)
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"sluice\""))
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        // Every error the hub answers has the same shape (see `http::error_response`).
        let body = serde_json::json!({
            "code": self.status().as_u16(),
            "description": self.to_string(),
        });
        let mut response = (self.status(), axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, self.www_authenticate());
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal: its status, label and challenge.
    #[test]
    fn each_refusal_has_its_status_label_and_challenge() {
        let invalid = |description: &str| {
            format!(
                "Bearer realm=\"sluice\", error=\"invalid_token\", error_description=\"{description}\""
            )
        };
        let cases = [
            (
                AuthError::MissingToken,
                "missing_token",
                "Bearer realm=\"sluice\"".to_owned(),
            ),
            (
                AuthError::MalformedHeader,
                "malformed_header",
                "Bearer realm=\"sluice\", error=\"invalid_request\", error_description=\"the Authorization header must be `Bearer <token>`\"".to_owned(),
            ),
            (
                AuthError::TooLarge { what: "token", limit: 9 },
                "too_large",
                invalid("the token is over the limit of 9"),
            ),
            (
                AuthError::InvalidToken("bad"),
                "invalid_token",
                invalid("the token is malformed: bad"),
            ),
            (AuthError::Expired, "expired", invalid("the token has expired")),
            (AuthError::NotYetValid, "not_yet_valid", invalid("the token is not valid yet")),
            (
                AuthError::WrongAlgorithm,
                "wrong_algorithm",
                invalid("the token's signature algorithm is not accepted"),
            ),
            (
                AuthError::BadSignature,
                "bad_signature",
                invalid("the token's signature does not verify"),
            ),
            (
                AuthError::WrongAudience,
                "wrong_audience",
                invalid("the token is meant for another audience"),
            ),
            (
                AuthError::WrongIssuer,
                "wrong_issuer",
                invalid("the token comes from another issuer"),
            ),
            (
                AuthError::ForbiddenTopic { topic: "a.b".into() },
                "forbidden_topic",
                "Bearer realm=\"sluice\", error=\"insufficient_scope\"".to_owned(),
            ),
            (
                AuthError::NotAdmin,
                "not_admin",
                "Bearer realm=\"sluice\", error=\"insufficient_scope\"".to_owned(),
            ),
            (
                AuthError::CrossSiteCookie,
                "cross_site_cookie",
                "Bearer realm=\"sluice\", error=\"insufficient_scope\"".to_owned(),
            ),
        ];
        for (err, reason, challenge) in cases {
            let status = if matches!(
                reason,
                "forbidden_topic" | "not_admin" | "cross_site_cookie"
            ) {
                StatusCode::FORBIDDEN
            } else {
                StatusCode::UNAUTHORIZED
            };
            assert_eq!(err.status(), status, "{err:?}");
            assert_eq!(err.reason(), reason);
            assert_eq!(err.www_authenticate(), challenge.as_str(), "{err:?}");
            let response = err.clone().into_response();
            assert_eq!(response.status(), status);
            assert_eq!(
                response.headers()[header::WWW_AUTHENTICATE],
                challenge.as_str()
            );
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "application/json",
                "every error answer is JSON"
            );
        }
    }
}
