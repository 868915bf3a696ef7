//! The hub's Prometheus metrics, served at `/metrics` as OpenMetrics text or as the
//! Prometheus text format 0.0.4, whichever the scraper's `Accept` prefers ([`Exposition`]).
//!
//! Names (counters get the `_total` suffix on the wire) are listed in `docs/OPERATIONS.md`.

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

mod latency;
mod streams;

pub use latency::Latency;
pub use streams::{Snapshot, StreamGauges};

/// One label: `[(name, value)]`.
pub type Label = [(&'static str, &'static str); 1];

/// A counter family with one label.
pub type Counters = Family<Label, Counter>;

/// Every metric of the hub.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Event streams open now.
    pub active_connections: Gauge,
    /// Shared backend feeds (one per distinct topic set) open now.
    pub active_feeds: Gauge,
    /// Bytes the fan-out's rings of recent frames hold (`fanout.ring_memory` bounds them).
    pub ring_bytes: Gauge,
    /// Messages written to clients.
    pub delivered: Counter,
    /// Messages a client did not get, by reason (`too_large`, `replay_window`); each one was
    /// reported to the client with a `gap` frame.
    pub dropped: Counters,
    /// `gap` frames sent, by reason.
    pub gaps: Counters,
    /// Connections closed because their socket accepted nothing for `sse.write_timeout`.
    pub slow_disconnects: Counter,
    /// Stream ends, by `reason`.
    pub disconnects: Counters,
    /// Subscriptions that asked for a resume position.
    pub replay_requests: Counter,
    /// Resumes whose position was lost, by reason (`expired`, `ahead`, `incarnation`).
    pub replay_fallbacks: Counters,
    /// Clients that fell behind the in-memory buffer and read from the stream to catch up.
    pub catchups: Counter,
    /// Requests refused before streaming, by reason.
    pub rejected: Counters,
    /// Backend errors, by kind.
    pub backend_errors: Counters,
    /// Readiness probes answered 503, by cause.
    pub readiness_failures: Counters,
    /// Publish requests, by result (`stored`, `duplicate`, `rejected`, `failed`).
    pub publishes: Counters,
    /// Messages `POST /publish` refused (single bodies and items of a batch alike), by reason.
    pub publish_refusals: Counters,
    /// Admin API requests, by result (`ok`, `refused`, `failed`).
    pub admin_requests: Counters,
    /// Messages under the Mercure subscription events' subjects that the active-subscriptions
    /// table did not take in, by reason (`undecodable`, `no_node`, `table_full`).
    pub mercure_events_skipped: Counters,
    /// Subscriptions this node serves that it announced again after reading an end another
    /// node published for them (taken for dead while cut off), by reason (`ended_elsewhere`).
    pub mercure_reannounced: Counters,
    /// Admin API requests refused, by reason.
    pub admin_refusals: Counters,
    /// HTTP/2 connections that ended with an error, by its code (`enhance_your_calm`: too
    /// many streams reset, `protocol_error`, …; `io` when the socket failed).
    pub http2_errors: Counters,
    /// TLS handshakes completed, by kind (`full`; `resumed`: from a session ticket, without
    /// the certificate's signature or a new key exchange's cost of a full one).
    pub tls_handshakes: Counters,
    /// Lookups in the caches of verified tokens, by result (`hit`: no signature verified;
    /// `miss`: verified).
    pub token_cache_lookups: Counters,
    /// Request body bytes held now, all requests together (bounded by the body budget).
    pub body_bytes: Gauge,
    /// `POST /publish` from the body read in full to the answer, per shape of body.
    pub publish_latency: PublishLatency,
    /// From a message's store time to the write that carries its frame, live messages only.
    pub delivery_latency: Latency,
    /// The per-stream gauges and the feeds' lag, as read at the start of the last scrape.
    pub streams: StreamGauges,
    /// The process's resident memory, read when the metrics are encoded.
    resident_memory: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Registry::default(),
            active_connections: Gauge::default(),
            active_feeds: Gauge::default(),
            ring_bytes: Gauge::default(),
            delivered: Counter::default(),
            dropped: Counters::default(),
            gaps: Counters::default(),
            slow_disconnects: Counter::default(),
            disconnects: Counters::default(),
            replay_requests: Counter::default(),
            replay_fallbacks: Counters::default(),
            catchups: Counter::default(),
            rejected: Counters::default(),
            backend_errors: Counters::default(),
            readiness_failures: Counters::default(),
            publishes: Counters::default(),
            publish_refusals: Counters::default(),
            admin_requests: Counters::default(),
            mercure_events_skipped: Counters::default(),
            mercure_reannounced: Counters::default(),
            admin_refusals: Counters::default(),
            http2_errors: Counters::default(),
            tls_handshakes: Counters::default(),
            token_cache_lookups: Counters::default(),
            body_bytes: Gauge::default(),
            publish_latency: PublishLatency::default(),
            delivery_latency: Latency::default(),
            streams: StreamGauges::default(),
            resident_memory: Gauge::default(),
        };
        metrics.register_delivery(&mut registry);
        metrics.register_requests(&mut registry);
        metrics.register_the_rest(&mut registry);
        Self {
            registry,
            ..metrics
        }
    }

    /// Registers what delivery to clients does: streams, feeds, messages, gaps and resumes.
    fn register_delivery(&self, r: &mut Registry) {
        r.register(
            "sluice_active_connections",
            "Event streams open now",
            self.active_connections.clone(),
        );
        r.register(
            "sluice_active_feeds",
            "Shared backend feeds open now",
            self.active_feeds.clone(),
        );
        r.register(
            "sluice_fanout_ring_bytes",
            "Bytes the fan-out's rings of recent frames hold",
            self.ring_bytes.clone(),
        );
        r.register(
            "sluice_messages_delivered",
            "Messages written to clients",
            self.delivered.clone(),
        );
        r.register(
            "sluice_messages_dropped",
            "Messages not delivered, each reported by a gap frame",
            self.dropped.clone(),
        );
        r.register(
            "sluice_gaps",
            "Gap frames sent to clients",
            self.gaps.clone(),
        );
        r.register(
            "sluice_slow_client_disconnects",
            "Connections closed after write_timeout without progress",
            self.slow_disconnects.clone(),
        );
        r.register(
            "sluice_disconnects",
            "Event streams ended",
            self.disconnects.clone(),
        );
        r.register(
            "sluice_replay_requests",
            "Subscriptions resuming from a position",
            self.replay_requests.clone(),
        );
        r.register(
            "sluice_replay_fallbacks",
            "Resumes whose position was lost",
            self.replay_fallbacks.clone(),
        );
        r.register(
            "sluice_catchups",
            "Clients that caught up from the stream after falling behind",
            self.catchups.clone(),
        );
    }

    /// Registers what requests do: refusals, backend errors, publishes, the admin API and the token cache.
    fn register_requests(&self, r: &mut Registry) {
        r.register(
            "sluice_connections_rejected",
            "Requests refused before streaming",
            self.rejected.clone(),
        );
        r.register(
            "sluice_backend_errors",
            "Backend errors",
            self.backend_errors.clone(),
        );
        r.register(
            "sluice_readiness_failures",
            "Readiness probes answered 503",
            self.readiness_failures.clone(),
        );
        r.register(
            "sluice_publishes",
            "Publish requests",
            self.publishes.clone(),
        );
        r.register(
            "sluice_publish_refusals",
            "Messages POST /publish refused, by reason",
            self.publish_refusals.clone(),
        );
        r.register(
            "sluice_admin_requests",
            "Admin API requests, by result",
            self.admin_requests.clone(),
        );
        r.register(
            "sluice_admin_refusals",
            "Admin API requests refused, by reason",
            self.admin_refusals.clone(),
        );
        r.register(
            "sluice_token_cache_lookups",
            "Lookups in the caches of verified tokens, by result (hit, miss)",
            self.token_cache_lookups.clone(),
        );
    }

    /// Registers Mercure's subscription events, HTTP/2 errors, request bodies, the latencies, the per-stream gauges and the process's memory.
    fn register_the_rest(&self, r: &mut Registry) {
        r.register(
            "sluice_mercure_subscription_events_skipped",
            "Messages under the Mercure subscription events' subjects not taken into the active subscriptions table, by reason",
            self.mercure_events_skipped.clone(),
        );
        r.register(
            "sluice_mercure_subscriptions_reannounced",
            "Mercure subscriptions this node serves announced again after another node ended them, by reason",
            self.mercure_reannounced.clone(),
        );
        r.register(
            "sluice_http2_connection_errors",
            "HTTP/2 connections that ended with an error, by its code",
            self.http2_errors.clone(),
        );
        r.register(
            "sluice_tls_handshakes",
            "TLS handshakes completed, by kind (full, resumed)",
            self.tls_handshakes.clone(),
        );
        r.register(
            "sluice_request_body_bytes",
            "Request body bytes held now, all requests together",
            self.body_bytes.clone(),
        );
        r.register(
            "sluice_publish_latency_seconds",
            "POST /publish from its body read in full to its answer, by shape (single or batch)",
            self.publish_latency.family.clone(),
        );
        r.register(
            "sluice_delivery_latency_seconds",
            "From a live message's store time to the write carrying its frame to a client",
            self.delivery_latency.clone(),
        );
        r.register_collector(Box::new(self.streams.clone()));
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the hub process in bytes",
            self.resident_memory.clone(),
        );
    }

    /// Every metric of the hub and those `backend` registers itself.
    pub fn for_backend(backend: &dyn sluice_backend::StreamStatistics) -> Self {
        let mut metrics = Self::new();
        backend.register_metrics(&mut metrics.registry);
        metrics
    }

    /// Increments `family` for `label = value`.
    pub fn count(family: &Counters, label: &'static str, value: &'static str) {
        family.get_or_create(&[(label, value)]).inc();
    }

    /// Adds `n` to `family` for `label = value` at once; nothing at all for 0, so no series
    /// appears that nothing counted.
    pub fn count_by(family: &Counters, label: &'static str, value: &'static str, n: u64) {
        if n > 0 {
            family.get_or_create(&[(label, value)]).inc_by(n);
        }
    }

    /// Every metric as OpenMetrics text.
    pub fn encode(&self) -> String {
        self.encode_as(Exposition::OpenMetrics)
    }

    /// Every metric in `format`.
    pub fn encode_as(&self, format: Exposition) -> String {
        if let Some(bytes) = resident_memory() {
            self.resident_memory.set(bytes);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = match format {
            Exposition::OpenMetrics => text::encode(&mut out, &self.registry),
            Exposition::Prometheus => prometheus_text::encode(&mut out, &self.registry),
        };
        out
    }
}

