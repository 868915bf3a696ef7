//! The whole path in a real browser: headless Chromium opens pages served by the `sluice`
//! binary, subscribes with a plain `EventSource`, and receives what is published — also across
//! a hub crash and a stream recreated under the page.

use std::path::PathBuf;
use std::time::Duration;

use sluice_test_support::serde_json::{Value, json};
use sluice_test_support::{Browser, Page, SluiceProcess, http, tempfile};

/// How long the page may take to see what the test waits for (reconnects included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// `sluice serve` on its embedded default, with its data in a fresh directory.
struct Hub {
    process: SluiceProcess,
    data_dir: PathBuf,
    _work_dir: tempfile::TempDir,
}

impl Hub {
    async fn start() -> Self {
        let work_dir = tempfile::tempdir().expect("temp dir");
        let data_dir = work_dir.path().join("sluice-data");
        let cwd = work_dir.path().to_owned();
        let process = SluiceProcess::start_configured(
            env!("CARGO_BIN_EXE_sluice"),
            [
                "serve".into(),
                "--data-dir".into(),
                data_dir.clone().into_os_string(),
            ],
            move |command| {
                command.current_dir(&cwd);
            },
        )
        .await
        .expect("sluice serve starts");
        Self {
            process,
            data_dir,
            _work_dir: work_dir,
        }
    }

    /// Publishes `payload` on `topic` and returns the hub's answer (`id`, `seq`).
    async fn publish(&self, topic: &str, payload: Value) -> Value {
        let body = json!({"topic": topic, "payload": payload});
        let response = http::post_json(&self.process.url("/publish"), &body)
            .await
            .expect("publish request");
        assert!(
            response.status.is_success(),
            "publish {body}: {} {}",
            response.status,
            response.text()
        );
        response.json().expect("publish answers JSON")
    }
}

async fn open_page(browser: &Browser, url: &str) -> Page {
    let page = browser.new_page().await.expect("new tab");
    page.open(url).await.expect("page served by sluice");
    page
}

/// Waits until the built-in page has recorded `count` events of `kind`, and returns them.
async fn wait_for_events(page: &Page, kind: &str, count: usize) -> Vec<Value> {
    let condition = format!(
        "(() => {{ const found = (window.sluiceEvents || []).filter((e) => e.type === {kind}); \
         return found.length >= {count} && found; }})()",
        kind = json!(kind)
    );
    let found = page.wait_for(&condition, PAGE_TIMEOUT).await;
    let found = found.unwrap_or_else(|err| panic!("waiting for {count} `{kind}` events: {err:#}"));
    found.as_array().expect("array").clone()
}

/// Every event the built-in page recorded, in order.
async fn all_events(page: &Page) -> Vec<Value> {
    let events = page
        .eval("window.sluiceEvents")
        .await
        .expect("sluiceEvents");
    events.as_array().expect("array").clone()
}

/// The payloads of the `message` events, in order.
fn payloads(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|event| event["type"] == "message")
        .map(|event| event["data"]["payload"].clone())
        .collect()
}

#[tokio::test]
async fn event_source_in_chromium_receives_a_published_event() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open_page(&browser, &hub.process.url("/")).await;

    // An EventSource of the test's own, so only the hub's wire behaviour is under test.
    let script = r#"
        window.test = { connected: null, messages: [], errors: 0 };
        const source = new EventSource('/events?topic=browser.hello');
        source.addEventListener('connected', (e) => {
            window.test.connected = { id: e.lastEventId, data: JSON.parse(e.data) };
        });
        source.onmessage = (e) => {
            window.test.messages.push({ id: e.lastEventId, data: JSON.parse(e.data) });
        };
        source.onerror = () => { window.test.errors += 1; };
        true
    "#;
    page.eval(script).await.expect("EventSource created");
    let connected = page
        .wait_for("window.test.connected", PAGE_TIMEOUT)
        .await
        .expect("the hub sends its connected frame");
    assert_eq!(connected["data"]["topics"], json!(["browser.hello"]));

    let published = hub
        .publish("browser.hello", json!({"greeting": "hi", "n": 1}))
        .await;

    let messages = page
        .wait_for(
            "window.test.messages.length > 0 && window.test.messages",
            PAGE_TIMEOUT,
        )
        .await
        .expect("the page receives the published event");
    let messages = messages.as_array().expect("array");
    assert_eq!(messages.len(), 1, "exactly one event: {messages:?}");
    let message = &messages[0];
    assert_eq!(message["data"]["topic"], "browser.hello");
    assert_eq!(
        message["data"]["payload"],
        json!({"greeting": "hi", "n": 1})
    );
    assert!(message["data"]["time"].is_string(), "{message}");
    assert_eq!(
        message["id"], published["id"],
        "the event id is the one publish returned"
    );
    assert_eq!(
        page.eval("window.test.errors").await.expect("errors"),
        Value::from(0)
    );
}

