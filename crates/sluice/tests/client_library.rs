//! The browser client library (`/sluice.js`, clients/js/) in headless Chromium against the
//! `sluice` binary: the cursor survives reloads, a crash of the hub, a refusal and an expired
//! token without losing or repeating a message; gaps reach the application with their range;
//! without storage it still resumes within the page. Each test fails without the library's
//! part it names (a plain `EventSource` restarts live after a reload, gives up on a refusal,
//! and cannot renew a token).

use std::path::Path;
use std::time::Duration;

use sluice_test_support::serde_json::{Value, json};
use sluice_test_support::{Browser, Page, SluiceProcess, http, tempfile};

/// How long the page may take to see what the test waits for (reconnects included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

const SECRET: &str = "0123456789abcdef0123456789abcdef-library-secret";

/// `sluice serve` with `config` (TOML) over a fresh data directory.
struct Hub {
    process: SluiceProcess,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("sluice.toml");
        std::fs::write(&config_path, config).expect("config written");
        let data_dir = dir.path().join("data");
        let process = SluiceProcess::start_configured(
            env!("CARGO_BIN_EXE_sluice"),
            [
                "serve".into(),
                "--config".into(),
                config_path.into_os_string(),
                "--data-dir".into(),
                data_dir.into_os_string(),
            ],
            |_| {},
        )
        .await
        .expect("sluice serve starts");
        Self { process, _dir: dir }
    }

    /// Publishes `n` on `topic`; the event id the hub gave it.
    async fn publish(&self, topic: &str, n: u64) -> String {
        publish(&self.process.url("/publish"), topic, n).await
    }
}

async fn publish(url: &str, topic: &str, n: u64) -> String {
    let body = json!({ "topic": topic, "payload": { "n": n } });
    let response = http::post_json(url, &body).await.expect("publish request");
    assert!(response.status.is_success(), "{}", response.text());
    response.json().expect("JSON")["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

/// A same-origin page of the hub without a content security policy, where the test's script
/// imports the library as an application would.
const HOST: &str = "/stream";

/// Runs the application: imports `/sluice.js` and subscribes with `options` (a JavaScript
/// object literal, without the callbacks), recording what it is given in `sessionStorage`
/// (`test.log`: message ids; `test.events`: the ids of the message events `onEvent` was given;
/// both survive reloads) and in `window` (`testGaps`, `testStates`: `[state, reason, status,
/// retryIn, description]`).
async fn run_app(page: &Page, options: &str) {
    let script = format!(
        "(async () => {{
           const {{ subscribe }} = await import('/sluice.js');
           const saved = () => JSON.parse(sessionStorage.getItem('test.log') || '[]');
           window.testLog = saved();
           window.testGaps = [];
           window.testStates = [];
           window.testSub = subscribe(Object.assign({options}, {{
             onMessage: (m) => {{
               window.testLog.push(m.id);
               try {{ sessionStorage.setItem('test.log', JSON.stringify(window.testLog)); }} catch (_) {{}}
             }},
             onEvent: (e) => {{
               if (e.type !== 'message') return;
               const events = JSON.parse(sessionStorage.getItem('test.events') || '[]');
               events.push(e.id);
               try {{ sessionStorage.setItem('test.events', JSON.stringify(events)); }} catch (_) {{}}
             }},
             onGap: (g) => window.testGaps.push(g),
             onState: (s, d) => window.testStates.push([s, d.reason || null, d.status || null, d.retryIn || null, d.description || null]),
           }}));
           return true;
         }})()"
    );
    page.eval(&script).await.expect("the application starts");
}

/// The ids the application was given, once it has at least `count`.
async fn delivered(page: &Page, count: usize) -> Vec<String> {
    let condition = format!("window.testLog && window.testLog.length >= {count} && window.testLog");
    let log = page
        .wait_for(&condition, PAGE_TIMEOUT)
        .await
        .unwrap_or_else(|err| panic!("waiting for {count} messages: {err:#}"));
    serde_ids(&log)
}

fn serde_ids(log: &Value) -> Vec<String> {
    log.as_array()
        .expect("an array")
        .iter()
        .map(|id| id.as_str().expect("an id").to_owned())
        .collect()
}

async fn wait_state(page: &Page, state: &str) {
    let condition = format!(
        "window.testSub && window.testSub.state === {}",
        json!(state)
    );
    page.wait_for(&condition, PAGE_TIMEOUT)
        .await
        .unwrap_or_else(|err| panic!("waiting for state {state}: {err:#}"));
}

