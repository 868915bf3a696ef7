//! Who may subscribe, who may publish and who may administer streams: JWT bearer tokens
//! checked per direction.
//!
//! Per request the hub calls [`Authenticator::authenticate`] with the direction, the request
//! headers and the raw query string, gets a [`Grant`] (or an [`AuthError`] that is already an
//! HTTP answer), checks every requested topic with [`Grant::check_subscribe`] or
//! [`Grant::check_publish`] before any backend work, and ends a stream when
//! [`Grant::expires_in`] elapses. [`Authenticator::reload`] re-reads key files; the hub calls it on SIGHUP
//! ([`Authenticator::reload_on_sighup`]) and, if it likes, when a key file changes
//! ([`Authenticator::reload_on_change`]). The configuration and claim format are described in
//! docs/AUTH.md.

pub(crate) mod cache;
mod claims;
pub(crate) mod config;
mod error;
mod extract;
mod grant;
pub(crate) mod keys;
mod origin;
mod reload;
pub(crate) mod token;

use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use axum::http::HeaderMap;
use sluice_protocol::subject::FilterSet;

pub use config::{AuthConfig, AuthConfigError, DirectionConfig, KeyConfig, PemKey, Secret};
pub use error::AuthError;
pub(crate) use error::{challenge, denial_status};
pub use extract::{FoundToken, TokenPlaces, TokenSource, extract_token};
pub use grant::{Direction, Grant};
pub(crate) use origin::{cookie_origin_allowed, request_origin};

use cache::TokenCache;
use keys::KeySet;
use sluice_core::metrics::Counters;
use token::TokenRules;

/// Checks requests against the configured tokens and keys; shared by all requests.
pub struct Authenticator {
    subscribe: Option<DirectionAuth>,
    publish: Option<DirectionAuth>,
    admin: Option<DirectionAuth>,
    /// Cross-site origins from which a token in a cookie may publish or administer (besides
    /// the hub's own): `[cors] allowed_origins`, less `*`.
    cookie_origins: Vec<String>,
}

/// One configured direction: fixed rules plus keys that [`Authenticator::reload`] swaps.
struct DirectionAuth {
    prefix: String,
    config: DirectionConfig,
    rules: TokenRules,
    anonymous: FilterSet,
    keys: RwLock<Arc<Keyed>>,
    /// Where the tokens' cache counts its lookups.
    cache_lookups: Counters,
}

/// A direction's keys and the tokens verified with them: a reload replaces both at once, so
/// no token verified with a removed key outlives it (a request still verifying with the old
/// keys stores into the old cache, which nothing reads any more).
struct Keyed {
    keys: KeySet,
    verified: TokenCache<Grant>,
}

impl Authenticator {
    /// Validates the configuration and reads every key file.
    pub fn new(config: &AuthConfig) -> Result<Self, AuthConfigError> {
        Self::counting_cache_lookups(config, Counters::default())
    }

    /// As [`Authenticator::new`], counting the verified-token cache's hits and misses in
    /// `lookups` (the hub's `sluice_token_cache_lookups_total`).
    pub(crate) fn counting_cache_lookups(
        config: &AuthConfig,
        lookups: Counters,
    ) -> Result<Self, AuthConfigError> {
        config.validate()?;
        let load = |name: &str, d: &Option<DirectionConfig>| {
            d.as_ref()
                .map(|d| DirectionAuth::new(name, d, lookups.clone()))
                .transpose()
        };
        Ok(Self {
            subscribe: load("subscribe", &config.subscribe)?,
            publish: load("publish", &config.publish)?,
            admin: load("admin", &config.admin)?,
            cookie_origins: Vec::new(),
        })
    }

    /// The same, accepting a token sent in a cookie for publishing and administration from
    /// `origins` too (exact origins; a `*` among them is ignored: it grants no credentials).
    pub fn with_cookie_origins(mut self, origins: &[String]) -> Self {
        self.cookie_origins = origins.iter().filter(|o| *o != "*").cloned().collect();
        self
    }

    /// Whether `direction` requires authorization at all.
    pub fn is_enabled(&self, direction: Direction) -> bool {
        self.direction(direction).is_some()
    }

