//! `sluice health`: whether the hub on this machine is ready, for container health checks (a
//! minimal image has no curl). It asks `GET /readyz` where `sluice serve` listens, found from
//! the same configuration (the file in `--config` / `SLUICE_CONFIG` and the `SLUICE_*`
//! environment), over loopback when the hub listens on every interface. Exit status 0 when
//! the hub answers `200`, 1 otherwise, with the reason on stderr.
//!
//! With TLS on the hub's main listener the probe speaks TLS without checking the certificate,
//! as Kubernetes' HTTPS probes do: it sends nothing secret, to this machine's own hub, and the
//! certificate names the hub's public host, not the loopback address. A `--url` given by hand
//! is checked as `sluice pub` checks its hub.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sluice_server::config::{self, Config, Overrides};
use tokio_rustls::TlsConnector;

use crate::client::{HubArgs, HubClient};

/// How long the hub has to answer.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Flags of `sluice health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The hub's TOML configuration file, as given to `sluice serve`.
    #[arg(long, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    /// Ask this URL instead of the configured address, e.g. http://127.0.0.1:8080/readyz.
    #[arg(long)]
    url: Option<String>,
}

/// Asks the hub whether it is ready; an error saying why when it is not.
pub async fn run(args: HealthArgs) -> anyhow::Result<()> {
    let (url, client) = match &args.url {
        Some(url) => (url.clone(), HubArgs::new(url.clone(), None, None).client()?),
        None => {
            let (config, _warnings) = config::load(
                args.config.as_deref(),
                std::env::vars(),
                &Overrides::default(),
            )?;
            configured_probe(&config)?
        }
    };
    let request = Request::get(url.as_str())
        .body(Full::new(Bytes::new()))
        .with_context(|| format!("invalid URL {url:?}"))?;
    let answer = tokio::time::timeout(TIMEOUT, async {
        let response = client.send(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, body))
    })
    .await
    .with_context(|| format!("{url} did not answer within {} s", TIMEOUT.as_secs()))?
    .with_context(|| format!("cannot ask {url}"))?;
    let (status, body) = answer;
    if !status.is_success() {
        bail!(
            "not ready: {url} answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    println!("ready: {url} answered {status}");
    Ok(())
}

/// The URL of `/readyz` on the hub's main listener and a client for it.
fn configured_probe(config: &Config) -> anyhow::Result<(String, HubClient)> {
    let addr = loopback_for(config.listen);
    let tls_on_main = config.tls.as_ref().is_some_and(|tls| tls.listen.is_none());
    if tls_on_main {
        let url = format!("https://{addr}/readyz");
        Ok((
            url,
            HubClient::over_tls(TlsConnector::from(unverified_tls()?)),
        ))
    } else {
        let url = format!("http://{addr}/readyz");
        let client = HubArgs::new(url.clone(), None, None).client()?;
        Ok((url, client))
    }
}

/// `listen` with a wildcard address replaced by the loopback address of its family.
fn loopback_for(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// A TLS client that accepts any certificate (the handshake's signatures are still checked):
/// see the module's documentation for why the probe of the hub's own address may.
fn unverified_tls() -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(algorithms)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts the server's certificate whatever it is.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listen_address_is_probed_on_loopback() {
        let probe = |listen: &str| loopback_for(listen.parse().expect("an address")).to_string();
        assert_eq!(probe("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(probe("[::]:9000"), "[::1]:9000");
        assert_eq!(probe("10.1.2.3:8080"), "10.1.2.3:8080");
    }
}
