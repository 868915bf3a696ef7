//! The HTTP/2 connections the event streams share: client `i` opens its stream on connection
//! `i / streams_per_connection`, which the first of its clients to get there opens.

use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use tokio::sync::OnceCell;

use crate::http::Target;

/// The shared HTTP/2 connections of one run.
#[derive(Debug)]
pub struct Multiplex {
    streams_per_connection: usize,
    connections: Box<[OnceCell<SendRequest<Full<Bytes>>>]>,
}

impl Multiplex {
    /// Room for `clients` streams, `streams_per_connection` (at least 1) on each connection.
    pub fn new(clients: usize, streams_per_connection: usize) -> Self {
        let streams_per_connection = streams_per_connection.max(1);
        let connections = clients.div_ceil(streams_per_connection);
        Self {
            streams_per_connection,
            connections: (0..connections).map(|_| OnceCell::new()).collect(),
        }
    }

    /// The connection client `client` opens its stream on.
    pub fn connection_of(&self, client: usize) -> usize {
        client / self.streams_per_connection
    }

    /// The sender of client `client`'s connection, opened from `source` when it is the first
    /// to need it. Clients of that connection wait for it to open; when it fails, each of
    /// them tries in turn (and counts its own connect error).
    ///
    /// # Errors
    /// When opening the connection fails.
    pub async fn sender(
        &self,
        target: &Target,
        client: usize,
        source: Option<IpAddr>,
    ) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let cell = self
            .connections
            .get(self.connection_of(client))
            .ok_or_else(|| anyhow::anyhow!("client {client} has no connection"))?;
        let sender = cell
            .get_or_try_init(|| target.connect_http2(source))
            .await?;
        Ok(sender.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_fill_one_connection_after_the_other() {
        let multiplex = Multiplex::new(250, 100);
        assert_eq!(multiplex.connections.len(), 3);
        let connections: Vec<_> = [0, 99, 100, 249]
            .into_iter()
            .map(|client| multiplex.connection_of(client))
            .collect();
        assert_eq!(connections, [0, 0, 1, 2]);
        assert_eq!(Multiplex::new(5, 0).connections.len(), 5);
    }
}
