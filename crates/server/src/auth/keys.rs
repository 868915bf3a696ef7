//! Loading verification keys from the configuration and its files.

use crate::bounded_file::read_at_most;
use std::path::Path;

use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use super::config::{AuthConfigError, KeyConfig, MIN_HMAC_SECRET_BYTES};

/// Largest PEM or secret file read.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;
/// Largest JWKS file read.
const MAX_JWKS_FILE_BYTES: u64 = 1024 * 1024;
/// Most keys one direction may hold, so a token without `kid` costs a bounded number of checks.
pub(crate) const MAX_KEYS: usize = 64;

/// One key a token signature may be checked against.
pub(crate) struct VerifyingKey {
    /// The key id a token's `kid` header must name, when the key has one.
    pub id: Option<String>,
    /// The only algorithm this key may verify, when its JWKS entry says so.
    pub algorithm: Option<Algorithm>,
    /// The key material; its family (HMAC, RSA, EC, Ed) fixes which algorithms apply.
    pub key: DecodingKey,
}

impl VerifyingKey {
    /// Whether a token signed with `alg` and naming `kid` may be checked against this key.
    ///
    /// The family check is what stops algorithm confusion: an `HS256` token is never checked
    /// against the bytes of an RSA public key.
    pub fn fits(&self, alg: Algorithm, kid: Option<&str>) -> bool {
        self.key.family() == alg.family()
            && self.algorithm.is_none_or(|a| a == alg)
            && match (kid, &self.id) {
                (Some(kid), Some(id)) => kid == id,
                _ => true,
            }
    }
}

/// Every key of one direction, as loaded at start-up or at the last successful reload.
pub(crate) struct KeySet {
    pub keys: Vec<VerifyingKey>,
}

impl KeySet {
    /// Reads every key of one direction; `prefix` is its dotted key, e.g. `auth.subscribe`.
    pub fn load(prefix: &str, configs: &[KeyConfig]) -> Result<Self, AuthConfigError> {
        let mut keys = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let key = format!("{prefix}.keys[{i}]");
            match config {
                KeyConfig::Hmac {
                    id,
                    secret,
                    secret_file,
                } => {
                    let bytes = match (secret, secret_file) {
                        (Some(secret), _) => secret.expose().to_vec(),
                        (None, Some(path)) => read_secret_file(&key, path)?,
                        (None, None) => {
                            return Err(AuthConfigError::invalid(
                                format!("{key}.secret"),
                                "(missing)",
                                "an HMAC key needs secret or secret_file",
                            ));
                        }
                    };
                    if bytes.len() < MIN_HMAC_SECRET_BYTES {
                        tracing::warn!(
                            key = %key,
                            bytes = bytes.len(),
                            "HMAC secret is shorter than {MIN_HMAC_SECRET_BYTES} bytes; use a longer random secret"
                        );
                    }
                    let decoding = DecodingKey::from_secret(&bytes).map_err(|e| {
                        AuthConfigError::invalid(format!("{key}.secret"), "(hidden)", e.to_string())
                    })?;
                    keys.push(VerifyingKey {
                        id: id.clone(),
                        algorithm: None,
                        key: decoding,
                    });
                }
                KeyConfig::Rsa(pem) => keys.push(load_pem(
                    &key,
                    pem,
                    "RSA public key in PEM",
                    DecodingKey::from_rsa_pem,
                )?),
                KeyConfig::Ec(pem) => keys.push(load_pem(
                    &key,
                    pem,
                    "EC public key in PEM",
                    DecodingKey::from_ec_pem,
                )?),
                KeyConfig::Eddsa(pem) => keys.push(load_pem(
                    &key,
                    pem,
                    "Ed25519 public key in PEM",
                    DecodingKey::from_ed_pem,
                )?),
                KeyConfig::Jwks { file } => keys.extend(load_jwks(&key, file)?),
            }
        }
        if keys.len() > MAX_KEYS {
            return Err(AuthConfigError::invalid(
                format!("{prefix}.keys"),
                format!("{} keys", keys.len()),
                format!("at most {MAX_KEYS} keys (JWKS entries included)"),
            ));
        }
        Ok(Self { keys })
    }
}

