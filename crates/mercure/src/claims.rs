//! Authorization claims, once the hub has verified a token's signature: what the holder may
//! publish and which private updates it may receive.
//!
//! Two shapes, both accepted in one token:
//!
//! - 0.x: the `mercure` claim (or its namespaced twin `https://mercure.rocks/`) with `publish`
//!   and `subscribe` lists of selectors (strings read as `topic=` selectors: `*`, URI Template,
//!   exact; or `{"match": …, "match_type": "exact" | "urlpattern", "payload": …}` objects) and
//!   an optional `payload`;
//! - 1.0 draft (RFC 9068 access tokens): `authorization_details` entries of type
//!   [`DETAIL_TYPE`] with `actions` (`publish`, `subscribe`; others ignored), `topics` (matcher
//!   objects) and an optional `payload`; entries of other types are ignored whatever their shape.
//!
//! What the verifier must check itself, with the signature: the JOSE header's `typ` is
//! `at+jwt` for an access token ([`is_access_token_type`]), `aud` holds the hub
//! ([`Claims::audience_contains`]) and `iss` is trusted ([`Claims::iss`]), and `exp`.
//!
//! Limits: [`MAX_CLAIM_SELECTORS`] selectors in each `mercure` list, [`MAX_DETAILS`] Mercure
//! authorization details and [`MAX_DETAIL_TOPICS`] topics across them (Mercure's limits).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::selector::{Selector, SelectorError, SelectorKind};
use crate::set::any_selects;
use crate::text::shown;
use crate::update::Update;

/// The `type` of a Mercure authorization detail.
pub const DETAIL_TYPE: &str = "https://mercure.rocks/authorization-detail";

/// The JOSE `typ` of an RFC 9068 access token.
pub(crate) const ACCESS_TOKEN_TYPE: &str = "at+jwt";

/// The most selectors a `mercure.publish` or `mercure.subscribe` list may hold.
pub const MAX_CLAIM_SELECTORS: usize = 1000;

/// The most Mercure authorization details one token may hold.
pub const MAX_DETAILS: usize = 100;

/// The most topics all of a token's Mercure authorization details may hold together.
pub const MAX_DETAIL_TOPICS: usize = 100;

/// Whether a JOSE header `typ` names an access token: `at+jwt` or `application/at+jwt`, in any
/// case (RFC 9068 §4).
pub fn is_access_token_type(typ: Option<&str>) -> bool {
    let Some(typ) = typ else { return false };
    let typ = match typ.get(..12) {
        Some(media) if media.eq_ignore_ascii_case("application/") => &typ[12..],
        _ => typ,
    };
    typ.eq_ignore_ascii_case(ACCESS_TOKEN_TYPE)
}

/// A selector as a claim gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MatcherClaim {
    /// A string: a 0.x selector (`*`, URI Template or exact).
    Text(String),
    /// An object: a 1.0 draft matcher.
    Object(Matcher),
}

/// A 1.0 draft matcher object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matcher {
    /// The pattern.
    #[serde(rename = "match")]
    pub pattern: String,
    /// `exact` (the default) or `urlpattern`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_type: Option<String>,
    /// Data for the subscriptions this matcher selects (subscription events and API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// The 0.x `mercure` claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MercureClaim {
    /// Selectors of the topics the holder may publish to.
    #[serde(default)]
    pub publish: Vec<MatcherClaim>,
    /// Selectors of the topics whose private updates the holder may receive.
    #[serde(default)]
    pub subscribe: Vec<MatcherClaim>,
    /// Data about the holder, shown in its subscriptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// A Mercure authorization detail (1.0 draft).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AuthorizationDetail {
    /// Always [`DETAIL_TYPE`] for the entries read here.
    #[serde(rename = "type")]
    pub detail_type: String,
    /// `publish`, `subscribe`; other actions are ignored.
    #[serde(default)]
    pub actions: Vec<String>,
    /// The topics the actions apply to.
    #[serde(default)]
    pub topics: Vec<Matcher>,
    /// Data for the subscriptions these topics select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `aud`: one audience or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    /// A single audience.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// The claims of a verified token that this crate reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// The 0.x claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mercure: Option<MercureClaim>,
    /// The 0.x claim under its namespaced name, used when `mercure` is absent.
    #[serde(
        default,
        rename = "https://mercure.rocks/",
        skip_serializing_if = "Option::is_none"
    )]
    pub mercure_namespaced: Option<MercureClaim>,
    /// RFC 9068 / RFC 9396 authorization details, of any type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorization_details: Vec<Value>,
    /// The audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    /// The issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// The subject (the holder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
}