    /// Authenticates one request for `direction`.
    ///
    /// `query` is the raw query string (`uri.query()`). Without authorization configured for
    /// the direction, everything is granted (the admin API checks [`Authenticator::is_enabled`]
    /// first: it is off, not open, without `[auth.admin]`). A request without a token gets the anonymous
    /// grant when one is configured; a request with a bad token is refused even then.
    pub fn authenticate(
        &self,
        direction: Direction,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Grant, AuthError> {
        let Some(auth) = self.direction(direction) else {
            return Ok(Grant::unrestricted(direction));
        };
        let places = TokenPlaces {
            cookie_name: auth.config.cookie_name.as_deref(),
            query_param: auth.config.query_param.as_deref(),
        };
        match extract_token(headers, query, places)? {
            // A browser sends the cookie with any site's request: a state change it authorises
            // must come from the hub's own page or a trusted origin.
            Some(found)
                if found.source == TokenSource::Cookie
                    && direction != Direction::Subscribe
                    && !cookie_origin_allowed(headers, &self.cookie_origins) =>
            {
                Err(AuthError::CrossSiteCookie)
            }
            Some(found) => auth.verify(found.token, direction),
            None if auth.anonymous.is_empty() => Err(AuthError::MissingToken),
            None => Ok(Grant::limited(
                direction,
                auth.anonymous.clone(),
                None,
                None,
            )),
        }
    }

    /// Re-reads every key (inline secrets, PEM files, JWKS files) of every direction.
    ///
    /// All or nothing: when any key fails to load, the error is returned and the keys in use
    /// stay as they were. Requests in flight keep the keys they started with. A successful
    /// reload empties the cache of verified tokens: every token is verified again with the
    /// new keys.
    pub fn reload(&self) -> Result<(), AuthConfigError> {
        let directions: Vec<&DirectionAuth> = self.configured().collect();
        let fresh = directions
            .iter()
            .map(|d| KeySet::load(&d.prefix, &d.config.keys))
            .collect::<Result<Vec<_>, _>>()?;
        for (direction, keys) in directions.into_iter().zip(fresh) {
            tracing::info!(direction = %direction.prefix, keys = keys.keys.len(), "auth keys reloaded");
            let keyed = direction.keyed(keys);
            *direction
                .keys
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Arc::new(keyed);
        }
        Ok(())
    }

    /// The directions that have authorization configured.
    fn configured(&self) -> impl Iterator<Item = &DirectionAuth> {
        [&self.subscribe, &self.publish, &self.admin]
            .into_iter()
            .flatten()
    }

    fn direction(&self, direction: Direction) -> Option<&DirectionAuth> {
        match direction {
            Direction::Subscribe => self.subscribe.as_ref(),
            Direction::Publish => self.publish.as_ref(),
            Direction::Admin => self.admin.as_ref(),
        }
    }
}

impl DirectionAuth {
    fn new(
        name: &str,
        config: &DirectionConfig,
        cache_lookups: Counters,
    ) -> Result<Self, AuthConfigError> {
        let prefix = format!("auth.{name}");
        let keys = KeySet::load(&prefix, &config.keys)?;
        let anonymous = FilterSet::new(config.anonymous.iter().cloned()).map_err(|e| {
            AuthConfigError::invalid(format!("{prefix}.anonymous"), "(list)", e.to_string())
        })?;
        let keyed = Keyed {
            keys,
            verified: TokenCache::new(cache_lookups.clone()),
        };
        Ok(Self {
            rules: TokenRules::new(config),
            anonymous,
            keys: RwLock::new(Arc::new(keyed)),
            cache_lookups,
            config: config.clone(),
            prefix,
        })
    }

    /// `keys` with an empty cache of verified tokens.
    fn keyed(&self, keys: KeySet) -> Keyed {
        Keyed {
            keys,
            verified: TokenCache::new(self.cache_lookups.clone()),
        }
    }

    /// The grant of `token` for `direction`: verified once, then taken from the cache while
    /// its `exp` and `nbf` still hold.
    fn verify(&self, token: &str, direction: Direction) -> Result<Grant, AuthError> {
        let keyed = Arc::clone(&self.keys.read().unwrap_or_else(PoisonError::into_inner));
        keyed.verified.get_or_verify(token, SystemTime::now(), || {
            self.rules.verify(token, &keyed.keys, direction)
        })
    }
}
