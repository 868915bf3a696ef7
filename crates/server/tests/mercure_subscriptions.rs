//! Mercure's active subscriptions over real HTTP, on the embedded store and on a real
//! nats-server: the events published when a subscription starts and ends (for every way it
//! ends), who receives them, the subscriptions API with its `lastEventID` and refusals, and two
//! hub nodes on one JetStream stream listing each other's subscribers; both in the 0.x shape and
//! in the 1.0 draft's; and a node cut off from the stream for longer than its lease announcing
//! its subscriptions again.

mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;
#[path = "mercure/harness.rs"]
mod harness;

use std::time::Duration;

use backends::{Kind, on_both_backends};
use common::TestHub;
use harness::{
    HUB, Harness, SUBSCRIBER_KEY, config, form, publisher, start_node, subscriber, token,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};
use sluice_test_support::{HttpResponse, SseClient, TcpProxy, eventually_async, http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOOK: &str = "https://example.com/books/1";
const SHELF: &str = "https://example.com/shelves/{id}";
const SUBSCRIPTIONS: &str = "/.well-known/mercure/subscriptions";
/// The selector of every subscription event.
const EVENTS: &str = "/.well-known/mercure/subscriptions/{topic}/{subscriber}";
/// A `subscribe` grant covering the events and every API resource.
const API: &str = "/.well-known/mercure/subscriptions{/topic}{/subscriber}";
/// A 1.0 draft matcher (a URL pattern) of the shelves.
const SHELF_PATTERN: &str = "https://example.com/shelves/:id";
/// The 1.0 draft's selector of every 1.0 draft subscription event (a relative URL pattern).
const DRAFT_EVENTS: &str = "/.well-known/mercure/subscriptions/:type/:match/:subscriber";
/// A `subscribe` grant covering the 1.0 draft's events and every API resource of either shape.
const DRAFT_API: &str = "/.well-known/mercure/subscriptions{/type}{/match}{/subscriber}";

on_both_backends!(
    subscription_events_announce_starts_and_ends_with_payloads_to_granted_subscribers_only,
    the_api_lists_every_subscription_a_selectors_and_one_with_a_last_event_id_to_resume_from,
    a_drained_hub_publishes_the_ends_and_the_restarted_hub_lists_none,
    draft_subscription_events_announce_starts_and_ends_in_the_drafts_shape,
    the_api_answers_the_drafts_paths_in_its_shape_with_the_cursor_in_the_link,
);

/// What RFC 6570 leaves unencoded in a simple expansion: the unreserved characters.
const EXPANDED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` as a subscription topic's segment holds it.
fn encoded(text: &str) -> String {
    utf8_percent_encode(text, EXPANDED).to_string()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `GET` `path` of `hub` with `token`, if any.
async fn get(hub: &TestHub, path: &str, token: Option<&str>) -> HttpResponse {
    get_with(hub, path, token, &[]).await
}

/// `GET` `path` of `hub` with `token`, if any, and `extra` headers.
async fn get_with(
    hub: &TestHub,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
) -> HttpResponse {
    let bearer = token.map(bearer);
    let mut headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    headers.extend_from_slice(extra);
    let request = http::request("GET".parse().unwrap(), &hub.url(path), &headers)
        .unwrap()
        .body(Default::default())
        .unwrap();
    http::send(request).await.expect("GET")
}

/// The subscriptions `hub` lists (the collection), as its API answers with the `API` grant.
async fn listed(hub: &TestHub) -> Value {
    let answer = get(hub, SUBSCRIPTIONS, Some(&subscriber(&[API]))).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json().unwrap()
}

/// The subscribers `hub` lists for `selector`.
async fn subscribers_of(hub: &TestHub, selector: &str) -> Vec<String> {
    let list = listed(hub).await;
    list["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["topic"] == selector)
        .map(|s| s["subscriber"].as_str().unwrap().to_owned())
        .collect()
}

/// A subscriber to every subscription event, granted them.
async fn watcher(hub: &Harness, last_event_id: Option<&str>) -> SseClient {
    let auth = bearer(&subscriber(&[EVENTS]));
    let mut headers = vec![("authorization", auth.as_str())];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    hub.subscribed(&form(&[("topic", EVENTS)]), &headers).await
}

/// The next subscription event `client` receives for a subscription made with `selector`.
async fn next_event_of(client: &mut SseClient, selector: &str) -> Value {
    loop {
        let frame = client.next_event().await.expect("a subscription event");
        let doc: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        if doc["topic"] == selector {
            return doc;
        }
    }
}

/// A 1.0 draft subscriber to every 1.0 draft subscription event, granted them.
async fn draft_watcher(hub: &Harness, last_event_id: Option<&str>) -> SseClient {
    let auth = bearer(&subscriber(&[DRAFT_API]));
    let mut headers = vec![("authorization", auth.as_str())];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    hub.subscribed(&form(&[("match_urlpattern", DRAFT_EVENTS)]), &headers)
        .await
}

/// The next 1.0 draft subscription event `client` receives for a subscription made with
/// matcher `pattern`, and its SSE event type.
async fn next_draft_event_of(client: &mut SseClient, pattern: &str) -> (Value, Option<String>) {
    loop {
        let frame = client.next_event().await.expect("a subscription event");
        let doc: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        if doc["match"] == pattern {
            return (doc, frame.event);
        }
    }
}

/// The cursor of a 1.0 draft API answer: the `last-event-id` of its one `rel="mercure"` link.
fn link_cursor(answer: &HttpResponse) -> String {
    let links: Vec<&str> = answer
        .headers
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(links.len(), 1, "one link: {links:?}");
    let link = links[0];
    let rest = link
        .strip_prefix("</.well-known/mercure>; rel=\"mercure\"; last-event-id=\"")
        .unwrap_or_else(|| panic!("{link}"));
    let (cursor, attributes) = rest.split_once('"').unwrap();
    assert_eq!(
        attributes,
        "; type=\"mercure\"; content-type=\"application/json\""
    );
    cursor.to_owned()
}

async fn subscription_events_announce_starts_and_ends_with_payloads_to_granted_subscribers_only(
    kind: Kind,
) {
    let hub = Harness::start(kind, config("anonymous = true\nsubscriptions = true")).await;
    let mut watcher = watcher(&hub, None).await;
    let elsewhere = bearer(&subscriber(&["https://example.com/{x}"]));
    let mut outsider = hub
        .subscribed(&form(&[("topic", "*")]), &[("authorization", &elsewhere)])
        .await;
    let client = subscribed_as_alice(&hub, &[("topic", BOOK), ("topic", SHELF)]).await;

    let start = next_event_of(&mut watcher, BOOK).await;
    let id = start["subscriber"].as_str().unwrap().to_owned();
    assert!(id.starts_with("urn:uuid:"), "{id}");
    assert_eq!(
        start,
        json!({
            "@context": "https://mercure.rocks/",
            "id": format!("{SUBSCRIPTIONS}/{}/{}", encoded(BOOK), encoded(&id)),
            "type": "Subscription",
            "topic": BOOK,
            "subscriber": id,
            "active": true,
            "payload": { "name": "alice" },
        })
    );
    let shelf = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(
        (&shelf["subscriber"], &shelf["active"]),
        (&json!(id), &json!(true)),
        "one subscriber id per subscription, one event per selector"
    );

    // The client goes away: its subscription ends.
    drop(client);
    let end = next_event_of(&mut watcher, BOOK).await;
    let mut ended = start.clone();
    ended["active"] = json!(false);
    assert_eq!(end, ended, "the same document, inactive");
    let end = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(
        (&end["subscriber"], &end["active"]),
        (&json!(id), &json!(false))
    );

    // Private: a subscriber whose grants do not select the subscription topics never gets
    // them, even on `*`; the public update after them is the first thing it gets.
    hub.publish(&[("topic", "https://example.com/marker"), ("data", "marker")])
        .await;
    let first = outsider.next_event().await.unwrap();
    assert_eq!(first.data.as_deref(), Some("marker"));
}

async fn the_api_lists_every_subscription_a_selectors_and_one_with_a_last_event_id_to_resume_from(
    kind: Kind,
) {
    let hub = Harness::start(kind, config("anonymous = true\nsubscriptions = true")).await;
    let book = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let _shelf = hub.subscribed(&form(&[("topic", SHELF)]), &[]).await;
    let node = hub.hub();
    eventually_async("both subscriptions listed", async || {
        subscribers_of(node, BOOK).await.len() == 1 && subscribers_of(node, SHELF).await.len() == 1
    })
    .await;
    let all = listed(node).await;
    assert_eq!(all["@context"], "https://mercure.rocks/");
    assert_eq!(all["type"], "Subscriptions");
    assert_eq!(all["id"], SUBSCRIPTIONS);
    assert!(
        all["lastEventID"].as_str().unwrap().starts_with('#'),
        "{all}"
    );
    assert!(all["subscriptions"][0].get("@context").is_none());
    let book_id = subscribers_of(node, BOOK).await.remove(0);

    let collection = format!("{SUBSCRIPTIONS}/{}", encoded(BOOK));
    let answer = get(node, &collection, Some(&subscriber(&[API]))).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/ld+json"));
    let of_book = answer.json().unwrap();
    assert_eq!(of_book["id"], collection);
    assert_eq!(of_book["subscriptions"].as_array().unwrap().len(), 1);
    assert_eq!(of_book["subscriptions"][0]["subscriber"], book_id);

    let one_path = format!("{collection}/{}", encoded(&book_id));
    let one = get(node, &one_path, Some(&subscriber(&[API]))).await;
    assert_eq!(one.status, 200, "{}", one.text());
    let one = one.json().unwrap();
    assert_eq!(
        (&one["id"], &one["active"]),
        (&json!(one_path), &json!(true))
    );
    assert_eq!(one["@context"], "https://mercure.rocks/");
    let last_event_id = one["lastEventID"].as_str().unwrap().to_owned();

    // Resuming the events from `lastEventID` gives what happened after the answer: the end,
    // not the start it already showed.
    let mut watcher = watcher(&hub, Some(&last_event_id)).await;
    drop(book);
    let next = next_event_of(&mut watcher, BOOK).await;
    assert_eq!(
        (&next["subscriber"], &next["active"]),
        (&json!(book_id), &json!(false))
    );
    eventually_async("the ended subscription is no longer listed", async || {
        get(node, &one_path, Some(&subscriber(&[API]))).await.status == 404
    })
    .await;
    assert_eq!(subscribers_of(node, SHELF).await.len(), 1);
}

async fn a_drained_hub_publishes_the_ends_and_the_restarted_hub_lists_none(kind: Kind) {
    let mut hub = Harness::start(kind, config("anonymous = true\nsubscriptions = true")).await;
    let mut client = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let node = hub.hub();
    eventually_async("the subscription listed", async || {
        subscribers_of(node, BOOK).await.len() == 1
    })
    .await;
    let id = subscribers_of(node, BOOK).await.remove(0);
    hub.restart().await;
    assert_eq!(client.next_frame_or_end().await.unwrap(), None, "drained");

    let mut everything = watcher(&hub, Some("earliest")).await;
    let start = next_event_of(&mut everything, BOOK).await;
    let end = next_event_of(&mut everything, BOOK).await;
    assert_eq!(
        (&start["subscriber"], &start["active"]),
        (&json!(id), &json!(true))
    );
    assert_eq!(
        (&end["subscriber"], &end["active"]),
        (&json!(id), &json!(false))
    );
    let node = hub.hub();
    eventually_async("the restarted hub has read the stream", async || {
        listed(node).await["lastEventID"] != "earliest"
    })
    .await;
    assert!(subscribers_of(node, BOOK).await.is_empty());
}

/// A socket that accepts nothing is closed as a slow client: its subscription ends too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_closed_by_the_hub_is_announced_as_ended() {
    let mut config = config("anonymous = true\nsubscriptions = true");
    config.sse.write_timeout = Duration::from_secs(1);
    config.sse.max_event_size = 256 * 1024;
    let hub = Harness::start(Kind::Embedded, config).await;
    let mut watcher = watcher(&hub, None).await;
    let mut socket = tokio::net::TcpStream::connect(hub.hub().addr)
        .await
        .unwrap();
    let request = format!(
        "GET {HUB}?{} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
        form(&[("topic", BOOK)])
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 64];
    let n = socket.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"));
    let start = next_event_of(&mut watcher, BOOK).await;
    assert_eq!(start["active"], true);
    // ~19 MiB in one burst: more than the socket buffers of a client that reads nothing.
    let payload = "s".repeat(64 * 1024);
    for _ in 0..300 {
        hub.publish(&[("topic", BOOK), ("data", &payload)]).await;
    }
    let end = next_event_of(&mut watcher, BOOK).await;
    assert_eq!(
        (&end["subscriber"], &end["active"]),
        (&start["subscriber"], &json!(false))
    );
    assert_eq!(
        hub.hub()
            .metric("sluice_disconnects_total{reason=\"slow_client\"}"),
        1
    );
    drop(socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_missing_tokens_other_selectors_and_unknown_subscriptions() {
    let hub = Harness::start(Kind::Embedded, config("subscriptions = true")).await;
    let node = hub.hub();
    let rejected = |reason: &str| {
        node.metric(&format!(
            "sluice_connections_rejected_total{{reason=\"{reason}\"}}"
        ))
    };
    let answer = get(node, SUBSCRIPTIONS, None).await;
    assert_eq!(answer.status, 401);
    assert_eq!(rejected("missing_token"), 1);
    let answer = get(node, SUBSCRIPTIONS, Some("not.a.token")).await;
    assert_eq!(answer.status, 401);

    // A token for the events of one selector opens that selector's resources only.
    let book_events = format!("{SUBSCRIPTIONS}/{}/{{subscriber}}", encoded(BOOK));
    let book_collection = format!("{SUBSCRIPTIONS}/{}", encoded(BOOK));
    let narrow = subscriber(&[&book_events, &book_collection]);
    let answer = get(node, SUBSCRIPTIONS, Some(&narrow)).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(rejected("mercure_subscriptions_forbidden"), 1);
    let answer = get(node, &book_collection, Some(&narrow)).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json().unwrap()["subscriptions"], json!([]));
    let other = format!("{SUBSCRIPTIONS}/{}", encoded(SHELF));
    assert_eq!(get(node, &other, Some(&narrow)).await.status, 403);
    let publisher_only = publisher();
    assert_eq!(
        get(node, SUBSCRIPTIONS, Some(&publisher_only)).await.status,
        401,
        "signed with the publishers' key"
    );

    let unknown = format!("{book_collection}/{}", encoded("urn:uuid:nobody"));
    let answer = get(node, &unknown, Some(&narrow)).await;
    assert_eq!(answer.status, 404);
    assert_eq!(rejected("mercure_subscriptions_not_found"), 1);
    let answer = get(node, &format!("{unknown}/more"), Some(&narrow)).await;
    assert_eq!(answer.status, 404);

    // The 1.0 draft's paths are refused alike.
    let draft_collection = format!("{SUBSCRIPTIONS}/exact/{}", encoded(BOOK));
    assert_eq!(get(node, &draft_collection, None).await.status, 401);
    assert_eq!(
        get(node, &draft_collection, Some(&narrow)).await.status,
        403,
        "a grant of the 0.x paths is not one of the draft's"
    );
    let draft_narrow = subscriber(&[
        &draft_collection,
        &format!("{draft_collection}/{{subscriber}}"),
    ]);
    let answer = get(node, &draft_collection, Some(&draft_narrow)).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json().unwrap()["subscriptions"], json!([]));
    let unknown = format!("{draft_collection}/{}", encoded("urn:uuid:nobody"));
    assert_eq!(get(node, &unknown, Some(&draft_narrow)).await.status, 404);
    assert_eq!(
        get(node, &format!("{unknown}/more"), Some(&draft_narrow))
            .await
            .status,
        404
    );

    // Off unless asked for.
    let plain = Harness::start(Kind::Embedded, config("")).await;
    assert_eq!(
        get(plain.hub(), SUBSCRIPTIONS, Some(&subscriber(&[API])))
            .await
            .status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hub_nodes_on_one_stream_list_each_others_subscribers() {
    let hub = Harness::start(
        Kind::jetstream(),
        config("anonymous = true\nsubscriptions = true"),
    )
    .await;
    let second = hub.another_node().await;
    let first = hub.hub();
    let _on_first = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let url = second.url(&format!("{HUB}?{}", form(&[("topic", SHELF)])));
    let mut on_second = SseClient::connect(&url).await.unwrap();
    assert_eq!(on_second.status(), 200);
    on_second.next_frame().await.unwrap();
    for node in [first, &second] {
        eventually_async("each node lists both nodes' subscribers", async || {
            subscribers_of(node, BOOK).await.len() == 1
                && subscribers_of(node, SHELF).await.len() == 1
        })
        .await;
    }
    assert_eq!(
        subscribers_of(first, SHELF).await,
        subscribers_of(&second, SHELF).await
    );

    drop(on_second);
    for node in [first, &second] {
        eventually_async(
            "the gone subscriber is dropped from both lists",
            async || subscribers_of(node, SHELF).await.is_empty(),
        )
        .await;
    }
    assert_eq!(subscribers_of(&second, BOOK).await.len(), 1);
    second.stop().await;
}

/// A node that dies without a word (its runtime stopped: nothing of it runs again) stops
/// renewing its lease; the other node then ends its subscriptions, publishing the ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_subscriptions_end_when_its_lease_runs_out() {
    let hub = Harness::start(
        Kind::jetstream(),
        config("anonymous = true\nsubscriptions = true\nsubscriptions_lease = \"2s\""),
    )
    .await;
    let mut watcher = watcher(&hub, None).await;
    let (config, jetstream) = hub.node_config();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let doomed =
        tokio::task::spawn_blocking(move || handle.block_on(start_node(config, jetstream)))
            .await
            .unwrap();
    let first = hub.hub();
    let (client, start) = subscribe_listed(&doomed, &mut watcher, first).await;

    runtime.shutdown_background();
    let end = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(
        (&end["subscriber"], &end["active"]),
        (&start["subscriber"], &json!(false))
    );
    assert!(subscribers_of(first, SHELF).await.is_empty());
    drop((client, doomed));
}

/// A configuration with Mercure on, to which a test appends keys of `[mercure]`.
const MERCURE_BASE: &str =
    "topic_prefix = \"app\"\n[mercure]\nenabled = true\npublisher_jwt_key = \"k\"\n";

/// The configuration `text` with the environment `env`, as the binary loads it.
fn load(
    text: &str,
    env: &[(&str, &str)],
) -> Result<(sluice_server::config::Config, Vec<String>), sluice_server::config::ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    sluice_server::config::load_str(text, "test", env.collect::<Vec<_>>(), &Default::default())
}

#[test]
fn the_lease_is_between_a_second_and_an_hour_and_may_come_from_the_environment() {
    let base = MERCURE_BASE;
    for lease in ["0s", "500ms", "2h"] {
        let err = load(&format!("{base}subscriptions_lease = \"{lease}\""), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mercure.subscriptions_lease"),
            "{lease}: {err}"
        );
    }
    let (config, _) = load(
        base,
        &[
            ("SLUICE_MERCURE_SUBSCRIPTIONS", "true"),
            ("SLUICE_MERCURE_SUBSCRIPTIONS_LEASE", "5s"),
        ],
    )
    .unwrap();
    assert!(config.mercure.subscriptions);
    assert_eq!(config.mercure.subscriptions_lease, Duration::from_secs(5));
    let (config, _) = load(base, &[]).unwrap();
    assert!(!config.mercure.subscriptions, "off by default");
}

/// A message under the subscription events' subjects that is no subscription event (written
/// there by something other than a hub) is not listed, and is counted and logged as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_among_the_subscription_events_that_is_none_is_counted_as_skipped() {
    let hub = Harness::start(
        Kind::jetstream(),
        config("anonymous = true\nsubscriptions = true"),
    )
    .await;
    let (_, jetstream) = hub.node_config();
    let client = async_nats::connect(jetstream.urls[0].as_str())
        .await
        .unwrap();
    let context = async_nats::jetstream::new(client);
    context
        .publish("mercure.s.0123456789abcdef._", "not a subscription".into())
        .await
        .unwrap()
        .await
        .expect("stored");
    let _listed = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    eventually_async("the subscriber is listed", async || {
        subscribers_of(hub.hub(), BOOK).await.len() == 1
    })
    .await;
    hub.hub()
        .eventually("the stray message is counted", |hub| {
            hub.metric("sluice_mercure_subscription_events_skipped_total{reason=\"undecodable\"}")
                == 1
        })
        .await;
    assert_eq!(
        listed(hub.hub()).await["subscriptions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

async fn draft_subscription_events_announce_starts_and_ends_in_the_drafts_shape(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true\nsubscriptions = true")).await;
    let mut drafts = draft_watcher(&hub, None).await;
    let mut legacy = watcher(&hub, None).await;
    let client = subscribed_as_alice(
        &hub,
        &[("match", BOOK), ("match_urlpattern", SHELF_PATTERN)],
    )
    .await;

    let (start, event) = next_draft_event_of(&mut drafts, BOOK).await;
    assert_eq!(event.as_deref(), Some("mercure"), "the draft's event type");
    let id = start["subscriber"].as_str().unwrap().to_owned();
    assert!(id.starts_with("urn:uuid:"), "{id}");
    assert_eq!(
        start,
        json!({
            "id": format!("{SUBSCRIPTIONS}/exact/{}/{}", encoded(BOOK), encoded(&id)),
            "type": "subscription",
            "match_type": "exact",
            "match": BOOK,
            "subscriber": id,
            "active": true,
            "payload": { "name": "alice" },
        })
    );
    let (shelf, _) = next_draft_event_of(&mut drafts, SHELF_PATTERN).await;
    assert_eq!(
        shelf["id"],
        format!(
            "{SUBSCRIPTIONS}/urlpattern/{}/{}",
            encoded(SHELF_PATTERN),
            encoded(&id)
        )
    );
    assert_eq!(
        (&shelf["match_type"], &shelf["subscriber"]),
        (&json!("urlpattern"), &json!(id))
    );

    drop(client);
    let (end, event) = next_draft_event_of(&mut drafts, BOOK).await;
    let mut ended = start.clone();
    ended["active"] = json!(false);
    assert_eq!((end, event.as_deref()), (ended, Some("mercure")));
    let (end, _) = next_draft_event_of(&mut drafts, SHELF_PATTERN).await;
    assert_eq!(end["active"], false);

    // A 0.x selector's events keep the 0.x shape, without an event type, also beside a 1.0
    // matcher of the same subscription (one subscriber id for both).
    let _mixed = hub
        .subscribed(
            &form(&[("topic", BOOK), ("match_urlpattern", SHELF_PATTERN)]),
            &[],
        )
        .await;
    let old = loop {
        let frame = legacy.next_event().await.unwrap();
        let doc: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        assert_eq!(
            (doc["type"].as_str(), &frame.event),
            (Some("Subscription"), &None)
        );
        if doc["topic"] == BOOK {
            break doc;
        }
    };
    let (new, _) = next_draft_event_of(&mut drafts, SHELF_PATTERN).await;
    assert_eq!(
        (&new["subscriber"], &new["active"]),
        (&old["subscriber"], &json!(true))
    );
}

async fn the_api_answers_the_drafts_paths_in_its_shape_with_the_cursor_in_the_link(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true\nsubscriptions = true")).await;
    let shelf = hub
        .subscribed(&form(&[("match_urlpattern", SHELF_PATTERN)]), &[])
        .await;
    let _book = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let node = hub.hub();
    let token = subscriber(&[DRAFT_API]);
    let collection = format!("{SUBSCRIPTIONS}/urlpattern/{}", encoded(SHELF_PATTERN));
    eventually_async("both subscriptions listed", async || {
        let answer = get(node, &collection, Some(&token)).await;
        answer.json().unwrap()["subscriptions"]
            .as_array()
            .unwrap()
            .len()
            == 1
            && subscribers_of(node, BOOK).await.len() == 1
    })
    .await;

    let answer = get(node, &collection, Some(&token)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert!(link_cursor(&answer).starts_with('#'));
    let body = answer.json().unwrap();
    let member = body["subscriptions"][0].clone();
    assert_eq!(
        body,
        json!({ "id": collection, "type": "subscriptions", "subscriptions": [member] })
    );
    assert_eq!(
        (&member["type"], &member["match"]),
        (&json!("subscription"), &json!(SHELF_PATTERN))
    );
    let id = member["subscriber"].as_str().unwrap().to_owned();

    let one_path = format!("{collection}/{}", encoded(&id));
    let one = get(node, &one_path, Some(&token)).await;
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(one.header("content-type"), Some("application/json"));
    let cursor = link_cursor(&one);
    assert_eq!(
        one.json().unwrap(),
        member,
        "the event's document, unchanged"
    );

    // The whole collection, asked for as JSON: every subscription, each in its own shape.
    let accept_json = [("accept", "application/json")];
    let all = get_with(node, SUBSCRIPTIONS, Some(&token), &accept_json).await;
    assert_eq!(all.header("content-type"), Some("application/json"));
    link_cursor(&all);
    let all = all.json().unwrap();
    assert_eq!(
        (&all["type"], &all["id"]),
        (&json!("subscriptions"), &json!(SUBSCRIPTIONS))
    );
    let mut types: Vec<&str> = all["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["type"].as_str().unwrap())
        .collect();
    types.sort_unstable();
    assert_eq!(types, ["Subscription", "subscription"]);
    assert!(all.get("lastEventID").is_none() && all.get("@context").is_none());
    let legacy = get(node, SUBSCRIPTIONS, Some(&token)).await;
    assert_eq!(
        legacy.json().unwrap()["type"],
        "Subscriptions",
        "0.x unless asked"
    );

    // Resuming the events from the cursor gives what happened after the answer: the end.
    let mut drafts = draft_watcher(&hub, Some(&cursor)).await;
    drop(shelf);
    let (next, _) = next_draft_event_of(&mut drafts, SHELF_PATTERN).await;
    assert_eq!(
        (&next["subscriber"], &next["active"]),
        (&json!(id), &json!(false))
    );
    eventually_async("the ended subscription is no longer listed", async || {
        get(node, &one_path, Some(&token)).await.status == 404
    })
    .await;
}

/// Subscribes to `SHELF` on `node`; returns the client and its start event (read by
/// `watcher`) once `first` lists the subscriber.
async fn subscribe_listed(
    node: &TestHub,
    watcher: &mut SseClient,
    first: &TestHub,
) -> (SseClient, Value) {
    let url = node.url(&format!("{HUB}?{}", form(&[("topic", SHELF)])));
    let mut client = SseClient::connect(&url).await.unwrap();
    client.next_frame().await.unwrap();
    let start = next_event_of(watcher, SHELF).await;
    eventually_async("the subscriber listed", async || {
        subscribers_of(first, SHELF).await.len() == 1
    })
    .await;
    (client, start)
}

/// A subscription to `query` whose token's payload names alice (and grants no selector).
async fn subscribed_as_alice(hub: &Harness, query: &[(&str, &str)]) -> SseClient {
    let alice = token(
        SUBSCRIBER_KEY,
        json!({ "subscribe": [], "payload": { "name": "alice" } }),
    );
    hub.subscribed(&form(query), &[("authorization", &bearer(&alice))])
        .await
}

/// The port of a `nats://host:port` URL.
fn nats_port(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("a NATS URL with a port")
}

/// A node cut off from the stream for longer than its lease is taken for dead: the other
/// node ends its subscription although it still serves it. Back on the stream, the cut-off
/// node reads that end and announces the subscription again, so the other node lists it
/// again; and that new start can itself be ended later (its end names it, so it is not taken
/// for a duplicate of the first end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_taken_for_dead_while_cut_off_announces_its_subscriptions_again() {
    let hub = Harness::start(
        Kind::jetstream(),
        config("anonymous = true\nsubscriptions = true\nsubscriptions_lease = \"2s\""),
    )
    .await;
    let mut watcher = watcher(&hub, None).await;
    let (mut config, mut jetstream) = hub.node_config();
    let proxy = TcpProxy::start(nats_port(&jetstream.urls[0])).await;
    jetstream.urls = vec![proxy.nats_url()];
    config.jetstream = Some(jetstream.clone());
    let cut_off = start_node(config, jetstream).await;
    let first = hub.hub();
    let (mut client, start) = subscribe_listed(&cut_off, &mut watcher, first).await;

    proxy.cut_and_hold();
    let end = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(
        (&end["subscriber"], &end["active"]),
        (&start["subscriber"], &json!(false)),
        "taken for dead"
    );
    proxy.resume();
    let again = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(again, start, "announced again");
    eventually_async("listed again", async || {
        subscribers_of(first, SHELF).await.len() == 1
    })
    .await;
    let reannounced = "sluice_mercure_subscriptions_reannounced_total{reason=\"ended_elsewhere\"}";
    assert_eq!(cut_off.metric(reannounced), 1);

    // Still served: an update reaches it; and when it goes, its end is stored and unlists it.
    hub.publish(&[
        ("topic", "https://example.com/shelves/1"),
        ("data", "still here"),
    ])
    .await;
    let frame = client.next_event().await.unwrap();
    assert_eq!(frame.data.as_deref(), Some("still here"));
    drop(client);
    let end = next_event_of(&mut watcher, SHELF).await;
    assert_eq!(end["active"], false);
    eventually_async("unlisted once ended", async || {
        subscribers_of(first, SHELF).await.is_empty()
    })
    .await;
    cut_off.stop().await;
}

