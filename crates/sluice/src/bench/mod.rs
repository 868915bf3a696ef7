//! `sluice bench`: a load generator for a running hub, on this machine only.
//!
//! It opens `--clients` SSE streams (`GET /events?topic=…`) spread over `--topics` topics,
//! waits until every one has its `connected` frame, publishes `--rate` messages per second
//! (`POST /publish`) for `--duration`, waits until everything has arrived, and reports
//! delivered events per second, publish→receive latency, every error and loss, and the hub's
//! memory per connection. It only speaks HTTP, so the same run works against a hub on the
//! embedded store or in front of NATS JetStream.
//!
//! Every stage is bounded in time: connecting (`--clients / --connect-rate` plus 30 s),
//! publishing (`--duration`), draining (until nothing arrives for 5 s, at most 60 s).

mod event_stream;
mod http;
mod limits;
mod message;
mod publisher;
mod report;
mod server;
mod stats;
mod subscriber;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use self::http::{Target, fetch};
use self::publisher::{PayloadShape, Published, Schedule};
use self::report::{
    Connect, Delivery, Load, OwnUse, Percentiles, Publish, Report, Server, cpu_per_event,
    per_connection,
};
use self::server::{ServerProbe, cpu_seconds_of, rss_of};
use self::stats::{Stats, new_histogram};
use self::subscriber::{CONNECT_TIMEOUT, Outcome, Phase};

/// Draining ends when nothing has arrived for this long…
const DRAIN_STALL: Duration = Duration::from_secs(5);
/// …or after this long at most.
const DRAIN_MAX: Duration = Duration::from_secs(60);
/// How often progress is checked while connecting and draining.
const POLL: Duration = Duration::from_millis(10);
/// How often the hub's memory is sampled while publishing.
const RSS_SAMPLE: Duration = Duration::from_millis(500);

/// `sluice bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The hub's base URL (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
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
    /// The hub's process id: its memory and CPU are read from /proc (otherwise memory is read
    /// from its /metrics when it exports `process_resident_memory_bytes`).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// New client connections per second while subscribing.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub connect_rate: u64,
    /// Concurrent publishing connections.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub publishers: u64,
    /// First token of the benchmark's topics.
    #[arg(long, default_value = "bench", value_parser = parse_topic_prefix)]
    pub topic_prefix: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What every client and publisher of one run shares.
#[derive(Debug)]
pub struct Run {
    target: Target,
    stats: Stats,
    /// Tags this run's messages, so messages of anyone else are told apart.
    run_id: String,
    topic_names: Vec<String>,
    payload: PayloadShape,
}

