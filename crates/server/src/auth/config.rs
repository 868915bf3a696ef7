//! The `[auth]` configuration section: who may subscribe and who may publish.
//!
//! Each direction is opt-in: without an `[auth.subscribe]` (or `[auth.publish]`) table, that
//! direction is open to everyone. See docs/AUTH.md for the user-facing description.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jsonwebtoken::{Algorithm, AlgorithmFamily};
use serde::{Deserialize, Serialize, Serializer};
use sluice_protocol::subject::validate_filter;

/// Default tolerance for clock skew when checking `exp` and `nbf`.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(5);
/// Largest accepted `leeway`: leeway is for clock skew, not for extending token lifetimes.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);
/// Default largest token accepted, in bytes (checked before any decoding).
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8192;
/// Default largest number of filters in each list of the `sluice` claim.
pub const DEFAULT_MAX_FILTERS: usize = 128;
/// HMAC secrets shorter than this are accepted with a warning.
pub const MIN_HMAC_SECRET_BYTES: usize = 32;

const MAX_TOKEN_BYTES_RANGE: RangeInclusive<usize> = 256..=65536;
const MAX_FILTERS_RANGE: RangeInclusive<usize> = 1..=1024;

/// Authorization for both directions of the hub. Mounted as `[auth]` in the hub configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Who may subscribe; absent means anyone may subscribe to any topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<DirectionConfig>,
    /// Who may publish; absent means anyone may publish to any topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<DirectionConfig>,
}

/// Token rules for one direction (subscribe or publish).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionConfig {
    /// Keys that may have signed a token; a token must verify against one of them.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// Signature algorithms a token may use (`HS256`, `RS256`, `ES256`, `EdDSA`, …).
    #[serde(default)]
    pub algorithms: Vec<Algorithm>,
    /// Cookie carrying the token when there is no `Authorization` header (for `EventSource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_name: Option<String>,
    /// Query parameter carrying the token as a last resort; disabled unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_param: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf` (whole seconds, e.g. `"5s"`).
    #[serde(default = "default_leeway", with = "crate::config::duration")]
    pub leeway: Duration,
    /// When set, a token must carry this value in its `aud` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// When set, a token's `iss` claim must equal this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Whether a token without `exp` is refused (default true).
    #[serde(default = "default_true")]
    pub require_exp: bool,
    /// Filters granted to a request that carries no token; empty means a token is required.
    #[serde(default)]
    pub anonymous: Vec<String>,
    /// Largest accepted token, in bytes.
    #[serde(default = "default_max_token_bytes")]
    pub max_token_bytes: usize,
    /// Largest number of filters in each list of a token's `sluice` claim.
    #[serde(default = "default_max_filters")]
    pub max_filters: usize,
}

/// One verification key, or a file holding a set of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum KeyConfig {
    /// A shared HMAC secret (HS256/384/512), inline or in a file.
    Hmac {
        /// Key id matched against a token's `kid` header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The secret itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<Secret>,
        /// A file holding the secret; one trailing newline is ignored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret_file: Option<PathBuf>,
    },
    /// An RSA public key (RS256/384/512, PS256/384/512) in a PEM file.
    Rsa(PemKey),
    /// An elliptic-curve public key, P-256 or P-384 (ES256/384), in a PEM file.
    Ec(PemKey),
    /// An Ed25519 public key (EdDSA) in a PEM file.
    Eddsa(PemKey),
    /// A JSON Web Key Set file (RFC 7517), re-read on reload.
    Jwks {
        /// Path of the JWKS file.
        file: PathBuf,
    },
}

/// A public key stored in a PEM file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PemKey {
    /// Key id matched against a token's `kid` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Path of the PEM file (SubjectPublicKeyInfo, or PKCS#1 for RSA).
    pub pem_file: PathBuf,
}

