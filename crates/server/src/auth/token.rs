//! Verifying a token: size, algorithm, key, signature, time and audience checks, then claims.

use std::time::{Duration, SystemTime};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation, decode, decode_header};
use sluice_protocol::subject::FilterSet;

use super::cache::TimeWindow;
use super::claims::TokenClaims;
use super::config::DirectionConfig;
use super::error::AuthError;
use super::grant::{Direction, Grant};
use super::keys::KeySet;

/// The fixed verification rules of one direction, prepared once from its configuration.
pub(crate) struct TokenRules {
    /// Algorithms a token may use.
    algorithms: Vec<Algorithm>,
    /// The `jsonwebtoken` checks (time, audience, issuer); its algorithm list is set per token.
    validation: Validation,
    leeway: Duration,
    max_token_bytes: usize,
    max_filters: usize,
}

impl TokenRules {
    pub fn new(config: &DirectionConfig) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = config.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        let mut required = Vec::new();
        if config.require_exp {
            required.push("exp");
        }
        // Without an expected audience, `aud` is not checked (otherwise jsonwebtoken refuses
        // every token that carries one).
        validation.validate_aud = config.audience.is_some();
        if let Some(audience) = &config.audience {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        if let Some(issuer) = &config.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        Self {
            algorithms: config.algorithms.clone(),
            validation,
            leeway: config.leeway,
            max_token_bytes: config.max_token_bytes,
            max_filters: config.max_filters,
        }
    }

    /// Verifies `token` against `keys` and turns its `sluice` claim into a grant for
    /// `direction`, with the time window the grant may be used in.
    pub fn verify(
        &self,
        token: &str,
        keys: &KeySet,
        direction: Direction,
    ) -> Result<(Grant, TimeWindow), AuthError> {
        let claims = self.verify_claims::<TokenClaims>(token, keys)?;
        let window = self.window(claims.exp, claims.nbf);
        Ok((self.grant(claims, direction)?, window))
    }

    /// When a verified token with these `exp` and `nbf` claims passes these rules' time checks.
    pub fn window(&self, exp: Option<f64>, nbf: Option<f64>) -> TimeWindow {
        TimeWindow::new(exp, nbf, self.leeway)
    }

    /// Verifies `token` against `keys` (size, algorithm, signature, time, audience, issuer)
    /// and returns its claims as `C` (the `sluice` claim's shape, or Mercure's).
    pub fn verify_claims<C: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        keys: &KeySet,
    ) -> Result<C, AuthError> {
        // Size first: nothing below decodes or allocates more than the token's own length.
        if token.len() > self.max_token_bytes {
            return Err(AuthError::TooLarge {
                what: "token",
                limit: self.max_token_bytes,
            });
        }
        // An unknown `alg` (including `none`) fails here: jsonwebtoken has no such algorithm.
        let header = decode_header(token)
            .map_err(|_| AuthError::InvalidToken("the header is not a JWT header"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::WrongAlgorithm);
        }
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];

        for key in keys
            .keys
            .iter()
            .filter(|k| k.fits(header.alg, header.kid.as_deref()))
        {
            match decode::<C>(token, &key.key, &validation) {
                Ok(data) => return Ok(data.claims),
                // A key of the right family that does not verify, or does not fit the curve or
                // size this algorithm needs: try the next one.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::InvalidSignature
                            | ErrorKind::InvalidEcdsaKey
                            | ErrorKind::InvalidEddsaKey
                            | ErrorKind::InvalidRsaKey(_)
                            | ErrorKind::InvalidKeyFormat
                    ) => {}
                Err(e) => return Err(map_error(e.kind())),
            }
        }
        // Keys of the token's family that all failed (or whose `kid` did not match) is a
        // signature problem; no key of that family at all is an algorithm problem.
        if keys
            .keys
            .iter()
            .any(|k| k.key.family() == header.alg.family())
        {
            Err(AuthError::BadSignature)
        } else {
            Err(AuthError::WrongAlgorithm)
        }
    }

    fn grant(&self, claims: TokenClaims, direction: Direction) -> Result<Grant, AuthError> {
        let filters = match direction {
            Direction::Subscribe => claims.sluice.subscribe.0,
            Direction::Publish => claims.sluice.publish.0,
            Direction::Admin if claims.sluice.admin => Vec::new(),
            Direction::Admin => return Err(AuthError::NotAdmin),
        };
        if filters.len() > self.max_filters {
            return Err(AuthError::TooLarge {
                what: "sluice claim",
                limit: self.max_filters,
            });
        }
        let filters = FilterSet::new(filters)
            .map_err(|_| AuthError::InvalidToken("the sluice claim holds an invalid filter"))?;
        // `exp` was checked to be a non-negative number; an absurdly distant one means no expiry.
        let expires_at = claims.exp.and_then(|exp| {
            let exp = Duration::try_from_secs_f64(exp).ok()?;
            SystemTime::UNIX_EPOCH.checked_add(exp.checked_add(self.leeway)?)
        });
        Ok(Grant::limited(direction, filters, expires_at, claims.sub))
    }
}

