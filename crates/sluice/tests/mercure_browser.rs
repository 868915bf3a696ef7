//! The Mercure hub in a real browser: headless Chromium subscribes to the `sluice` binary's
//! `/.well-known/mercure` with a plain `EventSource`, carrying its token as browsers do (the
//! `mercureAuthorization` cookie or the `authorization` query parameter), and receives what is
//! published — selected by exact topics, URI Templates and URL Patterns, private updates only
//! with a grant, custom ids as `lastEventId`, and every update once across a hub restart.
//!
//! Each page reports what its `EventSource`s saw (`window.subs`); the tests wait on that, and
//! publish a last public "marker" update where they assert that something did *not* arrive:
//! updates reach a subscriber in stream order, so once the marker is there, anything before it
//! that was going to arrive has.

use std::time::Duration;

use sluice_test_support::serde_json::{Value, json};
use sluice_test_support::{Browser, Page, SluiceProcess, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const PUBLISHER_KEY: &str = "browser-publisher-secret-0123456789abcdef";
const SUBSCRIBER_KEY: &str = "browser-subscriber-secret-0123456789abcdef";
const BOOK: &str = "https://example.com/books/1";

/// How long the page may take to see what the test waits for (reconnects included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// `subscribe(name, params, types)`: a plain `EventSource` on `/.well-known/mercure` with the
/// query parameters `params` (`[[key, value], …]`), recording into `window.subs[name]` its
/// opens, errors and events (`message` and the named `types`) with their `lastEventId`.
const PAGE_SCRIPT: &str = r#"
    window.subs = {};
    window.sources = {};
    window.subscribe = (name, params, types) => {
        const sub = { opens: 0, errors: 0, events: [] };
        window.subs[name] = sub;
        const query = new URLSearchParams(params).toString();
        const source = new EventSource('/.well-known/mercure?' + query);
        window.sources[name] = source;
        source.onopen = () => { sub.opens += 1; };
        source.onerror = () => { sub.errors += 1; };
        const record = (e) => sub.events.push({ type: e.type, data: e.data, id: e.lastEventId });
        source.onmessage = record;
        for (const type of types || []) source.addEventListener(type, record);
        return true;
    };
    true
"#;

/// `sluice serve` with the Mercure hub on (anonymous subscribers allowed, for public updates),
/// its data in a fresh directory.
struct Hub {
    process: SluiceProcess,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!(
            "topic_prefix = \"app\"\n[mercure]\nenabled = true\nanonymous = true\n\
             publisher_jwt_key = \"{PUBLISHER_KEY}\"\nsubscriber_jwt_key = \"{SUBSCRIBER_KEY}\"\n"
        );
        let process = SluiceProcess::serve(BIN, dir.path(), Some(&config))
            .await
            .expect("sluice serve starts with the Mercure hub");
        Self { process, _dir: dir }
    }

    /// Publishes the form `fields` and returns the update's id, the hub's answer.
    async fn publish(&self, fields: &[(&str, &str)]) -> String {
        let bearer = format!(
            "Bearer {}",
            token(PUBLISHER_KEY, json!({ "publish": ["*"] }))
        );
        let headers = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("authorization", bearer.as_str()),
        ];
        let form = form(fields);
        let request = http::request(
            "POST".parse().unwrap(),
            &self.process.url("/.well-known/mercure"),
            &headers,
        )
        .expect("a request")
        .body(form.clone().into())
        .expect("a body");
        let answer = http::send(request).await.expect("publish request");
        assert_eq!(answer.status, 200, "publish {form}: {}", answer.text());
        answer.text()
    }
}

/// `application/x-www-form-urlencoded` of `fields`, in order.
fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(key, value)| format!("{}={}", encode(key), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but the form's unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Mercure token signed with `key`, its `mercure` claim being `claim`.
fn token(key: &str, claim: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "mercure": claim }),
        &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).expect("a key"),
    )
    .expect("a token")
}

/// A subscriber's token allowed to receive private updates on `selectors`.
fn subscriber_token(selectors: &[&str]) -> String {
    token(SUBSCRIBER_KEY, json!({ "subscribe": selectors }))
}

