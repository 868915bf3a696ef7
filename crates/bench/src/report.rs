//! The result of a run, as JSON (serde) or as text for a person.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::server::StoreWrites;
use crate::{Hub, Protocol};

/// Everything a run measured.
///
/// It serializes (serde) to the JSON object `sluice bench --json` prints;
/// [`Report::to_text`] renders the same for a terminal.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Every participating client got every message of its topic exactly once, and nothing
    /// failed (no connect, publish or protocol error, no disconnect, no gap).
    pub(crate) ok: bool,
    /// What was asked for.
    pub(crate) load: Load,
    /// Subscribing.
    pub(crate) connect: Connect,
    /// Publishing.
    pub(crate) publish: Publish,
    /// Receiving.
    pub(crate) delivery: Delivery,
    /// Publish→receive latency in milliseconds, over every received message.
    pub(crate) latency_ms: Option<Percentiles>,
    /// The hub's resource use.
    pub(crate) server: Server,
    /// This process's own resource use.
    pub(crate) bench: OwnUse,
    /// The first error of each kind.
    pub(crate) errors: Vec<String>,
    /// Warnings about the setup (limits too low, RSS not readable).
    pub(crate) notes: Vec<String>,
}

/// The requested load.
#[derive(Debug, Serialize)]
pub struct Load {
    /// Hub URL.
    pub url: String,
    /// The HTTP spoken: `http/1.1` or `h2`.
    pub protocol: Protocol,
    /// Event streams per connection (above 1 only over HTTP/2).
    pub streams_per_connection: u64,
    /// Connections the event streams took.
    pub connections: u64,
    /// What kind of hub it is.
    pub hub: Hub,
    /// SSE clients.
    pub clients: u64,
    /// Topics the clients are spread over.
    pub topics: u64,
    /// Messages per second asked for.
    pub rate: f64,
    /// Seconds of publishing.
    pub duration_secs: f64,
    /// Approximate payload size in bytes.
    pub payload_bytes: u64,
    /// Publishing connections.
    pub publishers: u64,
    /// Loopback addresses the clients connected from (1: wherever the kernel picked).
    pub source_addresses: u64,
    /// Where each client's stream started (`--from`, the hub's `from=`); `null`: live.
    pub from: Option<String>,
}

/// How subscribing went.
#[derive(Debug, Serialize)]
pub struct Connect {
    /// Clients subscribed before publishing began.
    pub connected: u64,
    /// Clients that could not subscribe in time.
    pub errors: u64,
    /// Seconds from the first connect to the last `connected` frame (or the deadline).
    pub seconds: f64,
}

/// How publishing went.
#[derive(Debug, Serialize)]
pub struct Publish {
    /// Messages the schedule called for.
    pub target: u64,
    /// Messages the hub acknowledged.
    pub published: u64,
    /// Publishes refused, failed or timed out.
    pub errors: u64,
    /// Messages not sent because publishers fell behind the schedule.
    pub skipped: u64,
    /// Seconds publishing took.
    pub seconds: f64,
    /// Acknowledged messages per second.
    pub rate: f64,
    /// Time to acknowledgement in milliseconds.
    pub ack_ms: Option<Percentiles>,
}

/// How delivery went.
#[derive(Debug, Serialize)]
pub struct Delivery {
    /// Each acknowledged message once per subscribed client of its topic.
    pub expected: u64,
    /// Messages of this run received.
    pub received: u64,
    /// `expected - received` (never negative).
    pub missing: u64,
    /// Messages whose sequence did not increase (duplicates or reordering).
    pub out_of_order: u64,
    /// Messages that were not this run's (other publishers, other topics).
    pub foreign: u64,
    /// Retained messages the clients' start option (`--from`) replayed before the run's own
    /// (neither received nor foreign).
    pub replayed: u64,
    /// `gap` frames.
    pub gaps: u64,
    /// Streams that ended during the run.
    pub disconnects: u64,
    /// Streams that broke the SSE protocol.
    pub protocol_errors: u64,
    /// Clients that got every message of their topic exactly once.
    pub clients_exactly_once: u64,
    /// Participating clients that did not.
    pub clients_incomplete: u64,
    /// Received messages per second, from the first publish to the last receive.
    pub events_per_sec: f64,
    /// Seconds from the end of publishing until everything arrived (or draining gave up).
    pub drain_seconds: f64,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Serialize, PartialEq)]
