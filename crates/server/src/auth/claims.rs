//! The claims sluice reads from a verified token.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// The registered and sluice-specific claims of a token; other claims are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TokenClaims {
    /// Expiry, seconds since the Unix epoch (already checked by the verifier); RFC 7519 allows
    /// a fraction.
    #[serde(default)]
    pub exp: Option<f64>,
    /// Not before, seconds since the Unix epoch (already checked by the verifier).
    #[serde(default)]
    pub nbf: Option<f64>,
    /// Who the token was issued to; used in logs only.
    #[serde(default)]
    pub sub: Option<String>,
    /// What the bearer may do; a token without it is granted nothing.
    #[serde(default, deserialize_with = "object_only")]
    pub sluice: SluiceClaim,
}

/// The `sluice` claim: the topic filters (NATS wildcards `*` and `>`) the bearer may use.
///
/// Each list may also be written as a single string. Unknown fields are refused, so a typo
/// such as `subcribe` is reported instead of silently granting nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SluiceClaim {
    /// Filters the bearer may subscribe to (or to any filter inside them).
    #[serde(default)]
    pub subscribe: FilterList,
    /// Filters whose subjects the bearer may publish to.
    #[serde(default)]
    pub publish: FilterList,
    /// Whether the bearer may administer streams (`[auth.admin]`).
    #[serde(default)]
    pub admin: bool,
}

/// Accepts the claim only as a JSON object: serde would otherwise also take a struct written as
/// an array (`["a"]`), a form nobody means.
fn object_only<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SluiceClaim, D::Error> {
    let object = serde_json::Map::deserialize(deserializer)?;
    SluiceClaim::deserialize(serde_json::Value::Object(object)).map_err(D::Error::custom)
}

/// A list of filters written either as `"a.>"` or as `["a.>", "b.*"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "OneOrMany")]
pub struct FilterList(pub Vec<String>);

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl From<OneOrMany> for FilterList {
    fn from(value: OneOrMany) -> Self {
        match value {
            OneOrMany::One(filter) => FilterList(vec![filter]),
            OneOrMany::Many(filters) => FilterList(filters),
        }
    }
}
