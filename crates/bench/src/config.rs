//! What one run asks for: the load, and the hub to aim it at.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use crate::{Hub, Protocol, PublisherKey};

/// One benchmark run: the load to generate and the hub to aim it at.
///
/// [`run`](crate::run) refuses a configuration outside the ranges given here.
#[derive(Debug, Clone)]
pub struct Config {
    /// The hub's base URL, `http://` or `https://<loopback address>:<port>`; any other host is
    /// refused.
    pub url: String,
    /// PEM file of the certificate authorities to trust for an `https://` URL, instead of the
    /// system's; refused with an `http://` one.
    pub ca_file: Option<PathBuf>,
    /// The HTTP the clients and publishers speak.
    pub protocol: Protocol,
    /// Event streams on each HTTP/2 connection (client `i` on connection
    /// `i / streams_per_connection`); at least 1, above 1 only with [`Protocol::Http2`]. More
    /// than the hub's `http2.max_concurrent_streams` leaves the extra streams waiting.
    pub streams_per_connection: u64,
    /// What kind of hub answers there.
    pub hub: Hub,
    /// Concurrent SSE clients; at least 1.
    pub clients: u64,
    /// Messages published per second over all topics; above 0 and at most 10 000 000.
    pub rate: f64,
    /// How long to publish.
    pub duration: Duration,
    /// Topics the clients are spread over; at least 1. Client `i` subscribes to
    /// `<topic_prefix>.<i % topics>`.
    pub topics: u64,
    /// Approximate size of each message's JSON payload in bytes.
    pub payload_bytes: u64,
    /// The hub's process id: its memory and CPU, with those of its child processes (nginx's
    /// workers), are then read from /proc. Without it, memory is read from the hub's /metrics
    /// when it exports `process_resident_memory_bytes`.
    pub server_pid: Option<u32>,
    /// New client connections per second while subscribing; at least 1.
    pub connect_rate: u64,
    /// Concurrent publishing connections; at least 1. With [`Hub::Nchan`] it must divide
    /// `topics`, so that all messages of a topic go through one publisher, one after the other,
    /// and their order on the stream can be checked from their own numbers.
    pub publishers: u64,
    /// Loopback addresses the clients connect from: client `i` from `127.0.0.<1 + i % n>`, so
    /// that more clients than one address has local ports can reach the hub. 1 (the default):
    /// every client from where the kernel picks. At most [`MAX_SOURCE_ADDRESSES`].
    pub source_addresses: u64,
    /// First token(s) of the run's topics: dot-separated tokens of letters, digits, `_` and
    /// `-`.
    pub topic_prefix: String,
    /// The key the publishers sign their Mercure tokens with (`HS256`, the hub's
    /// `mercure.publisher_jwt_key`): required with [`Hub::Mercure`], refused with any other.
    pub mercure_publisher_key: Option<PublisherKey>,
    /// Where each client's stream starts, as the `from=` of its `/events` URL (the hub judges
    /// it): `latest`, `last:<N>`, `since:<RFC 3339 time or duration>`, `earliest` or `live`;
    /// `None` starts live. The retained messages a client gets before the run's own are
    /// counted as replayed, not as foreign. Only with [`Hub::Sluice`].
    pub from: Option<String>,
}

impl Config {
    /// Fails when a number is outside its documented range, naming it as `sluice bench`'s
    /// option spells it.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if !(self.rate > 0.0 && self.rate <= 10_000_000.0) {
            bail!(
                "--rate {} must be above 0 and at most 10000000 messages per second",
                self.rate
            );
        }
        for (count, name) in [
            (self.clients, "--clients"),
            (self.topics, "--topics"),
            (self.connect_rate, "--connect-rate"),
            (self.publishers, "--publishers"),
            (self.source_addresses, "--source-addresses"),
            (self.streams_per_connection, "--streams-per-connection"),
        ] {
            if count == 0 {
                bail!("{name} must be at least 1");
            }
        }
        if self.streams_per_connection > 1 && self.protocol != Protocol::Http2 {
            bail!(
                "--streams-per-connection {} needs --http2: HTTP/1.1 carries one event stream per connection",
                self.streams_per_connection
            );
        }
        if self.source_addresses > MAX_SOURCE_ADDRESSES {
            bail!("--source-addresses must be at most {MAX_SOURCE_ADDRESSES}");
        }
        match (self.hub, &self.mercure_publisher_key) {
            (Hub::Mercure, None) => bail!("--target mercure needs --mercure-publisher-key"),
            (Hub::Sluice | Hub::Nchan, Some(_)) => {
                bail!("--mercure-publisher-key is for --target mercure")
            }
            _ => {}
        }
        if self.from.is_some() && self.hub != Hub::Sluice {
            bail!("--from is for --target sluice");
        }
        if self.hub == Hub::Nchan && !self.topics.is_multiple_of(self.publishers) {
            bail!(
                "--target nchan: --publishers {} must divide --topics {}, so that each topic's \
                 messages go through one publisher and their order can be checked",
                self.publishers,
                self.topics
            );
        }
        Ok(())
    }

    /// How many connections the event streams take: one per client over HTTP/1.1, one per
    /// [`Config::streams_per_connection`] clients over HTTP/2.
    pub(crate) fn connections(&self) -> u64 {
        self.clients.div_ceil(self.streams_per_connection.max(1))
    }

    /// The address event-stream connection `connection` comes from, when
    /// [`Config::source_addresses`] asks for more than one.
    pub(crate) fn source_address(&self, connection: u64) -> Option<IpAddr> {
        (self.source_addresses > 1).then(|| {
            let last = u8::try_from(1 + connection % self.source_addresses).unwrap_or(u8::MAX);
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
        })
    }
}

