//! One run from start to end: connect the clients, publish on schedule, drain, and add up
//! what every client and publisher saw into the [`Report`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use hyper::header::HeaderValue;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::http::{Target, fetch};
use crate::limits;
use crate::mercure;
use crate::multiplex::Multiplex;
use crate::payload::PayloadShape;
use crate::publisher::{self, Published, Schedule};
use crate::report::{
    Connect, Delivery, Load, OwnUse, Percentiles, Publish, Report, Server, StoreCost,
    cpu_per_event, per_connection,
};
use crate::run_context::Run;
use crate::server::{ServerProbe, cpu_seconds_of, rss_of};
use crate::stats::{Stats, new_histogram};
use crate::subscriber::{self, CONNECT_TIMEOUT, Outcome, Phase};
use crate::{Config, Hub, Protocol};

/// Draining ends when nothing has arrived for this long…
const DRAIN_STALL: Duration = Duration::from_secs(5);
/// …or after this long at most.
const DRAIN_MAX: Duration = Duration::from_secs(60);
/// How often progress is checked while connecting and draining.
const POLL: Duration = Duration::from_millis(10);
/// How often the hub's memory is sampled while publishing.
const RSS_SAMPLE: Duration = Duration::from_millis(500);

/// Runs the benchmark `config` describes against its hub and returns what it measured.
///
/// Progress lines go to stderr while it runs (`… connected in …; publishing …` once publishing
/// starts). A run that lost or failed anything still returns its report, with
/// [`Report::is_ok`] false and [`Report::problems`] saying what went wrong.
///
/// # Errors
/// When the configuration is invalid (see [`Config`]), the URL is not a loopback address, the
/// `--ca-file` is unusable, no hub answers there (or its TLS certificate is not trusted, or it
/// does not speak HTTP/2 when asked to), this process's open-file limit cannot be raised to fit
/// the connections, or a task of the run fails.
pub async fn run(config: Config) -> anyhow::Result<Report> {
    config.check()?;
    let connections = config.connections();
    let open_files = limits::raise_open_files(connections + limits::SPARE_FILES)?;
    let target = Target::parse(&config.url, config.protocol, config.ca_file.as_deref())?;
    check_sources(&config, &target)?;
    let topic_names: Vec<String> = (0..config.topics)
        .map(|k| format!("{}.{k}", config.topic_prefix))
        .collect();
    let authorization = config
        .mercure_publisher_key
        .as_ref()
        .map(mercure::authorization)
        .transpose()?;
    check_hub(&target, config.hub, &topic_names[0], authorization.as_ref()).await?;
    let probe = ServerProbe::new(config.server_pid, target.clone());
    let mut notes = Vec::new();
    let server_files = config.server_pid.and_then(limits::open_files_of);
    if let Some(limit) = server_files
        && limit < connections + limits::SPARE_FILES
    {
        notes.push(format!(
            "the hub's open-file limit is {limit}, below {connections} connections: raise `ulimit -n` where it is started"
        ));
    }
    let clients = usize::try_from(config.clients).unwrap_or(usize::MAX);
    let streams_per_connection = usize::try_from(config.streams_per_connection).unwrap_or(1);
    let multiplex = (config.protocol == Protocol::Http2)
        .then(|| Multiplex::new(clients, streams_per_connection));
    let run = Arc::new(Run {
        target,
        multiplex,
        hub: config.hub,
        stats: Stats::new(topic_names.len()),
        run_id: run_id(),
        topic_names,
        payload: PayloadShape::new(usize::try_from(config.payload_bytes).unwrap_or(usize::MAX)),
        authorization,
        from: config
            .from
            .as_deref()
            .map(|from| utf8_percent_encode(from, NON_ALPHANUMERIC).to_string()),
    });
    progress(format_args!(
        "sluice bench: open-file limit {open_files}; connecting {} clients at {}/s to {} over {} ({connections} connections)",
        config.clients,
        config.connect_rate,
        config.url,
        protocol_name(config.protocol)
    ));

    let rss_idle = probe.rss().await;
    let (phase, phase_rx) = watch::channel(Phase::Connecting);
    let connect_start = Instant::now();
    let spawner = tokio::spawn(spawn_clients(run.clone(), config.clone(), phase_rx));
    let spawn_time = Duration::from_secs_f64(config.clients as f64 / config.connect_rate as f64);
    wait_connected(
        &run.stats,
        config.clients,
        connect_start + spawn_time + CONNECT_TIMEOUT,
    )
    .await;
    let connect_seconds = connect_start.elapsed().as_secs_f64();
    let rss_connected = probe.rss().await;
    let processes = probe.processes();
    let connected = Stats::get(&run.stats.connected);
    progress(format_args!(
        "sluice bench: {connected} connected in {connect_seconds:.2} s; publishing {} msgs/s for {:?}",
        config.rate, config.duration
    ));

    let writes_start = probe.store_writes().await;
    let cpu_start = Usage::now(&probe);
    let schedule = Schedule {
        start: Instant::now(),
        rate: config.rate,
        duration: config.duration,
        publishers: usize::try_from(config.publishers).unwrap_or(1),
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
    let writes_end = probe.store_writes().await;
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
        replayed: Stats::get(&stats.replayed),
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
        && participants == config.clients
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
            "the hub's memory is unknown: pass --server-pid <pid of sluice serve, or of nginx's master>"
                .to_owned(),
        );
    }
    let report = Report {
        ok,
        load: Load {
            url: config.url.clone(),
            protocol: config.protocol,
            streams_per_connection: config.streams_per_connection,
            connections,
            hub: config.hub,
            clients: config.clients,
            topics: config.topics,
            rate: config.rate,
            duration_secs: config.duration.as_secs_f64(),
            payload_bytes: config.payload_bytes,
            publishers: config.publishers,
            source_addresses: config.source_addresses,
            from: config.from.clone(),
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
            processes,
            rss_idle_bytes: rss_idle,
            rss_connected_bytes: rss_connected,
            rss_peak_bytes: rss_peak,
            rss_per_connection_idle_bytes: per_connection(rss_idle, rss_connected, participants),
            rss_per_connection_bytes: per_connection(rss_idle, rss_peak, participants),
            cpu_cores: cpu.server,
            cpu_us_per_event: cpu_per_event(cpu.server, busy_seconds, received),
            open_files_limit: server_files,
            store: StoreCost::between(writes_start, writes_end, acknowledged),
        },
        bench: OwnUse {
            rss_bytes: own_rss,
            cpu_cores: cpu.own,
            cpu_us_per_event: cpu_per_event(cpu.own, busy_seconds, received),
        },
        errors: stats.first_errors(),
        notes,
    };
    Ok(report)
}