/// The publish latency histograms: one series per shape of body, both present from the start.
#[derive(Debug, Clone)]
pub struct PublishLatency {
    family: Family<Label, Latency>,
    /// A single message (`shape="single"`), answered with its acknowledgement.
    pub single: Latency,
    /// A batch (`shape="batch"`), answered with one element per message.
    pub batch: Latency,
}

impl Default for PublishLatency {
    fn default() -> Self {
        let family = Family::<Label, Latency>::default();
        let single = family.get_or_create(&[("shape", "single")]).clone();
        let batch = family.get_or_create(&[("shape", "batch")]).clone();
        Self {
            family,
            single,
            batch,
        }
    }
}

/// The two text formats of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics 1.0: counter families without `_total`, `# EOF` at the end.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: `# HELP` and `# TYPE` name counters with `_total`,
    /// no `# EOF`.
    Prometheus,
}

impl Exposition {
    /// The format for an `Accept` header: OpenMetrics when it names
    /// `application/openmetrics-text` with a quality at least that of plain text (`text/plain`,
    /// `text/*`, `*/*`), else the Prometheus text format (also when there is no `Accept`).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut openmetrics = 0.0_f32;
        let mut plain = 0.0_f32;
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let quality = parts
                .filter_map(|param| param.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, q)| q.trim().parse::<f32>().ok())
                .unwrap_or(0.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
                "text/plain" | "text/*" | "*/*" => plain = plain.max(quality),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= plain {
            Self::OpenMetrics
        } else {
            Self::Prometheus
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Prometheus => prometheus_text::CONTENT_TYPE,
        }
    }
}

