//! A child process whose output is captured line by line, waited on with deadlines, and killed
//! when dropped (also while a panicking test unwinds).
//!
//! Each child runs in its own process group, and the whole group is killed: programs that start
//! helpers of their own (Chromium) leave nothing behind.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::sync::watch;
use tokio::time::Instant;

/// How many output lines a process keeps; older lines are dropped.
const KEPT_LINES: usize = 2000;
/// Longest line of output kept as one line.
const MAX_LINE_BYTES: u64 = 64 * 1024;
/// How many lines of output a start error shows.
pub(crate) const TAIL_LINES: usize = 20;

/// A process failed to start or to become ready.
///
/// `Debug` shows the same readable text as `Display`, so `.expect()` prints the log tail as lines.
#[derive(thiserror::Error)]
#[error("{binary} (listening on {address}) {reason}\n--- last lines of its output ---\n{log_tail}")]
pub struct StartError {
    /// The binary that was started.
    pub binary: PathBuf,
    /// The address it was asked to listen on.
    pub address: String,
    /// What went wrong.
    pub reason: String,
    /// The last lines it printed (stdout and stderr interleaved).
    pub log_tail: String,
}

impl std::fmt::Debug for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Output of a child, shared with the threads that read its pipes.
#[derive(Default)]
struct Output {
    lines: VecDeque<String>,
    /// Number of lines dropped from the front of `lines`.
    dropped: usize,
    /// Pipes that reached end of file (stdout and stderr: 2 means the process closed both).
    closed_pipes: u8,
}

/// Why waiting for a line of output failed.
#[derive(Debug)]
pub(crate) enum WaitError {
    /// The deadline passed first.
    Timeout(Duration),
    /// The process closed its output (it exited) before printing the line.
    Closed,
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(after) => write!(f, "did not print the expected line within {after:?}"),
            Self::Closed => f.write_str("exited before printing the expected line"),
        }
    }
}

/// A running child process with captured output. Dropping it kills the process and waits for it.
pub(crate) struct ManagedChild {
    binary: PathBuf,
    child: Option<Child>,
    output: Arc<Mutex<Output>>,
    changed: watch::Receiver<u64>,
}

impl ManagedChild {
    /// Spawns `binary` with `args`, capturing stdout and stderr.
    pub(crate) fn spawn(
        binary: &Path,
        args: impl IntoIterator<Item = OsString>,
        configure: impl Fn(&mut Command),
    ) -> std::io::Result<Self> {
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        configure(&mut command);
        command.process_group(0);
        let mut child = command.spawn()?;
        let output = Arc::new(Mutex::new(Output::default()));
        let (notify, changed) = watch::channel(0);
        let notify = Arc::new(notify);
        let stdout = child
            .stdout
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>);
        let stderr = child
            .stderr
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>);
        for pipe in [stdout, stderr].into_iter().flatten() {
            let output = Arc::clone(&output);
            let notify = Arc::clone(&notify);
            std::thread::spawn(move || read_lines(pipe, &output, &notify));
        }
        Ok(Self {
            binary: binary.to_owned(),
            child: Some(child),
            output,
            changed,
        })
    }

    /// The binary this process runs.
    pub(crate) fn binary(&self) -> &Path {
        &self.binary
    }

    /// The process id, while the process is running.
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` to the process alone, not its group.
    pub(crate) fn signal(&self, signal: Signal) -> std::io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the process is not running"))?;
        kill_process(Pid::from_child(child), signal).map_err(std::io::Error::from)
    }

    /// Waits until a line of output (printed since the start) makes `find` return a value.
    pub(crate) async fn wait_for_line<T>(
        &mut self,
        timeout: Duration,
        mut find: impl FnMut(&str) -> Option<T>,
    ) -> Result<T, WaitError> {
        let deadline = Instant::now() + timeout;
        let mut next_line = 0;
        loop {
            self.changed.borrow_and_update();
            {
                let output = lock(&self.output);
                let start = next_line.max(output.dropped);
                for line in output.lines.iter().skip(start - output.dropped) {
                    if let Some(found) = find(line) {
                        return Ok(found);
                    }
                }
                next_line = output.dropped + output.lines.len();
                if output.closed_pipes == 2 {
                    return Err(WaitError::Closed);
                }
            }
            match tokio::time::timeout_at(deadline, self.changed.changed()).await {
                Ok(Ok(())) => {}
                // The readers are gone, so the pipes are closed: the next pass reports it.
                Ok(Err(_)) => {}
                Err(_) => return Err(WaitError::Timeout(timeout)),
            }
        }
    }

    /// The last `count` lines of output.
    pub(crate) fn log_tail(&self, count: usize) -> String {
        let output = lock(&self.output);
        let skip = output.lines.len().saturating_sub(count);
        let lines: Vec<&str> = output.lines.iter().skip(skip).map(String::as_str).collect();
        lines.join("\n")
    }

    /// A [`StartError`] for this process, with its log tail.
    /// The exit status is added to the reason when the process has exited.
    pub(crate) fn start_error(
        &mut self,
        address: &str,
        reason: impl std::fmt::Display,
    ) -> StartError {
        let reason = match self.try_wait() {
            Ok(Some(status)) => format!("{reason} ({status})"),
            _ => reason.to_string(),
        };
        StartError {
            binary: self.binary.clone(),
            address: address.to_owned(),
            reason,
            log_tail: self.log_tail(TAIL_LINES),
        }
    }

    /// Sends SIGTERM and waits up to `grace` for the process to exit; kills it after that.
    /// Returns the exit status, or `None` when the process had already been stopped.
    pub(crate) async fn terminate(
        &mut self,
        grace: Duration,
    ) -> std::io::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        if child.try_wait()?.is_none() {
            // The process may exit between the check and the signal; that is fine.
            let _ = kill_process_group(Pid::from_child(child), Signal::TERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                // Helpers the process left behind in its group go with it.
                let _ = kill_process_group(Pid::from_child(child), Signal::KILL);
                self.child = None;
                return Ok(Some(status));
            }
            // Polling with a deadline: std has no asynchronous wait for a child.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.kill()
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub(crate) fn kill(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        // The group outlives its leader when helpers are still running: kill it regardless.
        let _ = kill_process_group(Pid::from_child(&child), Signal::KILL);
        child.wait().map(Some)
    }

    /// The exit status if the process has exited, without waiting.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(child) => child.try_wait(),
            None => Ok(None),
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        // Nothing useful can be done with an error while dropping (possibly while unwinding).
        let _ = self.kill();
    }
}

fn read_lines(pipe: Box<dyn Read + Send>, output: &Mutex<Output>, notify: &watch::Sender<u64>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        // A longer line is kept as several pieces, so memory stays bounded.
        match reader
            .by_ref()
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let mut output = lock(output);
                output
                    .lines
                    .push_back(text.trim_end_matches(['\r', '\n']).to_owned());
                if output.lines.len() > KEPT_LINES {
                    output.lines.pop_front();
                    output.dropped += 1;
                }
            }
        }
        notify.send_modify(|count| *count += 1);
    }
    lock(output).closed_pipes += 1;
    notify.send_modify(|count| *count += 1);
}

/// Locks the output; a reader thread that panicked leaves it usable.
fn lock(output: &Mutex<Output>) -> std::sync::MutexGuard<'_, Output> {
    output.lock().unwrap_or_else(PoisonError::into_inner)
}
