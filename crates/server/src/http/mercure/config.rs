//! The `[mercure]` section: the Mercure endpoints, where their updates are stored, and the keys
//! their tokens are checked with (docs/CONFIGURATION.md, docs/MERCURE.md).

use std::time::Duration;

use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde::{Deserialize, Serialize};
use sluice_mercure::{DEFAULT_BASE_URL, Scheme};
use sluice_protocol::subject::filter_is_subset;

use crate::auth::Secret;
use crate::config::error::ConfigError;
use crate::config::values::{allowed_origin, http_url};
use sluice_protocol::config_duration;

/// The cookie Mercure reads a subscriber's token from.
pub const DEFAULT_COOKIE_NAME: &str = "mercureAuthorization";

/// The Mercure hub (`[mercure]`): off unless `enabled`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MercureConfig {
    /// Serve `/.well-known/mercure` (404 when off).
    pub enabled: bool,
    /// The subject tokens the updates are stored under, in the served stream. Must lie outside
    /// `topic_prefix`, so that `GET /events` and `POST /publish` cannot reach them.
    pub subject_prefix: String,
    /// The key publishers' tokens are signed with: the secret for `HS*`, the public key in PEM
    /// for the others. Required when enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publisher_jwt_key: Option<Secret>,
    /// The publishers' signature algorithm (`HS256`, `RS256`, `ES256`, `EdDSA`, …).
    pub publisher_jwt_alg: String,
    /// The key subscribers' tokens are signed with; the publisher's when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_jwt_key: Option<Secret>,
    /// The subscribers' signature algorithm.
    pub subscriber_jwt_alg: String,
    /// Subscribers without a token are let in, and get public updates only.
    pub anonymous: bool,
    /// The cookie a subscriber's token may come in.
    pub cookie_name: String,
    /// Browser origins that may subscribe (with credentials: the cookie), or `*`.
    pub cors_origins: Vec<String>,
    /// Browser origins that may publish, or `*`.
    pub publish_origins: Vec<String>,
    /// Idle interval after which a subscription gets a `:` comment.
    #[serde(with = "config_duration")]
    pub heartbeat: Duration,
    /// The URL relative URL patterns and topics resolve against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The hub's resource identifier, which an access token (`typ: at+jwt`, 1.0 draft) must
    /// name in `aud`; without it access tokens are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The issuer an access token's `iss` must be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Active subscriptions: publish an event when a subscription starts or ends, and serve
    /// `/.well-known/mercure/subscriptions` (docs/MERCURE.md, "Active subscriptions").
    pub subscriptions: bool,
    /// How long a hub node's subscriptions stay listed by the other nodes after the last sign
    /// of life they read from it in the stream (a node renews it every third of this).
    #[serde(with = "config_duration")]
    pub subscriptions_lease: Duration,
    /// The protocol whose shape the whole collection `GET /.well-known/mercure/subscriptions`
    /// is answered in: `accept` (the 1.0 draft's when `Accept` names `application/json` and
    /// not `application/ld+json`, else 0.x), `0.x` or `draft`.
    pub subscriptions_collection: CollectionShape,
}

/// Which shape the whole subscriptions collection is answered in ([`MercureConfig`]): its path
/// is the same in both protocols, so nothing in the request itself tells them apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum CollectionShape {
    /// The 1.0 draft's when the request accepts `application/json` and not
    /// `application/ld+json`, else 0.x.
    #[default]
    #[serde(rename = "accept")]
    ByAccept,
    /// Always 0.x (JSON-LD).
    #[serde(rename = "0.x")]
    Legacy,
    /// Always the 1.0 draft's (JSON).
    #[serde(rename = "draft")]
    Draft,
}

impl<'de> Deserialize<'de> for CollectionShape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        sluice_protocol::config_choice::choice(
            deserializer,
            &[
                ("accept", Self::ByAccept),
                ("0.x", Self::Legacy),
                ("draft", Self::Draft),
            ],
        )
    }
}