/// A progress line on stderr (the report goes to stdout).
fn progress(line: std::fmt::Arguments<'_>) {
    eprintln!("{line}");
}

/// Fails early, with a clear message, when nothing answers at the URL, or not as `hub` does
/// (asked about `topic`, with the publishers' `authorization`).
async fn check_hub(
    target: &Target,
    hub: Hub,
    topic: &str,
    authorization: Option<&HeaderValue>,
) -> anyhow::Result<()> {
    let request = hub.liveness_request(target, topic, authorization)?;
    let (method, path) = (request.method().clone(), request.uri().clone());
    let (status, _) = fetch(target, request, Duration::from_secs(5))
        .await
        .with_context(|| format!("no hub answers at {}", target.addr()))?;
    if !hub.is_alive(status) {
        bail!(
            "the hub at {} answered {method} {path} with {status}{}",
            target.addr(),
            hub.liveness_hint(status)
        );
    }
    Ok(())
}

/// The protocol as the progress line names it.
fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Http1 => "HTTP/1.1",
        Protocol::Http2 => "HTTP/2",
    }
}

/// Fails early when the connections cannot all get a local port: towards one hub address,
/// each source address has the ports of `net.ipv4.ip_local_port_range` and no more.
fn check_sources(config: &Config, target: &Target) -> anyhow::Result<()> {
    if config.source_addresses > 1 && !target.addr().is_ipv4() {
        bail!(
            "--source-addresses needs an IPv4 hub address (127.0.0.1): IPv6 has one loopback address"
        );
    }
    let connections = config.connections();
    let per_source = connections.div_ceil(config.source_addresses);
    match limits::local_ports() {
        Some(ports) if per_source > ports => bail!(
            "{connections} connections from {} source address(es) need {per_source} local ports each, but \
             net.ipv4.ip_local_port_range has {ports}: pass --source-addresses {}",
            config.source_addresses,
            connections.div_ceil(ports)
        ),
        _ => Ok(()),
    }
}

/// Starts the configured clients at `connect_rate` per second, round-robin over the topics
/// (and the source addresses); stops starting them once publishing begins (those never
/// started count as connect errors).
async fn spawn_clients(
    run: Arc<Run>,
    config: Config,
    phase: watch::Receiver<Phase>,
) -> Vec<JoinHandle<Outcome>> {
    let (clients, rate) = (config.clients, config.connect_rate);
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
        // Every client of one HTTP/2 connection names the same address: its connection's.
        let source = config.source_address(client / config.streams_per_connection.max(1));
        let client = usize::try_from(client).unwrap_or(usize::MAX);
        let task =
            subscriber::subscribe(run.clone(), client, client % topics, source, phase.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_16_hex_digits() {
        let id = run_id();
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
