//! A real headless Chromium against the `sluice` binary over HTTPS: twelve `EventSource`s to
//! one origin all stream at once over HTTP/2, get every message exactly once in order, and
//! resume after the hub restarts; the same page over plain HTTP/1.1 meets the browser's limit
//! of six connections per origin (which is what shows HTTP/2 was used).

use std::path::PathBuf;
use std::time::Duration;

use sluice_test_support::serde_json::{Value, json};
use sluice_test_support::{Browser, Page, SluiceProcess, TestCa, http, tempfile};

/// How long the page may take to see what the test waits for (reconnects included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Event sources the page opens: twice the browser's HTTP/1.1 limit per origin.
const SOURCES: usize = 12;

/// Starts `sluice serve` in `dir`, speaking TLS on its `listen` when `tls` is set.
async fn start_hub(dir: &tempfile::TempDir, tls: bool) -> SluiceProcess {
    start_hub_with(dir, tls, "").await
}

/// [`start_hub`] with `extra` configuration after the `[tls]` section.
async fn start_hub_with(dir: &tempfile::TempDir, tls: bool, extra: &str) -> SluiceProcess {
    let mut args: Vec<std::ffi::OsString> = vec!["serve".into()];
    if tls {
        let (cert, key) = TestCa::new().issue("sluice hub").write(dir.path(), "hub");
        let config = dir.path().join("sluice.toml");
        let text = format!(
            "[tls]\ncert_file = {}\nkey_file = {}\n{extra}",
            json!(cert.display().to_string()),
            json!(key.display().to_string())
        );
        std::fs::write(&config, text).expect("write the config");
        args.extend(["--config".into(), config.into_os_string()]);
    }
    let data_dir: PathBuf = dir.path().join("data");
    args.extend(["--data-dir".into(), data_dir.into_os_string()]);
    SluiceProcess::start(env!("CARGO_BIN_EXE_sluice"), args)
        .await
        .expect("sluice serve starts")
}

/// Opens the hub's page and, in it, [`SOURCES`] event sources on `topic`, each recording its
/// `connected` frames and its messages.
async fn open_sources(browser: &Browser, hub: &SluiceProcess, topic: &str) -> Page {
    let page = browser.new_page().await.expect("new tab");
    page.open(&hub.url("/"))
        .await
        .expect("page served by sluice");
    let script = format!(
        r#"
        window.sources = [];
        for (let i = 0; i < {SOURCES}; i++) {{
            const record = {{ connected: 0, messages: [] }};
            const source = new EventSource('/events?topic={topic}');
            source.addEventListener('connected', () => {{ record.connected += 1; }});
            source.onmessage = (e) => {{
                record.messages.push({{ id: e.lastEventId, payload: JSON.parse(e.data).payload }});
            }};
            window.sources.push(record);
        }}
        true
        "#
    );
    page.eval(&script).await.expect("event sources created");
    page
}

/// Waits until every source has been connected `times` times and holds `count` messages.
async fn wait_all(page: &Page, times: usize, count: usize) {
    let condition = format!(
        "window.sources.every((s) => s.connected >= {times} && s.messages.length >= {count})"
    );
    page.wait_for(&condition, PAGE_TIMEOUT)
        .await
        .unwrap_or_else(|err| {
            panic!("all sources connected {times}x with {count} messages: {err:#}")
        });
}

/// Publishes from the page itself (a `fetch` on the same HTTP/2 connection).
async fn publish_from_page(page: &Page, topic: &str, n: u64) {
    let script = format!(
        "fetch('/publish', {{ method: 'POST', headers: {{ 'content-type': 'application/json' }}, \
         body: JSON.stringify({{ topic: '{topic}', payload: {n} }}) }}).then((r) => r.status)"
    );
    let status = page.eval(&script).await.expect("publish from the page");
    assert_eq!(status, json!(200), "publish {n}");
}

