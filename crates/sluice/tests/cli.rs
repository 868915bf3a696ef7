//! The `sluice` binary end to end: `serve` with defaults, `pub`/`sub` against it, graceful
//! SIGTERM, configuration errors before any socket opens, and `stream ls|info|purge`.

use std::process::Command;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, SseClient, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(args: &[&str], cwd: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run sluice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_defaults_uses_the_embedded_store_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_owned();
    let mut hub = SluiceProcess::start_configured(BIN, ["serve"], move |cmd| {
        cmd.current_dir(&cwd);
    })
    .await
    .expect("serve starts");
    let answer = http::post_json(
        &hub.url("/publish"),
        &json!({ "topic": "any.topic", "payload": "hi" }),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        dir.path().join("sluice-data/streams/sluice").is_dir(),
        "default stream in ./sluice-data"
    );

    let mut client = SseClient::connect(&hub.url("/events?topic=%3E&last-id=0"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let message = client.next_event().await.unwrap();
    assert_eq!(message.id.as_deref(), answer.json().unwrap()["id"].as_str());

    // SIGTERM drains: the stream ends cleanly, the process exits 0 and logs the reason.
    let status = hub
        .terminate(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("exit status");
    assert!(status.success(), "{status:?}\n{}", hub.log_tail(20));
    assert!(client.frames_until_end().await.is_ok());
    assert!(
        hub.log_tail(50).contains("disconnect_reason"),
        "{}",
        hub.log_tail(50)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_and_sub_talk_to_a_running_hub() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "serve".as_ref(),
        "--log-format".as_ref(),
        "json".as_ref(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ];
    let mut hub = SluiceProcess::start(BIN, args).await.unwrap();
    let base = hub.base_url();
    for payload in ["{\"n\":1}", "plain"] {
        let out = sluice(&["pub", "--hub", &base, "orders.eu", payload], dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["duplicate"], false);
    }
    let out = sluice(
        &[
            "sub",
            "--hub",
            &base,
            "--last-id",
            "0",
            "--count",
            "2",
            "orders.*",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("connected 0-"), "{text}");
    assert!(
        lines[1].starts_with("message 1-") && lines[1].contains(r#""payload":{"n":1}"#),
        "{text}"
    );
    assert!(
        lines[2].starts_with("message 2-") && lines[2].contains(r#""payload":"plain""#),
        "{text}"
    );
    // --log-format json: structured lines, the stream end carrying its disconnect_reason.
    let line = hub
        .wait_for_log("disconnect_reason", Duration::from_secs(20))
        .await
        .expect("the stream end is logged");
    let log: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert!(log["fields"]["disconnect_reason"].is_string(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configuration_fails_before_listening_naming_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "[sse]\nheartbeat = \"-5s\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(
        stderr.contains("sse.heartbeat") && stderr.contains("-5s"),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_LIMITS_MAX_CONNECTIONS", "lots")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SLUICE_LIMITS_MAX_CONNECTIONS") && stderr.contains("lots"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_commands_list_describe_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut hub = SluiceProcess::start(
        BIN,
        ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()],
    )
    .await
    .unwrap();
    for n in 0..3 {
        let answer = http::post_json(&hub.url("/publish"), &json!({ "topic": "t", "payload": n }))
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
    }
    hub.terminate(Duration::from_secs(10)).await.unwrap();
    let data = data.to_str().unwrap();
    let out = sluice(&["stream", "--data-dir", data, "ls"], dir.path());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sluice");
    let out = sluice(
        &["stream", "--data-dir", data, "info", "sluice"],
        dir.path(),
    );
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (info["messages"].clone(), info["last_seq"].clone()),
        (json!(3), json!(3))
    );
    let out = sluice(
        &[
            "stream",
            "--data-dir",
            data,
            "purge",
            "sluice",
            "--keep",
            "1",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["purged"],
        2
    );
    let out = sluice(&["stream", "--data-dir", data, "info", "nope"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

#[test]
fn stream_commands_on_a_missing_data_directory_are_an_error_not_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let out = sluice(
        &["stream", "--data-dir", missing.to_str().unwrap(), "ls"],
        dir.path(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no data directory") && stderr.contains("no-such-dir"),
        "{stderr}"
    );
    assert!(!missing.exists(), "a store was created");
}
