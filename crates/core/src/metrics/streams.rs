//! The per-stream gauges and the feeds' lag, encoded from what the backend said at the start of
//! the scrape: `GET /metrics` asks the backend (`Backend::stream_stats`) and the fan-out first,
//! then encodes.
//!
//! Nothing here is updated on the hot path: publishes and deliveries never touch it. A scrape
//! whose read of the backend failed shows none of these series (a stale value would look
//! current), which Prometheus records as their absence.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use sluice_backend::StreamStats;

/// What one scrape read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every stream the backend reports.
    pub streams: Vec<StreamStats>,
    /// How far the node's feeds are behind the served stream's last sequence; `None` when
    /// the backend did not answer.
    pub feed_lag: Option<u64>,
}

/// The collector, sharing its snapshot with the scrape that replaces it.
#[derive(Debug, Clone, Default)]
pub struct StreamGauges(Arc<Mutex<Snapshot>>);

/// A per-stream gauge: name, help, and the value it reads.
type StreamGauge = (&'static str, &'static str, fn(&StreamStats) -> u64);

const STREAM_GAUGES: [StreamGauge; 5] = [
    ("sluice_stream_messages", "Messages the stream holds", |s| {
        s.messages
    }),
    (
        "sluice_stream_bytes",
        "Bytes of the messages the stream holds",
        |s| s.bytes,
    ),
    (
        "sluice_stream_first_seq",
        "First retained sequence of the stream (last + 1 when empty)",
        |s| s.first_seq,
    ),
    (
        "sluice_stream_last_seq",
        "Last sequence the stream assigned",
        |s| s.last_seq,
    ),
    (
        "sluice_stream_lost_messages",
        "Messages the stream knows it lost (damaged or missing)",
        |s| s.lost_messages,
    ),
];

impl StreamGauges {
    /// Replaces what the next encoding reports.
    pub fn replace(&self, snapshot: Snapshot) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = snapshot;
    }

    fn snapshot(&self) -> Snapshot {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

impl Collector for StreamGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.snapshot();
        if !snapshot.streams.is_empty() {
            for (name, help, value) in STREAM_GAUGES {
                let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                for stream in &snapshot.streams {
                    let labels = [("stream", stream.name.as_str())];
                    gauge(value(stream)).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        if let Some(lag) = snapshot.feed_lag {
            let metric = encoder.encode_descriptor(
                "sluice_feed_lag_messages",
                "Sequences of the served stream not yet routed to this node's feeds (all feeds share one read)",
                None,
                MetricType::Gauge,
            )?;
            gauge(lag).encode(metric)?;
        }
        Ok(())
    }
}