async fn open(browser: &Browser, url: &str) -> Page {
    let page = browser.new_page().await.expect("new tab");
    page.open(url).await.expect("the host page loads");
    page
}

/// A token for subscribing to everything that expires `secs` seconds from now (in the past
/// when negative).
fn token(secs: i64) -> String {
    token_for(secs, ">")
}

/// A token for subscribing to `filter` that expires `secs` seconds from now.
fn token_for(secs: i64, filter: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let exp = now.saturating_add_signed(secs);
    let claims = json!({ "sub": "page", "exp": exp, "sluice": { "subscribe": [filter] } });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

/// A hub whose subscribers need a token, carried in `access_token`, and a page of it whose
/// application gets `tokens` one after the other from its `token()` (`window.testAsked`
/// counts the calls).
async fn token_app(browser: &Browser, tokens: [String; 2]) -> (Hub, Page) {
    let hub = Hub::start(&auth_config()).await;
    let page = open(browser, &hub.process.url(HOST)).await;
    let tokens = json!(tokens);
    page.eval(&format!(
        "window.testTokens = {tokens}; window.testAsked = 0; true"
    ))
    .await
    .expect("tokens");
    run_app(
        &page,
        "{ topics: ['auth.t'], tokenParam: 'access_token', \
           token: () => window.testTokens[window.testAsked++] }",
    )
    .await;
    (hub, page)
}

/// A configuration whose subscribers need a token, carried in `access_token`.
fn auth_config() -> String {
    format!(
        "[auth.subscribe]\nalgorithms = [\"HS256\"]\nleeway = 0\nquery_param = \"access_token\"\n\
         keys = [{{ type = \"hmac\", secret = \"{SECRET}\" }}]\n"
    )
}

/// The last recorded state, once the subscription is closed: `[state, reason, status,
/// retryIn, description]`.
async fn closed_with(page: &Page) -> Value {
    wait_state(page, "closed").await;
    page.eval("window.testStates.at(-1)")
        .await
        .expect("the last state")
}

/// Whether some recorded state has `reason`.
async fn told(page: &Page, reason: &str) -> bool {
    let states = page.eval("window.testStates").await.expect("states");
    states
        .as_array()
        .expect("states")
        .iter()
        .any(|s| s[1] == reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_serves_the_library_as_a_module_under_4_kib_gzipped() {
    let hub = Hub::start("").await;
    let answer = http::get(&hub.process.url("/sluice.js"))
        .await
        .expect("GET");
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.headers["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(answer.headers["access-control-allow-origin"], "*");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/sluice.js");
    assert_eq!(answer.body, std::fs::read(&source).expect("the library"));
    // A page that holds it already gets a 304.
    let etag = answer.headers["etag"].to_str().expect("an etag").to_owned();
    let request = http::request(
        "GET".parse().expect("a method"),
        &hub.process.url("/sluice.js"),
        &[("if-none-match", etag.as_str())],
    )
    .expect("request")
    .body(String::new().into())
    .expect("body");
    assert_eq!(http::send(request).await.expect("GET").status, 304);
    // Its size as shipped, gzipped without minifying (minified it is smaller still).
    let gzip = std::process::Command::new("gzip")
        .args(["-9", "-c"])
        .arg(&source)
        .output()
        .expect("gzip runs");
    assert!(gzip.status.success());
    assert!(
        gzip.stdout.len() < 4096,
        "{} bytes gzipped",
        gzip.stdout.len()
    );
}

/// Five reloads while 600 messages are published at 200 a second: every message reaches the
/// application exactly once, in order — through `onMessage` and through `onEvent` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_arrives_once_across_five_reloads_at_200_a_second() {
    let hub = Hub::start("").await;
    let browser = Browser::launch().await.expect("chromium starts");
    let host = hub.process.url(HOST);
    let page = open(&browser, &host).await;
    let options = "{ topics: ['reload.t'] }";
    run_app(&page, options).await;
    wait_state(&page, "open").await;

    let url = hub.process.url("/publish");
    let publisher = tokio::spawn(async move {
        let mut ids = Vec::new();
        let mut pace = tokio::time::interval(Duration::from_millis(5));
        for n in 0..600 {
            pace.tick().await;
            ids.push(publish(&url, "reload.t", n).await);
        }
        ids
    });
    for reload in 1..=5 {
        delivered(&page, reload * 90).await;
        page.open(&host).await.expect("reloaded");
        run_app(&page, options).await;
    }
    let sent = publisher.await.expect("the publisher");
    let got = delivered(&page, sent.len()).await;
    assert_eq!(
        got, sent,
        "every message once, in order, across the reloads"
    );
    let events = page
        .eval("JSON.parse(sessionStorage.getItem('test.events') || '[]')")
        .await
        .expect("the onEvent log");
    assert_eq!(
        serde_ids(&events),
        sent,
        "onEvent: every message once, in order"
    );
}

/// The hub is killed (SIGKILL) mid-stream and started again: nothing is lost or repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_killed_and_restarted_loses_and_repeats_nothing() {
    let mut hub = Hub::start("").await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    run_app(&page, "{ topics: ['crash.t'], retry: 200 }").await;
    wait_state(&page, "open").await;
    let mut sent = Vec::new();
    for n in 0..3 {
        sent.push(hub.publish("crash.t", n).await);
    }
    delivered(&page, 3).await;
    hub.process.kill().expect("kill the hub");
    hub.process.restart().await.expect("the hub restarts");
    for n in 3..6 {
        sent.push(hub.publish("crash.t", n).await);
    }
    assert_eq!(delivered(&page, 6).await, sent);
    wait_state(&page, "open").await;
    sent.push(hub.publish("crash.t", 6).await);
    assert_eq!(delivered(&page, 7).await, sent);
}

/// Refused at `max_connections` (a plain request gets 429): the library keeps trying and
/// subscribes once a place is free, from the start it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_at_max_connections_recovers_once_there_is_room() {
    let hub = Hub::start("[limits]\nmax_connections = 1\n").await;
    let held = sluice_test_support::SseClient::connect(&hub.process.url("/events?topic=held"))
        .await
        .expect("the one place is taken");
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    run_app(
        &page,
        "{ topics: ['room.t'], from: 'earliest', retry: 200, maxRetry: 400 }",
    )
    .await;
    let sent = hub.publish("room.t", 1).await;
    page.wait_for(
        "window.testStates.some((s) => s[0] === 'reconnecting' && s[1] === 'refused')",
        PAGE_TIMEOUT,
    )
    .await
    .expect("told it is refused and retrying");
    drop(held);
    wait_state(&page, "open").await;
    assert_eq!(delivered(&page, 1).await, [sent]);
}

