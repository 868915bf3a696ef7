//! The hub under test: its loopback address, the protocol spoken to it (HTTP/1.1 or HTTP/2,
//! over plain TCP or TLS), and client connections to it.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use crate::transport::Io;

/// Largest response body read whole (publish answers, `/metrics`).
const MAX_BODY: usize = 4 << 20;
/// Bytes read from a socket at a time.
const READ_BUFFER: usize = 4096;

/// Which HTTP the bench speaks to the hub, for its event streams and its publishes alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Protocol {
    /// HTTP/1.1: one connection per event stream. Over TLS, ALPN offers `http/1.1` only.
    #[serde(rename = "http/1.1")]
    Http1,
    /// HTTP/2: event streams multiplexed on shared connections. Over TLS, ALPN offers `h2`
    /// only (a hub that does not accept it is an error); over `http://` the connection starts
    /// with the HTTP/2 preface (`h2c` with prior knowledge, the hub's `http2.h2c`).
    #[serde(rename = "h2")]
    Http2,
}

/// How `https://` connections are made.
#[derive(Clone)]
struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
    /// The `--ca-file` trusted, if any (else the system's authorities), for error messages.
    ca_file: Option<PathBuf>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("name", &self.name)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// What the handshake trusted, for its error message.
    fn trusting(&self) -> String {
        match &self.ca_file {
            Some(path) => format!("trusting --ca-file {}", path.display()),
            None => "trusting the system's certificate authorities".to_owned(),
        }
    }
}

/// Where the hub listens and how to speak to it. Only loopback addresses are accepted: the
/// load never leaves the machine.
#[derive(Debug, Clone)]
pub struct Target {
    addr: SocketAddr,
    authority: String,
    /// `http` or `https`.
    scheme: &'static str,
    /// The URL's path without its trailing slash, prefixed to every request path.
    base_path: String,
    protocol: Protocol,
    tls: Option<Tls>,
}

