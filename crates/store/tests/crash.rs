//! kill -9 a child process publishing with sync `always` at random points, reopen, and check
//! that every acknowledged sequence is present with its payload.

mod common;

use common::run_child_until_killed;
use sluice_store::{Headers, Store, StoreOptions, StreamConfig, SyncPolicy};

const DIR_ENV: &str = "SLUICE_STORE_CRASH_DIR";

fn opts() -> StoreOptions {
    StoreOptions {
        sync: SyncPolicy::Always,
        block_size: 16 << 10,
        ..StoreOptions::default()
    }
}

fn payload(seq: u64) -> String {
    format!("crash-{seq}")
}

/// The child: publishes forever with 8 concurrent publishers, printing `ACK <seq>` after each
/// acknowledgement. Does nothing unless started by the parent test.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let (store, _) = Store::open(&dir, opts()).unwrap();
    let s = match store.stream("K") {
        Some(s) => s,
        None => store.create_stream(StreamConfig::new("K", ["k"])).unwrap(),
    };
    rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    for _ in 0..u64::MAX {
                        // The payload names the sequence it expects; the store assigns in order,
                        // so a publisher asks for the next one under a lock-free retry.
                        let mut h = Headers::new();
                        let next = s.info(None).state.last_seq + 1;
                        h.insert("Nats-Expected-Last-Sequence", (next - 1).to_string());
                        if let Ok(ack) = s.publish("k", h, payload(next)).await {
                            println!("ACK {}", ack.seq);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn every_acknowledged_sequence_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<u64> = Vec::new();
    for round in 0..5u64 {
        let kill_after = 20 + (round * 7919 + 13) % 150;
        let seen = run_child_until_killed(
            "crash_child",
            DIR_ENV,
            dir.path(),
            "ACK ",
            kill_after,
            |seq| {
                acked.push(seq.trim().parse().unwrap());
            },
        );
        assert!(seen >= kill_after, "round {round}: the child stopped early");

        let (store, reports) = Store::open(dir.path(), opts()).unwrap();
        let s = store.stream("K").unwrap();
        for &seq in &acked {
            let m = s.get(seq).unwrap().unwrap_or_else(|| {
                panic!("round {round}: acknowledged seq {seq} lost ({reports:?})")
            });
            assert_eq!(m.payload, payload(seq));
        }
        store.close();
    }
}
