//! TLS for the hub's listeners: the `[tls]` section, the certificate chain and key read from
//! PEM files and checked against each other ([`Certificates`]), and their reload on SIGHUP and
//! when a file changes, without dropping a connection (`reload.rs`).
//!
//! rustls with the `ring` provider: TLS 1.3 and 1.2, ALPN `h2` then `http/1.1`, and stateless
//! session tickets, so a client that reconnects (a browser after a network change) resumes
//! its session instead of paying for a full handshake.

mod reload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::bounded_file::read_at_most;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// The `[tls]` section: where the certificate and its key are, and which listener speaks TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, the server's certificate first.
    pub cert_file: PathBuf,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// A second listener, for TLS, beside the plain `listen`. Without it `listen` itself
    /// speaks TLS (and there is no plain listener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

/// Why a certificate or key cannot be used; each names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The certificate file is missing, unreadable, not PEM or holds no certificate.
    #[error("tls.cert_file {path}: {reason}")]
    Cert {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key file is missing, unreadable, not PEM or holds no key rustls can sign with.
    #[error("tls.key_file {path}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key is not the certificate's.
    #[error("tls.key_file {key} is not the key of the certificate in tls.cert_file {cert}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

/// The certificate the TLS listeners present: read at start, replaced by [`Certificates::reload`].
/// Handshakes in progress keep the certificate they started with; open connections are
/// untouched.
#[derive(Debug)]
pub struct Certificates {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificates {
    /// Reads and checks the files of `config`: a missing, unreadable or malformed file, or a
    /// key that is not the certificate's, is an error naming the file.
    pub fn load(config: &TlsConfig) -> Result<Arc<Self>, TlsError> {
        let key = read(&config.cert_file, &config.key_file)?;
        Ok(Arc::new(Self {
            cert_file: config.cert_file.clone(),
            key_file: config.key_file.clone(),
            current: RwLock::new(Arc::new(key)),
        }))
    }

    /// Reads the files again; on success new handshakes present the new certificate, on
    /// failure the previous one stays in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = read(&self.cert_file, &self.key_file)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        tracing::info!(cert_file = %self.cert_file.display(), "TLS certificate reloaded");
        Ok(())
    }

    /// The rustls configuration of a TLS listener: TLS 1.3 and 1.2, this certificate, ALPN
    /// `h2` (when `http2`) and `http/1.1`, session tickets.
    pub(crate) fn server_config(self: &Arc<Self>, http2: bool) -> Arc<ServerConfig> {
        let versions = [&version::TLS13, &version::TLS12];
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .expect("the ring provider supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        // Stateless tickets, encrypted under a key of this process that rotates every six
        // hours: a returning client resumes with no signature and the hub keeps nothing per
        // session (rustls's default, a cache of 256 sessions, forgets a client after 256
        // others). Without a ticket key (the system's random source failing) the hub still
        // serves, with full handshakes only.
        match rustls::crypto::ring::Ticketer::new() {
            Ok(ticketer) => config.ticketer = ticketer,
            Err(err) => tracing::warn!(error = %err, "TLS session tickets are off"),
        }
        if http2 {
            config.alpn_protocols.push(b"h2".to_vec());
        }
        config.alpn_protocols.push(b"http/1.1".to_vec());
        Arc::new(config)
    }

    fn files(&self) -> [&Path; 2] {
        [&self.cert_file, &self.key_file]
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The largest certificate chain file read (a chain is a few KiB).
const MAX_CERT_FILE_BYTES: u64 = 1024 * 1024;

/// The largest private key file read.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// Reads the chain and the key and checks that they belong together.
fn read(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_error = |reason: String| TlsError::Cert {
        path: cert_file.to_owned(),
        reason,
    };
    let key_error = |reason: String| TlsError::Key {
        path: key_file.to_owned(),
        reason,
    };
    // Read whole first, so that a missing file reads as the operating system says it.
    let certs = read_at_most(cert_file, MAX_CERT_FILE_BYTES)
        .map_err(|e| cert_error(e.to_string()))?
        .ok_or_else(|| cert_error(format!("larger than {MAX_CERT_FILE_BYTES} bytes")))?;
    let chain = CertificateDer::pem_slice_iter(&certs)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(cert_error("holds no PEM certificate".into()));
    }
    let key = read_at_most(key_file, MAX_KEY_FILE_BYTES)
        .map_err(|e| key_error(e.to_string()))?
        .ok_or_else(|| key_error(format!("larger than {MAX_KEY_FILE_BYTES} bytes")))?;
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| key_error(format!("not a PEM private key: {e}")))?;
    let key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_error(format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        // `Unknown`: the key cannot name its public half, so there is nothing to compare.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::Mismatch {
                cert: cert_file.to_owned(),
                key: key_file.to_owned(),
            })
        }
        // The certificate cannot be parsed.
        Err(e) => Err(cert_error(format!("unusable certificate: {e}"))),
    }
}
