//! The TLS client side of `https://` hubs, shared by `sluice bench`, `sluice sub` and
//! `sluice pub`: rustls with the ring provider, trusting a `--ca-file` or the system's
//! certificate authorities.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A rustls client configuration offering `alpn` (e.g. `[b"h2", b"http/1.1"]`) and trusting
/// the certificate authorities in the PEM file `ca_file` when given, else the system's.
///
/// # Errors
/// When `ca_file` cannot be read, is not PEM, or holds no usable certificate; the error names
/// it as `--ca-file <path>`.
pub fn client_config(
    ca_file: Option<&Path>,
    alpn: &[&[u8]],
) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .with_context(|| format!("--ca-file {}", path.display()))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                bail!("--ca-file {}: holds no usable certificate", path.display());
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("sluice-bench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let missing = dir.join("missing.pem");
        for (path, why) in [(&empty, "holds no usable certificate"), (&missing, "")] {
            let err = format!("{:#}", client_config(Some(path), &[b"h2"]).unwrap_err());
            assert!(
                err.contains(&format!("--ca-file {}", path.display())),
                "{err}"
            );
            assert!(err.contains(why), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