/// Maps a verification failure that no other key could fix.
fn map_error(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => AuthError::WrongAlgorithm,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::MissingRequiredClaim(_) => {
            AuthError::InvalidToken("a required claim (exp, aud or iss) is missing")
        }
        ErrorKind::InvalidClaimFormat(_) | ErrorKind::Json(_) => {
            AuthError::InvalidToken("the claims do not have the expected shape")
        }
        _ => AuthError::InvalidToken("the token is not a well-formed JWT"),
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, EncodingKey, Header, encode};
    use serde_json::{Value, json};

    use super::*;
    use crate::auth::keys::VerifyingKey;

    const SECRET: &[u8] = b"token-rules-test-secret-0123456789abcdef";

    fn rules(extra: &str) -> TokenRules {
        let text = format!(
            "algorithms = [\"HS256\", \"RS256\"]\n{extra}\n[[keys]]\ntype = \"jwks\"\nfile = \"k.json\"\n"
        );
        TokenRules::new(&toml::from_str(&text).expect("direction"))
    }

    fn hmac_keys() -> KeySet {
        KeySet {
            keys: vec![VerifyingKey {
                id: None,
                algorithm: None,
                key: DecodingKey::from_secret(SECRET).expect("key"),
            }],
        }
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    }

    fn hs256(claims: &Value) -> String {
        let key = EncodingKey::from_secret(SECRET).expect("key");
        encode(&Header::new(Algorithm::HS256), claims, &key).expect("sign")
    }

    fn verify(rules: &TokenRules, token: &str) -> Result<Grant, AuthError> {
        rules
            .verify(token, &hmac_keys(), Direction::Subscribe)
            .map(|(grant, _)| grant)
    }

    #[test]
    fn a_token_of_exactly_the_limit_is_accepted() {
        let token = hs256(&json!({ "exp": now() + 600, "sluice": { "subscribe": ["a"] } }));
        let at = rules(&format!("max_token_bytes = {}", token.len()));
        assert!(verify(&at, &token).is_ok());
        let below = rules(&format!("max_token_bytes = {}", token.len() - 1));
        assert_eq!(
            verify(&below, &token).unwrap_err(),
            AuthError::TooLarge {
                what: "token",
                limit: token.len() - 1
            }
        );
    }

    #[test]
    fn missing_claims_and_misshapen_claims_are_told_apart() {
        let no_exp = hs256(&json!({ "sluice": { "subscribe": ["a"] } }));
        assert_eq!(
            verify(&rules(""), &no_exp).unwrap_err(),
            AuthError::InvalidToken("a required claim (exp, aud or iss) is missing")
        );
        assert!(verify(&rules("require_exp = false"), &no_exp).is_ok());
        let shape = hs256(&json!({ "exp": now() + 600, "sluice": { "subscribe": 5 } }));
        assert_eq!(
            verify(&rules(""), &shape).unwrap_err(),
            AuthError::InvalidToken("the claims do not have the expected shape")
        );
        let filter = hs256(&json!({ "exp": now() + 600, "sluice": { "subscribe": ["a..b"] } }));
        assert_eq!(
            verify(&rules(""), &filter).unwrap_err(),
            AuthError::InvalidToken("the sluice claim holds an invalid filter")
        );
    }

    #[test]
    fn an_allowed_algorithm_without_a_key_of_its_family_is_the_wrong_algorithm() {
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/keys/rsa_a.key.pem"
        ))
        .expect("test key");
        let key = EncodingKey::from_rsa_pem(&pem).expect("RSA key");
        let claims = json!({ "exp": now() + 600, "sluice": { "subscribe": ["a"] } });
        let rs256 = encode(&Header::new(Algorithm::RS256), &claims, &key).expect("sign");
        assert_eq!(
            verify(&rules(""), &rs256).unwrap_err(),
            AuthError::WrongAlgorithm
        );
        // A key of the family that does not verify is a bad signature.
        let signed = hs256(&claims);
        let (signing_input, signature) = signed.rsplit_once('.').expect("three parts");
        let flipped = if signature.starts_with('A') { 'B' } else { 'A' };
        let forged = format!("{signing_input}.{flipped}{}", &signature[1..]);
        assert_eq!(
            verify(&rules(""), &forged).unwrap_err(),
            AuthError::BadSignature
        );
    }

    #[test]
    fn each_verification_failure_maps_to_its_refusal() {
        let json = serde_json::from_str::<Value>("{").unwrap_err();
        let cases = [
            (ErrorKind::ExpiredSignature, AuthError::Expired),
            (ErrorKind::ImmatureSignature, AuthError::NotYetValid),
            (ErrorKind::InvalidAlgorithm, AuthError::WrongAlgorithm),
            (ErrorKind::UnsupportedAlgorithm, AuthError::WrongAlgorithm),
            (ErrorKind::InvalidAudience, AuthError::WrongAudience),
            (ErrorKind::InvalidIssuer, AuthError::WrongIssuer),
            (
                ErrorKind::MissingRequiredClaim("exp".into()),
                AuthError::InvalidToken("a required claim (exp, aud or iss) is missing"),
            ),
            (
                ErrorKind::InvalidClaimFormat("exp".into()),
                AuthError::InvalidToken("the claims do not have the expected shape"),
            ),
            (
                ErrorKind::Json(std::sync::Arc::new(json)),
                AuthError::InvalidToken("the claims do not have the expected shape"),
            ),
            (
                ErrorKind::InvalidToken,
                AuthError::InvalidToken("the token is not a well-formed JWT"),
            ),
        ];
        for (kind, refusal) in cases {
            assert_eq!(map_error(&kind), refusal, "{kind:?}");
        }
    }

    #[test]
    fn the_grant_lasts_until_exp_plus_leeway_and_carries_the_subject() {
        let exp = now() + 600;
        let token = hs256(&json!({ "exp": exp, "sub": "u1", "sluice": { "subscribe": ["a"] } }));
        let grant = verify(&rules("leeway = \"7s\""), &token).expect("valid");
        assert_eq!(
            grant.expires_at(),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(exp + 7))
        );
        assert_eq!(grant.subject(), Some("u1"));
        assert!(grant.allows_subscribe("a") && !grant.allows_subscribe("b"));
    }
}