/// Resident memory of this process (`VmRSS` of `/proc/self/status`, in kB there, so no page
/// size is needed); `None` where there is no procfs.
fn resident_memory() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: i64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_chooses_the_format() {
        use Exposition::{OpenMetrics, Prometheus};
        let prometheus_scrape = "application/openmetrics-text;version=1.0.0;q=0.5,\
            application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        for (accept, expected) in [
            (None, Prometheus),
            (Some(""), Prometheus),
            (Some("*/*"), Prometheus),
            (Some("text/plain"), Prometheus),
            (Some("text/plain; version=0.0.4"), Prometheus),
            (Some("application/json"), Prometheus),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("Application/OpenMetrics-Text; version=1.0.0"),
                OpenMetrics,
            ),
            (Some(prometheus_scrape), OpenMetrics),
            (
                Some("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
                Prometheus,
            ),
            (
                Some("application/openmetrics-text;q=0.5, text/plain;q=0.5"),
                OpenMetrics,
            ),
            (Some("application/openmetrics-text;q=0"), Prometheus),
            (Some("application/openmetrics-text;q=nonsense"), Prometheus),
        ] {
            assert_eq!(Exposition::negotiate(accept), expected, "{accept:?}");
        }
    }

    /// The Prometheus text format as `promtool check metrics` and the Prometheus parsers read
    /// it: every family has `# HELP` then `# TYPE`, once; every sample belongs to the family
    /// declared just before it under its own name (so a counter family is `…_total`); no
    /// OpenMetrics-only lines.
    #[test]
    fn the_prometheus_format_declares_every_family_under_its_sample_names() {
        let metrics = Metrics::new();
        Metrics::count(&metrics.rejected, "reason", "body_timeout");
        Metrics::count(&metrics.publishes, "result", "stored");
        metrics.delivered.inc();
        let text = metrics.encode_as(Exposition::Prometheus);
        let mut families = std::collections::HashSet::new();
        let mut current: Option<(String, String)> = None;
        let mut help: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(
                    families.insert(name.clone()),
                    "{name} declared twice:\n{text}"
                );
                help = Some(name);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(
                    help.take().as_deref(),
                    Some(name),
                    "HELP before TYPE:\n{text}"
                );
                assert!(
                    ["counter", "gauge", "histogram", "untyped"].contains(&kind),
                    "{line}"
                );
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                current = Some((name.to_owned(), kind.to_owned()));
            } else {
                assert!(!line.starts_with('#'), "not Prometheus 0.0.4: {line}");
                let sample = line.split(['{', ' ']).next().unwrap();
                let (family, kind) = current.as_ref().expect("a sample after its TYPE");
                let own = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| sample == format!("{family}{suffix}")),
                    _ => sample == family,
                };
                assert!(own, "sample {sample} under family {family}:\n{text}");
            }
        }
        for family in [
            "sluice_connections_rejected_total",
            "sluice_publishes_total",
            "sluice_messages_delivered_total",
            "sluice_active_connections",
            "process_resident_memory_bytes",
        ] {
            assert!(families.contains(family), "{family} missing:\n{text}");
        }
        assert!(text.contains("sluice_connections_rejected_total{reason=\"body_timeout\"} 1"));
    }

    #[test]
    fn exposes_every_documented_name() {
        let metrics = Metrics::new();
        Metrics::count(&metrics.dropped, "reason", "too_large");
        Metrics::count(&metrics.publishes, "result", "stored");
        let text = metrics.encode();
        for name in [
            "sluice_active_connections",
            "sluice_messages_delivered_total",
            "sluice_messages_dropped_total{reason=\"too_large\"} 1",
            "sluice_slow_client_disconnects_total",
            "sluice_replay_requests_total",
            "sluice_publishes_total{result=\"stored\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        let resident = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        assert!(
            resident > 1024 * 1024,
            "resident memory {resident} in:\n{text}"
        );
    }
}