fn load_pem(
    key: &str,
    pem: &super::config::PemKey,
    what: &'static str,
    parse: fn(&[u8]) -> jsonwebtoken::errors::Result<DecodingKey>,
) -> Result<VerifyingKey, AuthConfigError> {
    let bytes = read_bounded(key, &pem.pem_file, MAX_KEY_FILE_BYTES)?;
    let decoding = parse(&bytes).map_err(|e| AuthConfigError::BadKey {
        key: key.to_owned(),
        path: pem.pem_file.clone(),
        what,
        detail: e.to_string(),
    })?;
    Ok(VerifyingKey {
        id: pem.id.clone(),
        algorithm: None,
        key: decoding,
    })
}

/// Reads a JWKS file. Keys meant for encryption, or of a type this build cannot verify, are
/// skipped with a warning; a file with no usable key at all is an error.
fn load_jwks(key: &str, path: &Path) -> Result<Vec<VerifyingKey>, AuthConfigError> {
    let bad = |detail: String| AuthConfigError::BadKey {
        key: key.to_owned(),
        path: path.to_owned(),
        what: "JWKS",
        detail,
    };
    let bytes = read_bounded(key, path, MAX_JWKS_FILE_BYTES)?;
    let set: JwkSet = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let mut keys = Vec::new();
    for (i, jwk) in set.keys.iter().enumerate() {
        let common = &jwk.common;
        if matches!(common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
            continue;
        }
        let algorithm = match common.key_algorithm.map(Algorithm::try_from) {
            None => None,
            Some(Ok(alg)) => Some(alg),
            Some(Err(_)) => {
                tracing::warn!(key = %key, index = i, "JWKS key has a non-signature algorithm; skipped");
                continue;
            }
        };
        match DecodingKey::from_jwk(jwk) {
            Ok(decoding) => keys.push(VerifyingKey {
                id: common.key_id.clone(),
                algorithm,
                key: decoding,
            }),
            Err(e) => {
                tracing::warn!(key = %key, index = i, error = %e, "JWKS key is not usable; skipped");
            }
        }
    }
    if keys.is_empty() {
        return Err(bad("no signature verification key in the set".to_owned()));
    }
    Ok(keys)
}

/// Reads an HMAC secret file; one trailing newline (as left by `echo` or an editor) is dropped.
fn read_secret_file(key: &str, path: &Path) -> Result<Vec<u8>, AuthConfigError> {
    let mut bytes = read_bounded(key, path, MAX_KEY_FILE_BYTES)?;
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    } else if bytes.ends_with(b"\n") {
        bytes.truncate(bytes.len() - 1);
    }
    if bytes.is_empty() {
        return Err(AuthConfigError::BadKey {
            key: key.to_owned(),
            path: path.to_owned(),
            what: "HMAC secret",
            detail: "the file is empty".to_owned(),
        });
    }
    Ok(bytes)
}

