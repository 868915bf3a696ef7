//! A real `nats-server` with JetStream on a free loopback port and a temporary store directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::child::{ManagedChild, StartError};

/// How long a nats-server may take to print "Server is ready".
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a graceful stop may take before the server is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Where to find `nats-server`: `SLUICE_NATS_SERVER`, else the repository's `.venv/bin/nats-server`
/// (installed by `scripts/test`), else `nats-server` on `PATH`.
pub fn nats_server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_NATS_SERVER") {
        return PathBuf::from(path);
    }
    let venv = crate::repo_root().join(".venv/bin/nats-server");
    if venv.is_file() {
        return venv;
    }
    PathBuf::from("nats-server")
}

/// Debian's packaged `nats-server` (2.9 on bookworm), when installed: the old-server case.
pub fn debian_nats_server_binary() -> Option<PathBuf> {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

/// How to start a [`NatsServer`].
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// The server binary.
    pub binary: PathBuf,
    /// Text of a nats-server configuration file (e.g. accounts, authorization, TLS), written to
    /// the store directory and passed with `-c`. The listen address and the JetStream store
    /// directory are always given as flags, which win over the file.
    pub config: Option<String>,
    /// Extra command line arguments.
    pub args: Vec<OsString>,
    /// Where the JetStream store lives, when not in the server's temporary directory (a
    /// power-loss file system, say). Left in place when the server is dropped.
    pub store_in: Option<PathBuf>,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            binary: nats_server_binary(),
            config: None,
            args: Vec::new(),
            store_in: None,
        }
    }
}

impl NatsOptions {
    /// Options for the given binary, e.g. [`debian_nats_server_binary`].
    pub fn binary(binary: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            ..Self::default()
        }
    }

    /// Adds a configuration file with this text.
    pub fn with_config(mut self, config: impl Into<String>) -> Self {
        self.config = Some(config.into());
        self
    }

    /// Adds a command line argument.
    pub fn with_arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Keeps the JetStream store in `dir` instead of the server's temporary directory.
    pub fn with_store_in(mut self, dir: impl Into<PathBuf>) -> Self {
        self.store_in = Some(dir.into());
        self
    }
}

/// A running `nats-server` with JetStream enabled, on 127.0.0.1, storing into a temporary
/// directory. Killed when dropped (also when the test panics); the directory is removed then.
pub struct NatsServer {
    options: NatsOptions,
    process: Option<ManagedChild>,
    port: u16,
    // Declared after `process` so the server is killed before its store is removed.
    store: TempDir,
}

impl NatsServer {
    /// Starts the default server binary (see [`nats_server_binary`]) and waits until it is ready.
    ///
    /// # Errors
    /// A [`StartError`] naming the binary, the port and the server's last log lines.
    pub async fn start() -> Result<Self, StartError> {
        Self::start_with(NatsOptions::default()).await
    }

    /// Starts a server with the given options and waits until it is ready.
    ///
    /// # Errors
    /// A [`StartError`] naming the binary, the port and the server's last log lines.
    pub async fn start_with(options: NatsOptions) -> Result<Self, StartError> {
        let early_error = |reason: String| StartError {
            binary: options.binary.clone(),
            address: "127.0.0.1:<random>".to_owned(),
            reason,
            log_tail: String::new(),
        };
        let store = tempfile::Builder::new()
            .prefix("sluice-nats-")
            .tempdir()
            .map_err(|err| early_error(format!("could not create a store directory: {err}")))?;
        if let Some(config) = &options.config {
            std::fs::write(store.path().join("nats.conf"), config)
                .map_err(|err| early_error(format!("could not write its config file: {err}")))?;
        }
        // Port -1 lets the server pick a free port itself: no race with other tests.
        let (process, port) = spawn(&options, store.path(), None).await?;
        Ok(Self {
            options,
            process: Some(process),
            port,
            store,
        })
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the JetStream store (and the config file, if any, unless the
    /// store is kept elsewhere: [`NatsOptions::with_store_in`]).
    pub fn store_dir(&self) -> &Path {
        self.options
            .store_in
            .as_deref()
            .unwrap_or(self.store.path())
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ManagedChild::id)
    }

    /// The last `count` lines the server logged.
    pub fn log_tail(&self, count: usize) -> String {
        self.process
            .as_ref()
            .map(|process| process.log_tail(count))
            .unwrap_or_default()
    }

    /// Stops the server gracefully (SIGTERM, then SIGKILL after a grace period). The store
    /// directory is kept, so [`NatsServer::restart`] brings the same streams back.
    ///
    /// # Errors
    /// When the process cannot be signalled or waited for.
    pub async fn stop(&mut self) -> std::io::Result<()> {
        if let Some(mut process) = self.process.take() {
            process.terminate(STOP_GRACE).await?;
        }
        Ok(())
    }

    /// Kills the server at once (SIGKILL), as a crash would; the store directory is kept.
    ///
    /// # Errors
    /// When the process cannot be killed or waited for.
    pub fn kill(&mut self) -> std::io::Result<()> {
        if let Some(mut process) = self.process.take() {
            process.kill()?;
        }
        Ok(())
    }

    /// Starts the server again (stopping it first if it runs) on the same port with the same
    /// store directory, and waits until it is ready.
    ///
    /// # Errors
    /// When stopping fails, or a [`StartError`] when the new process does not become ready.
    pub async fn restart(&mut self) -> Result<(), StartError> {
        self.stop().await.map_err(|err| StartError {
            binary: self.options.binary.clone(),
            address: format!("127.0.0.1:{}", self.port),
            reason: format!("could not be stopped for a restart: {err}"),
            log_tail: self.log_tail(crate::child::TAIL_LINES),
        })?;
        let (process, _) = spawn(&self.options, self.store.path(), Some(self.port)).await?;
        self.process = Some(process);
        Ok(())
    }
}

/// Starts nats-server and waits for "Server is ready"; returns the process and its client port.
async fn spawn(
    options: &NatsOptions,
    store: &Path,
    port: Option<u16>,
) -> Result<(ManagedChild, u16), StartError> {
    let port_arg = port.map_or_else(|| "-1".to_owned(), |port| port.to_string());
    let address = format!(
        "127.0.0.1:{}",
        port.map_or_else(|| "<random>".to_owned(), |p| p.to_string())
    );
    let mut args: Vec<OsString> = Vec::new();
    if options.config.is_some() {
        args.extend(["-c".into(), store.join("nats.conf").into()]);
    }
    args.extend(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"].map(OsString::from));
    args.push(options.store_in.as_deref().unwrap_or(store).into());
    args.extend(options.args.iter().cloned());
    let mut process =
        ManagedChild::spawn(&options.binary, args, |_| {}).map_err(|err| StartError {
            binary: options.binary.clone(),
            address: address.clone(),
            reason: format!("could not be started: {err}"),
            log_tail: String::new(),
        })?;
    let mut listening = None;
    let ready = process
        .wait_for_line(READY_TIMEOUT, |line| {
            if let Some((_, port)) =
                line.split_once("Listening for client connections on 127.0.0.1:")
            {
                listening = port.trim().parse::<u16>().ok();
            }
            line.contains("Server is ready").then_some(())
        })
        .await;
    if let Err(err) = ready {
        return Err(process.start_error(&address, format!("{err}: \"Server is ready\"")));
    }
    match listening {
        Some(port) => Ok((process, port)),
        None => Err(process.start_error(&address, "is ready but did not log its client port")),
    }
}
