//! Test bed for sluice: real `nats-server` and `sluice` processes on loopback ports, a strict
//! Server-Sent Events client, a JSON HTTP client, a certificate authority made at test time, a small tmpfs that fills up (root only), a
//! power-loss file system on FUSE ([`lossfs`], root only) and a headless Chromium driver.
//!
//! Every process is killed when its handle is dropped, also while a failing test unwinds, and
//! every wait has a deadline. A process that does not start gives a [`StartError`] naming the
//! binary, the address and the last lines of its output.

pub mod browser;
mod child;
pub mod h2_frames;
pub mod http;
pub mod lossfs;
mod nats;
mod proxy;
mod sluice;
mod sse;
mod tls;
mod tmpfs;
mod wait;

use std::path::PathBuf;

pub use browser::{Browser, Page};
pub use child::StartError;
pub use http::HttpResponse;
pub use nats::{NatsOptions, NatsServer, debian_nats_server_binary, nats_server_binary};
pub use proxy::TcpProxy;
/// Re-exported so test crates can build JSON bodies without depending on it themselves.
pub use serde_json;
pub use sluice::SluiceProcess;
pub use sluice_sse::Frame;
pub use sse::SseClient;
/// Re-exported so test crates can make temporary data directories without depending on it.
pub use tempfile;
pub use tls::TestCa;
pub use tmpfs::Tmpfs;
pub use wait::{eventually, eventually_async, wall_clock_passes};

/// The value of environment variable `name` parsed as a `T`, else `default` (unset or not a
/// `T`): how benches and measurement tests take their sizes.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The root of the sluice repository (where `.venv` and `Cargo.toml` live).
pub fn repo_root() -> PathBuf {
    // This crate lives at <root>/crates/test-support.
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// Every file under `dir` (recursively) with its bytes, by path: what a test compares to see
/// that nothing on disk changed.
///
/// # Panics
/// When `dir` or a file under it cannot be read.
pub fn files_under(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path)
                    .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
                files.insert(path, bytes);
            }
        }
    }
    files
}
