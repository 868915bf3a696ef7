//! A runtime the hub owns besides the one it is started on (the streams' workers, the Mercure
//! views' thread): shut down without blocking when dropped, since dropping a runtime blocks,
//! which is not allowed inside another runtime.

use std::io;

use tokio::runtime::{Builder, Handle, Runtime};

/// A multi-threaded runtime, shut down (without blocking) when dropped.
#[derive(Debug)]
pub(crate) struct OwnedRuntime {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl OwnedRuntime {
    /// Starts `threads` worker threads named `name`.
    pub(crate) fn start_named(threads: usize, name: &str) -> io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Where its tasks are spawned.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
