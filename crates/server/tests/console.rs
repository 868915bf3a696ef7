//! The console at `/` in a real headless Chromium: the tests fill in its forms, press its
//! buttons and read its DOM, against a hub on a loopback socket.
//!
//! With `SLUICE_CONSOLE_SCREENSHOTS=<dir>` each test also saves a PNG of the state it reached
//! into `<dir>` (docs/console holds the ones the docs show).

#[allow(unused_macros, unused_imports)]
mod common;

use std::time::Duration;

use common::{Embedded, HubFactory, TestHub, expect_event};
use serde_json::{Value, json};
use sluice_server::config::{Config, StreamDecl};
use sluice_test_support::{Browser, Page};

/// How long the page may take to show what a test waits for (a retry included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

const SECRET: &str = "0123456789abcdef0123456789abcdef-console-secret";

/// Chromium on the console of `hub`, opened at `path`.
async fn console(hub: &TestHub, path: &str) -> (Browser, Page) {
    let browser = Browser::launch().await.expect("chromium starts");
    let page = browser.new_page().await.expect("new tab");
    page.open(&hub.url(path)).await.expect("the console loads");
    (browser, page)
}

/// Evaluates `script` in the page.
async fn run(page: &Page, script: &str) -> Value {
    page.eval(script)
        .await
        .unwrap_or_else(|err| panic!("{script}: {err:#}"))
}

/// Waits until `condition` holds in the page and returns its value.
async fn wait(page: &Page, what: &str, condition: &str) -> Value {
    page.wait_for(condition, PAGE_TIMEOUT)
        .await
        .unwrap_or_else(|err| panic!("waiting for {what}: {err:#}"))
}

/// Sets the form field `id` to `value` as typing would (an `input` and a `change` event).
async fn fill(page: &Page, id: &str, value: &str) {
    let script = format!(
        "(() => {{ const field = document.getElementById({id}); field.value = {value}; \
         field.dispatchEvent(new Event('input')); field.dispatchEvent(new Event('change')); \
         return true; }})()",
        id = json!(id),
        value = json!(value)
    );
    run(page, &script).await;
}

/// Presses the button (or radio button) `selector`.
async fn press(page: &Page, selector: &str) {
    let script = format!("document.querySelector({}).click(), true", json!(selector));
    run(page, &script).await;
}

/// Waits until the state badge shows `kind` and returns its text and detail.
async fn wait_state(page: &Page, kind: &str) -> (String, String) {
    let condition = format!(
        "document.getElementById('state').className === {} && \
         [document.getElementById('state').textContent, \
          document.getElementById('state-detail').textContent]",
        json!(kind)
    );
    let shown = wait(page, &format!("state {kind}"), &condition).await;
    let text = |i: usize| shown[i].as_str().expect("text").to_owned();
    (text(0), text(1))
}

/// Waits until the console streams `topics`.
async fn wait_streaming(page: &Page, topics: &str) {
    let condition = format!(
        "document.getElementById('state').className === 'streaming' && \
         document.getElementById('state-detail').textContent === {}",
        json!(format!("topics {topics}"))
    );
    wait(page, &format!("streaming {topics}"), &condition).await;
}

/// The list's rows: their type, id and text.
async fn rows(page: &Page) -> Vec<Value> {
    let script = "Array.from(document.querySelectorAll('#events li')).map((li) => \
                  ({type: li.dataset.type, id: li.dataset.id, hidden: li.hidden, \
                    class: li.className, text: li.textContent}))";
    run(page, script).await.as_array().expect("rows").clone()
}

/// Saves a PNG of the page as `<name>.png` when `SLUICE_CONSOLE_SCREENSHOTS` names a folder.
async fn screenshot(page: &Page, name: &str) {
    screenshot_sized(page, name, 1100, 720).await;
}

/// [`screenshot`] of a `width` × `height` screen.
async fn screenshot_sized(page: &Page, name: &str, width: u32, height: u32) {
    let Some(dir) = std::env::var_os("SLUICE_CONSOLE_SCREENSHOTS") else {
        return;
    };
    let png = page.screenshot(width, height).await.expect("a screenshot");
    let path = std::path::Path::new(&dir).join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
}

