//! `sluice stream ls|info|purge`: administration of the embedded store's data directory.
//!
//! Run these while no hub has the directory open.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use sluice_store::{PurgeRequest, Store, StoreOptions, StreamHandle};

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
}

/// Runs a stream command.
pub async fn run(args: StreamArgs) -> anyhow::Result<()> {
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
    }
    Ok(())
}
