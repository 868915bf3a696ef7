//! HTTP edges through the real binary: every refusal is logged with its reason
//! (docs/OPERATIONS.md, "Logs") — a subscription or a publish refused as a bad request or by
//! authorization leaves an info line naming the reason and status, and a stream's end names its
//! peer as an address; the path form of `GET /events` adds its `topic=` parameters.

use std::time::Duration;

use sluice_test_support::serde_json::json;
use sluice_test_support::{SluiceProcess, SseClient, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_logged_with_their_reason_and_peers_as_addresses() {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[auth.publish]\nalgorithms = [\"HS256\"]\n[[auth.publish.keys]]\ntype = \"hmac\"\nsecret = \"a-long-enough-test-secret-of-32-bytes\"\n",
    )
    .unwrap();
    let data = root.path().join("data");
    let args = [
        "serve".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ];
    let mut hub = SluiceProcess::start(BIN, args).await.expect("serve starts");

    // A subscription with an invalid topic: 400.
    let answer = http::get(&hub.url("/events?topic=a..b")).await.unwrap();
    assert_eq!(answer.status, 400);
    let line = hub
        .wait_for_log("event stream refused", WAIT)
        .await
        .unwrap();
    assert!(
        line.contains("bad_request") && line.contains("400"),
        "{line}"
    );

    // A publish without a token: 401.
    let body = json!({ "topic": "t", "payload": 1 });
    let answer = http::post_json(&hub.url("/publish"), &body).await.unwrap();
    assert_eq!(answer.status, 401);
    let line = hub.wait_for_log("publish refused", WAIT).await.unwrap();
    assert!(
        line.contains("missing_token") && line.contains("401"),
        "{line}"
    );

    // A stream's end names its peer as an address.
    let client = SseClient::connect(&hub.url("/events?topic=t"))
        .await
        .unwrap();
    drop(client);
    let line = hub.wait_for_log("event stream ended", WAIT).await.unwrap();
    assert!(
        line.contains("peer=127.0.0.1:") && !line.contains("Some("),
        "{line}"
    );
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_form_adds_the_topic_parameters_instead_of_dropping_them() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    let hub = SluiceProcess::start(BIN, args).await.expect("serve starts");
    let mut client = SseClient::connect(&hub.url("/events/a/b?topic=c.d"))
        .await
        .unwrap();
    let connected = client.next_event().await.unwrap();
    assert_eq!(connected.event_type(), "connected");
    assert_eq!(
        connected.data.as_deref(),
        Some(r#"{"topics":["a.b","c.d"]}"#)
    );
    let body = json!({ "topic": "c.d", "payload": "to the query topic" });
    let answer = http::post_json(&hub.url("/publish"), &body).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let message = client.next_event().await.unwrap();
    assert_eq!(message.event_type(), "message");
    assert!(message.data.unwrap().contains("to the query topic"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_is_not_utf8_once_decoded_is_a_json_400() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    let hub = SluiceProcess::start(BIN, args).await.expect("serve starts");
    let answer = http::get(&hub.url("/events?topic=chat.room%FF"))
        .await
        .unwrap();
    assert_eq!(answer.status, 400, "{}", answer.text());
    let body = answer.json().unwrap();
    assert_eq!(body["code"], 400, "{body}");
    assert!(
        body["description"].as_str().unwrap().contains("\"topic\""),
        "{body}"
    );
    // Properly encoded UTF-8 is a topic like any other.
    let mut client = SseClient::connect(&hub.url("/events?topic=chat.r%C3%A4um"))
        .await
        .unwrap();
    let connected = client.next_event().await.unwrap();
    assert_eq!(
        connected.data.as_deref(),
        Some(r#"{"topics":["chat.räum"]}"#)
    );
}