/// Most loopback addresses the clients may connect from: `127.0.0.1` to `127.0.0.254`.
pub const MAX_SOURCE_ADDRESSES: u64 = 254;

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            url: "http://127.0.0.1:8080".to_owned(),
            ca_file: None,
            protocol: Protocol::Http1,
            streams_per_connection: 1,
            hub: Hub::Sluice,
            clients: 1,
            rate: 1.0,
            duration: Duration::from_secs(1),
            topics: 1,
            payload_bytes: 0,
            server_pid: None,
            connect_rate: 1,
            publishers: 1,
            source_addresses: 1,
            topic_prefix: "bench".to_owned(),
            mercure_publisher_key: None,
            from: None,
        }
    }

    #[test]
    fn rates_are_bounded() {
        assert!(config().check().is_ok());
        for rate in [0.0, -1.0, f64::NAN, 10_000_001.0] {
            let err = Config { rate, ..config() }.check().unwrap_err();
            assert!(err.to_string().contains("--rate"), "{rate}: {err}");
        }
    }

    #[test]
    fn counts_are_at_least_one() {
        let zeroed = [
            Config {
                clients: 0,
                ..config()
            },
            Config {
                topics: 0,
                ..config()
            },
            Config {
                connect_rate: 0,
                ..config()
            },
            Config {
                publishers: 0,
                ..config()
            },
        ];
        for (config, name) in
            zeroed
                .into_iter()
                .zip(["--clients", "--topics", "--connect-rate", "--publishers"])
        {
            let err = config.check().unwrap_err();
            assert_eq!(err.to_string(), format!("{name} must be at least 1"));
        }
    }

    #[test]
    fn streams_share_connections_only_over_http2() {
        assert_eq!(config().connections(), 1);
        let shared = Config {
            clients: 250,
            protocol: Protocol::Http2,
            streams_per_connection: 100,
            ..config()
        };
        assert!(shared.check().is_ok());
        assert_eq!(shared.connections(), 3);
        let http1 = Config {
            protocol: Protocol::Http1,
            ..shared.clone()
        };
        let err = http1.check().unwrap_err().to_string();
        assert!(
            err.contains("--streams-per-connection 100 needs --http2"),
            "{err}"
        );
        let none = Config {
            streams_per_connection: 0,
            ..shared
        };
        let err = none.check().unwrap_err().to_string();
        assert_eq!(err, "--streams-per-connection must be at least 1");
    }

    #[test]
    fn source_addresses_are_loopback_addresses_in_turn() {
        assert_eq!(config().source_address(0), None);
        let three = Config {
            source_addresses: 3,
            ..config()
        };
        assert!(three.check().is_ok());
        let sources: Vec<_> = (0..4).map(|client| three.source_address(client)).collect();
        let addr = |last| Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)));
        assert_eq!(sources, [addr(1), addr(2), addr(3), addr(1)]);
        let most = Config {
            source_addresses: MAX_SOURCE_ADDRESSES,
            ..config()
        };
        assert_eq!(most.source_address(253), addr(254));
        for (source_addresses, err) in [
            (0, "--source-addresses must be at least 1"),
            (255, "--source-addresses must be at most 254"),
        ] {
            let config = Config {
                source_addresses,
                ..config()
            };
            assert_eq!(config.check().unwrap_err().to_string(), err);
        }
    }

    #[test]
    fn nchan_needs_each_topic_on_one_publisher() {
        let nchan = |topics, publishers| Config {
            hub: Hub::Nchan,
            topics,
            publishers,
            ..config()
        };
        for (topics, publishers) in [(1, 1), (100, 20), (100_000, 20), (6, 3)] {
            assert!(
                nchan(topics, publishers).check().is_ok(),
                "{topics}/{publishers}"
            );
        }
        let err = nchan(100, 16).check().unwrap_err().to_string();
        assert!(
            err.contains("--publishers 16 must divide --topics 100"),
            "{err}"
        );
        assert!(nchan(1, 4).check().is_err());
        // sluice orders by its event ids: any number of publishers will do.
        let sluice = Config {
            topics: 100,
            publishers: 16,
            ..config()
        };
        assert!(sluice.check().is_ok());
    }

    #[test]
    fn mercure_and_its_publisher_key_come_together() {
        let key = Some(PublisherKey::new("secret"));
        let mercure = Config {
            hub: Hub::Mercure,
            mercure_publisher_key: key.clone(),
            ..config()
        };
        assert!(mercure.check().is_ok());
        let keyless = Config {
            mercure_publisher_key: None,
            ..mercure.clone()
        };
        let err = keyless.check().unwrap_err().to_string();
        assert_eq!(err, "--target mercure needs --mercure-publisher-key");
        let stray = Config {
            mercure_publisher_key: key,
            ..config()
        };
        let err = stray.check().unwrap_err().to_string();
        assert_eq!(err, "--mercure-publisher-key is for --target mercure");
        assert!(!format!("{mercure:?}").contains("secret"));
    }

    #[test]
    fn a_start_option_is_for_sluice_only() {
        let from = Some("latest".to_owned());
        let sluice = Config {
            from: from.clone(),
            ..config()
        };
        assert!(sluice.check().is_ok());
        let nchan = Config {
            hub: Hub::Nchan,
            from,
            ..config()
        };
        let err = nchan.check().unwrap_err().to_string();
        assert_eq!(err, "--from is for --target sluice");
    }
}
