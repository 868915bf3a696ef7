//! Scenarios of the recent starts (`from=`) and of `repair=latest`.

use serde_json::{Value, json};
use sluice_server::config::{Config, Repair};

use crate::common::{HubFactory, TestHub, data, expect_event};
use sluice_test_support::SseClient;

/// Publishes `(topic, payload)` in order; the answers' ids by payload.
async fn publish_all(hub: &TestHub, messages: &[(&str, u64)]) -> Vec<String> {
    let mut ids = Vec::new();
    for (topic, payload) in messages {
        let ack = hub.publish(topic, json!(payload)).await;
        ids.push(ack["id"].as_str().expect("an id").to_owned());
    }
    ids
}

/// The next `count` message frames' payloads, after the `connected` frame if it is next
/// (failing on any other event).
async fn payloads(client: &mut SseClient, count: usize) -> Vec<u64> {
    let mut got = Vec::new();
    while got.len() < count {
        let frame = client.next_event().await.expect("an event");
        match frame.event_type() {
            "connected" if got.is_empty() => continue,
            "message" => got.push(data(&frame)["payload"].as_u64().expect("a number")),
            other => panic!("expected a message, got {other}: {frame:?}"),
        }
    }
    got
}

/// The id of the position before `id`'s (`<seq>-<incarnation>`).
fn before(id: &str) -> String {
    let (seq, incarnation) = id.split_once('-').expect("an id");
    format!("{}-{incarnation}", seq.parse::<u64>().unwrap() - 1)
}

/// `from=latest` gives the latest message of each subject the topics match, in stream order,
/// then live messages without a seam; `from=last:N` the last N, `from=since:` those stored
/// since a time; a resume wins over `from=`, and a resume from a state message continues
/// exactly after it.
pub async fn recent_starts_give_their_messages_then_live(f: &dyn HubFactory) {
    let hub = f.start(Config::default()).await;
    let ids = publish_all(
        &hub,
        &[
            ("kv.a", 1),
            ("kv.a", 2),
            ("kv.b", 3),
            ("other", 4),
            ("kv.a", 5),
            ("kv.b", 6),
            ("kv.c.d", 7),
        ],
    )
    .await;
    let mut latest = hub.subscribe("?topic=kv.%3E&from=latest").await;
    let connected = expect_event(&mut latest, "connected").await.unwrap();
    // Before the first retained message: a reconnect from it loses none of the state.
    assert_eq!(connected.id.as_deref(), Some(before(&ids[0]).as_str()));
    let frame = expect_event(&mut latest, "message").await.unwrap();
    assert_eq!(frame.id.as_deref(), Some(ids[4].as_str()));
    let since = data(&frame)["time"].as_str().unwrap().to_owned();
    assert_eq!(payloads(&mut latest, 2).await, [6, 7]);
    let live = publish_all(&hub, &[("kv.b", 8), ("other", 9)]).await;
    assert_eq!(
        payloads(&mut latest, 1).await,
        [8],
        "live, right after the state"
    );

    let mut last = hub.subscribe("?topic=kv.*&from=last:2").await;
    let connected = expect_event(&mut last, "connected").await.unwrap();
    assert_eq!(connected.id.as_deref(), Some(before(&ids[5]).as_str()));
    assert_eq!(payloads(&mut last, 2).await, [6, 8]);
    let mut more = hub.subscribe("?topic=kv.*&from=last:100").await;
    assert_eq!(payloads(&mut more, 6).await, [1, 2, 3, 5, 6, 8]);

    let query = format!("?topic=kv.%3E&from=since:{}", since.replace('+', "%2B"));
    let mut recent = hub.subscribe(&query).await;
    assert_eq!(payloads(&mut recent, 4).await, [5, 6, 7, 8]);
    let mut future = hub
        .subscribe("?topic=kv.%3E&from=since:2999-01-01T00:00:00Z")
        .await;
    expect_event(&mut future, "connected").await.unwrap();

    // A resume wins over `from=`: from a state message, exactly what came after it.
    let headers = [("last-event-id", ids[5].as_str())];
    let mut resumed = hub
        .subscribe_with("?topic=kv.%3E&from=latest", &headers)
        .await;
    assert_eq!(payloads(&mut resumed, 2).await, [7, 8]);
    let headers = [("last-event-id", live[0].as_str())];
    let mut caught_up = hub
        .subscribe_with("?topic=kv.%3E&from=last:5", &headers)
        .await;
    expect_event(&mut caught_up, "connected").await.unwrap();

    publish_all(&hub, &[("kv.c.d", 10)]).await;
    for client in [
        &mut latest,
        &mut recent,
        &mut resumed,
        &mut caught_up,
        &mut future,
    ] {
        assert_eq!(payloads(client, 1).await, [10], "every reader goes on live");
    }
    assert_eq!(payloads(&mut last, 0).await, Vec::<u64>::new());
    hub.stop().await;
}

