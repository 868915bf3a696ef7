//! What one run asks for: the load, and the hub to aim it at.

use std::time::Duration;

use anyhow::bail;

/// One benchmark run: the load to generate and the hub to aim it at.
///
/// [`run`](crate::run) refuses a configuration outside the ranges given here.
#[derive(Debug, Clone)]
pub struct Config {
    /// The hub's base URL, `http://<loopback address>:<port>`; any other host is refused.
    pub url: String,
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
    /// The hub's process id: its memory and CPU are then read from /proc. Without it, memory
    /// is read from the hub's /metrics when it exports `process_resident_memory_bytes`.
    pub server_pid: Option<u32>,
    /// New client connections per second while subscribing; at least 1.
    pub connect_rate: u64,
    /// Concurrent publishing connections; at least 1.
    pub publishers: u64,
    /// First token(s) of the run's topics: dot-separated tokens of letters, digits, `_` and
    /// `-`.
    pub topic_prefix: String,
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
        ] {
            if count == 0 {
                bail!("{name} must be at least 1");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            url: "http://127.0.0.1:8080".to_owned(),
            clients: 1,
            rate: 1.0,
            duration: Duration::from_secs(1),
            topics: 1,
            payload_bytes: 0,
            server_pid: None,
            connect_rate: 1,
            publishers: 1,
            topic_prefix: "bench".to_owned(),
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
}
