//! `sluice bench` against a real `sluice serve` on loopback: a small load must arrive exactly
//! once at every client, and a hub that dies mid-run must show up as losses, not as success.
//! (Speed is measured in docs/BENCHMARKS.md, never asserted here.)

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, http, tempfile};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long one bench run may take, connecting and draining included.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

async fn start_hub(dir: &Path) -> SluiceProcess {
    let data_dir = dir.join("data");
    SluiceProcess::start(
        SLUICE,
        [
            "serve".into(),
            "--data-dir".into(),
            data_dir.into_os_string(),
        ],
    )
    .await
    .expect("sluice serve starts")
}

fn bench(hub: &SluiceProcess, extra: &[&str]) -> Child {
    let pid = hub.pid().expect("hub runs").to_string();
    let url = hub.base_url();
    let mut args = vec!["bench", "--url", &url, "--server-pid", &pid, "--json"];
    args.extend_from_slice(extra);
    Command::new(SLUICE)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sluice bench starts")
}

async fn finish(child: Child) -> (Output, Value) {
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .expect("sluice bench stops by itself")
        .expect("sluice bench output");
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "bench prints a JSON report ({err}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_published_event_reaches_every_client_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = start_hub(dir.path()).await;
    // 20 clients over 3 topics (7, 7 and 6 clients); 100 messages round-robin (34, 33, 33).
    let child = bench(
        &hub,
        &[
            "--clients",
            "20",
            "--topics",
            "3",
            "--rate",
            "50",
            "--duration",
            "2s",
            "--payload-bytes",
            "200",
        ],
    );
    let (output, report) = finish(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench failed: {stderr}\n{report:#}"
    );
    assert_eq!(report["ok"], true, "{report:#}");

    assert_eq!(report["connect"]["connected"], 20, "{report:#}");
    assert_eq!(report["connect"]["errors"], 0, "{report:#}");
    let publish = &report["publish"];
    assert_eq!(publish["target"], 100, "{report:#}");
    assert_eq!(publish["errors"], 0, "{report:#}");
    // Paced publishes the machine could not send on time are skipped, and said so: every one
    // of the 100 is either published or counted as skipped.
    let published = publish["published"].as_u64().expect("a count");
    let skipped = publish["skipped"].as_u64().expect("a count");
    assert_eq!(published + skipped, 100, "{report:#}");
    assert!(published > 0, "{report:#}");
    let delivery = &report["delivery"];
    let expected = delivery["expected"].as_u64().expect("a count");
    if skipped == 0 {
        assert_eq!(expected, 7 * 34 + 7 * 33 + 6 * 33, "{report:#}");
    }
    assert!(
        expected >= published * 6,
        "every message has 6 or 7 readers: {report:#}"
    );
    assert_eq!(delivery["received"], expected, "{report:#}");
    assert_eq!(delivery["missing"], 0, "{report:#}");
    assert_eq!(delivery["clients_exactly_once"], 20, "{report:#}");
    for anomaly in [
        "out_of_order",
        "foreign",
        "gaps",
        "disconnects",
        "protocol_errors",
        "clients_incomplete",
    ] {
        assert_eq!(delivery[anomaly], 0, "{anomaly} in {report:#}");
    }
    assert_eq!(report["latency_ms"]["samples"], expected, "{report:#}");
    let server = &report["server"];
    assert!(
        server["rss_idle_bytes"].as_u64().is_some_and(|rss| rss > 0),
        "{report:#}"
    );
    assert!(server["rss_per_connection_bytes"].is_u64(), "{report:#}");
    assert!(server["cpu_us_per_event"].is_f64(), "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_dies_mid_run_is_reported_as_losses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut hub = start_hub(dir.path()).await;
    let mut child = bench(
        &hub,
        &["--clients", "5", "--rate", "20", "--duration", "3s"],
    );
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let publishing = tokio::time::timeout(RUN_TIMEOUT, async {
        while let Some(line) = stderr.next_line().await.expect("stderr") {
            if line.contains("publishing") {
                return true;
            }
        }
        false
    });
    assert!(
        publishing.await.expect("bench reaches publishing"),
        "bench ended before publishing"
    );
    hub.kill().expect("hub killed");
    let rest_of_stderr = tokio::spawn(async move {
        let mut text = String::new();
        while let Ok(Some(line)) = stderr.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });

    let (output, report) = finish(child).await;
    assert!(
        !output.status.success(),
        "a run with losses must fail: {report:#}"
    );
    assert_eq!(report["ok"], false, "{report:#}");
    assert_eq!(report["connect"]["connected"], 5, "{report:#}");
    assert_eq!(report["delivery"]["disconnects"], 5, "{report:#}");
    assert!(
        report["publish"]["errors"].as_u64().is_some_and(|n| n > 0),
        "{report:#}"
    );
    let stderr = rest_of_stderr.await.expect("stderr reader");
    assert!(
        stderr.contains("not clean") && stderr.contains("5 disconnects"),
        "{stderr}"
    );
    let errors = report["errors"].to_string();
    assert!(
        errors.contains("disconnect") && errors.contains("publish"),
        "{report:#}"
    );
}

/// `--from last:2`: each client first gets the two most recent retained messages of its
/// topic, which the report counts as replayed (not foreign), then every message of the run
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_option_replays_retained_messages_before_the_run_which_stays_clean() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = start_hub(dir.path()).await;
    // What an earlier run left: three messages on bench.0, two on bench.1.
    for (n, topic) in ["bench.0", "bench.1", "bench.0", "bench.0", "bench.1"]
        .into_iter()
        .enumerate()
    {
        let body = json!({ "topic": topic, "payload": { "earlier": n } });
        let answer = http::post_json(&hub.url("/publish"), &body)
            .await
            .expect("publish");
        assert!(answer.status.is_success(), "{}", answer.text());
    }
    // 4 clients over 2 topics; 20 messages round-robin (10 each).
    let child = bench(
        &hub,
        &[
            "--clients",
            "4",
            "--topics",
            "2",
            "--rate",
            "20",
            "--duration",
            "1s",
            "--from",
            "last:2",
        ],
    );
    let (output, report) = finish(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench failed: {stderr}\n{report:#}"
    );
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["load"]["from"], "last:2", "{report:#}");
    let delivery = &report["delivery"];
    assert_eq!(delivery["replayed"], 4 * 2, "{report:#}");
    assert_eq!(delivery["foreign"], 0, "{report:#}");
    // Each run message has two readers (publishes skipped behind schedule are not expected).
    let published = report["publish"]["published"].as_u64().expect("a count");
    assert_eq!(delivery["expected"], 2 * published, "{report:#}");
    assert_eq!(delivery["received"], 2 * published, "{report:#}");
    assert_eq!(delivery["clients_exactly_once"], 4, "{report:#}");
}

#[tokio::test]
async fn refuses_a_url_where_no_hub_answers_or_off_this_machine() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = unused.local_addr().expect("addr");
    drop(unused);
    for (url, message) in [
        (format!("http://{addr}"), "no hub answers at"),
        ("http://192.0.2.1:8080".to_owned(), "not a loopback address"),
    ] {
        let output = Command::new(SLUICE)
            .args(["bench", "--url", &url, "--clients", "1", "--duration", "1s"])
            .output()
            .await
            .expect("sluice bench runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{url}: {stderr}");
        assert!(stderr.contains(message), "{url}: {stderr}");
    }
}
