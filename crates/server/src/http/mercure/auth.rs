//! Mercure's tokens: found where Mercure looks for them, verified by the hub's token verifier
//! with the `[mercure]` keys, read as Mercure claims.
//!
//! A subscriber's token comes from the `Authorization: Bearer` header, else the
//! `authorization` query parameter, else the cookie (`mercure.cookie_name`), as Mercure looks
//! for it; a publisher's from the header, else the cookie. `exp` is checked when present but
//! not required (Mercure does not require it).

use axum::http::HeaderMap;
use jsonwebtoken::Algorithm;
use sluice_mercure::{Claims, Grants};

use crate::auth::config::{DEFAULT_LEEWAY, DEFAULT_MAX_FILTERS, DEFAULT_MAX_TOKEN_BYTES};
use crate::auth::keys::{KeySet, VerifyingKey};
use crate::auth::token::TokenRules;
use crate::auth::{
    AuthConfigError, AuthError, DirectionConfig, Secret, TokenPlaces, extract_token,
};

/// One direction's key and rules.
pub struct Verifier {
    rules: TokenRules,
    keys: Option<KeySet>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("has_key", &self.keys.is_some())
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// The verifier of `<name>_key` and `<name>_alg` (no key: every token is refused).
    pub fn new(name: &str, key: Option<&Secret>, alg: &str) -> Result<Self, AuthConfigError> {
        let invalid = |err: crate::config::ConfigError| {
            AuthConfigError::invalid(format!("{name}_key"), "(hidden)", err.to_string())
        };
        let key = super::config::key(name, key, alg).map_err(invalid)?;
        let algorithm = key.as_ref().map_or(Algorithm::HS256, |(_, alg)| *alg);
        let rules = TokenRules::new(&DirectionConfig {
            keys: Vec::new(),
            algorithms: vec![algorithm],
            cookie_name: None,
            query_param: None,
            leeway: DEFAULT_LEEWAY,
            audience: None,
            issuer: None,
            require_exp: false,
            anonymous: Vec::new(),
            max_token_bytes: DEFAULT_MAX_TOKEN_BYTES,
            max_filters: DEFAULT_MAX_FILTERS,
        });
        let keys = key.map(|(key, algorithm)| KeySet {
            keys: vec![VerifyingKey {
                id: None,
                algorithm: Some(algorithm),
                key,
            }],
        });
        Ok(Self { rules, keys })
    }

    /// The grants of the request's token; `Ok(None)` when it carries none. `query_token` is
    /// the decoded `authorization` query parameter (subscribers only), `cookie` the cookie's
    /// name. `base` resolves relative patterns.
    pub fn grants(
        &self,
        headers: &HeaderMap,
        query_token: Option<&str>,
        cookie: &str,
        base: &str,
    ) -> Result<Option<Grants>, AuthError> {
        let header_only = TokenPlaces::default();
        let token = match extract_token(headers, None, header_only)? {
            Some(found) => Some(found.token),
            None => match query_token.filter(|token| !token.is_empty()) {
                Some(token) => Some(token),
                None => {
                    let cookie = TokenPlaces {
                        cookie_name: Some(cookie),
                        query_param: None,
                    };
                    extract_token(headers, None, cookie)?.map(|found| found.token)
                }
            },
        };
        let Some(token) = token else {
            return Ok(None);
        };
        let keys = self.keys.as_ref().ok_or(AuthError::WrongAlgorithm)?;
        let claims: Claims = self.rules.verify_claims(token, keys)?;
        let grants = claims.grants(base).map_err(|err| {
            tracing::info!(error = %err, "Mercure claims refused");
            AuthError::InvalidToken("the mercure claim or authorization_details are malformed")
        })?;
        Ok(Some(grants))
    }
}