/// Secrets are shown as their size only (see [`Secret`]).
impl std::fmt::Debug for MercureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MercureConfig")
            .field("enabled", &self.enabled)
            .field("subject_prefix", &self.subject_prefix)
            .field("publisher_jwt_key", &self.publisher_jwt_key)
            .field("publisher_jwt_alg", &self.publisher_jwt_alg)
            .field("subscriber_jwt_key", &self.subscriber_jwt_key)
            .field("subscriber_jwt_alg", &self.subscriber_jwt_alg)
            .field("anonymous", &self.anonymous)
            .field("cookie_name", &self.cookie_name)
            .field("cors_origins", &self.cors_origins)
            .field("publish_origins", &self.publish_origins)
            .field("heartbeat", &self.heartbeat)
            .field("base_url", &self.base_url)
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .field("subscriptions", &self.subscriptions)
            .field("subscriptions_lease", &self.subscriptions_lease)
            .field("subscriptions_collection", &self.subscriptions_collection)
            .finish()
    }
}

impl Default for MercureConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            subject_prefix: "mercure".into(),
            publisher_jwt_key: None,
            publisher_jwt_alg: "HS256".into(),
            subscriber_jwt_key: None,
            subscriber_jwt_alg: "HS256".into(),
            anonymous: false,
            cookie_name: DEFAULT_COOKIE_NAME.into(),
            cors_origins: Vec::new(),
            publish_origins: Vec::new(),
            heartbeat: Duration::from_secs(40),
            base_url: None,
            audience: None,
            issuer: None,
            subscriptions: false,
            subscriptions_lease: Duration::from_secs(30),
            subscriptions_collection: CollectionShape::ByAccept,
        }
    }
}

/// The keys of this section with no default, for the `SLUICE_MERCURE_…` variables.
pub const OPTIONAL_KEYS: &[&str] = &[
    "mercure.publisher_jwt_key",
    "mercure.subscriber_jwt_key",
    "mercure.base_url",
    "mercure.audience",
    "mercure.issuer",
];

/// Mercure's own environment variables, as its container image reads them, and the keys they
/// set (a `SLUICE_MERCURE_…` variable for the same key wins). An empty value sets nothing.
pub const MERCURE_VARIABLES: &[(&str, &str)] = &[
    ("MERCURE_PUBLISHER_JWT_KEY", "mercure.publisher_jwt_key"),
    ("MERCURE_PUBLISHER_JWT_ALG", "mercure.publisher_jwt_alg"),
    ("MERCURE_SUBSCRIBER_JWT_KEY", "mercure.subscriber_jwt_key"),
    ("MERCURE_SUBSCRIBER_JWT_ALG", "mercure.subscriber_jwt_alg"),
];

/// What Mercure's section is checked against, from the sections around it.
pub(crate) struct MercureContext<'a> {
    /// `topic_prefix`: `/events` and `/publish` must not reach Mercure's subjects.
    pub topic_prefix: &'a str,
    /// The embedded store's served stream, named in errors.
    pub served_stream: &'a str,
    /// The subjects the served stream captures, when the hub serves it itself (the embedded
    /// store): they must include Mercure's.
    pub served_subjects: Option<Vec<String>>,
}

