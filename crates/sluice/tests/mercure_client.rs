//! A third-party Mercure client against the `sluice` binary, used unchanged: the Python
//! publisher library `mercure-publisher` from PyPI (pinned by hash in
//! `scripts/mercure-client-requirements.txt`, installed into `.venv` by `scripts/test`) makes
//! its own publisher token and posts its own form, and sluice's strict SSE client checks that
//! each update arrives exactly as published.
//!
//! The library runs from `SLUICE_MERCURE_PYTHON` (a Python that has it), else
//! `.venv/bin/python`; without it the test fails, saying how to install it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{Frame, SluiceProcess, SseClient, repo_root, tempfile};
use tokio::io::AsyncWriteExt;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const PUBLISHER_KEY: &str = "client-publisher-secret-0123456789abcdef";
const SUBSCRIBER_KEY: &str = "client-subscriber-secret-0123456789abcdef";
const BOOK: &str = "https://example.com/books/1";
const AUTHOR: &str = "https://example.com/authors/7";

/// How long one run of the publisher script may take (Python's start included).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The Python the library is installed in.
fn python() -> PathBuf {
    std::env::var_os("SLUICE_MERCURE_PYTHON")
        .map_or_else(|| repo_root().join(".venv/bin/python"), PathBuf::from)
}

/// Fails the test, saying how to install it, when `python` cannot import the library.
async fn require_the_library(python: &PathBuf) {
    let check = tokio::process::Command::new(python)
        .args(["-c", "import mercure_publisher"])
        .output()
        .await;
    let problem = match check {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(err) => err.to_string(),
    };
    panic!(
        "the Mercure client library mercure-publisher is not available in {}: {problem}\n\
         ./scripts/test installs it into .venv; by hand: \
         .venv/bin/pip install --require-hashes -r scripts/mercure-client-requirements.txt \
         (or point SLUICE_MERCURE_PYTHON at a Python that has it)",
        python.display()
    );
}

/// Runs the library's publisher (`tests/mercure_client/publish.py`) with a token granting
/// `publish_topics`, and returns its answer per update (`{"id": …}` or `{"status": …}`).
async fn publish_with_the_library(
    hub: &SluiceProcess,
    publish_topics: &[&str],
    updates: Value,
) -> Vec<Value> {
    let python = python();
    require_the_library(&python).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mercure_client/publish.py");
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(hub.url("/.well-known/mercure"))
        .env("PUBLISHER_JWT_KEY", PUBLISHER_KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", python.display()));
    let request = json!({ "publish_topics": publish_topics, "updates": updates });
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(request.to_string().as_bytes())
        .await
        .expect("write the request");
    drop(stdin);
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish in {SCRIPT_TIMEOUT:?}", script.display()))
        .expect("the publisher script runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stderr}",
        script.display(),
        output.status
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The id the hub answered for one update.
fn answered_id(answer: &Value) -> String {
    answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the hub refused the update: {answer}"))
        .to_owned()
}

async fn start_hub(dir: &tempfile::TempDir) -> SluiceProcess {
    let config = format!(
        "topic_prefix = \"app\"\n[mercure]\nenabled = true\n\
         publisher_jwt_key = \"{PUBLISHER_KEY}\"\nsubscriber_jwt_key = \"{SUBSCRIBER_KEY}\"\n"
    );
    SluiceProcess::serve(BIN, dir.path(), Some(&config))
        .await
        .expect("sluice serve starts with the Mercure hub")
}

/// A subscriber on `BOOK` and the authors' URI Template, granted every private update.
async fn subscribe(hub: &SluiceProcess) -> SseClient {
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "mercure": { "subscribe": ["*"] } }),
        &jsonwebtoken::EncodingKey::from_secret(SUBSCRIBER_KEY.as_bytes()).expect("a key"),
    )
    .expect("a token");
    let url = hub.url(
        "/.well-known/mercure?topic=https%3A%2F%2Fexample.com%2Fbooks%2F1\
         &topic=https%3A%2F%2Fexample.com%2Fauthors%2F%7Bid%7D",
    );
    let bearer = format!("Bearer {token}");
    let client = SseClient::connect_with_headers(&url, &[("authorization", bearer.as_str())])
        .await
        .expect("subscribe");
    assert_eq!(client.status(), 200);
    client
}

fn frame(id: &str, event: Option<&str>, retry: Option<u64>, data: &str) -> Frame {
    Frame {
        id: Some(id.to_owned()),
        event: event.map(str::to_owned),
        data: Some(data.to_owned()),
        retry,
        comment: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_published_with_the_mercure_publisher_library_arrive_exactly_as_published() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = start_hub(&dir).await;
    let mut subscriber = subscribe(&hub).await;

    let updates = json!([
        { "topic": BOOK, "data": { "status": "published" } },
        {
            "topic": ["https://example.com/shelves/3", BOOK],
            "data": "line one\nline two",
            "private": true,
            "id": "urn:uuid:0d4b7a0e-6f0b-4c36-9a52-2b9ad9e1d3b1",
            "type": "book.shelved",
            "retry": 1500,
        },
        { "topic": AUTHOR, "data": "selected by the template" },
        { "topic": "https://example.com/other", "data": "selected by nothing" },
        { "topic": BOOK, "data": "last" },
    ]);
    let answers = publish_with_the_library(&hub, &["*"], updates).await;
    assert_eq!(answers.len(), 5, "{answers:?}");
    let ids: Vec<String> = answers.iter().map(answered_id).collect();
    assert_eq!(ids[1], "urn:uuid:0d4b7a0e-6f0b-4c36-9a52-2b9ad9e1d3b1");

    let mut received = Vec::new();
    for _ in 0..4 {
        received.push(subscriber.next_event().await.expect("an update"));
    }
    assert_eq!(
        received,
        [
            frame(&ids[0], None, None, r#"{"status": "published"}"#),
            frame(
                &ids[1],
                Some("book.shelved"),
                Some(1500),
                "line one\nline two"
            ),
            frame(&ids[2], None, None, "selected by the template"),
            frame(&ids[4], None, None, "last"),
        ],
        "each update as published, the unselected one left out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mercure_publisher_library_is_refused_topics_its_token_does_not_grant() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = start_hub(&dir).await;
    let mut subscriber = subscribe(&hub).await;

    let updates = json!([
        { "topic": AUTHOR, "data": "not granted" },
        { "topic": BOOK, "data": "granted" },
    ]);
    let granted = ["https://example.com/books/{id}"];
    let answers = publish_with_the_library(&hub, &granted, updates).await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(
        answers[0]["status"],
        json!(403),
        "the library reports the refusal: {answers:?}"
    );
    let id = answered_id(&answers[1]);

    let update = subscriber.next_event().await.expect("an update");
    assert_eq!(
        update,
        frame(&id, None, None, "granted"),
        "only the granted update was stored"
    );
}