pub struct Percentiles {
    /// Number of samples.
    pub samples: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// From a histogram of microseconds; `None` when it is empty.
    pub fn of(micros: &Histogram<u64>) -> Option<Self> {
        if micros.is_empty() {
            return None;
        }
        let ms = |q: f64| micros.value_at_quantile(q) as f64 / 1000.0;
        Some(Self {
            samples: micros.len(),
            p50: ms(0.5),
            p90: ms(0.9),
            p99: ms(0.99),
            p999: ms(0.999),
            max: micros.max() as f64 / 1000.0,
        })
    }
}

/// The hub's memory and CPU: its process's and its child processes' together.
#[derive(Debug, Serialize)]
pub struct Server {
    /// Its pid, when given.
    pub pid: Option<u32>,
    /// How many processes that is (nginx: the master and its workers), when known.
    pub processes: Option<u64>,
    /// Resident memory before any client connected.
    pub rss_idle_bytes: Option<u64>,
    /// Resident memory with every client connected, before publishing.
    pub rss_connected_bytes: Option<u64>,
    /// Largest resident memory seen while publishing and draining.
    pub rss_peak_bytes: Option<u64>,
    /// `(rss_connected - rss_idle) / connected`: the cost of an idle connection (over HTTP/2,
    /// of an idle stream with its share of its connection).
    pub rss_per_connection_idle_bytes: Option<u64>,
    /// `(rss_peak - rss_idle) / connected`: the cost of a connection under load.
    pub rss_per_connection_bytes: Option<u64>,
    /// CPU cores it used on average while publishing and draining (with a pid).
    pub cpu_cores: Option<f64>,
    /// CPU microseconds it spent per delivered event: comparable across machines and loads
    /// where `cpu_cores` mostly shows the share of the CPU the hub was given.
    pub cpu_us_per_event: Option<f64>,
    /// Its soft open-file limit (with a pid).
    pub open_files_limit: Option<u64>,
    /// What its embedded store did for this run's publishes, when it reports it.
    pub store: Option<StoreCost>,
}

/// What a run's publishes cost the hub's embedded store (from its `/metrics` before and after):
/// how well concurrent publishes shared writes and fsyncs.
#[derive(Debug, Serialize, PartialEq)]
pub struct StoreCost {
    /// Message batches written.
    pub write_batches: u64,
    /// fsyncs made (block files, index.db, sidecars, the lease, directories).
    pub fsyncs: u64,
    /// `fsyncs / acknowledged publishes`.
    pub fsyncs_per_message: f64,
    /// `acknowledged publishes / write_batches`.
    pub messages_per_batch: f64,
}

impl StoreCost {
    /// The store's counts between `start` and `end`, over `messages` acknowledged publishes;
    /// `None` without both readings or without a publish.
    pub fn between(
        start: Option<StoreWrites>,
        end: Option<StoreWrites>,
        messages: u64,
    ) -> Option<Self> {
        let (start, end) = (start?, end?);
        if messages == 0 {
            return None;
        }
        let write_batches = end.batches.saturating_sub(start.batches);
        let fsyncs = end.fsyncs.saturating_sub(start.fsyncs);
        Some(Self {
            write_batches,
            fsyncs,
            fsyncs_per_message: fsyncs as f64 / messages as f64,
            messages_per_batch: messages as f64 / write_batches.max(1) as f64,
        })
    }
}

