//! The real `sluice serve` on a data directory in a small tmpfs that fills up: publishes are
//! answered `507` with code 507 and `/readyz` is `503` with cause `storage` while it is full;
//! once space is freed publishing and readiness come back without a restart; SIGTERM stops the
//! hub while the disk is full; nothing acknowledged is lost and nothing refused is delivered.
//! Needs root (to mount the tmpfs); skipped with a message otherwise.

use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{HttpResponse, SluiceProcess, SseClient, Tmpfs, http};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// How long a SIGTERM may take to stop the hub (the drain of the CLI test).
const DRAIN: Duration = Duration::from_secs(10);
/// A payload larger than what a full tmpfs has left in the pages its files already hold.
const PAYLOAD: usize = 8 << 10;

/// A payload naming its publish attempt, padded to `len` bytes.
fn payload(attempt: usize, len: usize) -> String {
    let mut text = format!("attempt-{attempt}-");
    text.extend(std::iter::repeat_n('x', len.saturating_sub(text.len())));
    text
}

async fn publish(hub: &SluiceProcess, text: &str) -> HttpResponse {
    http::post_json(
        &hub.url("/publish"),
        &json!({ "topic": "disk.t", "payload": text }),
    )
    .await
    .unwrap()
}

/// The event ids acknowledged so far, in order.
struct Acked(Vec<(String, String)>);

impl Acked {
    /// Publishes until one is refused (or `tries` run out); returns the refusal.
    async fn publish_until_refused(
        &mut self,
        hub: &SluiceProcess,
        attempt: &mut usize,
        tries: usize,
    ) -> Option<HttpResponse> {
        for _ in 0..tries {
            *attempt += 1;
            let text = payload(*attempt, PAYLOAD);
            let answer = publish(hub, &text).await;
            if answer.status != 200 {
                return Some(answer);
            }
            let id = answer.json().unwrap()["id"].as_str().unwrap().to_owned();
            self.0.push((id, text));
        }
        None
    }

    /// Reads one message event per acknowledged publish from `client`, checking each is it.
    async fn expect_delivered(&self, client: &mut SseClient) {
        for (id, text) in &self.0 {
            let event = client.next_event().await.unwrap();
            assert_eq!(event.event_type(), "message", "{event:?}");
            assert_eq!(event.id.as_deref(), Some(id.as_str()));
            let data: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
            assert_eq!(data["payload"], text.as_str(), "event {id}");
        }
    }
}

async fn readyz(hub: &SluiceProcess) -> HttpResponse {
    http::get(&hub.url("/readyz")).await.unwrap()
}

fn assert_storage_refusal(answer: &HttpResponse) {
    assert_eq!(answer.status, 507, "{}", answer.text());
    let body = answer.json().unwrap();
    assert_eq!(body["code"], 507, "{body}");
    let description = body["description"].as_str().unwrap();
    assert!(
        description.contains("No space left on device"),
        "{description}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_publishes_until_space_is_freed_and_sigterm_still_stops_the_hub() {
    let Some(disk) = Tmpfs::mount(
        "4m",
        "a_full_disk_refuses_publishes_until_space_is_freed_and_sigterm_still_stops_the_hub",
    ) else {
        return;
    };
    let data = disk.path().join("data");
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    let mut hub = SluiceProcess::start(BIN, args).await.unwrap();
    let mut client = SseClient::connect(&hub.url("/events?topic=%3E&last-id=0"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let mut acked = Acked(Vec::new());
    let mut attempt = 0;
    assert!(
        acked
            .publish_until_refused(&hub, &mut attempt, 5)
            .await
            .is_none()
    );

    disk.fill().unwrap();
    let refused = acked
        .publish_until_refused(&hub, &mut attempt, 50)
        .await
        .expect("a publish is refused once the disk is full");
    assert_storage_refusal(&refused);
    let again = publish(&hub, &payload(attempt + 1000, PAYLOAD)).await;
    assert_storage_refusal(&again);
    let ready = readyz(&hub).await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json().unwrap()["cause"], "storage");
    let metrics = http::get(&hub.url("/metrics")).await.unwrap().text();
    let failed_writes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_store_write_errors_total{file=\"blocks\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(failed_writes >= 2, "{metrics}");

    // Space back: the next publish is stored and the hub is ready again, without a restart.
    disk.free().unwrap();
    assert!(
        acked
            .publish_until_refused(&hub, &mut attempt, 3)
            .await
            .is_none()
    );
    let ready = readyz(&hub).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    acked.expect_delivered(&mut client).await;

    // Full again: SIGTERM stops the hub within the drain, though index.db cannot be written.
    disk.fill().unwrap();
    let refused = acked.publish_until_refused(&hub, &mut attempt, 50).await;
    assert_storage_refusal(&refused.expect("refused again"));
    let status = hub.terminate(DRAIN).await.unwrap().expect("exit status");
    assert!(status.success(), "{status:?}\n{}", hub.log_tail(30));
    assert!(client.frames_until_end().await.is_ok());

    // Everything acknowledged is there after a restart, and nothing refused.
    disk.free().unwrap();
    hub.restart().await.unwrap();
    let mut client = SseClient::connect(&hub.url("/events?topic=%3E&last-id=0"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    acked.expect_delivered(&mut client).await;
    let next = publish(&hub, "after the restart").await;
    assert_eq!(next.status, 200, "{}", next.text());
    let event = client.next_event().await.unwrap();
    assert_eq!(
        event.id.as_deref(),
        next.json().unwrap()["id"].as_str(),
        "no refused message comes before it"
    );
}
