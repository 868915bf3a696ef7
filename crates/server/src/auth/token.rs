//! Verifying a token: size, algorithm, key, signature, time and audience checks, then claims.

use std::time::{Duration, SystemTime};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation, decode, decode_header};
use sluice_protocol::subject::FilterSet;

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

    /// Verifies `token` against `keys` and turns its `sluice` claim into a grant for `direction`.
    pub fn verify(
        &self,
        token: &str,
        keys: &KeySet,
        direction: Direction,
    ) -> Result<Grant, AuthError> {
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
            match decode::<TokenClaims>(token, &key.key, &validation) {
                Ok(data) => return self.grant(data.claims, direction),
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
