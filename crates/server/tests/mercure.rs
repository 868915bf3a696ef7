//! The Mercure hub at `/.well-known/mercure` over real HTTP, on the embedded store and on a real
//! nats-server: publishing, selectors, private updates, refusals, ids, resume across a hub
//! restart, shared feeds, discovery and CORS.

mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;
#[path = "mercure/harness.rs"]
mod harness;

use backends::{Kind, on_both_backends};
use harness::{
    HUB, Harness, PUBLISHER_KEY, SUBSCRIBER_KEY, config, form, publisher, subscriber, token,
};
use serde_json::json;
use sluice_test_support::http;

const BOOK: &str = "https://example.com/books/1";

on_both_backends!(
    a_published_update_reaches_subscribers_with_its_id_type_retry_and_lines,
    uri_templates_and_url_patterns_select_only_their_topics,
    an_update_reaches_subscribers_of_its_alternate_topics,
    private_updates_reach_only_subscribers_granted_one_of_their_topics,
    a_custom_id_is_echoed_and_a_repeated_one_is_stored_once,
    a_custom_id_taken_on_another_topic_swallows_nothing_and_resumes_without_loss,
    subscribers_resume_by_hub_id_custom_id_and_earliest_after_a_restart,
    subscriptions_with_the_same_selectors_and_grants_share_one_feed,
);

async fn a_published_update_reaches_subscribers_with_its_id_type_retry_and_lines(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let mut client = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let data = "line one\nline two\n\n  indented line four";
    let id = hub
        .publish(&[
            ("topic", BOOK),
            ("data", data),
            ("type", "book"),
            ("retry", "3000"),
        ])
        .await;
    assert!(id.starts_with('#'), "a hub-made id: {id}");
    let event = client.next_event().await.unwrap();
    assert_eq!(event.id.as_deref(), Some(id.as_str()));
    assert_eq!(event.event.as_deref(), Some("book"));
    assert_eq!(event.retry, Some(3000));
    assert_eq!(event.data.as_deref(), Some(data));

    // No type, no retry, empty data: a plain `message` event with empty data.
    let id = hub.publish(&[("topic", BOOK)]).await;
    let event = client.next_event().await.unwrap();
    assert_eq!(
        (
            event.id.as_deref(),
            event.event,
            event.retry,
            event.data.as_deref()
        ),
        (Some(id.as_str()), None, None, Some(""))
    );
}

async fn uri_templates_and_url_patterns_select_only_their_topics(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let mut template = hub
        .subscribed(&form(&[("topic", "https://example.com/books/{id}")]), &[])
        .await;
    let mut pattern = hub
        .subscribed(
            &form(&[("match_urlpattern", "https://example.com/authors/:id")]),
            &[],
        )
        .await;
    let mut exact = hub
        .subscribed(&form(&[("match", "https://example.com/authors/2")]), &[])
        .await;
    for (topic, data) in [
        ("https://example.com/other/1", "other"),
        (
            "https://example.com/books/1/chapters/2",
            "too deep for {id}",
        ),
        ("https://example.com/authors/2", "author"),
        ("https://example.com/books/1", "book"),
    ] {
        hub.publish(&[("topic", topic), ("data", data)]).await;
    }
    assert_eq!(
        template.next_event().await.unwrap().data.as_deref(),
        Some("book")
    );
    assert_eq!(
        pattern.next_event().await.unwrap().data.as_deref(),
        Some("author")
    );
    assert_eq!(
        exact.next_event().await.unwrap().data.as_deref(),
        Some("author")
    );
}

async fn an_update_reaches_subscribers_of_its_alternate_topics(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let mut alternate = hub
        .subscribed(&form(&[("topic", "https://example.com/alt")]), &[])
        .await;
    let id = hub
        .publish(&[
            ("topic", BOOK),
            ("topic", "https://example.com/alt"),
            ("data", "both"),
        ])
        .await;
    let event = alternate.next_event().await.unwrap();
    assert_eq!((event.id, event.data.as_deref()), (Some(id), Some("both")));
}

