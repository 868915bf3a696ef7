//! `sluice stream ls|info|purge|repair`: administration of the embedded store's data directory.
//!
//! Run these while no hub has the directory open.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use sluice_server::backend::embedded::stream_config;
use sluice_server::config::{self, Overrides};
use sluice_store::{MetaRepair, PurgeRequest, Store, StoreOptions, StreamConfig, StreamHandle};

/// `sluice stream …`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Directory of the embedded store.
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "./sluice-data")]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: StreamCommand,
}

#[derive(Debug, Subcommand)]
enum StreamCommand {
    /// List the streams.
    Ls,
    /// Show a stream's configuration and state as JSON.
    Info {
        /// The stream.
        name: String,
    },
    /// Remove messages from a stream (all of them unless narrowed).
    Purge {
        /// The stream.
        name: String,
        /// Only messages whose subject matches this filter.
        #[arg(long)]
        subject: Option<String>,
        /// Keep this many of the newest messages.
        #[arg(long)]
        keep: Option<u64>,
        /// Only messages below this sequence.
        #[arg(long)]
        up_to_seq: Option<u64>,
    },
    /// Rebuild the metadata files (meta.inf, meta.sum, meta.bak) of a stream refused because
    /// none of them verifies, then load it; message files are never touched. The configuration
    /// is the declared one, else that of a verified file; the incarnation is kept from a
    /// verified file, else a new one is picked (and said so on stderr).
    Repair {
        /// The stream.
        name: String,
        /// The hub's configuration file declaring the stream; without one, the declarations of
        /// `sluice serve` with no file (the `sluice` stream capturing every subject).
        #[arg(long, env = "SLUICE_CONFIG")]
        config: Option<PathBuf>,
    },
}

/// Runs a stream command.
pub async fn run(args: StreamArgs) -> anyhow::Result<()> {
    // Opening a store creates its directory: a mistyped path must not look like an empty store.
    anyhow::ensure!(
        args.data_dir.is_dir(),
        "no data directory {}: `sluice stream` works on an existing store (`sluice serve --data-dir` creates one)",
        args.data_dir.display()
    );
    let dir = args.data_dir.clone();
    let (store, _) =
        tokio::task::spawn_blocking(move || Store::open(&dir, StoreOptions::default()))
            .await?
            .with_context(|| format!("cannot open the store in {}", args.data_dir.display()))?;
    let result = command(&store, args.command).await;
    tokio::task::spawn_blocking(move || store.close()).await?;
    result
}

fn stream(store: &Store, name: &str) -> anyhow::Result<StreamHandle> {
    if let Some(refusal) = store
        .refused_streams()
        .into_iter()
        .find(|r| r.stream == name)
    {
        return Err(refusal.into());
    }
    store
        .stream(name)
        .with_context(|| format!("no stream {name:?}; streams: {:?}", store.list()))
}

async fn command(store: &Store, command: StreamCommand) -> anyhow::Result<()> {
    match command {
        StreamCommand::Ls => {
            for name in store.list() {
                println!("{name}");
            }
        }
        StreamCommand::Info { name } => {
            let info = stream(store, &name)?.info(None);
            let state = &info.state;
            let report = json!({
                "name": name,
                "created": info.created.to_string(),
                "incarnation": format!("{:x}", info.incarnation),
                "messages": state.msgs,
                "bytes": state.bytes,
                "first_seq": state.first_seq,
                "first_time": state.first_time.map(|t| t.to_string()),
                "last_seq": state.last_seq,
                "last_time": state.last_time.map(|t| t.to_string()),
                "num_deleted": state.num_deleted,
                "num_subjects": state.num_subjects,
                "lost": {
                    "msgs": state.lost.msgs,
                    "bytes": state.lost.bytes,
                    "damaged": state.lost.damaged,
                    "unconfirmed": state.lost.unconfirmed,
                },
                "config": info.config,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        StreamCommand::Purge {
            name,
            subject,
            keep,
            up_to_seq,
        } => {
            let request = PurgeRequest {
                filter: subject,
                keep,
                up_to_seq,
            };
            let purged = stream(store, &name)?.purge(request).await?;
            println!("{}", json!({ "purged": purged }));
        }
        StreamCommand::Repair { name, config } => repair(store, name, config).await?,
    }
    Ok(())
}

/// The configuration the hub declares for stream `name`: from `file`, the environment and the
/// defaults, as `sluice serve` loads it. `None` when the stream is not declared there.
fn declared_config(
    file: Option<&std::path::Path>,
    name: &str,
) -> anyhow::Result<Option<StreamConfig>> {
    let (config, _) = config::load(file, std::env::vars(), &Overrides::default())?;
    Ok(config
        .embedded
        .streams
        .iter()
        .find(|decl| decl.name == name)
        .map(stream_config))
}

/// `sluice stream repair`: rebuilds a refused stream's metadata and prints what it did.
async fn repair(store: &Store, name: String, file: Option<PathBuf>) -> anyhow::Result<()> {
    let declared = declared_config(file.as_deref(), &name)?;
    let repairing = store.clone();
    let stream_name = name.clone();
    let repaired =
        tokio::task::spawn_blocking(move || repairing.repair_stream(&stream_name, declared))
            .await?
            .with_context(|| format!("cannot repair stream {name:?}"))?;
    let Some(repair) = repaired else {
        eprintln!("stream {name:?}: its metadata verifies; nothing to repair");
        println!("{}", json!({ "stream": name, "repaired": false }));
        return Ok(());
    };
    if repair.kept_from.is_none() {
        eprintln!(
            "stream {name:?}: no verified metadata survived, so it has a new incarnation {:x}; clients resuming with ids of the old one see an incarnation gap",
            repair.incarnation
        );
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&repair_report(store, &repair)?)?
    );
    Ok(())
}

/// What `sluice stream repair` prints: the repair and the stream's state after it.
fn repair_report(store: &Store, repair: &MetaRepair) -> anyhow::Result<serde_json::Value> {
    let info = stream(store, &repair.stream)?.info(None);
    let kept_from = repair.kept_from.map(|file| file.to_string());
    let config_from = if repair.declared_config {
        Some("declaration".to_owned())
    } else {
        kept_from.clone()
    };
    Ok(json!({
        "stream": repair.stream,
        "repaired": true,
        "incarnation": format!("{:x}", repair.incarnation),
        "incarnation_kept_from": kept_from,
        "config_from": config_from,
        "messages": info.state.msgs,
        "first_seq": info.state.first_seq,
        "last_seq": info.state.last_seq,
    }))
}
