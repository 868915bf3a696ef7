//! How the JetStream backend reaches a real nats-server: authentication methods, TLS (CA,
//! mutual TLS, insecure skip-verify) and WebSocket URLs. Secrets never appear in errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_backend::{Backend, BackendError, Health};
use sluice_test_support::{NatsOptions, NatsServer};
use tempfile::TempDir;

async fn start(config: &str) -> NatsServer {
    NatsServer::start_with(NatsOptions::default().with_config(config))
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Creates the `EVENTS` stream through a client connected with `options`.
async fn create_stream(options: async_nats::ConnectOptions, url: &str) {
    let client = options.connect(url).await.expect("operator connects");
    jetstream::new(client)
        .create_stream(stream::Config {
            name: "EVENTS".to_owned(),
            subjects: vec!["events.>".to_owned()],
            ..Default::default()
        })
        .await
        .expect("stream created");
}

fn config(url: String) -> JetStreamConfig {
    let mut config = JetStreamConfig::new(url, "EVENTS");
    config.connect_timeout = Duration::from_secs(3);
    config
}

async fn assert_ready(config: &JetStreamConfig) {
    let backend = JetStreamBackend::connect(config)
        .await
        .unwrap_or_else(|err| panic!("connects: {err}"));
    assert_eq!(backend.health().await, Health::Ready);
}

async fn refused(config: &JetStreamConfig) -> String {
    match JetStreamBackend::connect(config).await {
        Ok(_) => panic!("connected with {config:?}"),
        Err(err @ BackendError::Unavailable(_)) => {
            eprintln!("refused as expected: {err}");
            err.to_string()
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn token_authentication() {
    let server = start("authorization { token: \"t0ken-123\" }").await;
    create_stream(
        async_nats::ConnectOptions::with_token("t0ken-123".into()),
        &server.url(),
    )
    .await;
    let mut config = config(server.url());
    config.token = Some("t0ken-123".into());
    assert_ready(&config).await;

    config.token = Some("wr0ng-456".into());
    let err = refused(&config).await;
    assert!(!err.contains("wr0ng-456"), "{err}");
}

#[tokio::test]
async fn user_and_password_authentication() {
    let server = start("authorization { user: alice, password: \"pa55-word\" }").await;
    create_stream(
        async_nats::ConnectOptions::with_user_and_password("alice".into(), "pa55-word".into()),
        &server.url(),
    )
    .await;
    let mut config = config(server.url());
    config.user = Some("alice".into());
    config.password = Some("pa55-word".into());
    assert_ready(&config).await;

    config.password = Some("not-the-pa55".into());
    let err = refused(&config).await;
    assert!(!err.contains("not-the-pa55"), "{err}");
}

#[tokio::test]
async fn user_and_password_in_the_url_authenticate_percent_decoded() {
    let server = start("authorization { user: alice, password: \"p@ss:w0rd\" }").await;
    create_stream(
        async_nats::ConnectOptions::with_user_and_password("alice".into(), "p@ss:w0rd".into()),
        &server.url(),
    )
    .await;
    let port = server.port();
    assert_ready(&config(format!(
        "nats://alice:p%40ss%3Aw0rd@127.0.0.1:{port}"
    )))
    .await;

    let err = refused(&config(format!("nats://alice:wr0ng-p4ss@127.0.0.1:{port}"))).await;
    assert!(!err.contains("wr0ng-p4ss"), "{err}");
    assert!(err.contains("authorization violation"), "{err}");
}

#[tokio::test]
async fn a_token_in_the_url_authenticates() {
    let server = start("authorization { token: \"t0ken/123\" }").await;
    create_stream(
        async_nats::ConnectOptions::with_token("t0ken/123".into()),
        &server.url(),
    )
    .await;
    let port = server.port();
    // Percent-encoded, in the second of two URLs: the credentials serve every server.
    let mut config = config(server.url());
    config
        .urls
        .push(format!("nats://t0ken%2F123@127.0.0.1:{port}"));
    assert_ready(&config).await;

    let err = refused(&self::config(format!("nats://wr0ng-t0k@127.0.0.1:{port}"))).await;
    assert!(!err.contains("wr0ng-t0k"), "{err}");
}

#[tokio::test]
async fn nkey_authentication() {
    // The user key pair from the NATS documentation.
    const SEED: &str = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY";
    const PUBLIC: &str = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";
    let server = start(&format!(
        "authorization {{ users: [ {{ nkey: {PUBLIC} }} ] }}"
    ))
    .await;
    create_stream(
        async_nats::ConnectOptions::with_nkey(SEED.into()),
        &server.url(),
    )
    .await;
    let dir = TempDir::new().unwrap();
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{SEED}\n")).unwrap();
    let mut config = config(server.url());
    config.nkey_seed_file = Some(seed_file);
    assert_ready(&config).await;
}

/// A throwaway CA with a server certificate for 127.0.0.1 and a client certificate, made
/// with the `openssl` command line tool.
struct Pki {
    dir: TempDir,
}

impl Pki {
    /// `None` when `openssl` is not installed.
    fn create() -> Option<Self> {
        let dir = TempDir::new().unwrap();
        // Each command is whitespace-separated; `None` when openssl cannot be run at all.
        let openssl = |command: &str| {
            let args: Vec<&str> = command.split_whitespace().collect();
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(dir.path())
                .output();
            match out {
                Ok(out) if out.status.success() => Some(()),
                Ok(out) => panic!(
                    "openssl {command} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(_) => None,
            }
        };
        let new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        openssl(&format!(
            "req -x509 {new_key} -keyout ca.key -out ca.pem -days 1 -subj /CN=sluice-test-CA"
        ))?;
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for name in ["server", "client"] {
            openssl(&format!(
                "req {new_key} -keyout {name}.key -out {name}.csr -subj /CN={name}"
            ))?;
            openssl(&format!(
                "x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                 -out {name}.pem -days 1 -extfile {name}.ext"
            ))?;
        }
        Some(Self { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// nats-server `tls` block; `verify` asks clients for a certificate signed by the CA.
    fn server_config(&self, verify: bool) -> String {
        let quoted = |p: &Path| format!("{:?}", p.display().to_string());
        format!(
            "tls {{ cert_file: {}, key_file: {}, ca_file: {}, verify: {verify} }}",
            quoted(&self.path("server.pem")),
            quoted(&self.path("server.key")),
            quoted(&self.path("ca.pem")),
        )
    }

    /// Client options trusting the CA (and presenting the client certificate).
    fn operator(&self) -> async_nats::ConnectOptions {
        async_nats::ConnectOptions::new()
            .add_root_certificates(self.path("ca.pem"))
            .add_client_certificate(self.path("client.pem"), self.path("client.key"))
            .require_tls(true)
    }
}

#[tokio::test]
async fn tls_is_verified_against_the_ca_file_unless_told_otherwise() {
    let Some(pki) = Pki::create() else {
        eprintln!("no openssl on this machine; nothing to test");
        return;
    };
    let server = start(&pki.server_config(false)).await;
    create_stream(pki.operator(), &server.url()).await;
    let mut config = config(server.url());
    config.ca_file = Some(pki.path("ca.pem"));
    assert_ready(&config).await;

    config.ca_file = None;
    refused(&config).await;

    config.tls_insecure_skip_verify = true;
    assert_ready(&config).await;
}

#[tokio::test]
async fn mutual_tls_presents_the_client_certificate() {
    let Some(pki) = Pki::create() else {
        eprintln!("no openssl on this machine; nothing to test");
        return;
    };
    let server = start(&pki.server_config(true)).await;
    create_stream(pki.operator(), &server.url()).await;
    let mut config = config(server.url());
    config.ca_file = Some(pki.path("ca.pem"));
    refused(&config).await;

    config.client_cert = Some(pki.path("client.pem"));
    config.client_key = Some(pki.path("client.key"));
    assert_ready(&config).await;

    // The skip-verify path builds its own TLS setup; it must still present the certificate.
    config.ca_file = None;
    config.tls_insecure_skip_verify = true;
    assert_ready(&config).await;
}

#[tokio::test]
async fn websocket_urls_connect() {
    let server = start("websocket { host: 127.0.0.1, port: -1, no_tls: true }").await;
    let log = server.log_tail(100);
    let port = log
        .lines()
        .find_map(|line| line.split_once("Listening for websocket clients on ws://127.0.0.1:"))
        .and_then(|(_, port)| port.trim().parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no websocket port in the log:\n{log}"));
    create_stream(async_nats::ConnectOptions::new(), &server.url()).await;
    assert_ready(&config(format!("ws://127.0.0.1:{port}"))).await;
}