async fn private_updates_reach_only_subscribers_granted_one_of_their_topics(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let query = form(&[("topic", "https://example.com/users/1/{box}")]);
    let granted = format!(
        "Bearer {}",
        subscriber(&["https://example.com/users/1/{x}"])
    );
    let other = format!(
        "Bearer {}",
        subscriber(&["https://example.com/users/2/{x}"])
    );
    let mut alice = hub.subscribed(&query, &[("authorization", &granted)]).await;
    let mut stranger = hub.subscribed(&query, &[("authorization", &other)]).await;
    let mut anonymous = hub.subscribed(&query, &[]).await;
    hub.publish(&[
        ("topic", "https://example.com/users/1/inbox"),
        ("data", "secret"),
        ("private", "on"),
    ])
    .await;
    hub.publish(&[
        ("topic", "https://example.com/users/1/news"),
        ("data", "public"),
    ])
    .await;
    assert_eq!(
        alice.next_event().await.unwrap().data.as_deref(),
        Some("secret")
    );
    assert_eq!(
        alice.next_event().await.unwrap().data.as_deref(),
        Some("public")
    );
    for client in [&mut stranger, &mut anonymous] {
        assert_eq!(
            client.next_event().await.unwrap().data.as_deref(),
            Some("public")
        );
    }
}

async fn a_custom_id_is_echoed_and_a_repeated_one_is_stored_once(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let mut client = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let pairs = [("topic", BOOK), ("data", "first"), ("id", "urn:uuid:1 é")];
    assert_eq!(hub.publish(&pairs).await, "urn:uuid:1 é");
    assert_eq!(
        hub.publish(&pairs).await,
        "urn:uuid:1 é",
        "the duplicate answers the same id"
    );
    hub.publish(&[("topic", BOOK), ("data", "next")]).await;
    let event = client.next_event().await.unwrap();
    assert_eq!(
        (event.id.as_deref(), event.data.as_deref()),
        (Some("urn:uuid:1 é"), Some("first"))
    );
    assert_eq!(
        client.next_event().await.unwrap().data.as_deref(),
        Some("next"),
        "the repeated id was not stored again"
    );
    assert!(
        hub.hub()
            .metric("sluice_publishes_total{result=\"duplicate\"}")
            >= 1
    );
}

/// A publisher allowed only its own topics uses another's id first: the other's update with
/// that id (a private one) is still stored and delivered, and a subscriber resuming by the id
/// resumes after the update it can receive — after the oldest when it receives both, so
/// nothing is skipped.
async fn a_custom_id_taken_on_another_topic_swallows_nothing_and_resumes_without_loss(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let order = "https://example.com/orders/77";
    let mut buyer = hub
        .subscribed(
            &form(&[("topic", order)]),
            &[("authorization", &format!("Bearer {}", subscriber(&[order])))],
        )
        .await;
    let attacker = token(
        PUBLISHER_KEY,
        json!({ "publish": ["https://example.com/attacker/{x}"] }),
    );
    let first = form(&[
        ("topic", "https://example.com/attacker/1"),
        ("data", "squatted"),
        ("id", "order-77"),
    ]);
    let answer = hub.post(&first, Some(&attacker)).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let id = hub
        .publish(&[
            ("topic", order),
            ("data", "paid"),
            ("id", "order-77"),
            ("private", "on"),
        ])
        .await;
    assert_eq!(id, "order-77");
    let event = buyer.next_event().await.unwrap();
    assert_eq!(
        (event.id.as_deref(), event.data.as_deref()),
        (Some("order-77"), Some("paid")),
        "stored and delivered, not taken for a duplicate"
    );
    hub.publish(&[("topic", order), ("data", "shipped"), ("private", "on")])
        .await;
    let bearer = format!("Bearer {}", subscriber(&[order]));
    let mut resumed = hub
        .subscribe(
            &form(&[("topic", order)]),
            &[("authorization", &bearer), ("last-event-id", "order-77")],
        )
        .await;
    assert_eq!(
        resumed.next_event().await.unwrap().data.as_deref(),
        Some("shipped"),
        "after its own update with the id"
    );
    let everyone = format!("Bearer {}", subscriber(&["*"]));
    let mut both = hub
        .subscribe(
            &form(&[("topic", "*")]),
            &[("authorization", &everyone), ("last-event-id", "order-77")],
        )
        .await;
    assert_eq!(
        both.next_event().await.unwrap().data.as_deref(),
        Some("paid"),
        "after the oldest update with the id it receives: a repeat, never a skip"
    );
}

