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
    /// Who may administer streams over HTTP (`/admin/…`, a token whose `sluice` claim has
    /// `"admin": true`); absent means the admin API is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<DirectionConfig>,
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
    #[serde(default = "default_leeway", with = "sluice_protocol::config_duration")]
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
        /// The secret inline in the configuration (never shown again).
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
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// Reads a secret as a string; any other value is refused without being echoed (serde's
/// "invalid type: integer `…`" would print it).
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SecretVisitor;
        impl serde::de::Visitor<'_> for SecretVisitor {
            type Value = Secret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the secret as a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret::new(v))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
                Err(not_a_string())
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
                Err(not_a_string())
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
                Err(not_a_string())
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(not_a_string())
            }
            fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Secret, E> {
                Err(not_a_string())
            }
        }
        fn not_a_string<E: serde::de::Error>() -> E {
            E::custom("expected the secret as a string (the value of a secret key is never shown)")
        }
        deserializer.deserialize_any(SecretVisitor)
    }
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret's bytes, for building the verifying key.
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
        /// The key file that could not be read.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// A key file holds no usable key.
    #[error("{key}: {} is not a usable {what}: {detail}", path.display())]
    BadKey {
        /// Dotted configuration key of the key entry.
        key: String,
        /// The key file that holds no usable key.
        path: PathBuf,
        /// What the file should hold (`RSA public key in PEM`, `JWKS`, …).
        what: &'static str,
        /// What the key parser reported.
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
        if let Some(admin) = &self.admin
            && !admin.anonymous.is_empty()
        {
            return Err(AuthConfigError::invalid(
                "auth.admin.anonymous".to_owned(),
                format!("{:?}", admin.anonymous),
                "the admin API always needs a token; leave anonymous out",
            ));
        }
        Ok(())
    }

    /// The configured directions with their names (`subscribe`, `publish`, `admin`).
    pub(crate) fn directions(&self) -> impl Iterator<Item = (&'static str, &DirectionConfig)> {
        [
            ("subscribe", &self.subscribe),
            ("publish", &self.publish),
            ("admin", &self.admin),
        ]
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
                sluice_protocol::config_duration::format(self.leeway),
                format!(
                    "must be whole seconds, at most {}",
                    sluice_protocol::config_duration::format(MAX_LEEWAY)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A direction read from TOML, as the hub configuration reads it.
    fn direction(text: &str) -> DirectionConfig {
        toml::from_str(text).expect("well-typed direction")
    }

    const HMAC: &str = "algorithms = [\"HS256\"]\n[[keys]]\ntype = \"hmac\"\nsecret = \"s\"\n";

    /// The key an invalid direction is refused for.
    fn refused_key(text: &str) -> String {
        match direction(text).validate("auth.subscribe") {
            Err(AuthConfigError::Invalid { key, .. }) => key,
            other => panic!("expected a refusal of\n{text}\ngot {other:?}"),
        }
    }

    fn accepted(text: &str) {
        if let Err(err) = direction(text).validate("auth.subscribe") {
            panic!("refused\n{text}\n{err}");
        }
    }

    #[test]
    fn omitted_keys_take_their_documented_defaults() {
        let d = direction(HMAC);
        assert_eq!(d.leeway, Duration::from_secs(5));
        assert_eq!(d.leeway, DEFAULT_LEEWAY);
        assert!(d.require_exp);
        assert_eq!(d.max_token_bytes, 8192);
        assert_eq!(d.max_filters, 128);
        assert_eq!((d.cookie_name, d.query_param), (None, None));
        assert_eq!((d.audience, d.issuer), (None, None));
        assert!(d.anonymous.is_empty());
    }

    #[test]
    fn a_direction_needs_keys_or_an_anonymous_grant() {
        assert_eq!(refused_key(""), "auth.subscribe.keys");
        accepted("anonymous = [\"public.>\"]");
        accepted(HMAC);
    }

    #[test]
    fn keys_need_algorithms_and_each_algorithm_a_key_of_its_family() {
        let keys_only = "[[keys]]\ntype = \"hmac\"\nsecret = \"s\"\n";
        assert_eq!(refused_key(keys_only), "auth.subscribe.algorithms");
        let pem = |kind: &str| format!("[[keys]]\ntype = \"{kind}\"\npem_file = \"k.pem\"\n");
        for (kind, fits, other) in [
            ("hmac", "HS384", "RS256"),
            ("rsa", "PS512", "ES256"),
            ("ec", "ES384", "EdDSA"),
            ("eddsa", "EdDSA", "HS256"),
        ] {
            let key = if kind == "hmac" {
                keys_only.to_owned()
            } else {
                pem(kind)
            };
            accepted(&format!("algorithms = [\"{fits}\"]\n{key}"));
            let text = format!("algorithms = [\"{fits}\", \"{other}\"]\n{key}");
            assert_eq!(refused_key(&text), "auth.subscribe.algorithms", "{kind}");
        }
        // A JWKS file may hold a key of any family.
        accepted(
            "algorithms = [\"HS256\", \"RS256\", \"ES256\", \"EdDSA\"]\n[[keys]]\ntype = \"jwks\"\nfile = \"k.json\"\n",
        );
    }

    #[test]
    fn an_hmac_key_has_exactly_one_non_empty_secret() {
        let hmac =
            |fields: &str| format!("algorithms = [\"HS256\"]\n[[keys]]\ntype = \"hmac\"\n{fields}");
        accepted(&hmac("secret = \"s\""));
        accepted(&hmac("secret_file = \"s.txt\""));
        assert_eq!(
            refused_key(&hmac("secret = \"\"")),
            "auth.subscribe.keys[0].secret"
        );
        assert_eq!(refused_key(&hmac("")), "auth.subscribe.keys[0].secret");
        assert_eq!(
            refused_key(&hmac("secret = \"s\"\nsecret_file = \"s.txt\"")),
            "auth.subscribe.keys[0].secret_file"
        );
    }

    #[test]
    fn cookie_and_query_names_must_be_non_empty_tokens() {
        accepted(&format!("cookie_name = \"a1!#$%&'*+-.^_`|~\"\n{HMAC}"));
        accepted(&format!("query_param = \"access_token-1.x\"\n{HMAC}"));
        for bad in ["", "a b", "a=b", "a;b", "é"] {
            let cookie = format!("cookie_name = {:?}\n{HMAC}", bad);
            assert_eq!(
                refused_key(&cookie),
                "auth.subscribe.cookie_name",
                "{bad:?}"
            );
            let query = format!("query_param = {:?}\n{HMAC}", bad);
            assert_eq!(refused_key(&query), "auth.subscribe.query_param", "{bad:?}");
        }
        // A cookie name may hold characters a query parameter name may not.
        assert_eq!(
            refused_key(&format!("query_param = \"a!\"\n{HMAC}")),
            "auth.subscribe.query_param"
        );
    }

    #[test]
    fn leeway_is_whole_seconds_up_to_five_minutes() {
        accepted(&format!("leeway = \"0s\"\n{HMAC}"));
        accepted(&format!("leeway = \"5m\"\n{HMAC}"));
        for bad in ["301s", "1500ms"] {
            let text = format!("leeway = \"{bad}\"\n{HMAC}");
            assert_eq!(refused_key(&text), "auth.subscribe.leeway", "{bad}");
        }
    }

    #[test]
    fn audience_and_issuer_must_not_be_empty() {
        accepted(&format!("audience = \"a\"\nissuer = \"i\"\n{HMAC}"));
        assert_eq!(
            refused_key(&format!("audience = \"\"\n{HMAC}")),
            "auth.subscribe.audience"
        );
        assert_eq!(
            refused_key(&format!("issuer = \"\"\n{HMAC}")),
            "auth.subscribe.issuer"
        );
    }

    #[test]
    fn anonymous_filters_must_be_valid_and_within_max_filters() {
        assert_eq!(
            refused_key("anonymous = [\"a.>\", \"a..b\"]"),
            "auth.subscribe.anonymous[1]"
        );
        accepted("max_filters = 2\nanonymous = [\"a\", \"b\"]");
        assert_eq!(
            refused_key("max_filters = 2\nanonymous = [\"a\", \"b\", \"c\"]"),
            "auth.subscribe.anonymous"
        );
    }

    #[test]
    fn token_and_filter_limits_have_inclusive_ranges() {
        for ok in [256, 65536] {
            accepted(&format!("max_token_bytes = {ok}\n{HMAC}"));
        }
        for bad in [255, 65537] {
            let text = format!("max_token_bytes = {bad}\n{HMAC}");
            assert_eq!(refused_key(&text), "auth.subscribe.max_token_bytes");
        }
        for ok in [1, 1024] {
            accepted(&format!("max_filters = {ok}\n{HMAC}"));
        }
        for bad in [0, 1025] {
            let text = format!("max_filters = {bad}\n{HMAC}");
            assert_eq!(refused_key(&text), "auth.subscribe.max_filters");
        }
        let err = direction(&format!("max_filters = 0\n{HMAC}"))
            .validate("auth.publish")
            .expect_err("out of range");
        assert_eq!(
            err.to_string(),
            "auth.publish.max_filters = 0: must be between 1 and 1024"
        );
    }

    #[test]
    fn both_directions_are_validated_under_their_own_names() {
        let bad = direction("");
        let config = AuthConfig {
            publish: Some(bad.clone()),
            ..AuthConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(AuthConfigError::Invalid { key, .. }) if key == "auth.publish.keys")
        );
        let config = AuthConfig {
            subscribe: Some(bad.clone()),
            ..AuthConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(AuthConfigError::Invalid { key, .. }) if key == "auth.subscribe.keys")
        );
        let config = AuthConfig {
            admin: Some(bad),
            ..AuthConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(AuthConfigError::Invalid { key, .. }) if key == "auth.admin.keys")
        );
        let config = AuthConfig {
            admin: Some(direction(&format!("anonymous = [\"a\"]\n{HMAC}"))),
            ..AuthConfig::default()
        };
        assert!(
            matches!(config.validate(), Err(AuthConfigError::Invalid { key, .. }) if key == "auth.admin.anonymous")
        );
        assert!(AuthConfig::default().validate().is_ok());
    }

    #[test]
    fn secret_debug_shows_only_the_length() {
        assert_eq!(
            format!("{:?}", Secret::new("hunter2")),
            "<secret of 7 bytes>"
        );
        assert_eq!(Secret::new("hunter2").expose(), b"hunter2");
    }

    #[test]
    fn each_key_names_the_file_it_reads() {
        let keys = direction(
            "[[keys]]\ntype = \"hmac\"\nsecret = \"s\"\n\
             [[keys]]\ntype = \"hmac\"\nsecret_file = \"s.txt\"\n\
             [[keys]]\ntype = \"rsa\"\npem_file = \"r.pem\"\n\
             [[keys]]\ntype = \"ec\"\npem_file = \"e.pem\"\n\
             [[keys]]\ntype = \"eddsa\"\npem_file = \"d.pem\"\n\
             [[keys]]\ntype = \"jwks\"\nfile = \"k.json\"\n",
        )
        .keys;
        let files: Vec<Option<&Path>> = keys.iter().map(KeyConfig::file).collect();
        let expected = [
            None,
            Some("s.txt"),
            Some("r.pem"),
            Some("e.pem"),
            Some("d.pem"),
            Some("k.json"),
        ];
        assert_eq!(files, expected.map(|f| f.map(Path::new)));
    }
}
