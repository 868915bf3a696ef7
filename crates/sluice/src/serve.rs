//! `sluice serve`: load and validate the configuration, open the backend, bind, announce the
//! address on stdout (and tell systemd it is ready, under `Type=notify`), serve until SIGTERM
//! or Ctrl-C, then drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_backend::BackendRoles;
use sluice_backend::embedded::EmbeddedBackend;
use sluice_backend::jetstream::JetStreamBackend;
use sluice_server::Listener;
use sluice_server::auth::Direction;
use sluice_server::config::{self, BackendKind, Config, Overrides};
use sluice_server::tls::Certificates;

/// Flags of `sluice serve`; each wins over the file and the environment.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file (keys: docs/CONFIGURATION.md).
    #[arg(long, env = "SLUICE_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free one).
    #[arg(long)]
    listen: Option<String>,
    /// Directory of the embedded store.
    #[arg(long)]
    data_dir: Option<String>,
    /// `embedded` (default) or `jetstream`.
    #[arg(long)]
    backend: Option<String>,
    /// NATS server URL(s), comma-separated (JetStream backend).
    #[arg(long)]
    nats_url: Option<String>,
    /// The stream to serve.
    #[arg(long)]
    stream: Option<String>,
    /// Tokens prepended to every topic to form the stream subject.
    #[arg(long)]
    topic_prefix: Option<String>,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            backend: self.backend.clone(),
            data_dir: self.data_dir.clone(),
            stream: self.stream.clone(),
            nats_url: self.nats_url.clone(),
            topic_prefix: self.topic_prefix.clone(),
        }
    }
}

/// Loads the configuration of `serve` (file < environment < flags) and validates it.
pub fn load_config(args: &ServeArgs) -> anyhow::Result<Config> {
    let (config, warnings) =
        config::load(args.config.as_deref(), std::env::vars(), &args.overrides())?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    Ok(config)
}

/// How often the TLS certificate and key files are checked for a change.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Runs the hub until a shutdown signal.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    // Errors about files the configuration names start with where the configuration came
    // from, as the configuration's own errors do.
    let from_config = |err: &dyn std::fmt::Display| match &args.config {
        Some(path) => anyhow::anyhow!("{}: {err}", path.display()),
        None => anyhow::anyhow!("{err}"),
    };
    // Before anything opens: a bad certificate or key is a startup error naming the file.
    let certificates = config
        .tls
        .as_ref()
        .map(Certificates::load)
        .transpose()
        .map_err(|err| from_config(&err))?;
    let listen = config.listen;
    let tls_listen = config.tls.as_ref().and_then(|tls| tls.listen);
    let backend = open_backend(&config).await?;
    let kind = backend.data.kind();
    let hub = sluice_server::Hub::new(config, backend).map_err(|err| from_config(&err))?;
    let auth = hub.auth();
    if [Direction::Subscribe, Direction::Publish, Direction::Admin]
        .into_iter()
        .any(|direction| auth.is_enabled(direction))
    {
        auth.reload_on_sighup()
            .context("cannot listen for SIGHUP")?;
    }
    let main = bind(listen)?;
    let listeners = match (&certificates, tls_listen) {
        (None, _) => vec![Listener::plain(main)],
        (Some(certificates), None) => vec![Listener::tls(main, certificates.clone())],
        (Some(certificates), Some(tls_listen)) => vec![
            Listener::plain(main),
            Listener::tls(bind(tls_listen)?, certificates.clone()),
        ],
    };
    if let Some(certificates) = &certificates {
        certificates
            .reload_on_sighup()
            .context("cannot listen for SIGHUP")?;
        certificates.reload_on_change(CERT_CHECK_INTERVAL);
    }
    for listener in &listeners {
        let addr = listener.local_addr()?;
        let scheme = listener.scheme();
        tracing::info!(%addr, scheme, backend = kind, "listening");
        // The readiness contract with scripts and tests: exactly this line on stdout, once
        // per listener, the one of `listen` first.
        println!("sluice listening on {scheme}://{addr}");
    }
    // The listeners are bound: connections queue from here on. A service manager waiting
    // for readiness (systemd's `Type=notify`) is told so; without `NOTIFY_SOCKET` this is
    // nothing.
    notify_service_manager(sd_notify::NotifyState::Ready);
    let shutdown = async {
        shutdown_signal().await;
        notify_service_manager(sd_notify::NotifyState::Stopping);
    };
    sluice_server::serve_listeners(hub, listeners, shutdown).await?;
    Ok(())
}

/// Tells systemd (or any manager that set `NOTIFY_SOCKET`) the hub's `state`; a failure is
/// logged, never fatal: the hub serves either way.
fn notify_service_manager(state: sd_notify::NotifyState) {
    if let Err(err) = sd_notify::notify(&[state]) {
        tracing::warn!(error = %err, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Connections the kernel completes for a listener before the hub accepts them. The standard
/// library's 128 overflowed when thousands of clients connected at once (the handshakes the
/// kernel then drops are retried by the clients a second or more later); the kernel caps this
/// at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    let listen = || -> std::io::Result<tokio::net::TcpListener> {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As the standard library's bind does: a restarted hub gets its port back at once.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().with_context(|| format!("cannot listen on {addr}"))
}

async fn open_backend(config: &Config) -> anyhow::Result<BackendRoles> {
    Ok(match config.backend {
        BackendKind::Embedded => {
            let (backend, reports) = EmbeddedBackend::open(&config.embedded).await?;
            for report in reports {
                tracing::info!(?report, "stream recovered");
            }
            tracing::info!(data_dir = %config.embedded.data_dir.display(), stream = %config.embedded.stream, "embedded store open");
            Arc::new(backend).into()
        }
        BackendKind::Jetstream => {
            let jetstream = config
                .jetstream
                .as_ref()
                .context("backend = \"jetstream\" needs a [jetstream] section")?;
            Arc::new(JetStreamBackend::connect(jetstream).await?).into()
        }
    })
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