/// A resume whose position is gone, with `repair=latest` (or `sse.repair = "latest"`): the
/// `gap` frame (saying `"repair":"latest"`), the latest retained message of each of its
/// subjects, then live messages; `repair=none` keeps `[replay] on_loss`.
pub async fn repair_latest_converges_after_a_lost_position(f: &dyn HubFactory) {
    let mut config = Config::default();
    config.admin.loopback = true;
    let hub = f.start(config).await;
    let ids = publish_all(
        &hub,
        &[
            ("kv.a", 1),
            ("kv.b", 2),
            ("kv.a", 3),
            ("kv.b", 4),
            ("kv.a", 5),
            ("x", 6),
        ],
    )
    .await;
    let stream = hub.served_stream().await;
    hub.admin(
        "POST",
        &format!("/admin/streams/{stream}/purge"),
        Some(json!({ "up_to_seq": seq(&ids[2]) })),
    )
    .await;
    let headers = [("last-event-id", ids[0].as_str())];
    let mut repaired = hub
        .subscribe_with("?topic=kv.*&repair=latest", &headers)
        .await;
    expect_event(&mut repaired, "connected").await.unwrap();
    let gap = data(&expect_event(&mut repaired, "gap").await.unwrap());
    assert_eq!(
        (&gap["reason"], &gap["from"], &gap["to"], &gap["repair"]),
        (
            &json!("expired"),
            &json!(seq(&ids[1])),
            &json!(seq(&ids[1])),
            &json!("latest")
        ),
        "{gap}"
    );
    assert_eq!(payloads(&mut repaired, 2).await, [4, 5], "the state");
    // Without repair, `on_loss = "earliest"` replays what is retained.
    let mut replayed = hub
        .subscribe_with("?topic=kv.*&repair=none", &headers)
        .await;
    expect_event(&mut replayed, "connected").await.unwrap();
    let gap = data(&expect_event(&mut replayed, "gap").await.unwrap());
    assert_eq!(gap.get("repair"), None, "{gap}");
    assert_eq!(payloads(&mut replayed, 3).await, [3, 4, 5]);
    // A position of another incarnation is repaired too.
    let stale = [("last-event-id", "3-abc")];
    let mut recreated = hub
        .subscribe_with("?topic=kv.a&repair=latest", &stale)
        .await;
    expect_event(&mut recreated, "connected").await.unwrap();
    let gap = data(&expect_event(&mut recreated, "gap").await.unwrap());
    assert_eq!(
        (&gap["reason"], &gap["repair"]),
        (&json!("incarnation"), &json!("latest"))
    );
    assert_eq!(payloads(&mut recreated, 1).await, [5]);

    publish_all(&hub, &[("kv.b", 7)]).await;
    assert_eq!(payloads(&mut repaired, 1).await, [7], "then live");
    assert_eq!(payloads(&mut replayed, 1).await, [7]);
    hub.stop().await;

    // The hub's default.
    let mut config = Config::default();
    config.sse.repair = Repair::Latest;
    let hub = f.start(config).await;
    let ids = publish_all(&hub, &[("kv.a", 1), ("kv.a", 2)]).await;
    let stale = format!("{}0", ids[1].trim_end_matches(|c: char| c != '-'));
    let mut client = hub
        .subscribe_with("?topic=kv.a", &[("last-event-id", stale.as_str())])
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let gap = data(&expect_event(&mut client, "gap").await.unwrap());
    assert_eq!(gap["repair"], "latest", "{gap}");
    assert_eq!(payloads(&mut client, 1).await, [2]);
    hub.stop().await;
}

/// Bad `from=` and `repair=` values are refused with a JSON 400 naming the parameter and
/// the accepted forms, counted and logged as `bad_request`.
pub async fn bad_start_values_are_refused_naming_the_parameter(f: &dyn HubFactory) {
    let hub = f.start(Config::default()).await;
    let cases = [
        ("from=last:0", "from: invalid value \"last:0\""),
        ("from=last:many", "from: invalid value \"last:many\""),
        (
            "from=since:yesterday",
            "from: invalid value \"since:yesterday\"",
        ),
        ("from=newest", "from: invalid value \"newest\""),
        ("from=latest&from=earliest", "from: given more than once"),
        (
            "repair=maybe",
            "repair: invalid value \"maybe\"; expected none or latest",
        ),
    ];
    for (query, says) in cases {
        let answer = hub.get(&format!("/events?topic=kv.a&{query}")).await;
        assert_eq!(answer.status, 400, "{query}");
        let body: Value = answer.json().expect("JSON");
        let description = body["description"].as_str().unwrap();
        assert!(description.starts_with(says), "{query}: {description}");
        if query.starts_with("from=") && !query.contains("&from") {
            assert!(description.contains("last:<N>") && description.contains("since:"));
        }
    }
    assert_eq!(
        hub.metric("sluice_connections_rejected_total{reason=\"bad_request\"}"),
        cases.len() as u64
    );
    hub.stop().await;
}

/// The stream sequence of an event id.
fn seq(id: &str) -> u64 {
    id.split('-').next().unwrap().parse().unwrap()
}
