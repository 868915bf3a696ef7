//! `sluice bench`: the command line of the load generator in `sluice-bench`.
//!
//! It turns the options into a [`sluice_bench::Config`], runs it, prints the report (text, or
//! JSON with `--json`) on stdout and fails after printing when the run was not clean.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

/// `sluice bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The hub's base URL, `http://` or `https://` (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// PEM file of the certificate authorities to trust for an `https://` URL, instead of the
    /// system's.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Speak HTTP/2 (over `https://` by ALPN; over `http://` with prior knowledge, which needs
    /// the hub's `http2.h2c`) instead of HTTP/1.1, for the event streams and the publishes.
    #[arg(long)]
    pub http2: bool,
    /// Connect as a kind of client: `browser` is what a browser tab does — TLS (an
    /// `https://` URL), HTTP/2, one event stream per connection — and the default for an
    /// `https://` URL without `--http2`; `http1` is HTTP/1.1 with a connection per event stream
    /// (over TLS for `https://`), the default for `http://`.
    #[arg(long, value_enum, conflicts_with = "streams_per_connection")]
    pub profile: Option<Profile>,
    /// Event streams multiplexed on each HTTP/2 connection (client i on connection
    /// i / N): at most the hub's `http2.max_concurrent_streams` (100 by default).
    #[arg(long, default_value_t = 1, requires = "http2", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub streams_per_connection: u64,
    /// What answers at the URL: `sluice` (`sluice serve`), `nchan` (nginx with nchan:
    /// `POST /pub?topic=…`, `GET /sub?topic=…`; `--publishers` must divide `--topics`) or
    /// `mercure` (`sluice serve` with `[mercure]` on, at `/.well-known/mercure`; needs
    /// `--mercure-publisher-key`).
    #[arg(long, value_enum, default_value_t = Target::Sluice)]
    pub target: Target,
    /// With `--target mercure`: the hub's `mercure.publisher_jwt_key` (HS256), which the
    /// publishers sign their tokens with. Never printed.
    #[arg(long)]
    pub mercure_publisher_key: Option<String>,
    /// Concurrent SSE clients.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub clients: u64,
    /// Messages published per second, over all topics.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// How long to publish, e.g. `20s` or `1m`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Topics the clients are spread over (client i subscribes to `<prefix>.<i % topics>`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub topics: u64,
    /// Approximate size of each message's JSON payload in bytes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub payload_bytes: u64,
    /// The hub's process id: its memory and CPU, with those of the processes under it
    /// (nginx's workers), are read from /proc (otherwise memory is read from its /metrics when
    /// it exports `process_resident_memory_bytes`).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// New client connections per second while subscribing.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub connect_rate: u64,
    /// Concurrent publishing connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub publishers: u64,
    /// Loopback addresses the clients connect from, 127.0.0.1 up (client i from
    /// 127.0.0.<1 + i % n>): one address has only the ports of net.ipv4.ip_local_port_range.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=sluice_bench::MAX_SOURCE_ADDRESSES))]
    pub source_addresses: u64,
    /// First token of the benchmark's topics.
    #[arg(long, default_value = "bench", value_parser = parse_topic_prefix)]
    pub topic_prefix: String,
    /// Where each client's stream starts (`--target sluice`), as the hub's `from=`: `latest`
    /// (the latest retained message of its topic), `last:<N>` (the N most recent), `since:<RFC
    /// 3339 time, or a duration such as 10m>`, `earliest` or `live` (the default). The retained
    /// messages replayed before the run's own are reported as `replayed`.
    #[arg(long, value_name = "START")]
    pub from: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the benchmark and prints its report; fails after printing when anything was lost.
///
/// # Errors
/// When the options are invalid, the hub does not answer, the open-file limit is too low, or
/// the run was not clean (the report says why).
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let json = args.json;
    let report = sluice_bench::run(args.into_config()?).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if !report.is_ok() {
        bail!("the run was not clean: {}", report.problems().join(", "));
    }
    Ok(())
}

/// The kinds of client `--profile` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// A browser tab: TLS, HTTP/2, one event stream per connection.
    Browser,
    /// HTTP/1.1, one connection per event stream (over TLS for an `https://` URL).
    Http1,
}

/// The kinds of hub `--target` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// `sluice serve`.
    Sluice,
    /// nginx with nchan.
    Nchan,
    /// `sluice serve`'s Mercure hub.
    Mercure,
}

impl BenchArgs {
    fn into_config(self) -> anyhow::Result<sluice_bench::Config> {
        let protocol = self.protocol()?;
        Ok(sluice_bench::Config {
            url: self.url,
            ca_file: self.ca_file,
            protocol,
            streams_per_connection: self.streams_per_connection,
            hub: match self.target {
                Target::Sluice => sluice_bench::Hub::Sluice,
                Target::Nchan => sluice_bench::Hub::Nchan,
                Target::Mercure => sluice_bench::Hub::Mercure,
            },
            clients: self.clients,
            rate: self.rate,
            duration: self.duration,
            topics: self.topics,
            payload_bytes: self.payload_bytes,
            server_pid: self.server_pid,
            connect_rate: self.connect_rate,
            publishers: self.publishers,
            source_addresses: self.source_addresses,
            topic_prefix: self.topic_prefix,
            mercure_publisher_key: self
                .mercure_publisher_key
                .map(sluice_bench::PublisherKey::new),
            from: self.from,
        })
    }

