//! The `sluice` command: `serve`, `pub`, `sub`, `stream`, `health`, `bench`.
//!
//! Logs go to stderr (`--log-format text|json`, filter with `SLUICE_LOG`, default `info`;
//! async-nats's connection details below info are never shown, as they may quote credentials);
//! stdout carries only command output (for `serve`: the `sluice listening on http://…` line).

mod backoff;
mod bench;
mod client;
mod health;
mod serve;
mod stream_cmd;
mod sub;

use clap::{Parser, Subcommand, ValueEnum};

/// The sluice event hub.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the hub (with no flags: 127.0.0.1:8080, embedded store in ./sluice-data).
    Serve(serve::ServeArgs),
    /// Publish one message to a running hub.
    Pub(client::PubArgs),
    /// Print the events of topics from a running hub, one line each; reconnects after
    /// disconnects and outages (0.5 s doubling to 30 s with jitter, never sooner than the hub's
    /// `retry:` hint) and resumes after the last event printed.
    Sub(sub::SubArgs),
    /// Administer streams (ls, info, purge, delete, repair): the embedded store's data
    /// directory, or with `--hub` a running hub's streams through its admin API.
    Stream(stream_cmd::StreamArgs),
    /// Ask the hub on this machine whether it is ready (`GET /readyz` on its configured
    /// address): exit status 0 when it is, 1 with the reason otherwise. For container health
    /// checks.
    Health(health::HealthArgs),
    /// Load a running hub with SSE clients and publishes; report throughput, latency, losses
    /// and the hub's memory per connection.
    Bench(bench::BenchArgs),
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Whatever SLUICE_LOG enables, a library event that may quote a secret is never shown.
    let safe = tracing_subscriber::filter::filter_fn(sluice_server::may_log);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter).with(safe);
    match format {
        LogFormat::Text => registry.with(layer).init(),
        LogFormat::Json => registry.with(layer.json()).init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("sluice: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("sluice: {}", one_line(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args).await,
        Command::Pub(args) => client::publish(args).await,
        Command::Sub(args) => sub::run(args).await,
        Command::Stream(args) => stream_cmd::run(args).await,
        Command::Health(args) => health::run(args).await,
        Command::Bench(args) => bench::run(args).await,
    }
}

/// The whole cause chain on one line, naming the bad value; no backtrace noise. A cause whose
/// text its outer message already quotes (`cannot read k.pem: No such file or directory (os
/// error 2)` caused by `No such file or directory (os error 2)`) is not repeated.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}