/// A token that expires mid-stream: the library asks the application's `token()` for a fresh
/// one and resumes where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed_through_the_callback_without_loss() {
    let browser = Browser::launch().await.expect("chromium starts");
    let (hub, page) = token_app(&browser, [token(3), token(600)]).await;
    wait_state(&page, "open").await;
    let mut sent = vec![hub.publish("auth.t", 1).await];
    delivered(&page, 1).await;
    // The first token expires: the stream ends with `token_expired`, the second is asked for.
    page.wait_for("window.testAsked === 2", PAGE_TIMEOUT)
        .await
        .expect("a fresh token was asked for");
    sent.push(hub.publish("auth.t", 2).await);
    assert_eq!(delivered(&page, 2).await, sent);
    assert!(told(&page, "token_expired").await);
}

/// A resume position the stream no longer holds: the gap reaches the application with the
/// lost range, so it can fetch what it needs elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_reaches_the_application_with_its_range() {
    let config = "[[embedded.streams]]\nname = \"sluice\"\nsubjects = [\">\"]\nmax_msgs = 2\n";
    let hub = Hub::start(config).await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    let first = hub.publish("gap.t", 1).await;
    for n in 2..=5 {
        hub.publish("gap.t", n).await;
    }
    // As if the page had stored the first message's id before it went away.
    page.eval(&format!(
        "sessionStorage.setItem('sluice.cursor.gap.t', {}); true",
        json!(first)
    ))
    .await
    .expect("a stored cursor");
    run_app(&page, "{ topics: ['gap.t'] }").await;
    delivered(&page, 2).await;
    let gaps = page.eval("window.testGaps").await.expect("gaps");
    assert_eq!(gaps.as_array().expect("gaps").len(), 1, "{gaps}");
    let gap = &gaps[0];
    assert_eq!(
        (&gap["reason"], &gap["from"], &gap["to"]),
        (&json!("expired"), &json!(2), &json!(3)),
        "{gap}"
    );
}

