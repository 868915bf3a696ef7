//! `sluice pub`, and what it shares with `sluice sub`: the hub's address and the HTTP client
//! (plain HTTP/1.1, or HTTPS with HTTP/2 or HTTP/1.1 as the hub's ALPN answer chooses).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Where the hub is, and the token to show it.
#[derive(Debug, Args)]
pub struct HubArgs {
    /// The hub's base URL (`http://` or `https://`).
    #[arg(long, env = "SLUICE_HUB", default_value = "http://127.0.0.1:8080")]
    hub: String,
    /// A token the hub's authorization accepts (a JWT), sent as `Authorization: Bearer`.
    /// Prefer the environment variable: a flag is visible to other users of the machine.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM file of the certificate authorities to trust for an `https://` hub, instead of the
    /// system's.
    #[arg(long, env = "SLUICE_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl HubArgs {
    /// The hub at `hub`, shown `token` when given, trusting the authorities in `ca_file` when
    /// given.
    pub fn new(hub: String, token: Option<String>, ca_file: Option<PathBuf>) -> Self {
        Self {
            hub,
            token,
            ca_file,
        }
    }

    /// `request` with the token, if one was given.
    pub fn authorize(
        &self,
        request: hyper::http::request::Builder,
    ) -> hyper::http::request::Builder {
        match &self.token {
            Some(token) => request.header(AUTHORIZATION, format!("Bearer {token}")),
            None => request,
        }
    }

    /// The URL of `path` on the hub; an error naming `--hub` when it is no `http://` or
    /// `https://` URL.
    pub fn uri(&self, path: &str) -> anyhow::Result<Uri> {
        let text = format!("{}{path}", self.hub.trim_end_matches('/'));
        let bad = |why: &str| anyhow::anyhow!("invalid --hub {:?}: {why}", self.hub);
        let uri: Uri = text
            .parse()
            .map_err(|_| bad("expected a URL such as http://127.0.0.1:8080"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(bad(
                "expected http://<host>:<port> or https://<host>:<port>",
            ));
        }
        Ok(uri)
    }

    /// The client for this hub: for an `https://` hub it trusts `--ca-file` (an error naming
    /// the file when it holds no usable certificate), else the system's certificate
    /// authorities.
    pub fn client(&self) -> anyhow::Result<HubClient> {
        if self.uri("")?.scheme_str() != Some("https") {
            return Ok(HubClient { tls: None });
        }
        let config =
            sluice_bench::tls::client_config(self.ca_file.as_deref(), &[b"h2", b"http/1.1"])?;
        Ok(HubClient {
            tls: Some(TlsConnector::from(Arc::new(config))),
        })
    }
}

/// One connection per request to the hub: plain HTTP/1.1, or TLS with HTTP/2 when the hub
/// offers it (ALPN), else HTTP/1.1.
pub struct HubClient {
    tls: Option<TlsConnector>,
}

impl HubClient {
    /// A client for an `https://` hub that connects with `tls`.
    pub fn over_tls(tls: TlsConnector) -> Self {
        Self { tls: Some(tls) }
    }

    /// Sends `request` (its URI absolute, from [`HubArgs::uri`]) on a new connection.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> anyhow::Result<Response<Incoming>> {
        let uri = request.uri().clone();
        let host = uri.host().context("the URL has no host")?;
        let default_port = if self.tls.is_some() { 443 } else { 80 };
        let port = uri.port_u16().unwrap_or(default_port);
        let host = host.trim_matches(['[', ']']);
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
            .await
            .with_context(|| format!("connecting to {host}:{port} timed out"))?
            .with_context(|| format!("cannot connect to {host}:{port}"))?;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &self.tls else {
            return http1(tcp, request).await;
        };
        let name = ServerName::try_from(host.to_owned())
            .with_context(|| format!("{host:?} is no TLS server name"))?;
        let stream = match tls.connect(name, tcp).await {
            Ok(stream) => stream,
            Err(err) => {
                let err =
                    anyhow::Error::from(err).context(format!("TLS handshake with {host}:{port}"));
                return Err(match certificate_refusal(&err) {
                    Some(refusal) => err.context(refusal),
                    None => err,
                });
            }
        };
        if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await?;
            tokio::spawn(connection);
            Ok(sender.send_request(request).await?)
        } else {
            http1(stream, request).await
        }
    }
}