/// This process's own cost, to show the load generator is not the bottleneck.
#[derive(Debug, Serialize)]
pub struct OwnUse {
    /// Resident memory at the end of the run.
    pub rss_bytes: Option<u64>,
    /// CPU cores used on average while publishing and draining.
    pub cpu_cores: Option<f64>,
    /// CPU microseconds spent per received event.
    pub cpu_us_per_event: Option<f64>,
}

/// CPU microseconds per event: `cores` busy for `seconds` while `events` were delivered.
pub fn cpu_per_event(cores: Option<f64>, seconds: f64, events: u64) -> Option<f64> {
    (events > 0).then_some(())?;
    Some(cores? * seconds * 1e6 / events as f64)
}

/// `(after - before) / count`, when all are known and `count > 0`.
pub fn per_connection(before: Option<u64>, after: Option<u64>, count: u64) -> Option<u64> {
    (count > 0).then_some(())?;
    Some(after?.saturating_sub(before?) / count)
}

impl Report {
    /// Whether the run was clean: every participating client got every message of its topic
    /// exactly once, and nothing failed.
    pub fn is_ok(&self) -> bool {
        self.ok
    }

    /// What went wrong, as `<count> <what>` for every non-zero count.
    pub fn problems(&self) -> Vec<String> {
        let d = &self.delivery;
        [
            (d.missing, "events missing"),
            (self.connect.errors, "connect errors"),
            (self.publish.errors, "publish errors"),
            (d.disconnects, "disconnects"),
            (d.gaps, "gap frames"),
            (d.out_of_order, "events out of order"),
            (d.foreign, "foreign events"),
            (d.protocol_errors, "protocol errors"),
            (
                d.clients_incomplete,
                "clients without every event exactly once",
            ),
        ]
        .into_iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!("{count} {what}"))
        .collect()
    }

    /// The report as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = self.write_text(&mut out);
        out
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        let load = &self.load;
        writeln!(
            out,
            "sluice bench: {} clients over {} {} connection(s) on {} topic(s), {} msgs/s for {}s, payload ~{} B, {} publisher(s), {}{}",
            load.clients,
            load.connections,
            match load.protocol {
                Protocol::Http1 => "HTTP/1.1",
                Protocol::Http2 => "HTTP/2",
            },
            load.topics,
            load.rate,
            load.duration_secs,
            load.payload_bytes,
            load.publishers,
            load.url,
            match load.hub {
                Hub::Sluice => "",
                Hub::Nchan => " (nchan)",
                Hub::Mercure => " (Mercure)",
            }
        )?;
        let c = &self.connect;
        writeln!(
            out,
            "connect   {} connected in {:.2} s, {} errors",
            c.connected, c.seconds, c.errors
        )?;
        let p = &self.publish;
        write!(
            out,
            "publish   {} of {} acknowledged ({} errors, {} skipped behind schedule) in {:.2} s = {:.1} msgs/s",
            p.published, p.target, p.errors, p.skipped, p.seconds, p.rate
        )?;
        match &p.ack_ms {
            Some(ack) => writeln!(
                out,
                "; ack p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                ack.p50, ack.p99, ack.max
            )?,
            None => writeln!(out)?,
        }
        let d = &self.delivery;
        writeln!(
            out,
            "deliver   {} of {} expected events received ({} missing, {} out of order, {} foreign), drained in {:.2} s",
            d.received, d.expected, d.missing, d.out_of_order, d.foreign, d.drain_seconds
        )?;
        if let Some(from) = &load.from {
            writeln!(
                out,
                "          {} retained events replayed first (--from {from})",
                d.replayed
            )?;
        }
        writeln!(out, "          {:.0} events/s delivered", d.events_per_sec)?;
        writeln!(
            out,
            "clients   {} exactly-once, {} incomplete; {} disconnects, {} gap frames, {} protocol errors",
            d.clients_exactly_once, d.clients_incomplete, d.disconnects, d.gaps, d.protocol_errors
        )?;
        match &self.latency_ms {
            Some(l) => writeln!(
                out,
                "latency   publish→receive p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms ({} samples)",
                l.p50, l.p90, l.p99, l.p999, l.max, l.samples
            )?,
            None => writeln!(out, "latency   no messages received")?,
        }
        let s = &self.server;
        writeln!(
            out,
            "server    RSS idle {}, connected {}, peak {}; per connection {} idle, {} under load; CPU {} ({})",
            mib(s.rss_idle_bytes),
            mib(s.rss_connected_bytes),
            mib(s.rss_peak_bytes),
            kib(s.rss_per_connection_idle_bytes),
            kib(s.rss_per_connection_bytes),
            cores(s.cpu_cores),
            per_event(s.cpu_us_per_event),
        )?;
        if let Some(store) = &s.store {
            writeln!(
                out,
                "store     {} write batches ({:.1} messages each), {} fsyncs ({:.2} per message)",
                store.write_batches,
                store.messages_per_batch,
                store.fsyncs,
                store.fsyncs_per_message
            )?;
        }
        writeln!(
            out,
            "bench     RSS {}, CPU {} ({})",
            mib(self.bench.rss_bytes),
            cores(self.bench.cpu_cores),
            per_event(self.bench.cpu_us_per_event),
        )?;
        for error in &self.errors {
            writeln!(out, "error     {error}")?;
        }
        for note in &self.notes {
            writeln!(out, "note      {note}")?;
        }
        let result = if self.ok {
            "OK: every event delivered exactly once"
        } else {
            "FAILED: see the counts above"
        };
        write!(out, "result    {result}")?;
        if p.skipped > 0 {
            out.push_str(" (but the hub acknowledged publishes slower than --rate)");
        }
        writeln!(out)
    }
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "n/a".to_owned(),
        |b| format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
    )
}