impl Target {
    /// Parses `http[s]://<loopback host>:<port>[/path]`, to be spoken to in `protocol`; an
    /// `https://` hub's certificate must be signed by an authority in `ca_file` when given,
    /// else by one the system trusts.
    ///
    /// # Errors
    /// When the URL is not `http` or `https`, has no host, or the host is not a loopback
    /// address; when `ca_file` is given for an `http://` URL or holds no usable certificate.
    pub fn parse(url: &str, protocol: Protocol, ca_file: Option<&Path>) -> anyhow::Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("--url {url:?} is not a URL"))?;
        let (scheme, default_port) = match uri.scheme_str() {
            Some("http") => ("http", 80),
            Some("https") => ("https", 443),
            _ => bail!("--url {url:?}: only http:// and https:// are supported"),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| anyhow!("--url {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(default_port);
        let host = authority.host().trim_matches(['[', ']']);
        let addr = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("--url {url:?}: cannot resolve its host"))?
            .find(|addr| addr.ip().is_loopback())
            .ok_or_else(|| {
                anyhow!("--url {url:?}: the host is not a loopback address; sluice bench only loads a hub on this machine")
            })?;
        let tls = match (scheme, ca_file) {
            ("https", _) => Some(tls(host, protocol, ca_file)?),
            (_, Some(path)) => bail!(
                "--ca-file {} is for an https:// --url, not {url:?}",
                path.display()
            ),
            (_, None) => None,
        };
        Ok(Self {
            addr,
            authority: authority.as_str().to_owned(),
            scheme,
            base_path: uri.path().trim_end_matches('/').to_owned(),
            protocol,
            tls,
        })
    }

    /// The socket address connections go to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A request for `path_and_query` (starting with `/`): in origin form with the `Host`
    /// header for HTTP/1.1, in absolute form (hyper sends its scheme and authority as
    /// `:scheme` and `:authority`) for HTTP/2.
    pub fn request(
        &self,
        method: hyper::Method,
        path_and_query: &str,
    ) -> hyper::http::request::Builder {
        let builder = Request::builder().method(method);
        match self.protocol {
            Protocol::Http1 => builder
                .uri(format!("{}{path_and_query}", self.base_path))
                .header(hyper::header::HOST, &self.authority),
            Protocol::Http2 => builder.uri(format!(
                "{}://{}{}{path_and_query}",
                self.scheme, self.authority, self.base_path
            )),
        }
    }

    /// Opens one TCP connection to the hub, without Nagle's delay, from `source` when given
    /// (any local port: `SO_REUSEADDR` lets it reuse ports of earlier runs' closed
    /// connections, which go to other ports of the hub), else from wherever the kernel picks.
    ///
    /// # Errors
    /// When the connection fails.
    pub async fn connect_tcp(&self, source: Option<IpAddr>) -> anyhow::Result<TcpStream> {
        let connected = match source {
            None => TcpStream::connect(self.addr).await,
            Some(source) => {
                let socket = match source {
                    IpAddr::V4(_) => TcpSocket::new_v4()?,
                    IpAddr::V6(_) => TcpSocket::new_v6()?,
                };
                socket.set_reuseaddr(true)?;
                socket
                    .bind(SocketAddr::new(source, 0))
                    .with_context(|| format!("bind to {source}"))?;
                socket.connect(self.addr).await
            }
        };
        let stream = connected.with_context(|| match source {
            None => format!("connect to {}", self.addr),
            Some(source) => format!("connect from {source} to {}", self.addr),
        })?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Opens one connection to the hub (see [`Target::connect_tcp`]) and, for an `https://`
    /// hub, completes the TLS handshake, checking that ALPN chose the protocol asked for.
    ///
    /// # Errors
    /// When the connection or the handshake fails (naming the hub's address and the
    /// certificate authorities trusted), or the hub did not accept HTTP/2.
    pub async fn connect_io(&self, source: Option<IpAddr>) -> anyhow::Result<Io> {
        let tcp = self.connect_tcp(source).await?;
        let Some(tls) = &self.tls else {
            return Ok(Io::Plain(tcp));
        };
        let refused_http2 = || {
            anyhow!(
                "the hub at {} did not accept HTTP/2 by ALPN (is its http2.enabled false? \
                 `--profile http1` benches HTTP/1.1 over TLS)",
                self.addr
            )
        };
        let stream = match tls.connector.connect(tls.name.clone(), tcp).await {
            Ok(stream) => stream,
            // A rustls hub that shares no protocol with the client's offer says so.
            Err(err) if self.protocol == Protocol::Http2 && no_common_protocol(&err) => {
                return Err(refused_http2());
            }
            Err(err) => {
                return Err(err).with_context(|| {
                    format!("TLS handshake with {} ({})", self.addr, tls.trusting())
                });
            }
        };
        let alpn = stream.get_ref().1.alpn_protocol();
        if self.protocol == Protocol::Http2 && alpn != Some(b"h2") {
            return Err(refused_http2());
        }
        Ok(Io::Tls(Box::new(stream)))
    }

    /// The request line and headers of `GET <path_and_query>` (starting with `/`) accepting
    /// `accept`, for an HTTP/1.1 client that writes its request on the socket itself.
    pub fn get_head(&self, path_and_query: &str, accept: &str) -> String {
        format!(
            "GET {}{path_and_query} HTTP/1.1\r\nhost: {}\r\naccept: {accept}\r\n\r\n",
            self.base_path, self.authority
        )
    }

    /// Opens one keep-alive connection in [`Target::protocol`] whose driver runs as its own
    /// task, ending when the returned sender (and its clones) and every response body are
    /// dropped.
    ///
    /// # Errors
    /// When the connection, the TLS or the HTTP handshake fails.
    pub async fn connect(&self) -> anyhow::Result<Sender> {
        match self.protocol {
            Protocol::Http1 => self.connect_http1().await.map(Sender::Http1),
            Protocol::Http2 => self.connect_http2(None).await.map(Sender::Http2),
        }
    }

    /// Opens one HTTP/1.1 connection. Reads go through a fixed 4 KiB buffer.
    async fn connect_http1(&self) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
        let io = self.connect_io(None).await?;
        let (sender, connection) = http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(TokioIo::new(io))
            .await
            .context("HTTP/1.1 handshake")?;
        // A connection error also fails the pending request or body read, where it is counted.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Opens one HTTP/2 connection from `source` when given; its sender may be cloned for
    /// every stream it is to carry.
    ///
    /// # Errors
    /// When the connection, the TLS or the HTTP/2 handshake fails.
    pub async fn connect_http2(
        &self,
        source: Option<IpAddr>,
    ) -> anyhow::Result<http2::SendRequest<Full<Bytes>>> {
        let io = self.connect_io(source).await?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(io))
            .await
            .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// The rustls connector for `host`, offering only `protocol` by ALPN.
fn tls(host: &str, protocol: Protocol, ca_file: Option<&Path>) -> anyhow::Result<Tls> {
    let alpn: &[u8] = match protocol {
        Protocol::Http1 => b"http/1.1",
        Protocol::Http2 => b"h2",
    };
    let config = crate::tls::client_config(ca_file, &[alpn])?;
    let name = ServerName::try_from(host.to_owned())
        .with_context(|| format!("{host:?} is no TLS server name"))?;
    Ok(Tls {
        connector: TlsConnector::from(Arc::new(config)),
        name,
        ca_file: ca_file.map(Path::to_owned),
    })
}

/// Whether a failed handshake is the hub's `no_application_protocol` alert: it speaks none of
/// the protocols ALPN offered.
fn no_common_protocol(err: &std::io::Error) -> bool {
    let alert = rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol);
    err.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|err| *err == alert)
}