/// A tab on a page the hub serves (so the `EventSource`s are same-origin and carry its
/// cookies), with [`PAGE_SCRIPT`] loaded.
async fn hub_page(browser: &Browser, hub: &Hub) -> Page {
    let page = browser.new_page().await.expect("new tab");
    page.open(&hub.process.url("/"))
        .await
        .expect("page served by sluice");
    page.eval(PAGE_SCRIPT).await.expect("page script");
    page
}

/// Starts the subscription `name` with the query parameters `params`, listening to `message`
/// and the event `types`, and waits until it is open.
async fn subscribe(page: &Page, name: &str, params: &[(&str, &str)], types: &[&str]) {
    let params: Vec<[&str; 2]> = params.iter().map(|(k, v)| [*k, *v]).collect();
    let call = format!(
        "window.subscribe({}, {}, {})",
        json!(name),
        json!(params),
        json!(types)
    );
    page.eval(&call).await.expect("EventSource created");
    wait_for_opens(page, name, 1).await;
}

/// Waits until the subscription `name` has opened `count` times.
async fn wait_for_opens(page: &Page, name: &str, count: u64) {
    let condition = format!("window.subs[{}].opens >= {count}", json!(name));
    page.wait_for(&condition, PAGE_TIMEOUT)
        .await
        .unwrap_or_else(|err| panic!("waiting for `{name}` to open {count} times: {err:#}"));
}

/// Waits until the subscription `name` has received `count` events, and returns every event
/// it has received.
async fn wait_for_events(page: &Page, name: &str, count: usize) -> Vec<Value> {
    let condition = format!(
        "(() => {{ const sub = window.subs[{}]; return sub.events.length >= {count} && sub.events; }})()",
        json!(name)
    );
    let events = page.wait_for(&condition, PAGE_TIMEOUT).await;
    let events =
        events.unwrap_or_else(|err| panic!("waiting for {count} `{name}` events: {err:#}"));
    events.as_array().expect("an array").clone()
}

/// The `data` of each event.
fn datas(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["data"].as_str().expect("data is text"))
        .collect()
}

#[tokio::test]
async fn event_source_receives_a_published_update_with_its_id_and_data() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = hub_page(&browser, &hub).await;
    subscribe(&page, "book", &[("topic", BOOK)], &[]).await;

    let id = hub
        .publish(&[("topic", BOOK), ("data", "line one\nline two")])
        .await;

    let events = wait_for_events(&page, "book", 1).await;
    assert_eq!(
        events,
        [json!({ "type": "message", "data": "line one\nline two", "id": id })],
        "one update, its multi-line data intact, the id the hub answered as lastEventId"
    );
    let errors = page.eval("window.subs.book.errors").await.expect("errors");
    assert_eq!(errors, json!(0));
}

#[tokio::test]
async fn a_private_update_reaches_only_event_sources_whose_token_grants_it() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = hub_page(&browser, &hub).await;
    let granting = subscriber_token(&["https://example.com/books/{id}"]);
    let other = subscriber_token(&["https://example.com/authors/{id}"]);

    // Opened before the cookie exists: no token at all (anonymous), and a granting token in the
    // `authorization` query parameter.
    subscribe(&page, "anonymous", &[("topic", BOOK)], &[]).await;
    let query = [("topic", BOOK), ("authorization", granting.as_str())];
    subscribe(&page, "query", &query, &[]).await;
    // The cookie as a browser application sets it; the query parameter wins over it, so the
    // last subscription holds a token that grants other topics only.
    // (The page at `/` cannot read it back: its path is the hub's.)
    let cookie = format!(
        "document.cookie = {}",
        json!(format!(
            "mercureAuthorization={granting}; path=/.well-known/mercure; SameSite=Strict"
        ))
    );
    page.eval(&cookie).await.expect("cookie set");
    subscribe(&page, "cookie", &[("topic", BOOK)], &[]).await;
    let query = [("topic", BOOK), ("authorization", other.as_str())];
    subscribe(&page, "ungranted", &query, &[]).await;

    hub.publish(&[("topic", BOOK), ("data", "secret"), ("private", "on")])
        .await;
    hub.publish(&[("topic", BOOK), ("data", "marker")]).await;

    for granted in ["query", "cookie"] {
        let events = wait_for_events(&page, granted, 2).await;
        assert_eq!(
            datas(&events),
            ["secret", "marker"],
            "`{granted}` is granted the private update"
        );
    }
    for refused in ["anonymous", "ungranted"] {
        let events = wait_for_events(&page, refused, 1).await;
        assert_eq!(
            datas(&events),
            ["marker"],
            "`{refused}` gets the public update only"
        );
    }
}

