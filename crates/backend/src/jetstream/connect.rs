//! Opening the NATS connection described by a [`JetStreamConfig`]: authentication, TLS,
//! reconnection, and connection events turned into logs and a reconnect signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::rustls;
use async_nats::{Client, ConnectOptions, Event};
use tokio::sync::watch;

use super::config::JetStreamConfig;
use super::url_auth::UrlCredentials;
use crate::{BackendError, Unavailable};

/// Why the NATS connection cannot be set up as configured; names the `[jetstream]` key and
/// the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A credentials or nkey seed file cannot be read.
    #[error("cannot use jetstream.{key} {}: {source}", path.display())]
    Unreadable {
        /// The key of the section naming it: `creds_file` or `nkey_seed_file`.
        key: &'static str,
        /// The file, as configured.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// `nkey_seed_file` holds something other than a user nkey seed (`SU…`).
    #[error("cannot use jetstream.nkey_seed_file {}: does not hold a user nkey seed (SU…)", path.display())]
    NotAnNkeySeed {
        /// The file, as configured.
        path: PathBuf,
    },
    /// The client certificate or its key is not readable PEM.
    #[error("cannot load jetstream.{key} {}: {source}", path.display())]
    Pem {
        /// The key of the section naming it: `client_cert` or `client_key`.
        key: &'static str,
        /// The file, as configured.
        path: PathBuf,
        /// What the PEM reader reported.
        source: rustls::pki_types::pem::Error,
    },
    /// Loading the client certificate panicked on its blocking thread.
    #[error("loading the client certificate failed: {0}")]
    LoadPanicked(#[source] tokio::task::JoinError),
    /// rustls cannot build the TLS configuration.
    #[error("TLS setup failed: {0}")]
    Tls(#[source] rustls::Error),
    /// The client certificate and key do not make a usable TLS identity.
    #[error("unusable client certificate or key: {0}")]
    ClientIdentity(#[source] rustls::Error),
}

/// An open connection and the signal that ticks each time it is re-established.
pub(super) struct Connection {
    pub client: Client,
    /// Counts reconnections; feeds watch it to rebuild their consumers after a connection
    /// loss, as messages in flight while disconnected are lost with the connection.
    pub reconnects: watch::Receiver<u64>,
}

/// Connects to the first reachable server of `config.urls`.
pub(super) async fn connect(config: &JetStreamConfig) -> Result<Connection, BackendError> {
    let shown_urls = config.redacted_urls();
    let (reconnect_tx, reconnects) = watch::channel(0u64);
    let options = options(config, reconnect_tx, shown_urls.clone()).await?;
    let attempt_limit = config.connect_timeout.saturating_mul(
        u32::try_from(config.urls.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1),
    );
    let client = tokio::time::timeout(attempt_limit, options.connect(config.server_addrs()))
        .await
        .map_err(|_| Unavailable::ConnectTimeout {
            urls: shown_urls.clone(),
            limit: attempt_limit,
        })?
        // async-nats errors may quote the address they tried, credentials included.
        .map_err(|err| Unavailable::Connect {
            urls: shown_urls,
            reason: config.scrub(&err.to_string()),
        })?;
    // The first connection's event comes through a task of async-nats: taken in here, it is
    // not mistaken later for a re-connection.
    let mut first = reconnects.clone();
    let _ = tokio::time::timeout(config.connect_timeout, first.wait_for(|count| *count > 0)).await;
    Ok(Connection { client, reconnects })
}

async fn options(
    config: &JetStreamConfig,
    reconnect_tx: watch::Sender<u64>,
    shown_urls: String,
) -> Result<ConnectOptions, BackendError> {
    let reconnect_wait = config.reconnect_wait;
    let mut options = ConnectOptions::new()
        .name(&config.name)
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.request_timeout))
        .max_reconnects(usize::try_from(config.max_reconnects).ok())
        // The first retry is immediate so a brief blip costs little; then `reconnect_wait`.
        .reconnect_delay_callback(move |attempts| {
            if attempts <= 1 {
                Duration::ZERO
            } else {
                reconnect_wait
            }
        })
        .event_callback(move |event| {
            let shown_urls = shown_urls.clone();
            let reconnect_tx = reconnect_tx.clone();
            async move { log_event(&event, &shown_urls, &reconnect_tx) }
        });
    options = authenticate(options, config).await?;
    options = secure(options, config).await?;
    Ok(options)
}

fn log_event(event: &Event, shown_urls: &str, reconnect_tx: &watch::Sender<u64>) {
    match event {
        Event::Connected => {
            reconnect_tx.send_modify(|count| *count += 1);
            tracing::info!(urls = shown_urls, "NATS connection (re-)established");
        }
        Event::Disconnected => tracing::warn!(urls = shown_urls, "NATS connection lost"),
        Event::Closed => tracing::warn!(urls = shown_urls, "NATS connection closed"),
        Event::LameDuckMode => {
            tracing::warn!(urls = shown_urls, "NATS server entered lame duck mode")
        }
        Event::Draining => tracing::info!(urls = shown_urls, "NATS connection draining"),
        Event::SlowConsumer(sid) => {
            tracing::warn!(urls = shown_urls, sid, "NATS reports a slow consumer")
        }
        Event::ServerError(err) => tracing::warn!(urls = shown_urls, %err, "NATS server error"),
        Event::ClientError(err) => tracing::warn!(urls = shown_urls, %err, "NATS client error"),
    }
}

async fn authenticate(
    options: ConnectOptions,
    config: &JetStreamConfig,
) -> Result<ConnectOptions, BackendError> {
    if let Some(path) = &config.creds_file {
        return options.credentials_file(path).await.map_err(|source| {
            SetupError::Unreadable {
                key: "creds_file",
                path: path.clone(),
                source,
            }
            .into()
        });
    }
    // Validation allows URL credentials only when no other method is configured.
    match config.url_credentials() {
        Some(UrlCredentials::Token(token)) => return Ok(options.token(token)),
        Some(UrlCredentials::UserPassword { user, password }) => {
            return Ok(options.user_and_password(user, password));
        }
        None => {}
    }
    if let Some(token) = &config.token {
        return Ok(options.token(token.clone()));
    }
    if let (Some(user), Some(password)) = (&config.user, &config.password) {
        return Ok(options.user_and_password(user.clone(), password.clone()));
    }
    if let Some(path) = &config.nkey_seed_file {
        let seed =
            tokio::fs::read_to_string(path)
                .await
                .map_err(|source| SetupError::Unreadable {
                    key: "nkey_seed_file",
                    path: path.clone(),
                    source,
                })?;
        let seed = seed.trim();
        // Never echo the content: it is the private key.
        if !seed.starts_with("SU") {
            return Err(SetupError::NotAnNkeySeed { path: path.clone() }.into());
        }
        return Ok(options.nkey(seed.to_owned()));
    }
    Ok(options)
}

async fn secure(
    mut options: ConnectOptions,
    config: &JetStreamConfig,
) -> Result<ConnectOptions, BackendError> {
    if config.tls_insecure_skip_verify {
        let tls = insecure_tls(config).await?;
        return Ok(options.tls_client_config(tls).require_tls(true));
    }
    if let Some(ca) = &config.ca_file {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let (Some(cert), Some(key)) = (&config.client_cert, &config.client_key) {
        options = options
            .add_client_certificate(cert.clone(), key.clone())
            .require_tls(true);
    }
    Ok(options)
}

/// A TLS configuration that accepts any server certificate (`tls_insecure_skip_verify`),
/// still presenting the client certificate when one is configured.
async fn insecure_tls(config: &JetStreamConfig) -> Result<rustls::ClientConfig, BackendError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(SetupError::Tls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)));
    let (Some(cert), Some(key)) = (&config.client_cert, &config.client_key) else {
        return Ok(builder.with_no_client_auth());
    };
    let (cert, key) = (cert.clone(), key.clone());
    let loaded = tokio::task::spawn_blocking(move || {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let pem = |key: &'static str, path: &PathBuf| {
            let path = path.clone();
            move |source| SetupError::Pem { key, path, source }
        };
        let certs = CertificateDer::pem_file_iter(&cert)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(pem("client_cert", &cert))?;
        let key = PrivateKeyDer::from_pem_file(&key).map_err(pem("client_key", &key))?;
        Ok::<_, SetupError>((certs, key))
    })
    .await
    .map_err(SetupError::LoadPanicked)??;
    Ok(builder
        .with_client_auth_cert(loaded.0, loaded.1)
        .map_err(SetupError::ClientIdentity)?)
}

/// Accepts every server certificate but still checks handshake signatures.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