/// Why a token's claims were refused; says which claim and entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsError {
    /// The claims are not JSON of the expected shape.
    #[error("malformed claims: {0}")]
    Malformed(String),
    /// A Mercure authorization detail that is not well-formed.
    #[error("authorization_details[{index}]: {reason}")]
    Detail {
        /// The entry's position in `authorization_details`.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A selector that cannot be compiled.
    #[error("{claim}[{index}]: {error}")]
    Selector {
        /// Where it stands: `mercure.publish`, `mercure.subscribe` or
        /// `authorization_details[i].topics`.
        claim: String,
        /// Its position in that list.
        index: usize,
        /// Why it was refused.
        error: SelectorError,
    },
    /// More entries than a limit allows.
    #[error("{claim}: more than {max} entries")]
    TooMany {
        /// Which list.
        claim: &'static str,
        /// The limit.
        max: usize,
    },
}

impl Claims {
    /// Reads the claims from a token's payload JSON.
    pub fn from_json(json: &[u8]) -> Result<Claims, ClaimsError> {
        serde_json::from_slice(json).map_err(|e| ClaimsError::Malformed(e.to_string()))
    }

    /// Whether `aud` names `expected`.
    pub fn audience_contains(&self, expected: &str) -> bool {
        match &self.aud {
            None => false,
            Some(Audience::One(aud)) => aud == expected,
            Some(Audience::Many(auds)) => auds.iter().any(|aud| aud == expected),
        }
    }

    /// What the claims grant, selectors compiled (`base` resolves relative URL patterns).
    pub fn grants(&self, base: &str) -> Result<Grants, ClaimsError> {
        let mut grants = Grants::default();
        if let Some(claim) = self.mercure.as_ref().or(self.mercure_namespaced.as_ref()) {
            grants.payload = claim.payload.clone();
            for (name, list, action) in [
                ("mercure.publish", &claim.publish, Action::Publish),
                ("mercure.subscribe", &claim.subscribe, Action::Subscribe),
            ] {
                if list.len() > MAX_CLAIM_SELECTORS {
                    return Err(ClaimsError::TooMany {
                        claim: name,
                        max: MAX_CLAIM_SELECTORS,
                    });
                }
                for (index, entry) in list.iter().enumerate() {
                    let at = |error| ClaimsError::Selector {
                        claim: name.to_owned(),
                        index,
                        error,
                    };
                    let (selector, payload) = match entry {
                        MatcherClaim::Text(text) => (Selector::topic(text).map_err(at)?, None),
                        MatcherClaim::Object(matcher) => {
                            (matcher.compile(base).map_err(at)?, matcher.payload.clone())
                        }
                    };
                    grants.grants.push(Grant {
                        selector,
                        payload,
                        publish: action == Action::Publish,
                        subscribe: action == Action::Subscribe,
                    });
                }
            }
        }
        self.add_details(base, &mut grants)?;
        Ok(grants)
    }