async fn subscribers_resume_by_hub_id_custom_id_and_earliest_after_a_restart(kind: Kind) {
    let mut hub = Harness::start(kind, config("anonymous = true")).await;
    hub.publish(&[("topic", BOOK), ("data", "a"), ("id", "custom-a")])
        .await;
    let b = hub.publish(&[("topic", BOOK), ("data", "b")]).await;
    hub.publish(&[
        ("topic", "https://example.com/other"),
        ("data", "not selected"),
    ])
    .await;
    hub.publish(&[("topic", BOOK), ("data", "c")]).await;
    hub.restart().await;
    let query = form(&[("topic", BOOK)]);
    let datas = async |client: &mut sluice_test_support::SseClient, count: usize| {
        let mut out = Vec::new();
        for _ in 0..count {
            out.push(client.next_event().await.unwrap().data.unwrap());
        }
        out
    };

    let mut by_custom = hub
        .subscribe(&query, &[("last-event-id", "custom-a")])
        .await;
    assert_eq!(by_custom.header("last-event-id"), Some("custom-a"));
    assert_eq!(datas(&mut by_custom, 2).await, ["b", "c"]);

    let mut by_hub_id = hub.subscribe(&query, &[("last-event-id", &b)]).await;
    assert_eq!(by_hub_id.header("last-event-id"), Some(b.as_str()));
    assert_eq!(datas(&mut by_hub_id, 1).await, ["c"]);

    let earliest = format!("{query}&lastEventID=earliest");
    let mut from_start = hub.subscribe(&earliest, &[]).await;
    assert_eq!(from_start.header("last-event-id"), Some("earliest"));
    assert_eq!(datas(&mut from_start, 3).await, ["a", "b", "c"]);

    // The header wins over both query parameters.
    let both = format!("{query}&lastEventID=earliest&last_event_id=earliest");
    let mut header_wins = hub.subscribe(&both, &[("last-event-id", &b)]).await;
    assert_eq!(datas(&mut header_wins, 1).await, ["c"]);
    let draft = format!("{query}&last_event_id=custom-a");
    let mut by_draft_parameter = hub.subscribe(&draft, &[]).await;
    assert_eq!(datas(&mut by_draft_parameter, 2).await, ["b", "c"]);

    // An id the hub never handed out starts with new updates; the answer names the last one.
    let mut unknown = hub
        .subscribe(&query, &[("last-event-id", "never-seen")])
        .await;
    let last = unknown.header("last-event-id").unwrap().to_owned();
    assert!(last.starts_with('#'), "{last}");
    let d = hub.publish(&[("topic", BOOK), ("data", "d")]).await;
    let event = unknown.next_event().await.unwrap();
    assert_eq!((event.id, event.data.as_deref()), (Some(d), Some("d")));
}