/// Runs the benchmark and prints its report; fails after printing when anything was lost.
///
/// # Errors
/// When the options are invalid, the hub does not answer, the open-file limit is too low, or
/// the run was not clean (the report says why).
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !(args.rate > 0.0 && args.rate <= 10_000_000.0) {
        bail!(
            "--rate {} must be above 0 and at most 10000000 messages per second",
            args.rate
        );
    }
    let open_files = limits::raise_open_files(args.clients + limits::SPARE_FILES)?;
    let target = Target::parse(&args.url)?;
    check_hub(&target).await?;
    let probe = ServerProbe::new(args.server_pid, target.clone());
    let mut notes = Vec::new();
    let server_files = args.server_pid.and_then(limits::open_files_of);
    if let Some(limit) = server_files
        && limit < args.clients + limits::SPARE_FILES
    {
        notes.push(format!(
            "the hub's open-file limit is {limit}, below {} clients: raise `ulimit -n` where it is started",
            args.clients
        ));
    }
    let topic_names: Vec<String> = (0..args.topics)
        .map(|k| format!("{}.{k}", args.topic_prefix))
        .collect();
    let run = Arc::new(Run {
        target,
        stats: Stats::new(topic_names.len()),
        run_id: run_id(),
        topic_names,
        payload: PayloadShape::new(usize::try_from(args.payload_bytes).unwrap_or(usize::MAX)),
    });
    progress(format_args!(
        "sluice bench: open-file limit {open_files}; connecting {} clients at {}/s to {}",
        args.clients, args.connect_rate, args.url
    ));

    let rss_idle = probe.rss().await;
    let (phase, phase_rx) = watch::channel(Phase::Connecting);
    let connect_start = Instant::now();
    let spawner = tokio::spawn(spawn_clients(
        run.clone(),
        args.clients,
        args.connect_rate,
        phase_rx,
    ));
    let spawn_time = Duration::from_secs_f64(args.clients as f64 / args.connect_rate as f64);
    wait_connected(
        &run.stats,
        args.clients,
        connect_start + spawn_time + CONNECT_TIMEOUT,
    )
    .await;
    let connect_seconds = connect_start.elapsed().as_secs_f64();
    let rss_connected = probe.rss().await;
    let connected = Stats::get(&run.stats.connected);
    progress(format_args!(
        "sluice bench: {connected} connected in {connect_seconds:.2} s; publishing {} msgs/s for {:?}",
        args.rate, args.duration
    ));

    let cpu_start = Usage::now(&probe);
    let schedule = Schedule {
        start: Instant::now(),
        rate: args.rate,
        duration: args.duration,
        publishers: usize::try_from(args.publishers).unwrap_or(1),
    };
    let publish_start_us = run.stats.now_us();
    phase.send_replace(Phase::Publishing);
    let (published, mut rss_peak) = publish(&run, schedule, &probe, rss_connected).await?;
    let publish_seconds = schedule.start.elapsed().as_secs_f64();
    let drain_start = Instant::now();
    drain(&run.stats).await;
    let drain_seconds = drain_start.elapsed().as_secs_f64();
    rss_peak = rss_peak.max(probe.rss().await);
    let usage_end = Usage::now(&probe);
    let cpu = usage_end.since(&cpu_start);
    let busy_seconds = (usage_end.at - cpu_start.at).as_secs_f64();
    let own_rss = rss_of(std::process::id());

    phase.send_replace(Phase::Stopping);
    let outcomes = collect(spawner.await.context("client spawner")?).await?;

    let stats = &run.stats;
    let received = Stats::get(&stats.received);
    let expected = stats.expected();
    let exactly_once = outcomes
        .iter()
        .filter(|o| o.participated && o.clean && o.received == stats.published_on(o.topic))
        .count() as u64;
    let participants = outcomes.iter().filter(|o| o.participated).count() as u64;
    let mut ack = new_histogram();
    for p in &published {
        // Same bounds everywhere, so adding cannot fail.
        let _ = ack.add(&p.ack);
    }
    let acknowledged = stats.published_total();
    let delivering = stats.last_receive().as_micros() as f64 - publish_start_us as f64;
    let delivery = Delivery {
        expected,
        received,
        missing: expected.saturating_sub(received),
        out_of_order: Stats::get(&stats.out_of_order),
        foreign: Stats::get(&stats.foreign),
        gaps: Stats::get(&stats.gaps),
        disconnects: Stats::get(&stats.disconnects),
        protocol_errors: Stats::get(&stats.protocol_errors),
        clients_exactly_once: exactly_once,
        clients_incomplete: participants - exactly_once,
        events_per_sec: if delivering > 0.0 {
            received as f64 * 1e6 / delivering
        } else {
            0.0
        },
        drain_seconds,
    };
    let connect = Connect {
        connected: participants,
        errors: Stats::get(&stats.connect_errors),
        seconds: connect_seconds,
    };
    let publish_errors = Stats::get(&stats.publish_errors);
    let ok = connect.errors == 0
        && publish_errors == 0
        && participants == args.clients
        && exactly_once == participants
        && delivery.missing == 0
        && delivery.gaps
            + delivery.disconnects
            + delivery.protocol_errors
            + delivery.out_of_order
            + delivery.foreign
            == 0;
    if rss_idle.is_none() {
        notes.push(
            "the hub's memory is unknown: pass --server-pid <pid of sluice serve>".to_owned(),
        );
    }
    let report = Report {
        ok,
        load: Load {
            url: args.url.clone(),
            clients: args.clients,
            topics: args.topics,
            rate: args.rate,
            duration_secs: args.duration.as_secs_f64(),
            payload_bytes: args.payload_bytes,
            publishers: args.publishers,
        },
        connect,
        publish: Publish {
            target: schedule.total(),
            published: acknowledged,
            errors: publish_errors,
            skipped: published.iter().map(|p| p.skipped).sum(),
            seconds: publish_seconds,
            rate: acknowledged as f64 / publish_seconds.max(1e-9),
            ack_ms: Percentiles::of(&ack),
        },
        delivery,
        latency_ms: Percentiles::of(&stats.latency()),
        server: Server {
            pid: probe.pid(),
            rss_idle_bytes: rss_idle,
            rss_connected_bytes: rss_connected,
            rss_peak_bytes: rss_peak,
            rss_per_connection_idle_bytes: per_connection(rss_idle, rss_connected, participants),
            rss_per_connection_bytes: per_connection(rss_idle, rss_peak, participants),
            cpu_cores: cpu.server,
            cpu_us_per_event: cpu_per_event(cpu.server, busy_seconds, received),
            open_files_limit: server_files,
        },
        bench: OwnUse {
            rss_bytes: own_rss,
            cpu_cores: cpu.own,
            cpu_us_per_event: cpu_per_event(cpu.own, busy_seconds, received),
        },
        errors: stats.first_errors(),
        notes,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if !report.ok {
        bail!("the run was not clean: {}", report.problems().join(", "));
    }
    Ok(())
}