/// Storage the browser refuses (as in some private modes): the library keeps the cursor in
/// memory, and a reconnect within the page still resumes exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_storage_it_still_resumes_within_the_page() {
    let mut hub = Hub::start("").await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    page.eval(
        "Object.defineProperty(window, 'sessionStorage', { get() { \
           throw new DOMException('storage is disabled', 'SecurityError'); } }); true",
    )
    .await
    .expect("storage refused");
    // The application's own log lives in `window` here.
    let script = "(async () => {
        const { subscribe } = await import('/sluice.js');
        window.testLog = [];
        window.testSub = subscribe({ topics: ['private.t'], retry: 200,
          onMessage: (m) => window.testLog.push(m.id) });
        return true;
      })()";
    page.eval(script).await.expect("the application starts");
    wait_state(&page, "open").await;
    let mut sent = vec![hub.publish("private.t", 1).await];
    delivered(&page, 1).await;
    hub.process.kill().expect("kill the hub");
    hub.process.restart().await.expect("the hub restarts");
    sent.push(hub.publish("private.t", 2).await);
    assert_eq!(delivered(&page, 2).await, sent);
}

/// Back online, the library reconnects at once instead of waiting out the hub's `retry:` (a
/// minute here, longer than the test waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coming_back_online_reconnects_at_once() {
    let mut hub = Hub::start("[sse]\nretry = \"60s\"\n").await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    run_app(&page, "{ topics: ['online.t'] }").await;
    wait_state(&page, "open").await;
    let mut sent = vec![hub.publish("online.t", 1).await];
    delivered(&page, 1).await;
    // Off the network, the stream ends (the hub is gone); the browser would wait a minute.
    page.set_offline(true).await.expect("page offline");
    hub.process.kill().expect("kill the hub");
    wait_state(&page, "reconnecting").await;
    hub.process.restart().await.expect("the hub restarts");
    sent.push(hub.publish("online.t", 2).await);
    page.set_offline(false).await.expect("page online");
    assert_eq!(delivered(&page, 2).await, sent);
}

/// A token refused with `401` (here one already expired when the page starts): `EventSource`
/// gives up; the library learns why, asks `token()` again and subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_asks_for_a_fresh_token_and_subscribes() {
    let browser = Browser::launch().await.expect("chromium starts");
    let (hub, page) = token_app(&browser, [token(-60), token(600)]).await;
    wait_state(&page, "open").await;
    assert_eq!(page.eval("window.testAsked").await.expect("asked"), 2);
    assert!(told(&page, "unauthorized").await);
    let sent = hub.publish("auth.t", 1).await;
    assert_eq!(delivered(&page, 1).await, [sent]);
}

/// What a proxy in front of the hub answers while the hub is away: `503` with `Retry-After`,
/// to the `EventSource` (which then gives up for good) and to the library's question. The
/// library waits as told and subscribes once the stream is there. The stand-in answers the
/// first two requests for `/events` so, then streams a `connected` frame and a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_with_retry_after_is_waited_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("address"));
    let library =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/sluice.js"))
            .expect("the library");
    let server = tokio::spawn(async move {
        let mut streams = 0;
        let mut held = Vec::new();
        loop {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.expect("read");
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
            let (status, kind, extra, body): (&str, &str, &str, Vec<u8>) = if path == "/sluice.js" {
                ("200 OK", "text/javascript", "", library.clone())
            } else if path.starts_with("/events") {
                streams += 1;
                if streams <= 2 {
                    let body = br#"{"code":503,"description":"the hub is away"}"#.to_vec();
                    (
                        "503 Service Unavailable",
                        "application/json",
                        "Retry-After: 1\r\n",
                        body,
                    )
                } else {
                    let frames = "retry: 60000\n\nid: 0-ab\nevent: connected\ndata: {\"topics\":[\"t\"]}\n\n\
                                  id: 1-ab\nevent: message\ndata: {\"topic\":\"t\",\"payload\":1,\"time\":\"2026-12-07T00:00:00Z\"}\n\n";
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n{frames}"
                    );
                    socket.write_all(response.as_bytes()).await.expect("write");
                    held.push(socket);
                    continue;
                }
            } else {
                (
                    "200 OK",
                    "text/html",
                    "",
                    b"<!doctype html><title>host</title>".to_vec(),
                )
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(response.as_bytes()).await.expect("write");
            socket.write_all(&body).await.expect("write");
        }
    });
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &format!("{origin}/host")).await;
    run_app(&page, "{ topics: ['t'], retry: 100, maxRetry: 200 }").await;
    wait_state(&page, "open").await;
    assert_eq!(delivered(&page, 1).await, ["1-ab"]);
    let states = page.eval("window.testStates").await.expect("states");
    assert!(
        states
            .as_array()
            .expect("states")
            .iter()
            .any(|s| s[0] == "reconnecting"
                && s[1] == "unavailable"
                && s[2] == 503
                && s[3].as_u64().is_some_and(|ms| ms >= 1000)),
        "not before Retry-After: {states}"
    );
    server.abort();
}