impl MercureConfig {
    /// The base URL relative patterns resolve against.
    pub fn base_url(&self) -> &str {
        self.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL)
    }

    /// The subscribers' key and algorithm (the publishers' when none of their own is set).
    pub(crate) fn subscriber_key(&self) -> (Option<&Secret>, &str) {
        match &self.subscriber_jwt_key {
            Some(key) => (Some(key), &self.subscriber_jwt_alg),
            None => (self.publisher_jwt_key.as_ref(), &self.publisher_jwt_alg),
        }
    }

    /// Checks the section against the whole configuration (`config` holds it).
    pub(crate) fn validate(&self, context: &MercureContext<'_>) -> Result<(), ConfigError> {
        let scheme = Scheme::new(&self.subject_prefix).map_err(|err| {
            ConfigError::invalid("mercure.subject_prefix", &self.subject_prefix, err.reason)
        })?;
        if self.heartbeat.is_zero() || self.heartbeat > Duration::from_secs(3600) {
            return Err(ConfigError::invalid(
                "mercure.heartbeat",
                config_duration::format(self.heartbeat),
                "must be between 1s and 1h",
            ));
        }
        let lease = self.subscriptions_lease;
        if lease < Duration::from_secs(1) || lease > Duration::from_secs(3600) {
            return Err(ConfigError::invalid(
                "mercure.subscriptions_lease",
                config_duration::format(lease),
                "must be between 1s and 1h",
            ));
        }
        if self.cookie_name.is_empty()
            || !self
                .cookie_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err(ConfigError::invalid(
                "mercure.cookie_name",
                &self.cookie_name,
                "is not a cookie name (letters, digits and !#$%&'*+-.^_`|~)",
            ));
        }
        for (list, origins) in [
            ("cors_origins", &self.cors_origins),
            ("publish_origins", &self.publish_origins),
        ] {
            for (index, origin) in origins.iter().enumerate() {
                allowed_origin(&format!("mercure.{list}[{index}]"), origin)?;
            }
        }
        if let Some(url) = &self.base_url {
            http_url("mercure.base_url", url)?;
        }
        for (key, value) in [
            ("mercure.audience", &self.audience),
            ("mercure.issuer", &self.issuer),
        ] {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                return Err(ConfigError::invalid(
                    key,
                    "",
                    "must not be empty; leave it out",
                ));
            }
        }
        let publisher = key(
            "mercure.publisher_jwt",
            self.publisher_jwt_key.as_ref(),
            &self.publisher_jwt_alg,
        )?;
        key(
            "mercure.subscriber_jwt",
            self.subscriber_jwt_key.as_ref(),
            &self.subscriber_jwt_alg,
        )?;
        if !self.enabled {
            return Ok(());
        }
        if publisher.is_none() {
            return Err(ConfigError::invalid(
                "mercure.publisher_jwt_key",
                "(missing)",
                "the Mercure hub needs the publishers' key (or MERCURE_PUBLISHER_JWT_KEY)",
            ));
        }
        self.check_reach(context, &scheme)
    }

    /// The prefix must be out of reach of `GET /events` and `POST /publish` (which read and
    /// write `topic_prefix` subjects), and inside the served embedded stream.
    fn check_reach(
        &self,
        context: &MercureContext<'_>,
        scheme: &Scheme,
    ) -> Result<(), ConfigError> {
        let wide = scheme.wide_filter();
        let topic_prefix = context.topic_prefix;
        let topics = if topic_prefix.is_empty() {
            ">".to_owned()
        } else {
            format!("{topic_prefix}.>")
        };
        if filter_is_subset(&wide, &topics) || filter_is_subset(&topics, &wide) {
            return Err(ConfigError::invalid(
                "topic_prefix",
                topic_prefix,
                format!(
                    "reaches the Mercure updates under mercure.subject_prefix {:?}: with Mercure \
                     enabled, set a topic_prefix (such as \"app\") outside it, so that GET /events \
                     and POST /publish cannot read or forge them",
                    self.subject_prefix
                ),
            ));
        }
        if let Some(subjects) = &context.served_subjects
            && !subjects.iter().any(|s| filter_is_subset(&wide, s))
        {
            return Err(ConfigError::invalid(
                "mercure.subject_prefix",
                &self.subject_prefix,
                format!(
                    "the served stream {:?} does not capture {wide:?} (its subjects: {subjects:?})",
                    context.served_stream
                ),
            ));
        }
        Ok(())
    }
}

/// The verifying key a `<name>_key` and `<name>_alg` pair makes, if the key is set.
pub(crate) fn key(
    name: &str,
    secret: Option<&Secret>,
    alg: &str,
) -> Result<Option<(DecodingKey, Algorithm)>, ConfigError> {
    let algorithm: Algorithm = alg.parse().map_err(|_| {
        ConfigError::invalid(
            format!("{name}_alg"),
            alg,
            "is not a JWT algorithm (HS256, HS384, HS512, RS256, …, PS512, ES256, ES384, EdDSA)",
        )
    })?;
    let Some(secret) = secret else {
        return Ok(None);
    };
    let bytes = secret.expose();
    let bad = |what: &str| {
        ConfigError::invalid(
            format!("{name}_key"),
            "(hidden)",
            format!("is not {what}, as {alg} needs"),
        )
    };
    let key = match algorithm.family() {
        AlgorithmFamily::Hmac if bytes.is_empty() => return Err(bad("a secret")),
        AlgorithmFamily::Hmac => DecodingKey::from_secret(bytes).map_err(|_| bad("a secret"))?,
        AlgorithmFamily::Rsa => {
            DecodingKey::from_rsa_pem(bytes).map_err(|_| bad("an RSA public key in PEM"))?
        }
        AlgorithmFamily::Ec => {
            DecodingKey::from_ec_pem(bytes).map_err(|_| bad("an EC public key in PEM"))?
        }
        AlgorithmFamily::Ed => {
            DecodingKey::from_ed_pem(bytes).map_err(|_| bad("an Ed25519 public key in PEM"))?
        }
    };
    Ok(Some((key, algorithm)))
}