/// The sending half of one keep-alive connection to the hub.
#[derive(Debug)]
pub enum Sender {
    /// An HTTP/1.1 connection: one request at a time.
    Http1(http1::SendRequest<Full<Bytes>>),
    /// An HTTP/2 connection.
    Http2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Http1(sender) => sender.is_closed(),
            Self::Http2(sender) => sender.is_closed(),
        }
    }

    /// Waits until the connection can take a request.
    ///
    /// # Errors
    /// When the connection has closed.
    pub async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Self::Http1(sender) => sender.ready().await,
            Self::Http2(sender) => sender.ready().await,
        }
    }

    /// Sends `request` (made by [`Target::request`]) and waits for the response head.
    ///
    /// # Errors
    /// When the connection fails before the head arrives.
    pub async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> hyper::Result<Response<Incoming>> {
        match self {
            Self::Http1(sender) => sender.send_request(request).await,
            Self::Http2(sender) => sender.send_request(request).await,
        }
    }
}

/// Sends `request` on a fresh connection and reads the whole answer, within `timeout`.
///
/// # Errors
/// When the exchange fails, times out, or the body is larger than 4 MiB.
pub async fn fetch(
    target: &Target,
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> anyhow::Result<(hyper::StatusCode, Bytes)> {
    tokio::time::timeout(timeout, async {
        let mut sender = target.connect().await?;
        let response = sender.send(request).await?;
        let status = response.status();
        let body = read_body(response.into_body()).await?;
        Ok((status, body))
    })
    .await
    .map_err(|_| anyhow!("no answer within {timeout:?}"))?
}

/// Reads a whole response body, at most 4 MiB.
///
/// # Errors
/// When reading fails or the body is too large.
pub async fn read_body(body: Incoming) -> anyhow::Result<Bytes> {
    let collected = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|err| anyhow!("reading the response body: {err}"))?;
    Ok(collected.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(url: &str) -> anyhow::Result<Target> {
        Target::parse(url, Protocol::Http1, None)
    }

    #[test]
    fn accepts_loopback_urls_and_keeps_a_base_path() {
        let target = plain("http://127.0.0.1:8080/").unwrap();
        assert_eq!(target.addr(), "127.0.0.1:8080".parse().unwrap());
        let target = plain("http://[::1]:9/hub/").unwrap();
        assert_eq!(target.addr(), "[::1]:9".parse().unwrap());
        let request = target
            .request(hyper::Method::GET, "/events?topic=a")
            .body(())
            .unwrap();
        assert_eq!(request.uri(), "/hub/events?topic=a");
        assert_eq!(request.headers()[hyper::header::HOST], "[::1]:9");
        assert_eq!(
            target.get_head("/events?topic=a", "text/event-stream"),
            "GET /hub/events?topic=a HTTP/1.1\r\nhost: [::1]:9\r\naccept: text/event-stream\r\n\r\n"
        );
    }

    #[test]
    fn http2_requests_are_in_absolute_form() {
        let target = Target::parse("https://localhost:8443/hub", Protocol::Http2, None).unwrap();
        assert_eq!(target.addr().port(), 8443);
        let request = target
            .request(hyper::Method::GET, "/events?topic=a")
            .body(())
            .unwrap();
        assert_eq!(request.uri(), "https://localhost:8443/hub/events?topic=a");
        assert!(request.headers().get(hyper::header::HOST).is_none());
    }

    #[test]
    fn refuses_other_schemes_and_hosts() {
        let err = plain("ftp://127.0.0.1:8080").unwrap_err().to_string();
        assert!(err.contains("only http:// and https://"), "{err}");
        let err = plain("http://192.0.2.1:8080").unwrap_err().to_string();
        assert!(err.contains("not a loopback address"), "{err}");
        let ca = Path::new("/etc/ca.pem");
        let err = Target::parse("http://127.0.0.1:8080", Protocol::Http1, Some(ca))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--ca-file /etc/ca.pem is for an https:// --url"),
            "{err}"
        );
    }
}
