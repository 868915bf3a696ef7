//! The `sluice` command: `serve`, `pub`, `sub`, `stream`, `bench`.

mod bench;

use clap::{Parser, Subcommand};

/// The sluice event hub.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load a running hub with SSE clients and publishes; report throughput, latency, losses
    /// and the hub's memory per connection.
    Bench(bench::BenchArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(args).await,
    }
}