fn kib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "n/a".to_owned(),
        |b| format!("{:.2} KiB", b as f64 / 1024.0),
    )
}

fn per_event(micros: Option<f64>) -> String {
    micros.map_or_else(|| "n/a".to_owned(), |us| format!("{us:.2} µs per event"))
}

fn cores(cores: Option<f64>) -> String {
    cores.map_or_else(|| "n/a".to_owned(), |c| format!("{c:.2} cores"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_histogram;

    #[test]
    fn store_cost_is_the_difference_per_acknowledged_publish() {
        let at = |batches, fsyncs| Some(StoreWrites { batches, fsyncs });
        let cost = StoreCost::between(at(10, 30), at(60, 130), 200).expect("a cost");
        assert_eq!(
            cost,
            StoreCost {
                write_batches: 50,
                fsyncs: 100,
                fsyncs_per_message: 0.5,
                messages_per_batch: 4.0,
            }
        );
        assert_eq!(StoreCost::between(None, at(1, 1), 5), None, "no reading");
        assert_eq!(
            StoreCost::between(at(1, 1), at(1, 1), 0),
            None,
            "no publish"
        );
    }

    #[test]
    fn percentiles_are_milliseconds() {
        let mut micros = new_histogram();
        assert_eq!(Percentiles::of(&micros), None);
        for value in 1..=1000 {
            micros.record(value * 10).unwrap();
        }
        let p = Percentiles::of(&micros).unwrap();
        assert_eq!(p.samples, 1000);
        assert!((p.p50 - 5.0).abs() < 0.01, "{p:?}");
        assert!((p.max - 10.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn cpu_per_event_is_busy_time_over_events() {
        assert_eq!(cpu_per_event(Some(0.5), 2.0, 1_000_000), Some(1.0));
        assert_eq!(cpu_per_event(None, 2.0, 10), None);
        assert_eq!(cpu_per_event(Some(0.5), 2.0, 0), None);
    }

    #[test]
    fn per_connection_needs_every_number() {
        assert_eq!(per_connection(Some(1000), Some(9000), 4), Some(2000));
        assert_eq!(per_connection(Some(9000), Some(1000), 4), Some(0));
        assert_eq!(per_connection(None, Some(9000), 4), None);
        assert_eq!(per_connection(Some(1), Some(9000), 0), None);
    }
}
