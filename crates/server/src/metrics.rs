//! The hub's Prometheus metrics, served at `/metrics` in the text exposition format.
//!
//! Names (counters get the `_total` suffix on the wire) are listed in `docs/OPERATIONS.md`.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
            resident_memory: Gauge::default(),
        };
        let r = &mut registry;
        r.register(
            "sluice_active_connections",
            "Event streams open now",
            metrics.active_connections.clone(),
        );
        r.register(
            "sluice_active_feeds",
            "Shared backend feeds open now",
            metrics.active_feeds.clone(),
        );
        r.register(
            "sluice_messages_delivered",
            "Messages written to clients",
            metrics.delivered.clone(),
        );
        r.register(
            "sluice_messages_dropped",
            "Messages not delivered, each reported by a gap frame",
            metrics.dropped.clone(),
        );
        r.register(
            "sluice_gaps",
            "Gap frames sent to clients",
            metrics.gaps.clone(),
        );
        r.register(
            "sluice_slow_client_disconnects",
            "Connections closed after write_timeout without progress",
            metrics.slow_disconnects.clone(),
        );
        r.register(
            "sluice_disconnects",
            "Event streams ended",
            metrics.disconnects.clone(),
        );
        r.register(
            "sluice_replay_requests",
            "Subscriptions resuming from a position",
            metrics.replay_requests.clone(),
        );
        r.register(
            "sluice_replay_fallbacks",
            "Resumes whose position was lost",
            metrics.replay_fallbacks.clone(),
        );
        r.register(
            "sluice_catchups",
            "Clients that caught up from the stream after falling behind",
            metrics.catchups.clone(),
        );
        r.register(
            "sluice_connections_rejected",
            "Requests refused before streaming",
            metrics.rejected.clone(),
        );
        r.register(
            "sluice_backend_errors",
            "Backend errors",
            metrics.backend_errors.clone(),
        );
        r.register(
            "sluice_readiness_failures",
            "Readiness probes answered 503",
            metrics.readiness_failures.clone(),
        );
        r.register(
            "sluice_publishes",
            "Publish requests",
            metrics.publishes.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the hub process in bytes",
            metrics.resident_memory.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// Every metric of the hub and those `backend` registers itself.
    pub fn for_backend(backend: &dyn crate::backend::Backend) -> Self {
        let mut metrics = Self::new();
        backend.register_metrics(&mut metrics.registry);
        metrics
    }

    /// Increments `family` for `label = value`.
    pub fn count(family: &Counters, label: &'static str, value: &'static str) {
        family.get_or_create(&[(label, value)]).inc();
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        if let Some(bytes) = resident_memory() {
            self.resident_memory.set(bytes);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
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