#[tokio::test]
async fn built_in_page_lists_published_events_in_order() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open_page(&browser, &hub.process.url("/?topic=browser.page")).await;
    wait_for_events(&page, "connected", 1).await;

    for n in 1..=3 {
        hub.publish("browser.page", json!({"n": n})).await;
    }
    // A message on another topic must not reach the page.
    hub.publish("browser.other", json!({"n": 0})).await;
    hub.publish("browser.page", json!({"n": 4})).await;

    wait_for_events(&page, "message", 4).await;
    let events = all_events(&page).await;
    assert_eq!(
        payloads(&events),
        [1, 2, 3, 4].map(|n| json!({"n": n})),
        "{events:?}"
    );
}

#[tokio::test]
async fn page_reconnects_after_a_hub_crash_and_gets_every_message_once() {
    let mut hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open_page(&browser, &hub.process.url("/?topic=browser.resume")).await;
    wait_for_events(&page, "connected", 1).await;
    for n in 1..=2 {
        hub.publish("browser.resume", json!({"n": n})).await;
    }
    wait_for_events(&page, "message", 2).await;

    // The hub dies mid-stream; the browser notices and keeps retrying by itself.
    hub.process.kill().expect("kill the hub");
    hub.process
        .restart()
        .await
        .expect("hub restarts on the same address");
    // Published before or after the browser is back: either way it arrives exactly once.
    hub.publish("browser.resume", json!({"n": 3})).await;
    wait_for_events(&page, "connected", 2).await;
    hub.publish("browser.resume", json!({"n": 4})).await;

    wait_for_events(&page, "message", 4).await;
    let events = all_events(&page).await;
    assert_eq!(
        payloads(&events),
        [1, 2, 3, 4].map(|n| json!({"n": n})),
        "every message exactly once, in order: {events:?}"
    );
    assert!(
        events.iter().all(|event| event["type"] != "gap"),
        "nothing was lost: {events:?}"
    );
}

#[tokio::test]
async fn stream_recreated_under_the_page_is_reported_as_a_gap() {
    let mut hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open_page(&browser, &hub.process.url("/?topic=browser.epoch")).await;
    wait_for_events(&page, "connected", 1).await;
    hub.publish("browser.epoch", json!({"n": 1})).await;
    wait_for_events(&page, "message", 1).await;

    // The stream is deleted and created anew: the page's position belongs to the old one.
    hub.process.kill().expect("kill the hub");
    std::fs::remove_dir_all(&hub.data_dir).expect("delete the data");
    hub.process
        .restart()
        .await
        .expect("hub restarts on the same address");

    let gaps = wait_for_events(&page, "gap", 1).await;
    assert_eq!(gaps[0]["data"]["reason"], "incarnation", "{gaps:?}");
    hub.publish("browser.epoch", json!({"n": 2})).await;
    wait_for_events(&page, "message", 2).await;
    let events = all_events(&page).await;
    assert_eq!(
        payloads(&events),
        [json!({"n": 1}), json!({"n": 2})],
        "{events:?}"
    );
    let gap_at = events.iter().position(|e| e["type"] == "gap");
    let second_message_at = events.iter().rposition(|e| e["type"] == "message");
    assert!(
        gap_at < second_message_at,
        "the gap comes before delivery continues: {events:?}"
    );
}

/// The console started with a start option (`from=latest` in its address) gets the latest
/// message of each subject, then live ones; after the hub crashes it resumes after the last
/// event it received, not from the start option again: every message once, nothing replayed
/// twice.
#[tokio::test]
async fn page_started_from_latest_resumes_by_its_last_id_after_a_hub_crash() {
    let mut hub = Hub::start().await;
    for (subject, n) in [("a", 1), ("b", 2), ("a", 3)] {
        hub.publish(&format!("browser.kv.{subject}"), json!({"n": n}))
            .await;
    }
    let browser = Browser::launch().await.expect("chromium starts");
    let url = hub.process.url("/?topic=browser.kv.%3E&from=latest");
    let page = open_page(&browser, &url).await;
    wait_for_events(&page, "message", 2).await;
    assert_eq!(
        payloads(&all_events(&page).await),
        [json!({"n": 2}), json!({"n": 3})],
        "the latest of b, then of a"
    );

    hub.process.kill().expect("kill the hub");
    hub.process
        .restart()
        .await
        .expect("hub restarts on the same address");
    // Before or after the page is back: either way once, and no latest state again.
    hub.publish("browser.kv.a", json!({"n": 4})).await;
    wait_for_events(&page, "connected", 2).await;
    hub.publish("browser.kv.b", json!({"n": 5})).await;

    wait_for_events(&page, "message", 4).await;
    let events = all_events(&page).await;
    assert_eq!(
        payloads(&events),
        [2, 3, 4, 5].map(|n| json!({"n": n})),
        "{events:?}"
    );
    assert!(
        events.iter().all(|event| event["type"] != "gap"),
        "nothing was lost: {events:?}"
    );
}