fn token(exp_in_secs: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let claims = json!({
        "sub": "console",
        "exp": now + exp_in_secs,
        "sluice": { "subscribe": [">"], "publish": [] },
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

/// Subscribers need a token, carried by the `sluiceAuthorization` cookie; publishing is open.
fn subscribe_auth_config() -> Config {
    let text = format!(
        "[auth.subscribe]\nalgorithms = [\"HS256\"]\nleeway = 0\ncookie_name = \"sluiceAuthorization\"\n\
         keys = [{{ type = \"hmac\", secret = \"{SECRET}\" }}]\n"
    );
    sluice_server::config::load_str(&text, "console test", Vec::new(), &Default::default())
        .expect("auth config")
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_subscribe_and_publish_and_the_event_shows_pretty_printed() {
    let hub = Embedded.start(Config::default()).await;
    let (_browser, page) = console(&hub, "/").await;
    fill(&page, "topics", "console.orders").await;
    press(&page, "#subscribe").await;
    wait_streaming(&page, "console.orders").await;

    fill(&page, "publish-topic", "console.orders").await;
    fill(
        &page,
        "payload",
        r#"{"id": 7, "lines": [{"sku": "a", "qty": 2}]}"#,
    )
    .await;
    fill(&page, "msg-id", "order-7").await;
    press(&page, "#publish").await;
    let result = wait(
        &page,
        "the publish answer",
        "document.getElementById('publish-result').className === 'ok' && \
         document.getElementById('publish-result').textContent",
    )
    .await;
    let id = result
        .as_str()
        .and_then(|text| text.strip_prefix("stored as "))
        .unwrap_or_else(|| panic!("{result}"))
        .to_owned();
    let payload = wait(
        &page,
        "the message row",
        "(() => { const li = document.querySelector('#events li.message'); \
         return li && [li.dataset.id, li.querySelector('.payload').textContent, li.textContent]; })()",
    )
    .await;
    assert_eq!(payload[0], json!(id), "the row carries the event id");
    assert_eq!(
        payload[1].as_str().expect("text"),
        "{\n  \"id\": 7,\n  \"lines\": [\n    {\n      \"sku\": \"a\",\n      \"qty\": 2\n    }\n  ]\n}",
        "the payload is pretty-printed"
    );
    assert!(
        payload[2]
            .as_str()
            .is_some_and(|t| t.contains("console.orders")),
        "the row names its topic: {payload}"
    );
    let events = run(&page, "window.sluiceEvents").await;
    let kinds: Vec<&str> = events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["connected", "message"], "{events}");

    // The same msg_id again is a duplicate; a wrong expected sequence is refused with its code.
    press(&page, "#publish").await;
    wait(
        &page,
        "the duplicate answer",
        &format!(
            "document.getElementById('publish-result').textContent === {}",
            json!(format!("duplicate of {id}"))
        ),
    )
    .await;
    fill(&page, "msg-id", "").await;
    fill(&page, "expected-last-seq", "5").await;
    press(&page, "#publish").await;
    let refused = wait(
        &page,
        "the refusal",
        "document.getElementById('publish-result').className === 'error' && \
         document.getElementById('publish-result').textContent",
    )
    .await;
    assert!(
        refused
            .as_str()
            .is_some_and(|t| t.starts_with("refused: 400, code 10071")),
        "{refused}"
    );

    let panel = wait(
        &page,
        "the stream panel",
        "(() => { const v = (id) => document.getElementById(id).textContent; \
         return v('stream-messages') === '1' && \
           [v('stream-first'), v('stream-last'), v('stream-bytes'), v('stream-subscribers')]; })()",
    )
    .await;
    assert_eq!(panel[0], "1");
    assert_eq!(panel[1], "1");
    assert!(
        panel[2].as_str().and_then(|b| b.parse::<u64>().ok()) > Some(0),
        "{panel}"
    );
    assert_eq!(panel[3], "1", "the console's own subscription");
    screenshot(&page, "streaming").await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_shows_refused_retrying_until_a_place_is_free() {
    let mut config = Config::default();
    config.limits.max_connections = 1;
    let hub = Embedded.start(config).await;
    let mut held = hub.subscribe("?topic=t").await;
    expect_event(&mut held, "connected")
        .await
        .expect("connected");

    let (_browser, page) = console(&hub, "/?topic=console.busy").await;
    let (text, _) = wait_state(&page, "refused").await;
    let seconds = text
        .strip_prefix("refused, retrying within ")
        .and_then(|rest| rest.strip_suffix(" s"))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        seconds.is_some_and(|s| (1..=4).contains(&s)),
        "{text:?}: counted down from twice the 2 s retry, the most the hub's jittered hint is"
    );
    let events = run(&page, "window.sluiceEvents.length").await;
    assert_eq!(events, 0, "a refusal is not a connected stream");
    assert!(hub.metric("sluice_connections_rejected_total{reason=\"max_connections\"}") >= 1);
    screenshot(&page, "refused").await;

    drop(held);
    wait_streaming(&page, "console.busy").await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_highlighted_with_what_was_lost() {
    let mut config = Config::default();
    config.embedded.streams = vec![StreamDecl {
        max_msgs: 2,
        ..StreamDecl::default_stream()
    }];
    let hub = Embedded.start(config).await;
    let mut ids = Vec::new();
    for n in 1..=5 {
        ids.push(hub.publish("console.gap", json!({ "n": n })).await["id"].clone());
    }
    let (_browser, page) = console(&hub, "/").await;
    fill(&page, "topics", "console.gap").await;
    press(&page, "input[name=from][value=last-id]").await;
    fill(&page, "last-id", ids[0].as_str().expect("id")).await;
    press(&page, "#subscribe").await;
    wait(
        &page,
        "both retained messages",
        "document.querySelectorAll('#events li.message').length === 2",
    )
    .await;

    let rows = rows(&page).await;
    let types: Vec<&str> = rows.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["connected", "gap", "message", "message"],
        "{rows:?}"
    );
    let gap = &rows[1];
    assert_eq!(gap["class"], "gap", "highlighted as a gap");
    let text = gap["text"].as_str().expect("text");
    assert!(
        text.contains("lost positions 2–3 (2 positions)")
            && text.contains("expired: no longer retained")
            && text.contains(&format!("resumed from {}", ids[0].as_str().unwrap())),
        "{text:?}"
    );
    assert_eq!([&rows[2]["id"], &rows[3]["id"]], [&ids[3], &ids[4]]);
    let highlighted = run(
        &page,
        "getComputedStyle(document.querySelector('#events li.gap')).borderLeftStyle",
    )
    .await;
    assert_eq!(highlighted, "solid");
    screenshot(&page, "gap").await;
    hub.stop().await;
}

/// A topic whose value the stream removed (here by `max_age`, on a stream that keeps delete
/// markers) gets a row of its own saying which topic and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_is_a_row_saying_which_and_why() {
    let mut config = Config::default();
    config.embedded.streams = vec![StreamDecl {
        max_age: Duration::from_secs(1),
        allow_msg_ttl: true,
        subject_delete_marker_ttl: Duration::from_secs(60),
        ..StreamDecl::default_stream()
    }];
    let hub = Embedded.start(config).await;
    let (_browser, page) = console(&hub, "/").await;
    fill(&page, "topics", "console.kv.>").await;
    press(&page, "#subscribe").await;
    wait_streaming(&page, "console.kv.>").await;
    hub.publish("console.kv.a", json!(1)).await;
    wait(
        &page,
        "the deleted row",
        "document.querySelectorAll('#events li.deleted').length === 1",
    )
    .await;
    let rows = rows(&page).await;
    let types: Vec<&str> = rows.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["connected", "message", "deleted"], "{rows:?}");
    let text = rows[2]["text"].as_str().expect("text");
    assert!(
        text.contains("console.kv.a") && text.contains("removed (max_age)"),
        "{text:?}"
    );
    screenshot(&page, "deleted").await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_for_good_is_closed_with_why_and_an_expired_token_says_so() {
    let hub = Embedded.start(subscribe_auth_config()).await;
    let (_browser, page) = console(&hub, "/?topic=console.auth").await;
    let (text, detail) = wait_state(&page, "closed").await;
    assert_eq!(text, "closed");
    wait(
        &page,
        "the reason of the refusal",
        "document.getElementById('state-detail').textContent.startsWith('401: ')",
    )
    .await;
    assert!(!detail.is_empty());
    screenshot(&page, "closed").await;

    // A token that expires in a few seconds: the stream ends with `token_expired`.
    fill(&page, "token", &token(5)).await;
    press(&page, "#subscribe").await;
    wait_state(&page, "streaming").await;
    let published = hub.publish("console.auth", json!("before")).await;
    wait(
        &page,
        "the first message",
        "document.querySelectorAll('#events li.message').length === 1",
    )
    .await;
    let (text, detail) = wait_state(&page, "expired").await;
    assert_eq!(text, "token expired");
    assert!(
        detail.ends_with(&format!(
            "resumes from {}",
            published["id"].as_str().unwrap()
        )),
        "{detail:?}"
    );
    let last = run(&page, "window.sluiceEvents.at(-1).type").await;
    assert_eq!(last, "token_expired");
    assert_eq!(
        hub.metric("sluice_disconnects_total{reason=\"token_expired\"}"),
        1
    );
    screenshot(&page, "expired").await;

    // A fresh token resumes where the stream ended: nothing published meanwhile is missed.
    hub.publish("console.auth", json!("meanwhile")).await;
    fill(&page, "token", &token(600)).await;
    press(&page, "#subscribe").await;
    wait_state(&page, "streaming").await;
    let payloads = wait(
        &page,
        "the message published while expired",
        "(() => { const m = window.sluiceEvents.filter((e) => e.type === 'message'); \
         return m.length === 2 && m.map((e) => e.data.payload); })()",
    )
    .await;
    assert_eq!(payloads, json!(["before", "meanwhile"]));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_capped_and_can_be_filtered_and_cleared() {
    let hub = Embedded.start(Config::default()).await;
    let (_browser, page) = console(&hub, "/?topic=console.cap").await;
    wait_state(&page, "streaming").await;
    fill(&page, "max-rows", "3").await;
    let mut ids = Vec::new();
    for n in 1..=5 {
        ids.push(hub.publish("console.cap", json!({ "n": n })).await["id"].clone());
    }
    wait(
        &page,
        "the last message",
        &format!("window.sluiceEvents.some((e) => e.id === {})", ids[4]),
    )
    .await;
    let kept: Vec<Value> = rows(&page).await.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(kept, ids[2..], "only the newest three rows are kept");
    let events = run(&page, "window.sluiceEvents.map((e) => e.id)").await;
    assert_eq!(events, json!(ids[2..]), "and only their events");

    fill(&page, "filter", "\"n\": 4").await;
    let shown: Vec<Value> = rows(&page)
        .await
        .iter()
        .filter(|r| r["hidden"] == false)
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(shown, [ids[3].clone()]);
    let counts = run(&page, "document.getElementById('shown').textContent").await;
    assert_eq!(counts, "1 of 3 rows");

    press(&page, "#clear").await;
    assert_eq!(rows(&page).await.len(), 0);
    assert_eq!(run(&page, "window.sluiceEvents.length").await, 0);
    hub.publish("console.cap", json!({ "n": 4 })).await;
    wait(
        &page,
        "a new row that matches the filter",
        "document.querySelectorAll('#events li:not([hidden])').length === 1",
    )
    .await;
    hub.stop().await;
}

/// The page is served with its security headers and still works under its own policy (its
/// script runs and streams); on a 420-px-wide screen the events take the width of the screen;
/// `newest first` puts new rows at the top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_locked_down_fits_a_phone_and_can_show_newest_first() {
    let hub = Embedded.start(Config::default()).await;
    let answer = hub.get("/").await;
    let policy = answer.header("content-security-policy").unwrap_or("");
    for part in [
        "default-src 'none'",
        "script-src 'sha256-",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(part), "{part}: {policy}");
    }
    assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(answer.header("referrer-policy"), Some("no-referrer"));
    assert_eq!(answer.header("x-frame-options"), Some("DENY"));

    let (_browser, page) = console(&hub, "/?topic=console.phone").await;
    page.set_viewport(420, 800).await.expect("a narrow screen");
    wait_state(&page, "streaming").await;
    let width = run(
        &page,
        "document.getElementById('events').getBoundingClientRect().width",
    )
    .await;
    assert!(
        width.as_f64().unwrap_or(0.0) > 300.0,
        "the events are {width} px wide"
    );
    let overflow = run(
        &page,
        "document.documentElement.scrollWidth - document.documentElement.clientWidth",
    )
    .await;
    assert_eq!(overflow, 0, "nothing wider than the screen");
    let events_first = run(
        &page,
        "document.getElementById('events').getBoundingClientRect().top < \
         document.getElementById('subscribe-form').getBoundingClientRect().top",
    )
    .await;
    assert_eq!(events_first, true, "the events above the forms");
    assert!(
        !page
            .console()
            .iter()
            .any(|line| line.contains("Content Security Policy")),
        "{:?}",
        page.console()
    );

    press(&page, "#newest-first").await;
    let mut ids = Vec::new();
    for n in 1..=2 {
        ids.push(hub.publish("console.phone", json!({ "n": n })).await["id"].clone());
    }
    wait(
        &page,
        "the second message",
        &format!("window.sluiceEvents.some((e) => e.id === {})", ids[1]),
    )
    .await;
    let shown: Vec<Value> = rows(&page).await.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(
        shown[..2],
        [ids[1].clone(), ids[0].clone()],
        "newest on top: {shown:?}"
    );
    screenshot_sized(&page, "phone", 420, 800).await;
    hub.stop().await;
}

/// A message a start-option test published: its id, topic and number.
struct Sent {
    id: String,
    topic: &'static str,
    n: u64,
}

impl Sent {
    /// Publishes `{"n": n}` on `topic`.
    async fn publish(hub: &TestHub, topic: &'static str, n: u64) -> Self {
        let answer = hub.publish(topic, json!({ "n": n })).await;
        let id = answer["id"].as_str().expect("an id").to_owned();
        Self { id, topic, n }
    }

    /// The message as [`event_lines`] shows it.
    fn line(&self) -> String {
        format!("message {} {} {}", self.id, self.topic, self.n)
    }
}

/// The page's events, one line each: `connected`, `gap`, or `message <id> <topic> <n>`.
async fn event_lines(page: &Page) -> Vec<String> {
    let script = "window.sluiceEvents.map((e) => e.type === 'message' \
                  ? ['message', e.id, e.data.topic, e.data.payload.n].join(' ') : e.type)";
    let lines = run(page, script).await;
    serde_json::from_value(lines.clone()).unwrap_or_else(|err| panic!("{lines}: {err}"))
}

/// Waits until the page has received the event `id`.
async fn wait_for_id(page: &Page, id: &str) {
    let condition = format!("window.sluiceEvents.some((e) => e.id === {})", json!(id));
    wait(page, &format!("event {id}"), &condition).await;
}

/// With the page subscribing (or subscribed): waits for the last of `replayed`, publishes
/// message `n` on `topic` live, waits for it, and asserts that the page received exactly
/// `connected`, `replayed` and the live message, in this order. Returns the live message.
async fn expect_replay_then_live(
    page: &Page,
    hub: &TestHub,
    replayed: &[&Sent],
    topic: &'static str,
    n: u64,
) -> Sent {
    match replayed.last() {
        Some(last) => wait_for_id(page, &last.id).await,
        None => {
            wait(
                page,
                "connected",
                "window.sluiceEvents.some((e) => e.type === 'connected')",
            )
            .await;
        }
    }
    let live = Sent::publish(hub, topic, n).await;
    wait_for_id(page, &live.id).await;
    let expected: Vec<String> = std::iter::once("connected".to_owned())
        .chain(replayed.iter().map(|sent| sent.line()))
        .chain([live.line()])
        .collect();
    assert_eq!(event_lines(page).await, expected);
    live
}

/// Clears the list, chooses the start option `radio` (with `field` set to `value`, if
/// given) and presses Subscribe.
async fn subscribe_from(page: &Page, radio: &str, field: Option<(&str, &str)>) {
    press(page, "#clear").await;
    press(page, &format!("input[name=from][value={radio}]")).await;
    if let Some((id, value)) = field {
        fill(page, id, value).await;
    }
    press(page, "#subscribe").await;
}

/// Waits until the state says `closed` with the description of the hub's 400 to
/// `/events?<query>` (asked here without a browser), and asserts no event arrived.
async fn expect_refused_like(page: &Page, hub: &TestHub, query: &str) {
    let answer = hub.get(&format!("/events?{query}")).await;
    assert_eq!(answer.status, 400, "{}", answer.text());
    let description = answer.json().expect("a JSON refusal")["description"]
        .as_str()
        .expect("a description")
        .to_owned();
    assert!(
        description.starts_with("from: invalid value"),
        "{description}"
    );
    let shown = format!("400: {description}");
    let condition = format!(
        "document.getElementById('state').className === 'closed' && \
         document.getElementById('state-detail').textContent === {}",
        json!(shown)
    );
    wait(page, &format!("the refusal {shown:?}"), &condition).await;
    assert_eq!(run(page, "window.sluiceEvents.length").await, 0);
}

/// The start options `latest`, `last N` and `since` deliver exactly the retained messages
/// they name, in stream order, then live ones — chosen in the form or named by `from=` in the
/// page's address; a bad value shows the hub's 400 with its description.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_options_deliver_the_latest_the_last_n_or_those_since_a_time_then_live() {
    let hub = Embedded.start(Config::default()).await;
    let mut sent = Vec::new();
    for (topic, n) in [
        ("console.kv.a", 1),
        ("console.kv.b", 2),
        ("console.kv.a", 3),
        ("console.other", 4),
        ("console.kv.c", 5),
        ("console.kv.b", 6),
        ("console.kv.a", 7),
    ] {
        sent.push(Sent::publish(&hub, topic, n).await);
    }
    let (_browser, page) = console(&hub, "/").await;
    fill(&page, "topics", "console.kv.>").await;

    // latest: the latest message of each subject, in stream order (c 5, b 6, a 7).
    subscribe_from(&page, "latest", None).await;
    let live = expect_replay_then_live(
        &page,
        &hub,
        &[&sent[4], &sent[5], &sent[6]],
        "console.kv.b",
        8,
    )
    .await;
    sent.push(live);
    let time_of_5 = run(
        &page,
        "window.sluiceEvents.find((e) => e.type === 'message' && e.data.payload.n === 5).data.time",
    )
    .await;
    let time_of_5 = time_of_5.as_str().expect("a time").to_owned();
    screenshot(&page, "from-latest").await;

    // last N: the 2 most recent matching messages (a 7, b 8).
    subscribe_from(&page, "last-n", Some(("last-n", "2"))).await;
    let live = expect_replay_then_live(&page, &hub, &[&sent[6], &sent[7]], "console.kv.c", 9).await;
    sent.push(live);

    // since a time: every matching message stored at or after message 5 (not 4: its topic).
    subscribe_from(&page, "since", Some(("since", &time_of_5))).await;
    let replayed: Vec<&Sent> = sent[4..].iter().collect();
    let live = expect_replay_then_live(&page, &hub, &replayed, "console.kv.a", 10).await;
    sent.push(live);

    // Bad values: the hub's 400 and its description, word for word.
    subscribe_from(&page, "last-n", Some(("last-n", "0"))).await;
    expect_refused_like(&page, &hub, "topic=console.kv.%3E&from=last:0").await;
    subscribe_from(&page, "since", Some(("since", "yesterday"))).await;
    expect_refused_like(&page, &hub, "topic=console.kv.%3E&from=since:yesterday").await;
    screenshot(&page, "from-refused").await;

    // `from=` in the page's address: shown in the form, and subscribed with at once.
    page.open(&hub.url("/?topic=console.kv.%3E&from=last:2"))
        .await
        .expect("the console loads");
    let form = run(
        &page,
        "[document.querySelector('input[name=from]:checked').value, \
          document.getElementById('last-n').value]",
    )
    .await;
    assert_eq!(form, json!(["last-n", "2"]));
    let live =
        expect_replay_then_live(&page, &hub, &[&sent[8], &sent[9]], "console.kv.b", 11).await;
    sent.push(live);
    page.open(&hub.url("/?topic=console.kv.%3E&from=since:1h"))
        .await
        .expect("the console loads");
    let form = run(
        &page,
        "[document.querySelector('input[name=from]:checked').value, \
          document.getElementById('since').value]",
    )
    .await;
    assert_eq!(form, json!(["since", "1h"]));
    // The last hour holds every message: all but message 4, whose topic is not matched.
    wait_for_id(&page, &sent[10].id).await;
    let expected: Vec<String> = std::iter::once("connected".to_owned())
        .chain(sent.iter().filter(|s| s.n != 4).map(Sent::line))
        .collect();
    assert_eq!(event_lines(&page).await, expected);
    // One the form cannot show goes to the hub as it is, which says what is wrong.
    page.open(&hub.url("/?topic=console.kv.%3E&from=soon"))
        .await
        .expect("the console loads");
    expect_refused_like(&page, &hub, "topic=console.kv.%3E&from=soon").await;
    hub.stop().await;
}
