//! Mercure's tokens: found where Mercure looks for them, verified by the hub's token verifier
//! with the `[mercure]` keys, read as Mercure claims.
//!
//! A subscriber's token comes from the `Authorization: Bearer` header, else the
//! `authorization` query parameter, else the cookie (`mercure.cookie_name`), as Mercure looks
//! for it; a publisher's from the header, else the cookie. `exp` is checked when present but
//! not required (Mercure does not require it), except in an access token.
//!
//! An access token of the 1.0 draft (JOSE `typ` `at+jwt`, RFC 9068) must also carry `exp`,
//! name `mercure.audience` in `aud` and have `mercure.issuer` as `iss` (when configured); a
//! subscription made with one ends when it expires.
//!
//! A token is verified once: what it grants is kept in the verifier's cache of verified tokens
//! (`auth::cache`) and served from there while its `exp` and `nbf` still hold.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use jsonwebtoken::{Algorithm, decode_header};
use serde::Deserialize;
use sluice_mercure::claims::is_access_token_type;
use sluice_mercure::{Claims, Grants};

use crate::auth::cache::{TimeWindow, TokenCache};
use crate::auth::config::{DEFAULT_LEEWAY, DEFAULT_MAX_FILTERS, DEFAULT_MAX_TOKEN_BYTES};
use crate::auth::keys::{KeySet, VerifyingKey};
use crate::auth::token::TokenRules;
use crate::auth::{
    AuthConfigError, AuthError, DirectionConfig, Secret, TokenPlaces, extract_token,
};
use sluice_core::metrics::Counters;

/// One direction's key and rules.
pub struct Verifier {
    rules: TokenRules,
    keys: Option<KeySet>,
    audience: Option<String>,
    issuer: Option<String>,
    /// Tokens verified with `keys`. The key changes only with the configuration (a new hub),
    /// and every caller passes the hub's one base URL, so a token's grants never go stale.
    verified: TokenCache<Accepted>,
}

/// What a verified token grants, and for how long.
#[derive(Debug)]
pub struct Verified {
    /// The grants, shared by every request with the same token.
    pub grants: Arc<Grants>,
    /// When an access token expires (none for other tokens).
    pub expires_in: Option<Duration>,
    /// The token came in the cookie, which a browser sends with any site's request.
    pub from_cookie: bool,
}

/// What the cache keeps of a verified token.
#[derive(Clone)]
struct Accepted {
    grants: Arc<Grants>,
    /// An access token's `exp`, since the Unix epoch.
    access_token_exp: Option<Duration>,
}

/// The claims read from a Mercure token.
#[derive(Deserialize)]
struct TokenClaims {
    #[serde(flatten)]
    claims: Claims,
    #[serde(default)]
    exp: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("has_key", &self.keys.is_some())
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// The verifier of `<name>_key` and `<name>_alg` (no key: every token is refused), with
    /// the audience and issuer access tokens must name; its token cache counts its lookups in
    /// `cache_lookups`.
    pub fn new(
        name: &str,
        key: Option<&Secret>,
        alg: &str,
        audience: Option<&str>,
        issuer: Option<&str>,
        cache_lookups: Counters,
    ) -> Result<Self, AuthConfigError> {
        let invalid = |err: crate::config::error::ConfigError| {
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
        Ok(Self {
            rules,
            keys,
            audience: audience.map(str::to_owned),
            issuer: issuer.map(str::to_owned),
            verified: TokenCache::new(cache_lookups),
        })
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
    ) -> Result<Option<Verified>, AuthError> {
        let header_only = TokenPlaces::default();
        let mut from_cookie = false;
        let token = match extract_token(headers, None, header_only)? {
            Some(found) => Some(found.token),
            None => match query_token.filter(|token| !token.is_empty()) {
                Some(token) => Some(token),
                None => {
                    let cookie = TokenPlaces {
                        cookie_name: Some(cookie),
                        query_param: None,
                    };
                    let found = extract_token(headers, None, cookie)?;
                    from_cookie = found.is_some();
                    found.map(|found| found.token)
                }
            },
        };
        let Some(token) = token else {
            return Ok(None);
        };
        let keys = self.keys.as_ref().ok_or(AuthError::WrongAlgorithm)?;
        let now = SystemTime::now();
        let accepted = self
            .verified
            .get_or_verify(token, now, || self.verify(token, keys, base))?;
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        // `exp` itself was checked by the verifier (with its leeway), and again by the cache.
        let expires_in = accepted
            .access_token_exp
            .map(|exp| exp.saturating_sub(since_epoch).max(Duration::from_secs(1)));
        Ok(Some(Verified {
            grants: accepted.grants,
            expires_in,
            from_cookie,
        }))
    }

    /// Verifies `token` with `keys` and compiles its grants; the window it may be used in.
    fn verify(
        &self,
        token: &str,
        keys: &KeySet,
        base: &str,
    ) -> Result<(Accepted, TimeWindow), AuthError> {
        let token_claims: TokenClaims = self.rules.verify_claims(token, keys)?;
        // The signature verified, so the header decodes.
        let typ = decode_header(token).ok().and_then(|header| header.typ);
        let access_token_exp = if is_access_token_type(typ.as_deref()) {
            Some(self.check_access_token(&token_claims)?)
        } else {
            None
        };
        let grants = token_claims.claims.grants(base).map_err(|err| {
            tracing::info!(error = %err, "Mercure claims refused");
            AuthError::InvalidToken("the mercure claim or authorization_details are malformed")
        })?;
        let accepted = Accepted {
            grants: Arc::new(grants),
            access_token_exp,
        };
        Ok((
            accepted,
            self.rules.window(token_claims.exp, token_claims.nbf),
        ))
    }

    /// The RFC 9068 checks of an access token; its `exp`, since the Unix epoch.
    fn check_access_token(&self, token: &TokenClaims) -> Result<Duration, AuthError> {
        let claims = &token.claims;
        let Some(audience) = &self.audience else {
            // A hub must know its resource identifier to accept access tokens.
            return Err(AuthError::WrongAudience);
        };
        if !claims.audience_contains(audience) {
            return Err(AuthError::WrongAudience);
        }
        if let Some(issuer) = &self.issuer
            && claims.iss.as_deref() != Some(issuer.as_str())
        {
            return Err(AuthError::WrongIssuer);
        }
        let exp = token
            .exp
            .ok_or(AuthError::InvalidToken("an access token needs exp"))?;
        Duration::try_from_secs_f64(exp).map_err(|_| AuthError::InvalidToken("exp is not a time"))
    }
}