/// The `type` of the whole collection `hub` answers with `extra` headers: `Subscriptions`
/// (0.x) or `subscriptions` (the 1.0 draft).
async fn collection_type(hub: &TestHub, extra: &[(&str, &str)]) -> String {
    let token = subscriber(&[DRAFT_API]);
    let answer = get_with(hub, SUBSCRIPTIONS, Some(&token), extra).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json().unwrap()["type"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_collections_shape_may_be_fixed_whatever_the_request_accepts() {
    let any = [("accept", "*/*")];
    let json_only = [("accept", "application/json")];
    let by_accept = Harness::start(
        Kind::Embedded,
        config("anonymous = true\nsubscriptions = true"),
    )
    .await;
    assert_eq!(
        collection_type(by_accept.hub(), &any).await,
        "Subscriptions"
    );
    assert_eq!(
        collection_type(by_accept.hub(), &json_only).await,
        "subscriptions"
    );
    drop(by_accept);
    for (shape, expected) in [("draft", "subscriptions"), ("0.x", "Subscriptions")] {
        let hub = Harness::start(
            Kind::Embedded,
            config(&format!(
                "anonymous = true\nsubscriptions = true\nsubscriptions_collection = \"{shape}\""
            )),
        )
        .await;
        for extra in [&any[..], &json_only[..], &[]] {
            assert_eq!(
                collection_type(hub.hub(), extra).await,
                expected,
                "{shape}, {extra:?}"
            );
        }
    }
}

#[test]
fn the_collections_shape_is_one_of_three_and_may_come_from_the_environment() {
    let base = MERCURE_BASE;
    let err = load(&format!("{base}subscriptions_collection = \"1.0\""), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mercure.subscriptions_collection") && err.contains("1.0"),
        "{err}"
    );
    let (config, _) = load(
        base,
        &[("SLUICE_MERCURE_SUBSCRIPTIONS_COLLECTION", "draft")],
    )
    .unwrap();
    assert_eq!(
        config.mercure.subscriptions_collection,
        sluice_server::config::CollectionShape::Draft
    );
}

/// A NATS outage longer than the lease: while it lasts, each node takes the other for dead and
/// a subscription ends; none of that can be stored then. Once NATS is back, the ends decided
/// and the end that happened are stored (they were tried again, not dropped), each node
/// announces what it serves again, and every node lists exactly the live subscriptions of
/// both — none lost, none left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_nats_outage_every_node_lists_every_live_subscription_and_no_ended_one() {
    const GONE: &str = "https://example.com/gone";
    let mut hub = Harness::start(
        Kind::jetstream(),
        config("anonymous = true\nsubscriptions = true\nsubscriptions_lease = \"2s\""),
    )
    .await;
    let second = hub.another_node().await;
    let _on_first = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let mut on_second = Vec::new();
    for topic in [SHELF, GONE] {
        let url = second.url(&format!("{HUB}?{}", form(&[("topic", topic)])));
        let mut client = SseClient::connect(&url).await.unwrap();
        client.next_frame().await.unwrap();
        on_second.push(client);
    }
    for node in [hub.hub(), &second] {
        eventually_async("each node lists all three", async || {
            subscribers_of(node, BOOK).await.len() == 1
                && subscribers_of(node, SHELF).await.len() == 1
                && subscribers_of(node, GONE).await.len() == 1
        })
        .await;
    }

    hub.nats().stop().await.unwrap();
    // The outage outlasts the lease (2 s) twice over: each node takes the other for dead.
    sluice_test_support::wall_clock_passes(std::time::SystemTime::now() + Duration::from_secs(5))
        .await;
    drop(on_second.pop());
    hub.nats().restart().await.unwrap();

    for node in [hub.hub(), &second] {
        eventually_async(
            "live subscriptions listed again, the ended one not",
            async || {
                subscribers_of(node, BOOK).await.len() == 1
                    && subscribers_of(node, SHELF).await.len() == 1
                    && subscribers_of(node, GONE).await.is_empty()
            },
        )
        .await;
    }
    second.stop().await;
}