async fn subscriptions_with_the_same_selectors_and_grants_share_one_feed(kind: Kind) {
    let hub = Harness::start(kind, config("anonymous = true")).await;
    let query = form(&[("topic", "https://example.com/books/{id}"), ("topic", BOOK)]);
    let same_set = form(&[("topic", BOOK), ("topic", "https://example.com/books/{id}")]);
    let mut first = hub.subscribed(&query, &[]).await;
    let mut second = hub.subscribed(&same_set, &[]).await;
    assert_eq!(hub.hub().hub.feed_count(), 1, "one feed for both");
    let bearer = format!("Bearer {}", subscriber(&["*"]));
    let mut granted = hub.subscribed(&query, &[("authorization", &bearer)]).await;
    assert_eq!(hub.hub().hub.feed_count(), 2, "other grants, another feed");
    hub.publish(&[("topic", BOOK), ("data", "x")]).await;
    for client in [&mut first, &mut second, &mut granted] {
        assert_eq!(
            client.next_event().await.unwrap().data.as_deref(),
            Some("x")
        );
    }
    assert_eq!(hub.hub().metric("sluice_active_feeds"), 2);
    // The feeds, and the compiled selectors they own, go with their last connection.
    drop((first, second, granted));
    sluice_test_support::eventually("the feeds gone with their connections", || {
        hub.hub().hub.feed_count() == 0 && hub.hub().metric("sluice_active_feeds") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_say_what_is_wrong() {
    let hub = Harness::start(Kind::Embedded, config("")).await;
    let body = form(&[("topic", BOOK), ("data", "x")]);
    let answer = hub.post(&body, None).await;
    assert_eq!(answer.status, 401, "{}", answer.text());
    let answer = hub.post(&body, Some("not.a.token")).await;
    assert_eq!(answer.status, 401, "{}", answer.text());
    let wrong_key = token(SUBSCRIBER_KEY, json!({ "publish": ["*"] }));
    assert_eq!(hub.post(&body, Some(&wrong_key)).await.status, 401);
    let narrow = token(
        PUBLISHER_KEY,
        json!({ "publish": ["https://example.com/books/{id}"] }),
    );
    let alternates = form(&[("topic", BOOK), ("topic", "https://example.com/other")]);
    let answer = hub.post(&alternates, Some(&narrow)).await;
    assert_eq!(
        answer.status,
        403,
        "every topic must be granted: {}",
        answer.text()
    );
    assert_eq!(hub.post(&body, Some(&narrow)).await.status, 200);
    let answer = hub.post(&form(&[("data", "x")]), Some(&publisher())).await;
    assert_eq!(answer.status, 400);
    assert!(answer.text().contains("topic"), "{}", answer.text());
    let answer = hub
        .post(&form(&[("topic", BOOK), ("id", "#1")]), Some(&publisher()))
        .await;
    assert_eq!(answer.status, 400);
    assert!(answer.text().contains("id"), "{}", answer.text());

    // Subscribing: no token without `anonymous`, unknown and invalid selectors.
    let client = hub.subscribe(&form(&[("topic", BOOK)]), &[]).await;
    assert_eq!(client.status(), 401);
    let bearer = format!("Bearer {}", subscriber(&[]));
    let wildcards = format!("https://ex.com/{}", "*".repeat(1000));
    for (query, named) in [
        (form(&[("match_x", BOOK)]), "match_x"),
        (form(&[("match_urlpattern", "https://x/(")]), "https://x/("),
        (String::from("other=1"), "selector"),
        // The outside audit's selectors: matching them stalled every subscriber.
        (
            form(&[("match_urlpattern", &wildcards)]),
            "groups, more than the 32 allowed",
        ),
        (
            form(&[("match_urlpattern", "https://ex.com/:a(a{1,100}{1,100}b)")]),
            "too complex to match",
        ),
    ] {
        let url = hub.hub().url(&format!("{HUB}?{query}"));
        let request = http::request("GET".parse().unwrap(), &url, &[("authorization", &bearer)])
            .unwrap()
            .body(Default::default())
            .unwrap();
        let answer = http::send(request).await.unwrap();
        assert_eq!(answer.status, 400, "{query}");
        assert!(answer.text().contains(named), "{query}: {}", answer.text());
    }
    assert!(
        hub.hub()
            .metric("sluice_connections_rejected_total{reason=\"missing_token\"}")
            >= 1
    );
    assert!(
        hub.hub()
            .metric("sluice_connections_rejected_total{reason=\"bad_request\"}")
            >= 3
    );
    assert!(
        hub.hub()
            .metric("sluice_publish_refusals_total{reason=\"mercure_forbidden_topic\"}")
            >= 1
    );
}

/// As Mercure's hub: a publish authorised by the cookie (which a browser attaches to any
/// site's form POST) is accepted only from an origin of `publish_origins`, or the hub's own;
/// one authorised by the `Authorization` header is not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_authorised_by_the_cookie_needs_a_publish_origin() {
    let hub = Harness::start(
        Kind::Embedded,
        config("publish_origins = [\"https://app.example\"]"),
    )
    .await;
    let cookie = format!("mercureAuthorization={}", publisher());
    let bearer = format!("Bearer {}", publisher());
    let own = format!("http://{}", hub.hub().addr);
    let body = form(&[("topic", BOOK), ("data", "x")]);
    for (origin, credentials, expected) in [
        (Some("https://evil.example"), ("cookie", &cookie), 403),
        (None, ("cookie", &cookie), 403),
        (Some("https://app.example"), ("cookie", &cookie), 200),
        (Some(own.as_str()), ("cookie", &cookie), 200),
        (
            Some("https://evil.example"),
            ("authorization", &bearer),
            200,
        ),
    ] {
        let mut headers = vec![
            ("content-type", "application/x-www-form-urlencoded"),
            (credentials.0, credentials.1.as_str()),
        ];
        if let Some(origin) = origin {
            headers.push(("origin", origin));
        }
        let request = http::request("POST".parse().unwrap(), &hub.hub().url(HUB), &headers)
            .unwrap()
            .body(body.clone().into())
            .unwrap();
        let answer = http::send(request).await.unwrap();
        assert_eq!(
            answer.status,
            expected,
            "{origin:?} {}: {}",
            credentials.0,
            answer.text()
        );
        if expected == 403 {
            assert!(answer.text().contains("cookie"), "{}", answer.text());
        }
    }
    assert_eq!(
        hub.hub()
            .metric("sluice_publish_refusals_total{reason=\"cross_site_cookie\"}"),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_token_may_come_in_the_cookie_or_the_query() {
    let hub = Harness::start(Kind::Embedded, config("")).await;
    let token = subscriber(&[BOOK]);
    let cookie = format!("theme=dark; mercureAuthorization={token}");
    let mut by_cookie = hub
        .subscribed(&form(&[("topic", BOOK)]), &[("cookie", &cookie)])
        .await;
    let mut by_query = hub
        .subscribed(&form(&[("topic", BOOK), ("authorization", &token)]), &[])
        .await;
    // The query parameter comes before the cookie, as in Mercure: a bad cookie is not read.
    let mut query_first = hub
        .subscribed(
            &form(&[("topic", BOOK), ("authorization", &token)]),
            &[("cookie", "mercureAuthorization=garbage")],
        )
        .await;
    hub.publish(&[("topic", BOOK), ("data", "private"), ("private", "")])
        .await;
    for client in [&mut by_cookie, &mut by_query, &mut query_first] {
        assert_eq!(
            client.next_event().await.unwrap().data.as_deref(),
            Some("private")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_updates_are_gap_events_only_for_subscribers_who_ask() {
    let hub = Harness::start(
        Kind::Embedded,
        config("anonymous = true\n[sse]\nmax_event_size = 256"),
    )
    .await;
    let mut plain = hub.subscribed(&form(&[("topic", BOOK)]), &[]).await;
    let mut gaps = hub
        .subscribed(&form(&[("topic", BOOK), ("sluice_gaps", "1")]), &[])
        .await;
    let big = "x".repeat(300);
    hub.publish(&[("topic", BOOK), ("data", &big)]).await;
    let small = hub.publish(&[("topic", BOOK), ("data", "small")]).await;
    let gap = gaps.next_event().await.unwrap();
    assert_eq!(gap.event.as_deref(), Some("gap"));
    assert!(gap.data.unwrap().contains("too_large"));
    assert!(gap.id.unwrap().starts_with('#'));
    assert_eq!(gaps.next_event().await.unwrap().id, Some(small.clone()));
    let event = plain.next_event().await.unwrap();
    assert_eq!(event.id, Some(small), "a plain client sees no gap event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_answers_with_its_link_cors_and_heartbeats() {
    let hub = Harness::start(
        Kind::Embedded,
        config(
            "anonymous = true\nheartbeat = \"1s\"\ncors_origins = [\"https://app.example\"]\n\
             publish_origins = [\"https://admin.example\"]",
        ),
    )
    .await;
    let mut client = hub
        .subscribe(
            &form(&[("topic", BOOK)]),
            &[("origin", "https://app.example")],
        )
        .await;
    assert_eq!(
        client.header("link"),
        Some("</.well-known/mercure>; rel=\"mercure\"")
    );
    assert_eq!(
        client.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(
        client.header("access-control-allow-credentials"),
        Some("true")
    );
    let heartbeat = loop {
        let frame = client.next_frame().await.unwrap();
        if let Some(comment) = frame.comment.filter(|c| c.starts_with("heartbeat")) {
            break comment;
        }
    };
    assert!(heartbeat.starts_with("heartbeat"));

    // Publishers' origins are their own.
    let preflight = |origin: &'static str, method: &'static str| {
        let url = hub.hub().url(HUB);
        async move {
            let request = http::request(
                "OPTIONS".parse().unwrap(),
                &url,
                &[
                    ("origin", origin),
                    ("access-control-request-method", method),
                ],
            )
            .unwrap()
            .body(Default::default())
            .unwrap();
            http::send(request).await.unwrap()
        }
    };
    let allowed = preflight("https://admin.example", "POST").await;
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("https://admin.example")
    );
    let refused = preflight("https://app.example", "POST").await;
    assert_eq!(refused.header("access-control-allow-origin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_is_off_unless_enabled() {
    let (hub, _) = common::Embedded::start_with_store(Default::default()).await;
    assert_eq!(hub.get(HUB).await.status, 404);
}

#[test]
fn the_configuration_names_what_is_wrong_and_never_shows_a_key() {
    let load = |text: &str, env: Vec<(&str, &str)>| {
        let env = env.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned()));
        sluice_server::config::load_str(text, "test", env, &Default::default())
    };
    let key = "publisher_jwt_key = \"a-secret-nobody-may-see-0123456789\"";
    let cases = [
        (format!("[mercure]\nenabled = true\n{key}"), "topic_prefix"),
        (
            "topic_prefix = \"app\"\n[mercure]\nenabled = true".to_owned(),
            "mercure.publisher_jwt_key",
        ),
        (
            format!(
                "topic_prefix = \"app\"\n[mercure]\nenabled = true\n{key}\npublisher_jwt_alg = \"HS1\""
            ),
            "mercure.publisher_jwt_alg",
        ),
        (
            format!(
                "topic_prefix = \"app\"\n[mercure]\nenabled = true\n{key}\npublisher_jwt_alg = \"RS256\""
            ),
            "mercure.publisher_jwt_key",
        ),
        (
            format!("topic_prefix = \"mercure\"\n[mercure]\nenabled = true\n{key}"),
            "topic_prefix",
        ),
        (
            format!(
                "topic_prefix = \"app\"\n[mercure]\nenabled = true\n{key}\n[[embedded.streams]]\n\
                 name = \"sluice\"\nsubjects = [\"app.>\"]"
            ),
            "mercure.subject_prefix",
        ),
        (
            format!(
                "topic_prefix = \"app\"\n[mercure]\nenabled = true\n{key}\ncors_origins = [\"app\"]"
            ),
            "mercure.cors_origins[0]",
        ),
    ];
    for (text, named) in cases {
        let err = load(&text, Vec::new()).expect_err(&text).to_string();
        assert!(err.contains(named), "{text}: {err}");
        assert!(!err.contains("nobody-may-see"), "{err}");
    }
    let secret = "a-secret-nobody-may-see-0123456789";
    let err = load("[mercure]\npublisher_jwt_key = 5", Vec::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("mercure.publisher_jwt_key"), "{err}");

    // Mercure's variables, below sluice's own.
    let base = "topic_prefix = \"app\"\n[mercure]\nenabled = true";
    let (config, _) = load(
        base,
        vec![
            ("MERCURE_PUBLISHER_JWT_KEY", secret),
            (
                "MERCURE_SUBSCRIBER_JWT_KEY",
                "subscribers-secret-0123456789abcdef",
            ),
            ("MERCURE_SUBSCRIBER_JWT_ALG", "HS512"),
            ("MERCURE_PUBLISHER_JWT_ALG", ""),
        ],
    )
    .unwrap();
    assert!(config.mercure.publisher_jwt_key.is_some());
    assert_eq!(config.mercure.publisher_jwt_alg, "HS256");
    assert_eq!(config.mercure.subscriber_jwt_alg, "HS512");
    let shown = format!("{config:?} {}", toml::to_string(&config).unwrap());
    assert!(!shown.contains("nobody-may-see"), "{shown}");
    let err = load(
        base,
        vec![
            ("MERCURE_PUBLISHER_JWT_KEY", secret),
            ("MERCURE_PUBLISHER_JWT_ALG", "XX1"),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("MERCURE_PUBLISHER_JWT_ALG"), "{err}");
    let (config, _) = load(
        base,
        vec![
            (
                "MERCURE_PUBLISHER_JWT_KEY",
                "mercure-variable-secret-0123456789",
            ),
            ("SLUICE_MERCURE_PUBLISHER_JWT_KEY", secret),
        ],
    )
    .unwrap();
    let key = config.mercure.publisher_jwt_key.unwrap();
    assert_eq!(key.expose(), secret.as_bytes(), "SLUICE_ wins");
}

/// An access token (1.0 draft) signed with `key`, of type `at+jwt`, with `claims`.
fn access_token(key: &str, claims: serde_json::Value) -> String {
    let header = jsonwebtoken::Header {
        typ: Some("at+jwt".into()),
        ..jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256)
    };
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn in_seconds(seconds: u64) -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + seconds
}

const AUDIENCE: &str = "https://hub.example/.well-known/mercure";
const ISSUER: &str = "https://issuer.example";

fn access_claims(actions: &[&str], exp: Option<u64>) -> serde_json::Value {
    let mut claims = json!({
        "aud": ["other", AUDIENCE],
        "iss": ISSUER,
        "sub": "alice",
        "authorization_details": [{
            "type": "https://mercure.rocks/authorization-detail",
            "actions": actions,
            "topics": [{ "match": "https://example.com/books/:id", "match_type": "urlpattern" }]
        }]
    });
    if let Some(exp) = exp {
        claims["exp"] = json!(exp);
    }
    claims
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_tokens_need_the_hub_audience_the_issuer_and_an_expiry() {
    let settings = format!("audience = \"{AUDIENCE}\"\nissuer = \"{ISSUER}\"");
    let hub = Harness::start(Kind::Embedded, config(&settings)).await;
    let query = form(&[("topic", BOOK)]);
    let good = access_token(
        SUBSCRIBER_KEY,
        access_claims(&["subscribe"], Some(in_seconds(600))),
    );
    let mut other_claims = access_claims(&["subscribe"], Some(in_seconds(600)));
    other_claims["aud"] = json!("https://other-hub.example");
    let mut other_issuer = access_claims(&["subscribe"], Some(in_seconds(600)));
    other_issuer["iss"] = json!("https://evil.example");
    for (claims, why) in [
        (other_claims, "another audience"),
        (other_issuer, "another issuer"),
        (access_claims(&["subscribe"], None), "no exp"),
    ] {
        let bearer = format!("Bearer {}", access_token(SUBSCRIBER_KEY, claims));
        let client = hub.subscribe(&query, &[("authorization", &bearer)]).await;
        assert_eq!(client.status(), 401, "{why}");
    }
    let bearer = format!("Bearer {good}");
    let mut client = hub.subscribed(&query, &[("authorization", &bearer)]).await;

    // Its authorization details grant publishing and private reading.
    let publisher = access_token(
        PUBLISHER_KEY,
        access_claims(&["publish"], Some(in_seconds(600))),
    );
    let body = form(&[("topic", BOOK), ("data", "private"), ("private", "1")]);
    let answer = hub.post(&body, Some(&publisher)).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        client.next_event().await.unwrap().data.as_deref(),
        Some("private")
    );

    // A subscription made with an access token ends when the token expires.
    let short = access_token(
        SUBSCRIBER_KEY,
        access_claims(&["subscribe"], Some(in_seconds(2))),
    );
    let bearer = format!("Bearer {short}");
    let mut expiring = hub.subscribed(&query, &[("authorization", &bearer)]).await;
    let frames = expiring.frames_until_end().await.unwrap();
    assert!(
        frames
            .iter()
            .any(|f| f.event.as_deref() == Some("token_expired")),
        "{frames:?}"
    );

    // Without a configured audience, no access token is accepted.
    let strict = Harness::start(Kind::Embedded, config("")).await;
    let client = strict
        .subscribe(&query, &[("authorization", &bearer)])
        .await;
    assert_eq!(client.status(), 401);
    let token = access_token(
        SUBSCRIBER_KEY,
        access_claims(&["subscribe"], Some(in_seconds(600))),
    );
    let client = strict
        .subscribe(&query, &[("authorization", &format!("Bearer {token}"))])
        .await;
    assert_eq!(client.status(), 401);
}
