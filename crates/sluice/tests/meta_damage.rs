//! Damaged stream metadata through the real binary: `sluice serve` opens a stream whose
//! meta.inf was damaged from meta.bak with the same event ids; with no metadata file left to
//! trust it refuses to start, naming the file and the repair command, and leaves every file in
//! place; `sluice stream repair` brings the messages back under a new incarnation, which a
//! client holding an old id sees as an `incarnation` gap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, SseClient, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// A data directory in which a hub stored three messages in the default stream.
struct Fixture {
    _root: tempfile::TempDir,
    data: PathBuf,
    ids: Vec<String>,
}

impl Fixture {
    async fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        let mut hub = serve(&data).await;
        let mut ids = Vec::new();
        for n in 1..=3 {
            let answer =
                http::post_json(&hub.url("/publish"), &json!({ "topic": "t", "payload": n }))
                    .await
                    .unwrap();
            assert_eq!(answer.status, 200, "{}", answer.text());
            ids.push(answer.json().unwrap()["id"].as_str().unwrap().to_owned());
        }
        hub.terminate(Duration::from_secs(10)).await.unwrap();
        Self {
            _root: root,
            data,
            ids,
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.data.join("streams/sluice").join(name)
    }

    /// Every file of the stream with its bytes.
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        sluice_test_support::files_under(&self.data.join("streams"))
    }
}

async fn serve(data: &Path) -> SluiceProcess {
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    SluiceProcess::start(BIN, args).await.expect("serve starts")
}

fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

/// The ids of the messages a client reading from the start is sent.
async fn ids_from_the_start(hub: &SluiceProcess) -> Vec<String> {
    let mut client = SseClient::connect(&hub.url("/events?topic=t&last-id=0"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let message = client.next_event().await.unwrap();
        assert_eq!(message.event_type(), "message");
        ids.push(message.id.unwrap());
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_opens_a_damaged_meta_inf_from_the_copy_with_the_same_ids() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.inf"));
    let mut hub = serve(&fx.data).await;
    assert_eq!(ids_from_the_start(&hub).await, fx.ids);
    let log = hub.log_tail(100);
    assert!(
        log.contains("meta.inf does not match meta.sum") && log.contains("meta.bak"),
        "{log}"
    );
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_untrustworthy_metadata_until_stream_repair() {
    let fx = Fixture::new().await;
    flip_a_byte(&fx.file("meta.inf"));
    std::fs::remove_file(fx.file("meta.bak")).unwrap();
    let before = fx.files();

    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&fx.data)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("serve exits instead of serving")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    let meta_inf = fx.file("meta.inf").display().to_string();
    assert!(
        stderr.contains(&meta_inf) && stderr.contains("sluice stream repair sluice"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(fx.files(), before, "every file left in place");

    let data = fx.data.to_str().unwrap();
    let out = Command::new(BIN)
        .args(["stream", "--data-dir", data, "info", "sluice"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("sluice stream repair sluice"), "{stderr}");

    let out = Command::new(BIN)
        .args(["stream", "--data-dir", data, "repair", "sluice"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("new incarnation"), "{stderr}");
    let repair: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(repair["repaired"], true);
    assert_eq!(repair["incarnation_kept_from"], Value::Null);
    assert_eq!(repair["config_from"], "declaration");
    assert_eq!(repair["messages"], 3);
    for (name, bytes) in &before {
        if name.parent() == Some(&fx.file("msgs")) {
            assert_eq!(&std::fs::read(name).unwrap(), bytes, "{name:?} untouched");
        }
    }

    let out = Command::new(BIN)
        .args(["stream", "--data-dir", data, "repair", "sluice"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["repaired"], false, "nothing left to repair");

    let mut hub = serve(&fx.data).await;
    let ids = ids_from_the_start(&hub).await;
    let incarnation = repair["incarnation"].as_str().unwrap();
    let expected: Vec<String> = (1..=3).map(|seq| format!("{seq}-{incarnation}")).collect();
    assert_eq!(ids, expected, "the messages, under the new incarnation");
    assert_ne!(ids, fx.ids);

    let mut client = SseClient::connect_with_headers(
        &hub.url("/events?topic=t"),
        &[("last-event-id", fx.ids[1].as_str())],
    )
    .await
    .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let gap = client.next_event().await.unwrap();
    assert_eq!(gap.event_type(), "gap");
    let gap: Value = serde_json::from_str(gap.data.as_deref().unwrap()).unwrap();
    assert_eq!(gap["reason"], "incarnation");
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}