#[tokio::test]
async fn twelve_event_sources_over_https_share_http2_and_resume_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut hub = start_hub(&dir, true).await;
    assert!(hub.base_url().starts_with("https://"), "{}", hub.base_url());
    let browser = Browser::launch_with_flags(&["--ignore-certificate-errors"])
        .await
        .expect("chromium starts");
    let topic = "browser.https";
    let page = open_sources(&browser, &hub, topic).await;
    let protocol = page
        .eval("performance.getEntriesByType('navigation')[0].nextHopProtocol")
        .await
        .expect("protocol");
    assert_eq!(protocol, json!("h2"), "the page came over HTTP/2");

    wait_all(&page, 1, 0).await;
    for n in 1..=3 {
        publish_from_page(&page, topic, n).await;
    }
    wait_all(&page, 1, 3).await;

    // The hub dies mid-stream; every source notices and resumes by itself.
    hub.kill().expect("kill the hub");
    hub.restart()
        .await
        .expect("hub restarts on the same address");
    wait_all(&page, 2, 3).await;
    for n in 4..=5 {
        publish_from_page(&page, topic, n).await;
    }
    wait_all(&page, 2, 5).await;

    let sources = page.eval("window.sources").await.expect("sources");
    let sources = sources.as_array().expect("array");
    assert_eq!(sources.len(), SOURCES);
    for source in sources {
        let payloads: Vec<Value> = source["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["payload"].clone())
            .collect();
        assert_eq!(
            payloads,
            [1, 2, 3, 4, 5].map(|n| json!(n)),
            "every message exactly once, in order: {source}"
        );
    }
}

#[tokio::test]
async fn the_same_page_over_http1_meets_the_six_connection_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = start_hub(&dir, false).await;
    let browser = Browser::launch().await.expect("chromium starts");
    let topic = "browser.http1";
    let page = open_sources(&browser, &hub, topic).await;
    let connected = "window.sources.filter((s) => s.connected > 0).length";
    page.wait_for(&format!("{connected} >= 5"), PAGE_TIMEOUT)
        .await
        .expect("the first sources connect");

    let body = json!({"topic": topic, "payload": 1});
    let published = http::post_json(&hub.url("/publish"), &body)
        .await
        .expect("publish");
    assert!(published.status.is_success(), "{}", published.text());
    // The sources streaming before the publish receive the message; the others are still
    // waiting for one of the browser's six connections.
    page.wait_for(
        "window.sources.filter((s) => s.messages.length === 1).length >= 5",
        PAGE_TIMEOUT,
    )
    .await
    .expect("the streaming sources get the message");
    let open = page.eval(connected).await.expect("count");
    let open = open.as_u64().expect("number");
    assert!(
        (5..=6).contains(&open),
        "over HTTP/1.1 at most six of {SOURCES} sources stream at once, got {open}"
    );
}

/// Served over HTTPS, the console sets the subscriber's token cookie `Secure`, so the browser
/// never sends it over plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_sets_its_token_cookie_secure_over_https() {
    let dir = tempfile::tempdir().expect("temp dir");
    let auth = "[auth.subscribe]\nalgorithms = [\"HS256\"]\ncookie_name = \"sluiceAuthorization\"\n\
                keys = [{ type = \"hmac\", secret = \"0123456789abcdef0123456789abcdef-console\" }]\n";
    let hub = start_hub_with(&dir, true, auth).await;
    let browser = Browser::launch_with_flags(&["--ignore-certificate-errors"])
        .await
        .expect("chromium starts");
    let page = browser.new_page().await.expect("new tab");
    page.open(&hub.url("/")).await.expect("the console loads");
    let script = "document.getElementById('token').value = 'a.token.value'; \
                  document.getElementById('topics').value = 'console.secure'; \
                  document.getElementById('subscribe').click(); true";
    page.eval(script).await.expect("subscribe pressed");
    // The library sets the cookie once it has the token, which it asks for asynchronously.
    page.wait_for(
        "document.cookie.includes('sluiceAuthorization=')",
        PAGE_TIMEOUT,
    )
    .await
    .expect("the console sets its token cookie");
    let cookies = page.cookies().await.expect("the browser's cookies");
    let cookie = cookies
        .iter()
        .find(|c| c["name"] == "sluiceAuthorization")
        .unwrap_or_else(|| panic!("the token cookie is set: {cookies:?}"));
    assert_eq!(cookie["value"], "a.token.value", "{cookie}");
    assert_eq!(cookie["secure"], true, "{cookie}");
    assert_eq!(cookie["sameSite"], "Strict", "{cookie}");
}