/// Refusals for good end the subscription with the hub's status and description: a `400`
/// (a bad `from=`) and a `403` (a token that does not cover the topic, whose renewal gives
/// the same answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_or_a_forbidden_topic_closes_with_the_hubs_description() {
    let hub = Hub::start(&auth_config()).await;
    let browser = Browser::launch().await.expect("chromium starts");

    let page = open(&browser, &hub.process.url(HOST)).await;
    let allowed = json!(token(600));
    run_app(
        &page,
        &format!("{{ topics: ['auth.t'], from: 'last:x', tokenParam: 'access_token', token: () => {allowed} }}"),
    )
    .await;
    let last = closed_with(&page).await;
    assert_eq!(
        (&last[1], &last[2]),
        (&json!("bad_request"), &json!(400)),
        "{last}"
    );
    let description = last[4].as_str().unwrap_or_default();
    assert!(description.starts_with("from: invalid value"), "{last}");

    let page = open(&browser, &hub.process.url(HOST)).await;
    let elsewhere = json!(token_for(600, "other.>"));
    run_app(
        &page,
        &format!("{{ topics: ['auth.t'], tokenParam: 'access_token', token: () => {elsewhere} }}"),
    )
    .await;
    let last = closed_with(&page).await;
    assert_eq!(
        (&last[1], &last[2]),
        (&json!("forbidden"), &json!(403)),
        "{last}"
    );
    assert!(last[4].as_str().is_some_and(|d| !d.is_empty()), "{last}");
}

/// A `token()` that gives nothing closes the subscription as `no_token` before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_callback_giving_nothing_closes_with_no_token() {
    let hub = Hub::start(&auth_config()).await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = open(&browser, &hub.process.url(HOST)).await;
    let refused = || async {
        let metrics = http::get(&hub.process.url("/metrics"))
            .await
            .expect("metrics")
            .text();
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(MISSING_TOKEN))
            .map_or(0.0, |n| n.trim().parse::<f64>().expect("a count"))
    };
    let before = refused().await;
    run_app(
        &page,
        "{ topics: ['auth.t'], tokenParam: 'access_token', token: async () => '' }",
    )
    .await;
    let last = closed_with(&page).await;
    assert_eq!(last[1], "no_token", "{last}");
    assert_eq!(refused().await, before, "nothing asked of the hub");
    // What a subscription without a token leaves in the metrics, so the check above can fail.
    let bare = http::get(&hub.process.url("/events?topic=auth.t"))
        .await
        .expect("GET");
    assert_eq!(bare.status, 401);
    assert_eq!(refused().await, before + 1.0);
}

/// The metric of subscriptions refused for want of a token.
const MISSING_TOKEN: &str = "sluice_connections_rejected_total{reason=\"missing_token\"}";

/// With `storage: 'local'` the position is the site's, not the tab's: a second tab with the
/// same key resumes after what the first delivered instead of starting from its `from`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_storage_carries_the_position_to_a_new_tab() {
    let hub = Hub::start("").await;
    let browser = Browser::launch().await.expect("chromium starts");
    let first = open(&browser, &hub.process.url(HOST)).await;
    let options = "{ topics: ['tabs.t'], from: 'earliest', storage: 'local' }";
    run_app(&first, options).await;
    wait_state(&first, "open").await;
    let early = [
        hub.publish("tabs.t", 1).await,
        hub.publish("tabs.t", 2).await,
    ];
    assert_eq!(delivered(&first, 2).await, early);
    first
        .eval("window.testSub.close(); true")
        .await
        .expect("closed");

    let later = hub.publish("tabs.t", 3).await;
    let second = open(&browser, &hub.process.url(HOST)).await;
    run_app(&second, options).await;
    assert_eq!(
        delivered(&second, 1).await,
        [later],
        "the new tab resumes after the first tab's last message"
    );
}
