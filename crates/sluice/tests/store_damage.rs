//! Damaged block files through the real binary: a subscriber replaying across a damaged
//! record is sent every intact message and a `gap` frame with reason `damaged` for the
//! record, whatever its topic filter; the loss shows in `/metrics` and `sluice stream info`.
//! After a kill -9 and a cut tail, new messages never reuse an id, and a client holding an id
//! from the cut part is sent an `unconfirmed` gap.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{Frame, SluiceProcess, SseClient, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

async fn serve(data: &Path) -> SluiceProcess {
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    SluiceProcess::start(BIN, args).await.expect("serve starts")
}

/// Publishes `n` messages, odd ones on topic `a`, even ones on `b`; returns their ids.
async fn publish(hub: &SluiceProcess, n: u64) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 1..=n {
        let topic = if i % 2 == 1 { "a" } else { "b" };
        let body = json!({ "topic": topic, "payload": format!("m{i}") });
        let answer = http::post_json(&hub.url("/publish"), &body).await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        ids.push(answer.json().unwrap()["id"].as_str().unwrap().to_owned());
    }
    ids
}

fn block(data: &Path) -> PathBuf {
    data.join("streams/sluice/msgs/1.blk")
}

/// Offset and length of the record of message `seq` in a pristine block.
fn record_of(block: &Path, seq: u64) -> (usize, usize) {
    let data = std::fs::read(block).unwrap();
    let mut off = 0;
    while off + 14 <= data.len() {
        let len = 4 + u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        let rec_seq = u64::from_le_bytes(data[off + 6..off + 14].try_into().unwrap());
        if data[off + 4] == 0 && rec_seq == seq {
            return (off, len);
        }
        off += len;
    }
    panic!("message {seq} not in {}", block.display());
}

fn gap_of(frame: &Frame) -> Value {
    assert_eq!(frame.event_type(), "gap", "{frame:?}");
    serde_json::from_str(frame.data.as_deref().unwrap()).unwrap()
}

/// The frames after `connected` a client of `query` is sent, `count` of them.
async fn frames(hub: &SluiceProcess, query: &str, count: usize) -> Vec<Frame> {
    let mut client = SseClient::connect(&hub.url(&format!("/events?{query}")))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(client.next_event().await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_becomes_a_damaged_gap_for_every_subscriber_it_could_concern() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut hub = serve(&data).await;
    let ids = publish(&hub, 10).await;
    hub.terminate(Duration::from_secs(10)).await.unwrap();
    let (off, len) = record_of(&block(&data), 5);
    let mut bytes = std::fs::read(block(&data)).unwrap();
    bytes[off + len / 2] ^= 0x01;
    std::fs::write(block(&data), bytes).unwrap();

    let mut hub = serve(&data).await;
    // Topic b never held message 5, but its subject cannot be read: the gap is sent.
    let got = frames(&hub, "topic=b&last-id=0", 6).await;
    let kinds: Vec<(String, Option<String>)> = got
        .iter()
        .map(|f| (f.event_type().to_owned(), f.id.clone()))
        .collect();
    assert_eq!(kinds[0], ("message".into(), Some(ids[1].clone())));
    assert_eq!(kinds[1], ("message".into(), Some(ids[3].clone())));
    let gap = gap_of(&got[2]);
    assert_eq!(
        (&gap["reason"], &gap["from"], &gap["to"]),
        (&json!("damaged"), &json!(5), &json!(5)),
        "{gap}"
    );
    let rest: Vec<Option<String>> = got[3..].iter().map(|f| f.id.clone()).collect();
    assert_eq!(
        rest,
        [ids[5].clone(), ids[7].clone(), ids[9].clone()].map(Some)
    );
    // Every topic's reader too, and all intact messages after the damage.
    let got = frames(&hub, "topic=a&topic=b&last-id=0", 10).await;
    assert_eq!(gap_of(&got[4])["reason"], "damaged");
    let delivered: Vec<Option<String>> = got
        .iter()
        .filter(|f| f.event_type() == "message")
        .map(|f| f.id.clone())
        .collect();
    let intact: Vec<Option<String>> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 4)
        .map(|(_, id)| Some(id.clone()))
        .collect();
    assert_eq!(delivered, intact);

    let metrics = http::get(&hub.url("/metrics")).await.unwrap().text();
    assert!(
        metrics.contains("sluice_store_lost_messages 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"sluice_gaps_total{reason="damaged"} 2"#),
        "{metrics}"
    );
    hub.terminate(Duration::from_secs(10)).await.unwrap();
    // Damage found by a read is remembered: a later open lists it before any read.
    let info = Command::new(BIN)
        .args(["stream", "--data-dir"])
        .arg(&data)
        .args(["info", "sluice"])
        .output()
        .unwrap();
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["lost"]["msgs"], 1, "{info}");
    assert_eq!(info["lost"]["damaged"], json!([[5, 5]]), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_and_a_cut_tail_ids_are_never_reused_and_holders_are_told() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut hub = serve(&data).await;
    let ids = publish(&hub, 10).await;
    hub.kill().unwrap();
    // The tail of the block cut at the end of record 7, with no index.db to tell.
    let _ = std::fs::remove_file(data.join("streams/sluice/msgs/index.db"));
    let (off, len) = record_of(&block(&data), 7);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(block(&data))
        .unwrap();
    file.set_len((off + len) as u64).unwrap();

    let hub = serve(&data).await;
    let metrics = http::get(&hub.url("/metrics")).await.unwrap().text();
    let unconfirmed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_store_unconfirmed_positions "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(unconfirmed.is_some_and(|n| n >= 3), "{metrics}");
    let new = publish(&hub, 1).await;
    let seq = |id: &str| id.split('-').next().unwrap().parse::<u64>().unwrap();
    assert!(seq(&new[0]) > 10, "{} reuses an acknowledged id", new[0]);
    // A client holding id 10 is told the rest of the unconfirmed positions, then gets the new
    // message.
    let got = frames(&hub, &format!("topic=a&topic=b&last-id={}", ids[9]), 2).await;
    let gap = gap_of(&got[0]);
    assert_eq!(
        (&gap["reason"], &gap["from"]),
        (&json!("unconfirmed"), &json!(11)),
        "{gap}"
    );
    assert_eq!(gap["to"].as_u64().unwrap(), seq(&new[0]) - 1, "{gap}");
    assert_eq!(got[1].id.as_deref(), Some(new[0].as_str()));
    // A client holding id 7, the last intact one, gets the new message with nothing to be told.
    let got = frames(&hub, &format!("topic=a&topic=b&last-id={}", ids[6]), 1).await;
    assert_eq!(got[0].id.as_deref(), Some(new[0].as_str()));
}