    fn add_details(&self, base: &str, grants: &mut Grants) -> Result<(), ClaimsError> {
        let mut details = 0;
        let mut topics = 0;
        for (index, raw) in self.authorization_details.iter().enumerate() {
            if raw.get("type").and_then(Value::as_str) != Some(DETAIL_TYPE) {
                continue;
            }
            let bad = |reason: String| ClaimsError::Detail { index, reason };
            details += 1;
            if details > MAX_DETAILS {
                return Err(ClaimsError::TooMany {
                    claim: "authorization_details",
                    max: MAX_DETAILS,
                });
            }
            let detail = AuthorizationDetail::deserialize(raw).map_err(|e| bad(e.to_string()))?;
            topics += detail.topics.len();
            if topics > MAX_DETAIL_TOPICS {
                return Err(ClaimsError::TooMany {
                    claim: "authorization_details topics",
                    max: MAX_DETAIL_TOPICS,
                });
            }
            if detail.actions.is_empty() {
                return Err(bad("declares no action".into()));
            }
            if detail.topics.is_empty() {
                return Err(bad("declares no topic".into()));
            }
            let publish = detail.actions.iter().any(|a| a == "publish");
            let subscribe = detail.actions.iter().any(|a| a == "subscribe");
            for (topic, matcher) in detail.topics.iter().enumerate() {
                if matcher.pattern.is_empty() {
                    return Err(bad(format!("topics[{topic}] has an empty pattern")));
                }
                let selector = matcher
                    .compile(base)
                    .map_err(|error| ClaimsError::Selector {
                        claim: format!("authorization_details[{index}].topics"),
                        index: topic,
                        error,
                    })?;
                grants.grants.push(Grant {
                    selector,
                    payload: detail.payload.clone(),
                    publish,
                    subscribe,
                });
            }
        }
        Ok(())
    }
}