/// What to tell the user when `err` is a TLS handshake that failed on the hub's certificate:
/// no retry changes that, so the caller stops. `None` for any other error.
pub fn certificate_refusal(err: &anyhow::Error) -> Option<String> {
    let rustls_error = err.chain().find_map(|cause| {
        let io = cause.downcast_ref::<std::io::Error>()?;
        io.get_ref()?.downcast_ref::<rustls::Error>()
    });
    let rustls::Error::InvalidCertificate(why) = rustls_error? else {
        return None;
    };
    let unknown_issuer = "no trusted certificate authority issued it";
    let cause = match why {
        // webpki also says "unsupported signature algorithm for this key" when the only
        // authority of the issuer's name it knows has another kind of key: not the issuer.
        rustls::CertificateError::UnknownIssuer
        | rustls::CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. }
        | rustls::CertificateError::UnsupportedSignatureAlgorithmContext { .. } => {
            unknown_issuer.to_owned()
        }
        rustls::CertificateError::Other(other)
            if format!("{other:?}").contains("CaUsedAsEndEntity") =>
        {
            "it is marked as a certificate authority, which cannot be the hub's own certificate \
             (what `openssl req -x509` makes unless told `basicConstraints=critical,CA:FALSE`)"
                .to_owned()
        }
        rustls::CertificateError::NotValidForName
        | rustls::CertificateError::NotValidForNameContext { .. } => {
            "it does not name the host in --hub".to_owned()
        }
        rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. } => {
            "it has expired".to_owned()
        }
        other => format!("{other:?}"),
    };
    Some(format!(
        "the hub's certificate is not trusted: {cause}. Pass --ca-file with the PEM of the \
         authority that issued it (a self-signed certificate is its own authority when it is \
         not marked as a CA; docs/OPERATIONS.md shows how to make one)"
    ))
}

/// Sends `request` over HTTP/1.1 on `io`: its target in origin form, with `Host`.
async fn http1(
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    mut request: Request<Full<Bytes>>,
) -> anyhow::Result<Response<Incoming>> {
    let uri = request.uri().clone();
    if let Some(authority) = uri.authority() {
        request
            .headers_mut()
            .insert(HOST, authority.as_str().parse()?);
    }
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = target.parse()?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection);
    Ok(sender.send_request(request).await?)
}

/// `sluice pub <topic> <payload>`.
#[derive(Debug, Args)]
pub struct PubArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// The topic, e.g. `orders.eu`.
    topic: String,
    /// The payload: JSON (`{"a":1}`, `42`) is sent as JSON, anything else as text.
    payload: String,
    /// Deduplication id (`Nats-Msg-Id`).
    #[arg(long)]
    msg_id: Option<String>,
    /// Time to live, e.g. `30s` or `never`.
    #[arg(long)]
    ttl: Option<String>,
}

/// How long one attempt to open a TCP connection to the hub may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Publishes one message and prints the hub's answer.
pub async fn publish(args: PubArgs) -> anyhow::Result<()> {
    let payload =
        serde_json::from_str::<Value>(&args.payload).unwrap_or(Value::String(args.payload));
    let mut body = json!({ "topic": args.topic, "payload": payload });
    if let Some(id) = args.msg_id {
        body["msg_id"] = json!(id);
    }
    if let Some(ttl) = args.ttl {
        body["ttl"] = json!(ttl);
    }
    let url = args.hub.uri("/publish")?;
    let request = args
        .hub
        .authorize(Request::post(&url))
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = args
        .hub
        .client()?
        .send(request)
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let answer = response.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&answer);
    if !status.is_success() {
        bail!("POST {url}: {status}: {text}");
    }
    println!("{text}");
    Ok(())
}

/// Percent-encodes a query value.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