    /// The protocol `--profile` and `--http2` ask for; without either, what the URL's clients
    /// are first of all: browser tabs for `https://`, HTTP/1.1 for `http://`.
    fn protocol(&self) -> anyhow::Result<sluice_bench::Protocol> {
        use sluice_bench::Protocol::{Http1, Http2};
        let https = self.url.starts_with("https://");
        Ok(match (self.profile, self.http2) {
            (Some(Profile::Browser), _) if !https => bail!(
                "--profile browser connects over TLS, as a browser does: --url {:?} must be https://",
                self.url
            ),
            (Some(Profile::Http1), true) => {
                bail!("--profile http1 and --http2 ask for different protocols: give one")
            }
            (Some(Profile::Browser), _) | (None, true) => Http2,
            (Some(Profile::Http1), false) => Http1,
            (None, false) if https => Http2,
            (None, false) => Http1,
        })
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration =
        sluice_protocol::duration::parse_duration(text).map_err(|err| err.to_string())?;
    if duration.is_zero() || duration > Duration::from_secs(3600) {
        return Err(format!("{text:?} must be above 0 and at most 1h"));
    }
    Ok(duration)
}

fn parse_topic_prefix(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.split('.').all(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        });
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} must be dot-separated tokens of letters, digits, `_` and `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_bounded() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("0s").unwrap_err().contains("above 0"));
        assert!(parse_duration("2h").unwrap_err().contains("at most 1h"));
        assert!(parse_duration("soon").is_err());
    }

    /// `sluice bench`'s options alone, as clap parses them.
    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        use clap::Parser as _;
        let args = std::iter::once("bench").chain(args.iter().copied());
        Bench::try_parse_from(args).map(|bench| bench.args)
    }

    #[test]
    fn the_target_and_source_addresses_reach_the_run() {
        let config = parse(&[]).unwrap().into_config().unwrap();
        assert_eq!(config.hub, sluice_bench::Hub::Sluice);
        assert_eq!(config.source_addresses, 1);
        let config = parse(&["--target", "nchan", "--source-addresses", "10"])
            .unwrap()
            .into_config()
            .unwrap();
        assert_eq!(config.hub, sluice_bench::Hub::Nchan);
        assert_eq!(config.source_addresses, 10);
        for bad in [
            &["--target", "nginx"][..],
            &["--source-addresses", "0"],
            &["--source-addresses", "255"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_mercure_target_and_its_key_reach_the_run() {
        let args = ["--target", "mercure", "--mercure-publisher-key", "s3cret"];
        let config = parse(&args).unwrap().into_config().unwrap();
        assert_eq!(config.hub, sluice_bench::Hub::Mercure);
        assert_eq!(
            config.mercure_publisher_key,
            Some(sluice_bench::PublisherKey::new("s3cret"))
        );
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn the_browser_profile_is_tls_and_http2_with_one_stream_per_connection() {
        let args = ["--url", "https://127.0.0.1:8443", "--profile", "browser"];
        let config = parse(&args).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http2);
        assert_eq!(config.streams_per_connection, 1);
        let plain = parse(&["--profile", "browser"]).unwrap().into_config();
        let refusal = plain.expect_err("a plain URL is refused").to_string();
        assert!(
            refusal.contains("\"http://127.0.0.1:8080\" must be https://"),
            "{refusal}"
        );
        let args = [
            "--profile",
            "browser",
            "--http2",
            "--streams-per-connection",
            "9",
        ];
        assert!(
            parse(&args).is_err(),
            "one stream per connection is the profile"
        );
    }

    #[test]
    fn an_https_url_is_benched_as_browser_tabs_unless_told_otherwise() {
        let https = ["--url", "https://127.0.0.1:8443"];
        let config = parse(&https).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http2);
        assert_eq!(config.streams_per_connection, 1);
        let args = ["--url", "https://127.0.0.1:8443", "--profile", "http1"];
        let config = parse(&args).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http1);
        let args = ["--url", "http://127.0.0.1:8080", "--profile", "http1"];
        let config = parse(&args).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http1);
        let args = [
            "--url",
            "https://127.0.0.1:8443",
            "--profile",
            "http1",
            "--http2",
        ];
        let refusal = parse(&args).unwrap().into_config().unwrap_err().to_string();
        assert!(refusal.contains("--profile http1 and --http2"), "{refusal}");
    }

    #[test]
    fn http2_and_its_streams_per_connection_reach_the_run() {
        let config = parse(&[]).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http1);
        assert_eq!((config.streams_per_connection, config.ca_file), (1, None));
        let args = [
            "--url",
            "https://127.0.0.1:8443",
            "--ca-file",
            "/etc/ca.pem",
            "--http2",
            "--streams-per-connection",
            "100",
        ];
        let config = parse(&args).unwrap().into_config().unwrap();
        assert_eq!(config.protocol, sluice_bench::Protocol::Http2);
        assert_eq!(config.streams_per_connection, 100);
        assert_eq!(config.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        for bad in [
            &["--streams-per-connection", "10"][..],
            &["--http2", "--streams-per-connection", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_start_option_reaches_the_run() {
        assert_eq!(parse(&[]).unwrap().into_config().unwrap().from, None);
        let config = parse(&["--from", "last:5"]).unwrap().into_config().unwrap();
        assert_eq!(config.from.as_deref(), Some("last:5"));
    }

    #[test]
    fn topic_prefixes_are_plain_tokens() {
        assert_eq!(parse_topic_prefix("load.test-1").unwrap(), "load.test-1");
        for bad in ["", "a..b", "a b", "a.*", "a/b", "a&topic=x"] {
            assert!(parse_topic_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