#[tokio::test]
async fn uri_templates_and_url_patterns_select_only_the_topics_they_match() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = hub_page(&browser, &hub).await;
    let template = [("topic", "https://example.com/books/{id}")];
    subscribe(&page, "template", &template, &[]).await;
    let pattern = [("match_urlpattern", "https://example.com/books/:id")];
    subscribe(&page, "pattern", &pattern, &[]).await;

    let published = [
        ("https://example.com/books/1", "book 1"),
        ("https://example.com/authors/1", "author 1"),
        ("https://example.com/books/1/chapters/2", "chapter 2"),
        ("https://example.org/books/1", "another host"),
        ("https://example.com/books/2", "book 2"),
    ];
    for (topic, data) in published {
        hub.publish(&[("topic", topic), ("data", data)]).await;
    }

    for name in ["template", "pattern"] {
        let events = wait_for_events(&page, name, 2).await;
        assert_eq!(
            datas(&events),
            ["book 1", "book 2"],
            "`{name}` selects https://example.com/books/<one segment> only"
        );
    }
}

#[tokio::test]
async fn a_custom_id_and_type_arrive_as_the_event_sources_last_event_id_and_event() {
    let hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = hub_page(&browser, &hub).await;
    subscribe(&page, "book", &[("topic", BOOK)], &["book.updated"]).await;

    let custom = "urn:uuid:5e94c686-2c0b-4f9b-958c-92ccc3bbb4eb";
    let fields = [
        ("topic", BOOK),
        ("data", "{\"title\":\"Dune\"}"),
        ("id", custom),
        ("type", "book.updated"),
    ];
    let answered = hub.publish(&fields).await;
    assert_eq!(answered, custom, "the hub answers the custom id");
    let hub_made = hub.publish(&[("topic", BOOK), ("data", "plain")]).await;

    let events = wait_for_events(&page, "book", 2).await;
    assert_eq!(
        events,
        [
            json!({ "type": "book.updated", "data": "{\"title\":\"Dune\"}", "id": custom }),
            json!({ "type": "message", "data": "plain", "id": hub_made }),
        ]
    );
}

#[tokio::test]
async fn event_source_resumes_after_a_hub_restart_with_every_update_once_in_order() {
    let mut hub = Hub::start().await;
    let browser = Browser::launch().await.expect("chromium starts");
    let page = hub_page(&browser, &hub).await;
    subscribe(&page, "book", &[("topic", BOOK)], &[]).await;
    hub.publish(&[("topic", BOOK), ("data", "1")]).await;
    // The last id before the restart is a custom one: the new process looks it up in the
    // stream.
    hub.publish(&[("topic", BOOK), ("data", "2"), ("id", "custom-2")])
        .await;
    wait_for_events(&page, "book", 2).await;

    // The page is taken off the network, so that it cannot reconnect before update 3 is
    // stored: 3 can then only arrive by the browser's own resume with `Last-Event-ID`.
    page.set_offline(true).await.expect("page offline");
    hub.process.kill().expect("kill -9 the hub");
    let errors = "window.subs.book.errors >= 1";
    page.wait_for(errors, PAGE_TIMEOUT)
        .await
        .expect("the EventSource sees the hub gone");
    hub.process
        .restart()
        .await
        .expect("the hub restarts on the same address");
    hub.publish(&[("topic", BOOK), ("data", "3")]).await;
    page.set_offline(false).await.expect("page online");
    wait_for_opens(&page, "book", 2).await;
    hub.publish(&[("topic", BOOK), ("data", "4")]).await;

    let events = wait_for_events(&page, "book", 4).await;
    assert_eq!(
        datas(&events),
        ["1", "2", "3", "4"],
        "every update exactly once, in order: {events:?}"
    );
    assert_eq!(events[1]["id"], "custom-2", "{events:?}");
}