impl Matcher {
    fn compile(&self, base: &str) -> Result<Selector, SelectorError> {
        match self.match_type.as_deref() {
            None | Some("exact") => Selector::exact(&self.pattern),
            Some("urlpattern") => Selector::url_pattern(&self.pattern, base),
            Some(other) => Err(SelectorError::Invalid {
                param: "match_type",
                value: shown(other),
                reason: "unknown matcher type (known: exact, urlpattern)".into(),
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Publish,
    Subscribe,
}

/// One granted selector: the actions it allows, and the payload it carries for the
/// subscriptions it selects.
#[derive(Debug)]
struct Grant {
    selector: Selector,
    payload: Option<Value>,
    publish: bool,
    subscribe: bool,
}

/// What a token grants: compiled once per connection, asked once per update.
#[derive(Debug, Default)]
pub struct Grants {
    grants: Vec<Grant>,
    payload: Option<Value>,
}

impl Grants {
    /// Nothing granted: an anonymous subscriber's (public updates only).
    pub fn none() -> Grants {
        Grants::default()
    }

    /// Whether the holder may publish an update with these topics: every one of them must be
    /// selected by a `publish` selector.
    pub fn can_publish(&self, topics: &[&str]) -> bool {
        let publish = self
            .grants
            .iter()
            .filter(|g| g.publish)
            .map(|g| &g.selector);
        !topics.is_empty()
            && topics
                .iter()
                .all(|topic| any_selects(publish.clone(), std::slice::from_ref(topic)))
    }

    /// Whether the holder may receive `update` (given that its subscription selects it): a
    /// public update always, a private one when a `subscribe` selector selects one of its topics.
    pub fn can_receive(&self, update: &Update) -> bool {
        !update.private || any_selects(self.subscribe_selectors(), &update.topic_refs())
    }

    /// The payload shown for a subscription made with `selector` (its text): that of the first
    /// `subscribe` grant carrying one that selects the selector's text as a topic, else the
    /// `mercure` claim's own payload.
    pub fn payload_for(&self, selector: &str) -> Option<&Value> {
        self.grants
            .iter()
            .filter(|grant| grant.subscribe && grant.payload.is_some())
            .find(|grant| grant.selector.matches(selector))
            .and_then(|grant| grant.payload.as_ref())
            .or(self.payload.as_ref())
    }

    /// What decides [`Grants::can_receive`]: the `subscribe` selectors as distinct, sorted
    /// `(kind, selector)` pairs. Holders with equal keys receive exactly the same private
    /// updates, so their subscriptions with equal selector sets may share one feed.
    pub fn receive_key(&self) -> Vec<(SelectorKind, &str)> {
        let mut key: Vec<(SelectorKind, &str)> = self
            .subscribe_selectors()
            .map(|s| (s.kind(), s.as_str()))
            .collect();
        key.sort_unstable();
        key.dedup();
        key
    }

    fn subscribe_selectors(&self) -> impl Iterator<Item = &Selector> + Clone {
        self.grants
            .iter()
            .filter(|g| g.subscribe)
            .map(|g| &g.selector)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::selector::DEFAULT_BASE_URL;

    fn grants(claims: Value) -> Result<Grants, ClaimsError> {
        Claims::from_json(claims.to_string().as_bytes())?.grants(DEFAULT_BASE_URL)
    }

    fn update(topics: &[&str], private: bool) -> Update {
        Update {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            data: String::new(),
            private,
            id: None,
            event_type: None,
            retry: None,
        }
    }

    #[test]
    fn the_mercure_claim_grants_publishing_on_every_topic_it_selects() {
        let g = grants(json!({"mercure": {"publish": ["https://example.com/books/{id}", "/alt"]}}))
            .unwrap();
        assert!(g.can_publish(&["https://example.com/books/1"]));
        assert!(g.can_publish(&["https://example.com/books/1", "/alt"]));
        assert!(
            !g.can_publish(&["https://example.com/books/1", "/other"]),
            "every topic, alternates included"
        );
        assert!(!g.can_publish(&[]));
        assert!(!Grants::none().can_publish(&["/alt"]));
    }

    #[test]
    fn private_updates_reach_only_matching_subscribe_selectors() {
        let g =
            grants(json!({"mercure": {"subscribe": ["https://example.com/users/1/{x}"]}})).unwrap();
        assert!(g.can_receive(&update(&["https://example.com/users/1/inbox"], true)));
        assert!(g.can_receive(&update(&["/other", "https://example.com/users/1/a"], true)));
        assert!(!g.can_receive(&update(&["https://example.com/users/2/inbox"], true)));
        assert!(g.can_receive(&update(&["https://example.com/users/2/inbox"], false)));
        assert!(!Grants::none().can_receive(&update(&["/a"], true)));
        assert!(Grants::none().can_receive(&update(&["/a"], false)));
        assert!(!g.can_publish(&["https://example.com/users/1/inbox"]));
    }

    #[test]
    fn the_receive_key_is_the_distinct_subscribe_selectors() {
        let a = grants(json!({"mercure": {"subscribe": ["/b", "/a", "/b"], "publish": ["/c"]}}))
            .unwrap();
        let b = grants(json!({"mercure": {"subscribe": ["/a", "/b"]}})).unwrap();
        assert_eq!(a.receive_key(), b.receive_key());
        assert_eq!(
            a.receive_key(),
            vec![(SelectorKind::Exact, "/a"), (SelectorKind::Exact, "/b")]
        );
        assert!(Grants::none().receive_key().is_empty());
    }

    #[test]
    fn the_namespaced_claim_stands_in_for_a_missing_mercure_claim() {
        let g = grants(json!({"https://mercure.rocks/": {"subscribe": ["*"]}})).unwrap();
        assert!(g.can_receive(&update(&["/x"], true)));
    }

    #[test]
    fn authorization_details_grant_their_actions_and_ignore_other_types() {
        let g = grants(json!({
            "aud": ["https://hub.example", "other"],
            "iss": "https://issuer.example",
            "authorization_details": [
                {"type": "payment", "actions": 5, "topics": "not mercure"},
                {
                    "type": DETAIL_TYPE,
                    "actions": ["subscribe", "future-action"],
                    "topics": [{"match": "https://example.com/books/:id", "match_type": "urlpattern"}],
                    "payload": {"user": "alice"}
                },
                {"type": DETAIL_TYPE, "actions": ["publish"], "topics": [{"match": "/news"}]}
            ]
        }))
        .unwrap();
        assert!(g.can_receive(&update(&["https://example.com/books/7"], true)));
        assert!(!g.can_receive(&update(&["https://example.com/authors/7"], true)));
        assert!(g.can_publish(&["/news"]));
        assert!(!g.can_publish(&["https://example.com/books/7"]));
        assert_eq!(g.payload_for("https://example.com/authors/{id}"), None);
        assert_eq!(
            g.payload_for("https://example.com/books/1"),
            Some(&json!({"user": "alice"}))
        );
    }

    #[test]
    fn the_claim_payload_is_the_default_subscription_payload() {
        let g = grants(json!({"mercure": {
            "subscribe": [{"match": "/a", "payload": {"for": "a"}}, "/b"],
            "payload": {"for": "all"}
        }}))
        .unwrap();
        assert_eq!(g.payload_for("/a"), Some(&json!({"for": "a"})));
        assert_eq!(g.payload_for("/b"), Some(&json!({"for": "all"})));
    }

    #[test]
    fn malformed_details_are_refused_saying_where() {
        let detail = |d: Value| grants(json!({"authorization_details": [{"type": "x"}, d]}));
        let error =
            detail(json!({"type": DETAIL_TYPE, "actions": [], "topics": [{"match": "/a"}]}))
                .unwrap_err();
        assert_eq!(
            error,
            ClaimsError::Detail {
                index: 1,
                reason: "declares no action".into()
            }
        );
        let error =
            detail(json!({"type": DETAIL_TYPE, "actions": ["publish"], "topics": []})).unwrap_err();
        assert!(error.to_string().contains("no topic"), "{error}");
        let error = detail(json!({"type": DETAIL_TYPE, "actions": ["publish"], "topics": ["/a"]}))
            .unwrap_err();
        assert!(
            error.to_string().starts_with("authorization_details[1]"),
            "{error}"
        );
        let error = detail(json!({"type": DETAIL_TYPE, "actions": ["publish"],
            "topics": [{"match": "/a", "match_type": "regex"}]}))
        .unwrap_err();
        assert!(error.to_string().contains("\"regex\""), "{error}");
        let error = detail(json!({"type": DETAIL_TYPE, "actions": ["publish"],
            "topics": [{"match": "https://x/(", "match_type": "urlpattern"}]}))
        .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("authorization_details[1].topics[0]") && text.contains("https://x/("),
            "{text}"
        );
        let error = grants(json!({"mercure": {"subscribe": ["/ok", "bad\u{0}"]}})).unwrap_err();
        assert!(
            error.to_string().starts_with("mercure.subscribe[1]"),
            "{error}"
        );
        assert!(matches!(
            Claims::from_json(b"{\"mercure\": {\"publish\": 1}}"),
            Err(ClaimsError::Malformed(_))
        ));
    }

    #[test]
    fn lists_are_bounded() {
        let many: Vec<String> = (0..=MAX_CLAIM_SELECTORS).map(|i| format!("/{i}")).collect();
        assert_eq!(
            grants(json!({"mercure": {"publish": many}})).unwrap_err(),
            ClaimsError::TooMany {
                claim: "mercure.publish",
                max: MAX_CLAIM_SELECTORS
            }
        );
        let topics: Vec<Value> = (0..=MAX_DETAIL_TOPICS)
            .map(|i| json!({"match": format!("/{i}")}))
            .collect();
        let error = grants(json!({"authorization_details": [
            {"type": DETAIL_TYPE, "actions": ["publish"], "topics": topics}
        ]}))
        .unwrap_err();
        assert!(matches!(
            error,
            ClaimsError::TooMany {
                max: MAX_DETAIL_TOPICS,
                ..
            }
        ));
    }

    #[test]
    fn access_tokens_are_typed_at_jwt() {
        for typ in [
            "at+jwt",
            "AT+JWT",
            "application/at+jwt",
            "Application/At+Jwt",
        ] {
            assert!(is_access_token_type(Some(typ)), "{typ}");
        }
        for typ in [
            None,
            Some("JWT"),
            Some("application/jwt"),
            Some("at+jwt "),
            Some(""),
        ] {
            assert!(!is_access_token_type(typ), "{typ:?}");
        }
    }

    #[test]
    fn the_audience_is_one_or_several() {
        let one = Claims::from_json(br#"{"aud": "https://hub.example"}"#).unwrap();
        assert!(one.audience_contains("https://hub.example"));
        assert!(!one.audience_contains("https://other.example"));
        let many =
            Claims::from_json(br#"{"aud": ["a", "https://hub.example"], "iss": "i"}"#).unwrap();
        assert!(many.audience_contains("https://hub.example"));
        assert_eq!(many.iss.as_deref(), Some("i"));
        assert!(!Claims::default().audience_contains("a"));
    }
}
