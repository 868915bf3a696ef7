//! `sluice stream ls|info|purge|delete|repair`: administration of streams.
//!
//! With `--hub URL` the commands go through the running hub's admin API (`[auth.admin]`, a
//! token with the admin grant in `--token` or `SLUICE_TOKEN`; or, on the hub's own machine,
//! `admin.loopback` without a token), on either backend. Without it
//! they open the embedded store's data directory themselves, which only works while no hub
//! has it open (the store's lock says so, and nothing is touched). `repair` always works on the
//! directory of a stopped hub.

use std::path::PathBuf;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request};
use serde_json::{Value, json};
use sluice_backend::PurgeOptions;
use sluice_backend::embedded::{admin, stream_config};
use sluice_server::config::{self, Overrides};
use sluice_store::{MetaRepair, Store, StoreError, StoreOptions, StreamConfig};

use crate::client::{self, HubArgs};

/// Largest answer read from the hub's admin API (a stream's description lists at most 10 000
/// subjects).
const MAX_ANSWER: usize = 16 << 20;

/// `sluice stream …`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Directory of the embedded store (without `--hub`).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "./sluice-data")]
    data_dir: PathBuf,
    /// A running hub's base URL (e.g. `http://127.0.0.1:8080`): administer its streams through
    /// its admin API instead of opening the data directory. Given before or after the
    /// subcommand, as with `pub` and `sub`.
    #[arg(long, global = true)]
    hub: Option<String>,
    /// A token with the admin grant, sent as `Authorization: Bearer` with `--hub` (none is
    /// needed on the hub's own machine when it has `admin.loopback`). Prefer the environment
    /// variable: a flag is visible to other users of the machine.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// PEM file of the certificate authorities to trust for an `https://` hub, instead of the
    /// system's (with `--hub`).
    #[arg(long, env = "SLUICE_CA_FILE", global = true)]
    ca_file: Option<PathBuf>,
    #[command(subcommand)]
    command: StreamCommand,
}

#[derive(Debug, Subcommand)]
enum StreamCommand {
    /// List the streams.
    Ls,
    /// Show a stream's configuration, state, subjects, sources and losses as JSON.
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
    /// Delete one message.
    Delete {
        /// The stream.
        name: String,
        /// The message's sequence.
        seq: u64,
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
    if let Some(hub) = args.hub {
        return remote(&HubArgs::new(hub, args.token, args.ca_file), args.command).await;
    }
    // Opening a store creates its directory: a mistyped path must not look like an empty store.
    anyhow::ensure!(
        args.data_dir.is_dir(),
        "no data directory {}: `sluice stream` works on an existing store (`sluice serve --data-dir` creates one)",
        args.data_dir.display()
    );
    let dir = args.data_dir.clone();
    let opened =
        tokio::task::spawn_blocking(move || Store::open(&dir, StoreOptions::default())).await?;
    let (store, _) = match opened {
        Ok(opened) => opened,
        Err(StoreError::Locked(dir)) => bail!(
            "{} is held by a running hub (its store is locked; nothing was changed): use --hub <URL>, on the hub's machine with admin.loopback = true in its [admin] section (or SLUICE_ADMIN_LOOPBACK=true), else with a token of [auth.admin]",
            dir.display()
        ),
        Err(err) => {
            return Err(err)
                .with_context(|| format!("cannot open the store in {}", args.data_dir.display()));
        }
    };
    let result = command(&store, args.command).await;
    tokio::task::spawn_blocking(move || store.close()).await?;
    result
}

/// A stream command on the opened store.
async fn command(store: &Store, command: StreamCommand) -> anyhow::Result<()> {
    match command {
        StreamCommand::Ls => {
            for name in store.list() {
                println!("{name}");
            }
        }
        StreamCommand::Info { name } => {
            let report = serde_json::to_value(admin::report(&admin::stream(store, &name)?))?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        StreamCommand::Purge {
            name,
            subject,
            keep,
            up_to_seq,
        } => {
            let options = PurgeOptions {
                subject,
                keep,
                up_to_seq,
            };
            let purged = admin::purge(&admin::stream(store, &name)?, options).await?;
            println!("{}", json!({ "purged": purged }));
        }
        StreamCommand::Delete { name, seq } => {
            admin::delete(&admin::stream(store, &name)?, seq).await?;
            println!("{}", json!({ "deleted": seq }));
        }
        StreamCommand::Repair { name, config } => repair(store, name, config).await?,
    }
    Ok(())
}

/// A stream command through the hub's admin API; prints what the local command prints.
async fn remote(hub: &HubArgs, command: StreamCommand) -> anyhow::Result<()> {
    match command {
        StreamCommand::Ls => {
            let answer = call(hub, Method::GET, "/admin/streams", None).await?;
            let streams = answer["streams"]
                .as_array()
                .context("the hub's answer has no list of streams")?;
            for name in streams.iter().filter_map(Value::as_str) {
                println!("{name}");
            }
        }
        StreamCommand::Info { name } => {
            let path = format!("/admin/streams/{}", client::encode(&name));
            let report = call(hub, Method::GET, &path, None).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        StreamCommand::Purge {
            name,
            subject,
            keep,
            up_to_seq,
        } => {
            let options = PurgeOptions {
                subject,
                keep,
                up_to_seq,
            };
            let path = format!("/admin/streams/{}/purge", client::encode(&name));
            let body = serde_json::to_value(options)?;
            println!("{}", call(hub, Method::POST, &path, Some(body)).await?);
        }
        StreamCommand::Delete { name, seq } => {
            let path = format!("/admin/streams/{}/messages/{seq}", client::encode(&name));
            println!("{}", call(hub, Method::DELETE, &path, None).await?);
        }
        StreamCommand::Repair { .. } => bail!(
            "`sluice stream repair` works on the data directory of a stopped hub: leave out --hub"
        ),
    }
    Ok(())
}

/// One admin API request; its JSON answer, or an error with the hub's description.
async fn call(
    hub: &HubArgs,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let url = hub.uri(path)?;
    let request = hub
        .authorize(Request::builder().method(method.clone()).uri(&url))
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))?;
    let response = hub
        .client()?
        .send(request)
        .await
        .with_context(|| format!("{method} {url}"))?;
    let status = response.status();
    let answer = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|err| anyhow::anyhow!("{method} {url}: reading the answer: {err}"))?
        .to_bytes();
    let parsed: Option<Value> = serde_json::from_slice(&answer).ok();
    if !status.is_success() {
        let description = parsed
            .as_ref()
            .and_then(|v| v["description"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer).trim().to_owned());
        bail!("{method} {url}: {status}: {description}");
    }
    parsed.with_context(|| format!("{method} {url}: the answer is not JSON"))
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
    let info = admin::stream(store, &repair.stream)?.info(None);
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
