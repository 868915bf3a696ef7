//! The hub under test: its loopback address, and plain HTTP/1.1 connections to it.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream};

/// Largest response body read whole (publish answers, `/metrics`).
const MAX_BODY: usize = 4 << 20;
/// Bytes read from a socket at a time.
const READ_BUFFER: usize = 4096;

/// The driver of one client connection.
type Connection = hyper::client::conn::http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// Where the hub listens. Only loopback addresses are accepted: the load never leaves the
/// machine.
#[derive(Debug, Clone)]
pub struct Target {
    addr: SocketAddr,
    authority: String,
    /// The URL's path without its trailing slash, prefixed to every request path.
    base_path: String,
}

impl Target {
    /// Parses `http://<loopback host>:<port>[/path]`.
    ///
    /// # Errors
    /// When the URL is not `http`, has no host, or the host is not a loopback address.
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let uri: Uri = url
            .parse()
            .with_context(|| format!("--url {url:?} is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("--url {url:?}: only http:// is supported");
        }
        let authority = uri
            .authority()
            .ok_or_else(|| anyhow!("--url {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = (authority.host().trim_matches(['[', ']']), port)
            .to_socket_addrs()
            .with_context(|| format!("--url {url:?}: cannot resolve its host"))?
            .find(|addr| addr.ip().is_loopback())
            .ok_or_else(|| {
                anyhow!("--url {url:?}: the host is not a loopback address; sluice bench only loads a hub on this machine")
            })?;
        Ok(Self {
            addr,
            authority: authority.as_str().to_owned(),
            base_path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The socket address connections go to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A request for `path_and_query` (starting with `/`) with the `Host` header set.
    pub fn request(
        &self,
        method: hyper::Method,
        path_and_query: &str,
    ) -> hyper::http::request::Builder {
        Request::builder()
            .method(method)
            .uri(format!("{}{path_and_query}", self.base_path))
            .header(hyper::header::HOST, &self.authority)
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

    /// The request line and headers of `GET <path_and_query>` (starting with `/`) accepting
    /// `accept`, for a client that writes its request on the socket itself.
    pub fn get_head(&self, path_and_query: &str, accept: &str) -> String {
        format!(
            "GET {}{path_and_query} HTTP/1.1\r\nhost: {}\r\naccept: {accept}\r\n\r\n",
            self.base_path, self.authority
        )
    }

    /// Opens one HTTP/1.1 connection; the caller must poll the returned [`Connection`] for
    /// requests and bodies to make progress. Reads go through a fixed 4 KiB buffer.
    async fn handshake(&self) -> anyhow::Result<(SendRequest<Full<Bytes>>, Connection)> {
        let stream = self.connect_tcp(None).await?;
        let handshake = hyper::client::conn::http1::Builder::new()
            .read_buf_exact_size(Some(READ_BUFFER))
            .handshake(TokioIo::new(stream))
            .await;
        handshake.context("HTTP handshake")
    }

    /// Opens one keep-alive HTTP/1.1 connection whose driver runs as its own task, ending when
    /// the returned sender and every response body are dropped.
    ///
    /// # Errors
    /// When the TCP connection or the HTTP handshake fails.
    pub async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let (sender, connection) = self.handshake().await?;
        // A connection error also fails the pending request or body read, where it is counted.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
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
        let response = sender.send_request(request).await?;
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
pub async fn read_body(body: hyper::body::Incoming) -> anyhow::Result<Bytes> {
    let collected = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|err| anyhow!("reading the response body: {err}"))?;
    Ok(collected.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_loopback_urls_and_keeps_a_base_path() {
        let target = Target::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(target.addr(), "127.0.0.1:8080".parse().unwrap());
        let target = Target::parse("http://[::1]:9/hub/").unwrap();
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
    fn refuses_other_schemes_and_hosts() {
        let err = Target::parse("https://127.0.0.1:8080")
            .unwrap_err()
            .to_string();
        assert!(err.contains("only http://"), "{err}");
        let err = Target::parse("http://192.0.2.1:8080")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a loopback address"), "{err}");
    }
}
