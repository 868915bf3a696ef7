//! The event streams' own runtime.
//!
//! A published message wakes every session of its feed; with thousands of sessions those
//! wake-ups fill the run queues, and a `POST /publish` (or a probe) that shares the queues waits
//! behind all of them, which throttles the publishers. Streams therefore run on their own
//! worker threads: the operating system shares the cores between the two runtimes, so
//! requests and the store keep their turn however many sessions are awake.
//!
//! The dispatch, which wakes the sessions of every message it routes, runs here too: a
//! session it wakes then runs on the same thread next (no hand-off between runtimes, and no
//! thread woken, per delivered message).

use std::io;

use tokio::runtime::{Builder, Handle, Runtime};

/// A multi-threaded runtime for event streams, shut down (without blocking) when dropped.
#[derive(Debug)]
pub struct StreamRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl StreamRuntime {
    /// Starts one worker thread per available core.
    pub fn start() -> io::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("sluice-streams")
            .enable_all()
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Where stream tasks are spawned.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for StreamRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is not allowed inside another runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
