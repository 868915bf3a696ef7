//! A certificate authority made at test time: certificates for `localhost` and `127.0.0.1`
//! signed by it, written as PEM files for a hub's `[tls]`, and a rustls client that trusts it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A fresh CA; every certificate it signs is for `localhost` and `127.0.0.1`.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate chain and its key, as PEM.
#[derive(Debug, Clone)]
pub struct TestCert {
    /// The leaf certificate, then the CA's.
    pub chain_pem: String,
    /// The leaf's private key (PKCS#8).
    pub key_pem: String,
}

impl TestCert {
    /// Writes `<name>.crt` and `<name>.key` into `dir` and returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.chain_pem).expect("write the test certificate");
        std::fs::write(&key, &self.key_pem).expect("write the test key");
        (cert, key)
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A new CA with a fresh key.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "sluice test CA");
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        Self { issuer }
    }

    /// A certificate for `localhost` and `127.0.0.1` with `common_name`, signed by this CA.
    pub fn issue(&self, common_name: &str) -> TestCert {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("certificate parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let key = KeyPair::generate().expect("certificate key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        TestCert {
            chain_pem: format!("{}{}", cert.pem(), self.issuer.pem()),
            key_pem: key.serialize_pem(),
        }
    }

    /// The CA's certificate as PEM (for `--ca-file`).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A rustls client trusting only this CA, offering `alpn` (e.g. `[b"h2"]`).
    pub fn client_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.issuer.der().clone())
            .expect("the CA certificate is a trust anchor");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Connects to `addr` over TLS as `localhost`, offering `alpn`.
    ///
    /// # Errors
    /// When the connection or the handshake fails.
    pub async fn connect(
        &self,
        addr: std::net::SocketAddr,
        alpn: &[&[u8]],
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        let connector = TlsConnector::from(self.client_config(alpn));
        let name = ServerName::try_from("localhost").expect("server name");
        connector.connect(name, tcp).await
    }
}