/// A progress line on stderr (the report goes to stdout).
fn progress(line: std::fmt::Arguments<'_>) {
    eprintln!("{line}");
}

/// Fails early, with a clear message, when nothing answers at the URL.
async fn check_hub(target: &Target) -> anyhow::Result<()> {
    let request = target
        .request(hyper::Method::GET, "/livez")
        .body(Full::<Bytes>::default())?;
    let (status, _) = fetch(target, request, Duration::from_secs(5))
        .await
        .with_context(|| format!("no hub answers at {}", target.addr()))?;
    if !status.is_success() {
        bail!(
            "the hub at {} answered GET /livez with {status}",
            target.addr()
        );
    }
    Ok(())
}

/// Starts `clients` clients at `rate` per second, round-robin over the topics; stops starting
/// them once publishing begins (those never started count as connect errors).
async fn spawn_clients(
    run: Arc<Run>,
    clients: u64,
    rate: u64,
    phase: watch::Receiver<Phase>,
) -> Vec<JoinHandle<Outcome>> {
    let start = Instant::now();
    let topics = run.topic_names.len();
    let mut handles = Vec::with_capacity(usize::try_from(clients).unwrap_or(0));
    for client in 0..clients {
        tokio::time::sleep_until(start + Duration::from_secs_f64(client as f64 / rate as f64))
            .await;
        if *phase.borrow() != Phase::Connecting {
            let stats = &run.stats;
            stats.error(&stats.connect_errors, "connect", || {
                "not started before publishing began (raise --connect-rate?)".to_owned()
            });
            stats
                .connect_errors
                .fetch_add(clients - client - 1, std::sync::atomic::Ordering::Relaxed);
            break;
        }
        let client = usize::try_from(client).unwrap_or(usize::MAX);
        let task = subscriber::subscribe(run.clone(), client, client % topics, phase.clone());
        handles.push(tokio::spawn(task));
    }
    handles
}

/// Waits until every client has subscribed or failed, or until `deadline`.
async fn wait_connected(stats: &Stats, clients: u64, deadline: Instant) {
    while Stats::get(&stats.connected) + Stats::get(&stats.connect_errors) < clients
        && Instant::now() < deadline
    {
        tokio::time::sleep(POLL).await;
    }
}

