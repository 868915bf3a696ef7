//! The `sluice` binary as a child process on a free loopback port.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use rustix::process::Signal;

use crate::child::{ManagedChild, StartError};

/// How long the binary may take to print its listening line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// The line the binary prints on stdout once it accepts connections (its contract with tests),
/// followed by `http://<addr>` or, when `listen` speaks TLS, `https://<addr>`.
const LISTENING_PREFIX: &str = "sluice listening on ";
/// The listen address the process is started with.
const LISTEN: &str = "127.0.0.1:0";
/// How long a graceful stop may take before the process is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Adjusts the command before each start (environment, working directory).
type Configure = Box<dyn Fn(&mut Command) + Send + Sync>;

/// A running `sluice` process. Killed when dropped (also when the test panics).
pub struct SluiceProcess {
    process: ManagedChild,
    addr: SocketAddr,
    /// `http` or `https`, as the listening line says.
    scheme: &'static str,
    args: Vec<OsString>,
    configure: Configure,
}

impl SluiceProcess {
    /// Starts `binary args… --listen 127.0.0.1:0` and waits for its stdout line
    /// `sluice listening on http://<addr>`. Typical `args`: `["serve", "--data-dir", dir]`.
    ///
    /// # Errors
    /// A [`StartError`] naming the binary, the listen address and its last lines of output.
    pub async fn start(
        binary: impl AsRef<Path>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Result<Self, StartError> {
        Self::start_configured(binary, args, |_| {}).await
    }

    /// Starts `binary serve` with its data directory at `dir/data` and, when `config` is
    /// given, the configuration file `dir/sluice.toml` holding it (`--config`).
    ///
    /// # Errors
    /// A [`StartError`] naming the binary, the listen address and its last lines of output.
    pub async fn serve(
        binary: impl AsRef<Path>,
        dir: &Path,
        config: Option<&str>,
    ) -> Result<Self, StartError> {
        let mut args: Vec<OsString> = vec!["serve".into()];
        if let Some(config) = config {
            let file = dir.join("sluice.toml");
            std::fs::write(&file, config).unwrap_or_else(|err| {
                panic!(
                    "cannot write the test configuration {}: {err}",
                    file.display()
                )
            });
            args.extend(["--config".into(), file.into_os_string()]);
        }
        args.extend(["--data-dir".into(), dir.join("data").into_os_string()]);
        Self::start(binary, args).await
    }

    /// Like [`SluiceProcess::start`], letting `configure` adjust the command first (environment
    /// variables such as `SLUICE_…`, the working directory); it is applied again on
    /// [`SluiceProcess::restart`].
    ///
    /// # Errors
    /// A [`StartError`] naming the binary, the listen address and its last lines of output.
    pub async fn start_configured(
        binary: impl AsRef<Path>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        configure: impl Fn(&mut Command) + Send + Sync + 'static,
    ) -> Result<Self, StartError> {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let configure: Configure = Box::new(configure);
        let (process, scheme, addr) = spawn(binary.as_ref(), &args, LISTEN, &configure).await?;
        Ok(Self {
            process,
            addr,
            scheme,
            args,
            configure,
        })
    }

    /// Starts the process again on the same address with the same arguments, stopping it
    /// first (SIGTERM) if it still runs. Clients reconnecting to [`SluiceProcess::base_url`]
    /// reach the new process.
    ///
    /// # Errors
    /// A [`StartError`] when the old process cannot be stopped or the new one does not start.
    pub async fn restart(&mut self) -> Result<(), StartError> {
        let binary = self.binary().to_owned();
        let listen = self.addr.to_string();
        if let Err(err) = self.process.terminate(STOP_GRACE).await {
            return Err(self
                .process
                .start_error(&listen, format!("could not be stopped: {err}")));
        }
        let (process, scheme, addr) = spawn(&binary, &self.args, &listen, &self.configure).await?;
        self.process = process;
        self.scheme = scheme;
        self.addr = addr;
        Ok(())
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` (`https://` when `listen` speaks TLS), without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// `base_url()` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// The binary this process runs.
    pub fn binary(&self) -> &Path {
        self.process.binary()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// The last `count` lines of its output (stdout and stderr interleaved).
    pub fn log_tail(&self, count: usize) -> String {
        self.process.log_tail(count)
    }

    /// Waits until a line of its output (since the start) contains `needle`, and returns it.
    ///
    /// # Errors
    /// When `timeout` passes first or the process exits.
    pub async fn wait_for_log(
        &mut self,
        needle: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let found = self
            .process
            .wait_for_line(timeout, |line| {
                line.contains(needle).then(|| line.to_owned())
            })
            .await;
        found.map_err(|err| {
            anyhow::anyhow!(
                "{} {err} (looking for {needle:?})\n--- last lines of its output ---\n{}",
                self.binary().display(),
                self.log_tail(crate::child::TAIL_LINES)
            )
        })
    }

    /// Sends SIGTERM and waits up to `grace` for it to exit (then kills it); returns how it
    /// exited, or `None` if it had already been stopped.
    ///
    /// # Errors
    /// When the process cannot be signalled or waited for.
    pub async fn terminate(&mut self, grace: Duration) -> std::io::Result<Option<ExitStatus>> {
        self.process.terminate(grace).await
    }

    /// Kills it at once (SIGKILL), as a crash would.
    ///
    /// # Errors
    /// When the process cannot be killed or waited for.
    pub fn kill(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.process.kill()
    }

    /// Freezes it (SIGSTOP), as a process the system stopped scheduling: the kernel still
    /// completes connections to its listener, and nothing accepts them. [`Self::resume`] lets
    /// it go on; dropping it kills it either way.
    ///
    /// # Errors
    /// When it is not running or cannot be signalled.
    pub fn suspend(&self) -> std::io::Result<()> {
        self.process.signal(Signal::STOP)
    }

    /// Lets a [`Self::suspend`]ed process go on (SIGCONT).
    ///
    /// # Errors
    /// When it is not running or cannot be signalled.
    pub fn resume(&self) -> std::io::Result<()> {
        self.process.signal(Signal::CONT)
    }

    /// Its exit status if it has exited on its own, without waiting.
    ///
    /// # Errors
    /// When the process cannot be queried.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.process.try_wait()
    }
}

/// Starts `binary args… --listen <listen>` and waits for its listening line.
async fn spawn(
    binary: &Path,
    args: &[OsString],
    listen: &str,
    configure: &Configure,
) -> Result<(ManagedChild, &'static str, SocketAddr), StartError> {
    let mut args = args.to_vec();
    args.extend(["--listen", listen].map(OsString::from));
    let mut process = ManagedChild::spawn(binary, args, configure).map_err(|err| StartError {
        binary: binary.to_owned(),
        address: listen.to_owned(),
        reason: format!("could not be started: {err}"),
        log_tail: String::new(),
    })?;
    let listening = process
        .wait_for_line(READY_TIMEOUT, |line| {
            let url = line.strip_prefix(LISTENING_PREFIX)?;
            let (scheme, addr) = [("https", "https://"), ("http", "http://")]
                .into_iter()
                .find_map(|(scheme, prefix)| Some((scheme, url.strip_prefix(prefix)?)))?;
            let addr = addr.trim().trim_end_matches('/').parse::<SocketAddr>();
            Some(addr.map(|addr| (scheme, addr)))
        })
        .await;
    match listening {
        Ok(Ok((scheme, addr))) => Ok((process, scheme, addr)),
        Ok(Err(err)) => Err(process.start_error(
            listen,
            format!("printed an unparsable listening address: {err}"),
        )),
        Err(err) => Err(process.start_error(
            listen,
            format!("{err}: `{LISTENING_PREFIX}http://<addr>` on stdout"),
        )),
    }
}
