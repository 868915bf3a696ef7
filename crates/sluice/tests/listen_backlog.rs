//! The hub's listener queues thousands of connections the kernel completed before the hub
//! accepts them (docs/OPERATIONS.md, "Connections"): clients that connect faster than the hub
//! accepts are not turned away, which with a short queue they were (their handshakes dropped
//! and retried by the clients a second or more later).

use std::time::Duration;

use sluice_test_support::{SluiceProcess, tempfile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Far more than the standard library's queue of 128, within a test's open-file limit.
const CONNECTIONS: usize = 600;
/// How long the connections may take; those a short queue drops would need minutes.
const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_hub_has_not_accepted_yet_are_queued_not_dropped() {
    let root = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, root.path(), None)
        .await
        .expect("serve starts");
    let addr = hub.addr();
    // Nothing is accepted while the hub is frozen: every connection waits in the queue.
    hub.suspend().unwrap();
    let mut connecting = JoinSet::new();
    for _ in 0..CONNECTIONS {
        connecting.spawn(TcpStream::connect(addr));
    }
    let mut connected = Vec::with_capacity(CONNECTIONS);
    let all = async {
        while let Some(joined) = connecting.join_next().await {
            connected.push(joined.unwrap().expect("connect"));
        }
    };
    let in_time = tokio::time::timeout(WAIT, all).await;
    hub.resume().unwrap();
    assert!(
        in_time.is_ok(),
        "{} of {CONNECTIONS} connections completed while the hub was frozen",
        connected.len()
    );

    // Once the hub goes on, it accepts and answers them.
    let mut last = connected.pop().unwrap();
    last.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    last.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
