//! HTTP edges through the real binary: every refusal is logged with its reason
//! (docs/OPERATIONS.md, "Logs") — a subscription or a publish refused as a bad request, by
//! authorization or for its body leaves an info line naming the reason and status, and a
//! stream's end names its peer as an address; the path form of `GET /events` adds its `topic=`
//! parameters; `/metrics` answers the format the scraper accepts, read by the Python
//! `prometheus_client` parsers; probe paths, the preflight's lists and the event type of
//! message frames follow the configuration.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, SseClient, http, tempfile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_logged_with_their_reason_and_peers_as_addresses() {
    let root = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(
        BIN,
        root.path(),
        Some("[auth.publish]\nalgorithms = [\"HS256\"]\n[[auth.publish.keys]]\ntype = \"hmac\"\nsecret = \"a-long-enough-test-secret-of-32-bytes\"\n"),
    )
    .await
    .expect("serve starts");

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
    let hub = SluiceProcess::serve(BIN, root.path(), None)
        .await
        .expect("serve starts");
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
    let hub = SluiceProcess::serve(BIN, root.path(), None)
        .await
        .expect("serve starts");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_refusals_are_logged_with_their_reason_and_peer() {
    let root = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(
        BIN,
        root.path(),
        Some("[limits]\nmax_publish_body = 1024\nbody_read_timeout = \"1s\"\n"),
    )
    .await
    .expect("serve starts");

    let big = json!({ "topic": "t", "payload": "x".repeat(2048) });
    let answer = http::post_json(&hub.url("/publish"), &big).await.unwrap();
    assert_eq!(answer.status, 413);
    assert_eq!(answer.json().unwrap()["code"], 413);
    let line = hub.wait_for_log("body_too_large", WAIT).await.unwrap();
    assert!(
        line.contains("publish refused")
            && line.contains("413")
            && line.contains("peer=127.0.0.1:"),
        "{line}"
    );

    // A body that stops half way is closed after body_read_timeout.
    let mut socket = tokio::net::TcpStream::connect(hub.addr()).await.unwrap();
    let head = "POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"topic\":";
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, socket.read_to_end(&mut answer))
        .await
        .expect("the hub closes the slow body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let line = hub.wait_for_log("body_timeout", WAIT).await.unwrap();
    assert!(
        line.contains("publish refused")
            && line.contains("408")
            && line.contains("peer=127.0.0.1:"),
        "{line}"
    );
    let metrics = http::get(&hub.url("/metrics")).await.unwrap().text();
    for reason in ["body_too_large", "body_timeout"] {
        let sample = format!("sluice_connections_rejected_total{{reason=\"{reason}\"}} 1");
        assert!(metrics.contains(&sample), "{sample} in:\n{metrics}");
    }
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}

/// The Python client library's parsers, pinned by the hash of their wheel, installed into a
/// virtual environment in `dir`: the third-party reader of both formats.
fn python_with_prometheus_client(dir: &Path) -> PathBuf {
    const REQUIREMENT: &str = "prometheus-client==0.26.0 \
        --hash=sha256:fa93d06737aa02bacd05794768508bb97d2fbee28cb3bca04eaae92f0ca953d6\n";
    let venv = dir.join("venv");
    let run = |program: &Path, args: &[&std::ffi::OsStr]| {
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|err| panic!("{}: {err}", program.display()));
        assert!(status.success(), "{} {args:?}: {status}", program.display());
    };
    run(
        Path::new("python3"),
        &["-m".as_ref(), "venv".as_ref(), venv.as_os_str()],
    );
    let requirements = dir.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENT).unwrap();
    let pip = venv.join("bin/pip");
    run(
        &pip,
        &[
            "install".as_ref(),
            "--quiet".as_ref(),
            "--disable-pip-version-check".as_ref(),
            "--no-deps".as_ref(),
            "--require-hashes".as_ref(),
            "-r".as_ref(),
            requirements.as_os_str(),
        ],
    );
    venv.join("bin/python")
}