/// A configuration value that must never be printed.
///
/// It is written out (serialized) as `(redacted)`, so a dumped configuration never holds it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret bytes.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("(redacted)")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<secret of {} bytes>", self.0.len())
    }
}

/// Why the auth configuration or one of its key files was refused. Every variant names the key.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// A value is out of range or malformed.
    #[error("{key} = {value}: {reason}")]
    Invalid {
        /// Dotted configuration key, e.g. `auth.subscribe.leeway_secs`.
        key: String,
        /// The offending value as written (secrets are never shown).
        value: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A key file could not be read.
    #[error("{key}: cannot read {}: {source}", path.display())]
    ReadFile {
        /// Dotted configuration key of the key entry.
        key: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file holds no usable key.
    #[error("{key}: {} is not a usable {what}: {detail}", path.display())]
    BadKey {
        /// Dotted configuration key of the key entry.
        key: String,
        /// The file.
        path: PathBuf,
        /// What the file should hold (`RSA public key in PEM`, `JWKS`, …).
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
}

impl AuthConfigError {
    pub(crate) fn invalid(
        key: String,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Self::Invalid {
            key,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

impl AuthConfig {
    /// Checks every value that can be checked without reading files.
    pub fn validate(&self) -> Result<(), AuthConfigError> {
        for (name, direction) in self.directions() {
            direction.validate(&format!("auth.{name}"))?;
        }
        Ok(())
    }

    /// The configured directions with their names (`subscribe`, `publish`).
    pub(crate) fn directions(&self) -> impl Iterator<Item = (&'static str, &DirectionConfig)> {
        [("subscribe", &self.subscribe), ("publish", &self.publish)]
            .into_iter()
            .filter_map(|(name, d)| d.as_ref().map(|d| (name, d)))
    }
}

impl DirectionConfig {
    /// Checks this direction; `prefix` is its dotted key, e.g. `auth.subscribe`.
    pub fn validate(&self, prefix: &str) -> Result<(), AuthConfigError> {
        let key = |name: &str| format!("{prefix}.{name}");
        if self.keys.is_empty() && self.anonymous.is_empty() {
            return Err(AuthConfigError::invalid(
                key("keys"),
                "[]",
                "no key and no anonymous grant: nobody could ever be let in",
            ));
        }
        if !self.keys.is_empty() && self.algorithms.is_empty() {
            return Err(AuthConfigError::invalid(
                key("algorithms"),
                "[]",
                "list the algorithms tokens may use, e.g. [\"HS256\"]",
            ));
        }
        for algorithm in &self.algorithms {
            let family = algorithm.family();
            if !self.keys.iter().any(|k| k.may_hold(family)) {
                return Err(AuthConfigError::invalid(
                    key("algorithms"),
                    format!("{algorithm:?}"),
                    format!("no configured key can verify it (needs a {family:?} key)"),
                ));
            }
        }
        for (i, k) in self.keys.iter().enumerate() {
            k.validate(&format!("{prefix}.keys[{i}]"))?;
        }
        if let Some(name) = &self.cookie_name
            && (name.is_empty() || !name.bytes().all(is_cookie_name_byte))
        {
            return Err(AuthConfigError::invalid(
                key("cookie_name"),
                format!("{name:?}"),
                "must be a non-empty cookie name (letters, digits and !#$%&'*+-.^_`|~)",
            ));
        }
        if let Some(name) = &self.query_param
            && (name.is_empty() || !name.bytes().all(is_query_name_byte))
        {
            return Err(AuthConfigError::invalid(
                key("query_param"),
                format!("{name:?}"),
                "must be a non-empty name of letters, digits, '-', '_' and '.'",
            ));
        }
        if self.leeway > MAX_LEEWAY || self.leeway.subsec_nanos() != 0 {
            return Err(AuthConfigError::invalid(
                key("leeway"),
                crate::config::duration::format(self.leeway),
                format!(
                    "must be whole seconds, at most {}",
                    crate::config::duration::format(MAX_LEEWAY)
                ),
            ));
        }
        for (name, value) in [("audience", &self.audience), ("issuer", &self.issuer)] {
            if value.as_deref() == Some("") {
                return Err(AuthConfigError::invalid(
                    key(name),
                    "\"\"",
                    "must not be empty; leave it out to skip the check",
                ));
            }
        }
        for (i, filter) in self.anonymous.iter().enumerate() {
            if let Err(e) = validate_filter(filter) {
                return Err(AuthConfigError::invalid(
                    format!("{prefix}.anonymous[{i}]"),
                    format!("{filter:?}"),
                    e.to_string(),
                ));
            }
        }
        check_range(
            key("max_token_bytes"),
            self.max_token_bytes,
            MAX_TOKEN_BYTES_RANGE,
        )?;
        check_range(key("max_filters"), self.max_filters, MAX_FILTERS_RANGE)?;
        if self.anonymous.len() > self.max_filters {
            return Err(AuthConfigError::invalid(
                key("anonymous"),
                format!("{} filters", self.anonymous.len()),
                format!("at most max_filters = {} filters", self.max_filters),
            ));
        }
        Ok(())
    }
}

impl KeyConfig {
    /// Whether this entry could hold a key of `family` (a JWKS may hold any).
    fn may_hold(&self, family: AlgorithmFamily) -> bool {
        match self {
            KeyConfig::Hmac { .. } => family == AlgorithmFamily::Hmac,
            KeyConfig::Rsa(_) => family == AlgorithmFamily::Rsa,
            KeyConfig::Ec(_) => family == AlgorithmFamily::Ec,
            KeyConfig::Eddsa(_) => family == AlgorithmFamily::Ed,
            KeyConfig::Jwks { .. } => true,
        }
    }

    /// The file this entry reads, if any.
    pub fn file(&self) -> Option<&Path> {
        match self {
            KeyConfig::Hmac { secret_file, .. } => secret_file.as_deref(),
            KeyConfig::Rsa(pem) | KeyConfig::Ec(pem) | KeyConfig::Eddsa(pem) => Some(&pem.pem_file),
            KeyConfig::Jwks { file } => Some(file),
        }
    }

    fn validate(&self, prefix: &str) -> Result<(), AuthConfigError> {
        if let KeyConfig::Hmac {
            secret,
            secret_file,
            ..
        } = self
        {
            match (secret, secret_file) {
                (Some(s), None) if s.expose().is_empty() => {
                    return Err(AuthConfigError::invalid(
                        format!("{prefix}.secret"),
                        "\"\"",
                        "an HMAC secret must not be empty",
                    ));
                }
                (Some(_), None) | (None, Some(_)) => {}
                (Some(_), Some(path)) => {
                    return Err(AuthConfigError::invalid(
                        format!("{prefix}.secret_file"),
                        path.display(),
                        "give either secret or secret_file, not both",
                    ));
                }
                (None, None) => {
                    return Err(AuthConfigError::invalid(
                        format!("{prefix}.secret"),
                        "(missing)",
                        "an HMAC key needs secret or secret_file",
                    ));
                }
            }
        }
        Ok(())
    }
}

fn check_range(
    key: String,
    value: usize,
    range: RangeInclusive<usize>,
) -> Result<(), AuthConfigError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(AuthConfigError::invalid(
            key,
            value,
            format!("must be between {} and {}", range.start(), range.end()),
        ))
    }
}

/// RFC 6265 cookie-name: an RFC 7230 token.
fn is_cookie_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Characters that never need percent-encoding in a query parameter name.
fn is_query_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.".contains(&b)
}

fn default_leeway() -> Duration {
    DEFAULT_LEEWAY
}

fn default_true() -> bool {
    true
}

fn default_max_token_bytes() -> usize {
    DEFAULT_MAX_TOKEN_BYTES
}

fn default_max_filters() -> usize {
    DEFAULT_MAX_FILTERS
}
