//! TLS handshakes against the hub, full beside resumed (a session ticket): what a browser
//! reconnecting after a network change costs the hub.
//!
//! The release `sluice serve` runs as a child process with a TLS listener (a certificate of a
//! test CA, ECDSA P-256). Clients on this machine connect, complete a handshake, ask
//! `GET /livez` over HTTP/1.1 and read the answer to its end (which takes in the tickets the
//! hub sends), then close; `SLUICE_BENCH_CONCURRENCY` of them at a time (default 2), for
//! `SLUICE_BENCH_HANDSHAKES` connections per kind (default 2000):
//!
//! - plain: the same request without TLS, on the plain listener (what the connection costs
//!   without any handshake);
//! - full: clients that never resume (rustls `Resumption::disabled()`);
//! - resumed: each client keeps its sessions, primed by one full handshake, so every later
//!   connection resumes.
//!
//! Printed per kind: connections per second (wall clock, with the clients on the same cores as
//! the hub) and the hub's CPU per connection (`/proc/<pid>/stat`, the kernel's share of it
//! included), and the hub's own count of each kind of handshake
//! (`sluice_tls_handshakes_total`), which says that the resumed ones did resume.
//!
//! `cargo bench -p sluice --bench tls_handshakes`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use sluice_test_support::{SluiceProcess, TestCa, env_or, http, tempfile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The hub's user and system CPU time so far.
fn cpu_time(pid: u32) -> Duration {
    Duration::from_secs_f64(sluice_bench::cpu_seconds_of(pid).expect("the hub's CPU time"))
}

const REQUEST: &[u8] = b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// One connection: handshake (unless `config` is `None`: plain HTTP), `GET /livez`, the
/// answer read to its end.
async fn connect_once(addr: SocketAddr, config: Option<Arc<rustls::ClientConfig>>) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let mut answer = Vec::new();
    match config {
        None => {
            tcp.write_all(REQUEST).await.expect("request");
            let _ = tcp.read_to_end(&mut answer).await;
        }
        Some(config) => {
            let name = ServerName::try_from("localhost").expect("name");
            let mut tls = TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .expect("handshake");
            tls.write_all(REQUEST).await.expect("request");
            let _ = tls.read_to_end(&mut answer).await;
        }
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "the hub answered");
}

/// `count` connections by `concurrency` clients, each with its own configuration from
/// `client`; the wall time they took.
async fn run(
    addr: SocketAddr,
    count: usize,
    concurrency: usize,
    client: impl Fn() -> Option<Arc<rustls::ClientConfig>>,
    prime: bool,
) -> Duration {
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let config = client();
        if prime {
            connect_once(addr, config.clone()).await;
        }
        clients.push(config);
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(n, config)| {
            let share = count / concurrency + usize::from(n < count % concurrency);
            tokio::spawn(async move {
                for _ in 0..share {
                    connect_once(addr, config.clone()).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client");
    }
    started.elapsed()
}

async fn handshakes(hub: &SluiceProcess) -> (u64, u64) {
    let text = http::get(&hub.url("/metrics"))
        .await
        .map(|answer| answer.text())
        .unwrap_or_default();
    let count = |kind: &str| {
        let name = format!("sluice_tls_handshakes_total{{kind=\"{kind}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&name))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .map_or(0, |n| n as u64)
    };
    (count("full"), count("resumed"))
}

#[tokio::main]
async fn main() {
    let count: usize = env_or("SLUICE_BENCH_HANDSHAKES", 2000);
    let concurrency: usize = env_or("SLUICE_BENCH_CONCURRENCY", 2);
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new();
    let (cert, key) = ca.issue("hub").write(dir.path(), "hub");
    // The TLS listener beside the plain one, which serves /metrics, on a port free now.
    let tls_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let settings = format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\nlisten = \"{tls_addr}\"\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let hub = SluiceProcess::serve(env!("CARGO_BIN_EXE_sluice"), dir.path(), Some(&settings))
        .await
        .expect("sluice serve starts");
    let pid = hub.pid().expect("the hub's pid");

    println!(
        "{count} connections per kind, {concurrency} clients at a time, each: TLS handshake \
         (ECDSA P-256 certificate; none for plain), GET /livez, close"
    );
    println!(
        "{:<8} {:>13} {:>18} {:>14} {:>10}",
        "kind", "connections/s", "hub CPU/connection", "hub: full", "resumed"
    );
    for kind in ["plain", "full", "resumed"] {
        let prime = kind == "resumed";
        let client = || {
            let mut config = (*ca.client_config(&[b"http/1.1"])).clone();
            if !prime {
                config.resumption = Resumption::disabled();
            }
            (kind != "plain").then(|| Arc::new(config))
        };
        let addr = if kind == "plain" {
            hub.addr()
        } else {
            tls_addr
        };
        let (full_before, resumed_before) = handshakes(&hub).await;
        let cpu_before = cpu_time(pid);
        let wall = run(addr, count, concurrency, client, prime).await;
        let cpu = cpu_time(pid).saturating_sub(cpu_before);
        let (full_after, resumed_after) = handshakes(&hub).await;
        let primed = if prime { concurrency } else { 0 } as f64;
        println!(
            "{kind:<8} {:>13.0} {:>15.0} µs {:>14} {:>10}",
            count as f64 / wall.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / (count as f64 + primed),
            full_after - full_before,
            resumed_after - resumed_before
        );
    }
}