/// Parses `text` with `prometheus_client`'s parser for `format` (`prometheus` or the strict
/// `openmetrics`); the families as `{name, type, samples: [sample names]}`.
async fn parse_with_python(python: &Path, format: &str, text: &str) -> Vec<Value> {
    const SCRIPT: &str = "\
import json, sys
from prometheus_client.parser import text_string_to_metric_families as prometheus
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
parse = openmetrics if sys.argv[1] == 'openmetrics' else prometheus
print(json.dumps([{'name': f.name, 'type': f.type, 'samples': [s.name for s in f.samples]}
                  for f in parse(sys.stdin.read())]))
";
    let mut child = tokio::process::Command::new(python)
        .args(["-c", SCRIPT, format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "the {format} parser refused:\n{}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The `# TYPE` lines of an exposition: `(family, type)`.
fn declared_families(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

/// `/metrics` answers the Prometheus text format 0.0.4 unless the scraper prefers OpenMetrics:
/// `# HELP` and `# TYPE` for every family, counters declared with `_total` so that a reader
/// sees each one as one family, no `# EOF`. Both answers are read by `prometheus_client`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_prometheus_text_or_openmetrics_as_accepted() {
    let root = tempfile::tempdir().unwrap();
    let python = python_with_prometheus_client(root.path());
    let hub = SluiceProcess::serve(BIN, root.path(), None)
        .await
        .expect("serve starts");
    // Labelled counters with samples, and a refusal.
    let body = json!({ "topic": "t", "payload": 1 });
    assert_eq!(
        http::post_json(&hub.url("/publish"), &body)
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        http::get(&hub.url("/events?topic=a..b"))
            .await
            .unwrap()
            .status,
        400
    );

    let scrape = |accept: Option<&'static str>| {
        let url = hub.url("/metrics");
        async move {
            let headers: Vec<(&str, &str)> = accept.map(|a| ("accept", a)).into_iter().collect();
            let request = http::request("GET".parse().unwrap(), &url, &headers)
                .unwrap()
                .body(Default::default())
                .unwrap();
            let answer = http::send(request).await.unwrap();
            assert_eq!(answer.status, 200);
            (
                answer.header("content-type").unwrap().to_owned(),
                answer.text(),
            )
        }
    };

    for accept in [
        None,
        Some("text/plain"),
        Some("text/plain; version=0.0.4"),
        Some("*/*"),
    ] {
        let (content_type, text) = scrape(accept).await;
        assert_eq!(
            content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        let declared = declared_families(&text);
        let helped = text.lines().filter(|l| l.starts_with("# HELP ")).count();
        assert_eq!(helped, declared.len(), "a # HELP for every family:\n{text}");
        for (name, kind) in &declared {
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
        }
        let families = parse_with_python(&python, "prometheus", &text).await;
        assert_eq!(
            families.len(),
            declared.len(),
            "one family per # TYPE:\n{families:?}"
        );
        for counter in [
            "sluice_publishes",
            "sluice_connections_rejected",
            "sluice_messages_delivered",
        ] {
            let family = families
                .iter()
                .find(|f| f["name"] == counter)
                .unwrap_or_else(|| panic!("{counter} in {families:?}"));
            assert_eq!(family["type"], "counter", "{family}");
        }
        let publishes = families
            .iter()
            .find(|f| f["name"] == "sluice_publishes")
            .unwrap();
        assert_eq!(
            publishes["samples"],
            json!(["sluice_publishes_total"]),
            "{publishes}"
        );
    }

    let scraper =
        "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    for accept in ["application/openmetrics-text", scraper] {
        let (content_type, text) = scrape(Some(accept)).await;
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        let families = parse_with_python(&python, "openmetrics", &text).await;
        assert_eq!(
            families.len(),
            declared_families(&text).len(),
            "{families:?}"
        );
        assert!(
            families
                .iter()
                .any(|f| f["name"] == "sluice_publishes" && f["type"] == "counter")
        );
    }
}

/// The configuration NUTS users know: probes at their own paths (the defaults then `404`), the
/// preflight's headers and methods from `[cors]`, and message frames of `sse.event_type`, which
/// the page at `/` listens for and `sluice sub --count` counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_paths_cors_lists_and_the_event_type_are_configurable() {
    let root = tempfile::tempdir().unwrap();
    let config = "[sse]\nevent_type = \"update\"\n\
        [probes]\nlive_path = \"/health/live\"\nready_path = \"/health/ready\"\nhealth_path = \"/health\"\n\
        [cors]\nallowed_origins = [\"https://app.example.com\"]\n\
        allowed_headers = [\"x-app-version\", \"last-event-id\"]\nallowed_methods = [\"GET\", \"OPTIONS\"]\n";
    let hub = SluiceProcess::serve(BIN, root.path(), Some(config))
        .await
        .expect("serve starts");
    for (path, status) in [
        ("/health/live", 200),
        ("/health/live/", 200),
        ("/health/ready", 200),
        ("/health", 200),
        ("/livez", 404),
        ("/readyz", 404),
        ("/healthz", 404),
    ] {
        let answer = http::get(&hub.url(path)).await.unwrap();
        assert_eq!(answer.status, status, "{path}: {}", answer.text());
    }

    let preflight = http::request(
        hyper::Method::OPTIONS,
        &hub.url("/events?topic=t"),
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "GET"),
            ("access-control-request-headers", "x-app-version"),
        ],
    )
    .unwrap()
    .body(Default::default())
    .unwrap();
    let preflight = http::send(preflight).await.unwrap();
    let allowed = |name: &str| preflight.header(name).unwrap_or("").to_ascii_lowercase();
    assert_eq!(
        allowed("access-control-allow-headers"),
        "x-app-version,last-event-id"
    );
    assert_eq!(allowed("access-control-allow-methods"), "get,options");

    let mut client = SseClient::connect(&hub.url("/events?topic=t"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let answer = http::post_json(&hub.url("/publish"), &json!({ "topic": "t", "payload": 1 }))
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let message = client.next_event().await.unwrap();
    assert_eq!(message.event_type(), "update");

    let page = http::get(&hub.url("/")).await.unwrap().text();
    // The console listens for the event type its inlined settings name.
    assert!(page.contains(r#""eventType":"update""#), "{page}");
    assert!(!page.contains("__SLUICE"), "{page}");

    let sub = tokio::process::Command::new(BIN)
        .args([
            "sub",
            "--hub",
            &hub.base_url(),
            "--last-id",
            "0",
            "--count",
            "1",
            "t",
        ])
        .output();
    let sub = tokio::time::timeout(WAIT, sub)
        .await
        .expect("sluice sub stops after one message")
        .unwrap();
    let printed = String::from_utf8_lossy(&sub.stdout);
    assert!(sub.status.success(), "{printed}");
    assert!(
        printed.lines().any(|l| l.starts_with("update ")),
        "{printed}"
    );
}

/// Rapid-reset floods set how often the HTTP/2 library would warn: its own warnings are never
/// shown, and the hub writes one line a minute for such connections — the first at once —
/// while `sluice_http2_connection_errors_total` counts every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_floods_are_counted_and_logged_once_a_minute() {
    use sluice_test_support::h2_frames;

    const LINE: &str = "HTTP/2 connections closed for resetting too many streams";
    let root = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(BIN, root.path(), Some("[http2]\nh2c = true\n"))
        .await
        .expect("serve starts");
    for flood in 1..=3 {
        let mut socket = tokio::net::TcpStream::connect(hub.addr()).await.unwrap();
        let mut bytes = h2_frames::PREFACE.to_vec();
        bytes.extend(h2_frames::frame(h2_frames::SETTINGS, 0, 0, &[]));
        bytes.extend(h2_frames::rapid_reset(500, "/events?topic=flood"));
        // The hub may close before it has read it all.
        let _ = socket.write_all(&bytes).await;
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, socket.read_to_end(&mut rest))
            .await
            .expect("the hub closes the connection")
            .ok();
        if flood == 1 {
            let line = hub.wait_for_log(LINE, WAIT).await.unwrap();
            assert!(line.contains("connections=1"), "{line}");
        }
    }
    let counted = "sluice_http2_connection_errors_total{reason=\"enhance_your_calm\"} 3";
    sluice_test_support::eventually_async("every flood counted", async || {
        let metrics = http::get(&hub.url("/metrics")).await.unwrap().text();
        metrics.contains(counted)
    })
    .await;
    // A line written after the count, so that anything the floods logged is in the output.
    let answer = http::get(&hub.url("/events?topic=a..b")).await.unwrap();
    assert_eq!(answer.status, 400);
    hub.wait_for_log("event stream refused", WAIT)
        .await
        .unwrap();
    let output = hub.log_tail(10_000);
    assert_eq!(output.matches(LINE).count(), 1, "{output}");
    assert!(
        !output.contains("reached limit"),
        "the library's own warning: {output}"
    );
}