/// Runs the publishers to the end of the schedule, sampling the hub's memory meanwhile;
/// returns what each did and the largest memory seen.
///
/// The publishers run on a thread of their own: on the runtime of thousands of subscribers
/// they would wait behind every woken client before sending and before reading their
/// acknowledgement, and the publish rate and ack latency would measure the bench, not the hub.
async fn publish(
    run: &Arc<Run>,
    schedule: Schedule,
    probe: &ServerProbe,
    rss: Option<u64>,
) -> anyhow::Result<(Vec<Published>, Option<u64>)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-publishers")
        .enable_all()
        .build()
        .context("cannot start the publishers' runtime")?;
    let mut publishers = JoinSet::new();
    for which in 0..schedule.publishers {
        publishers.spawn_on(
            publisher::publish(run.clone(), which, schedule),
            runtime.handle(),
        );
    }
    let result = async {
        let mut peak = rss;
        let mut sample = tokio::time::interval(RSS_SAMPLE);
        let mut done = Vec::with_capacity(schedule.publishers);
        loop {
            tokio::select! {
                next = publishers.join_next() => match next {
                    Some(result) => done.push(result.context("publisher task")?),
                    None => break,
                },
                _ = sample.tick() => peak = peak.max(probe.rss().await),
            }
        }
        Ok((done, peak))
    }
    .await;
    drop(publishers);
    // Dropping a runtime blocks, which is not allowed inside this one.
    runtime.shutdown_background();
    result
}

/// Waits until every expected message has arrived, nothing has arrived for [`DRAIN_STALL`],
/// or [`DRAIN_MAX`] has passed.
async fn drain(stats: &Stats) {
    let start = Instant::now();
    let mut last = Stats::get(&stats.received);
    let mut last_progress = start;
    while last < stats.expected() {
        let now = Instant::now();
        if now - last_progress >= DRAIN_STALL || now - start >= DRAIN_MAX {
            return;
        }
        tokio::time::sleep(POLL).await;
        let received = Stats::get(&stats.received);
        if received != last {
            last = received;
            last_progress = Instant::now();
        }
    }
}

/// Waits for every client to hang up and returns what each saw.
async fn collect(handles: Vec<JoinHandle<Outcome>>) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::with_capacity(handles.len());
    for handle in handles {
        outcomes.push(handle.await.context("client task")?);
    }
    Ok(outcomes)
}

/// CPU time of the hub and of this process at one moment.
struct Usage {
    at: Instant,
    server: Option<f64>,
    own: Option<f64>,
}

/// Average cores used between two [`Usage`] readings.
struct Cores {
    server: Option<f64>,
    own: Option<f64>,
}

impl Usage {
    fn now(probe: &ServerProbe) -> Self {
        Self {
            at: Instant::now(),
            server: probe.cpu_seconds(),
            own: cpu_seconds_of(std::process::id()),
        }
    }

    fn since(&self, earlier: &Self) -> Cores {
        let wall = (self.at - earlier.at).as_secs_f64().max(1e-9);
        let cores = |now: Option<f64>, then: Option<f64>| Some((now? - then?) / wall);
        Cores {
            server: cores(self.server, earlier.server),
            own: cores(self.own, earlier.own),
        }
    }
}

/// A run id: 16 hex digits, different for every run.
fn run_id() -> String {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new()
        .hash_one((std::process::id(), std::time::SystemTime::now()));
    format!("{random:016x}")
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

    #[test]
    fn topic_prefixes_are_plain_tokens() {
        assert_eq!(parse_topic_prefix("load.test-1").unwrap(), "load.test-1");
        for bad in ["", "a..b", "a b", "a.*", "a/b", "a&topic=x"] {
            assert!(parse_topic_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn run_ids_are_16_hex_digits() {
        let id = run_id();
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