/// Reads a whole file, refusing one larger than `limit` bytes without reading past it.
fn read_bounded(key: &str, path: &Path, limit: u64) -> Result<Vec<u8>, AuthConfigError> {
    let read_error = |source| AuthConfigError::ReadFile {
        key: key.to_owned(),
        path: path.to_owned(),
        source,
    };
    read_at_most(path, limit)
        .map_err(read_error)?
        .ok_or_else(|| AuthConfigError::BadKey {
            key: key.to_owned(),
            path: path.to_owned(),
            what: "key file",
            detail: format!("larger than {limit} bytes"),
        })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn hmac(id: Option<&str>, algorithm: Option<Algorithm>) -> VerifyingKey {
        VerifyingKey {
            id: id.map(str::to_owned),
            algorithm,
            key: DecodingKey::from_secret(b"secret").expect("key"),
        }
    }

    #[test]
    fn a_key_fits_its_family_its_jwks_algorithm_and_its_kid() {
        let any = hmac(None, None);
        assert!(any.fits(Algorithm::HS256, None));
        assert!(any.fits(Algorithm::HS512, Some("k")), "no id: any kid");
        assert!(!any.fits(Algorithm::RS256, None), "another family");
        let pinned = hmac(Some("k1"), Some(Algorithm::HS384));
        assert!(pinned.fits(Algorithm::HS384, Some("k1")));
        assert!(pinned.fits(Algorithm::HS384, None), "no kid: any key");
        assert!(!pinned.fits(Algorithm::HS384, Some("k2")));
        assert!(
            !pinned.fits(Algorithm::HS256, Some("k1")),
            "not its JWKS alg"
        );
    }

    fn file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(bytes).expect("write");
        file
    }

    #[test]
    fn secret_files_lose_one_trailing_line_break() {
        for (content, secret) in [
            (&b"abc\n"[..], &b"abc"[..]),
            (b"abc\r\n", b"abc"),
            (b"abc\n\n", b"abc\n"),
            (b"abc\r", b"abc\r"),
            (b"abc", b"abc"),
        ] {
            let file = file_with(content);
            assert_eq!(
                read_secret_file("k", file.path()).unwrap(),
                secret,
                "{content:?}"
            );
        }
        for empty in [&b""[..], b"\n", b"\r\n"] {
            let file = file_with(empty);
            let err = read_secret_file("k", file.path()).unwrap_err();
            assert!(matches!(
                err,
                AuthConfigError::BadKey {
                    what: "HMAC secret",
                    ..
                }
            ));
        }
    }

    #[test]
    fn files_are_read_whole_up_to_the_limit() {
        let exact = file_with(&[7; 100]);
        assert_eq!(read_bounded("k", exact.path(), 100).unwrap(), vec![7; 100]);
        let over = file_with(&[7; 101]);
        let err = read_bounded("k", over.path(), 100).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("is not a usable key file: larger than 100 bytes"),
            "{err}"
        );
        let missing = read_bounded("k", Path::new("/nonexistent/key"), 100).unwrap_err();
        assert!(matches!(missing, AuthConfigError::ReadFile { .. }));
    }

    /// Counts the warnings logged while it is the thread's subscriber.
    struct Warnings(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl tracing::Subscriber for Warnings {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            if *event.metadata().level() == tracing::Level::WARN {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// How many warnings loading one HMAC key with a secret of `len` bytes logs.
    fn warnings_for_secret_of(len: usize) -> usize {
        let count = std::sync::Arc::default();
        let keys = [KeyConfig::Hmac {
            id: None,
            secret: Some(super::super::config::Secret::new("s".repeat(len))),
            secret_file: None,
        }];
        let subscriber = Warnings(std::sync::Arc::clone(&count));
        tracing::subscriber::with_default(subscriber, || {
            // Other tests' threads install and drop subscribers of their own; the interest
            // they left cached for this callsite is recomputed with this one in place.
            tracing::callsite::rebuild_interest_cache();
            KeySet::load("auth.subscribe", &keys).expect("loads");
        });
        count.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn a_secret_shorter_than_32_bytes_is_loaded_with_a_warning() {
        assert_eq!(warnings_for_secret_of(MIN_HMAC_SECRET_BYTES - 1), 1);
        assert_eq!(warnings_for_secret_of(MIN_HMAC_SECRET_BYTES), 0);
    }

    #[test]
    fn at_most_max_keys_per_direction() {
        let secret = KeyConfig::Hmac {
            id: None,
            secret: Some(super::super::config::Secret::new("s")),
            secret_file: None,
        };
        let keys = vec![secret; MAX_KEYS];
        assert_eq!(
            KeySet::load("auth.subscribe", &keys).unwrap().keys.len(),
            MAX_KEYS
        );
        let mut more = keys.clone();
        more.push(keys[0].clone());
        let err = KeySet::load("auth.subscribe", &more)
            .err()
            .expect("too many");
        assert!(
            matches!(err, AuthConfigError::Invalid { key, .. } if key == "auth.subscribe.keys")
        );
    }
}
