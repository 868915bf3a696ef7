//! A state stream — `max_msgs_per_subject = 1` read with `from=latest` — as a live key-value
//! view, over real HTTP on both backends and on nats-server 2.9: a reader gets every key's
//! value, then each change; a tombstone published on a key (how a key is deleted) is delivered
//! as its value, live and to later readers; a key purged is absent for later readers, and on a
//! stream that keeps delete markers its deletion is told, live and as the key's state.

mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;

use backends::{Kind, Served, Settings, admin_config, admin_token, start};
use common::{data, expect_event};
use serde_json::{Value, json};
use sluice_test_support::SseClient;

/// One message per key.
fn state() -> Settings {
    Settings {
        max_msgs_per_subject: 1,
        ..Settings::default()
    }
}

/// The next message's topic and payload, after the `connected` frame if it is next.
async fn next_value(client: &mut SseClient) -> (String, Value) {
    loop {
        let frame = client.next_event().await.expect("an event");
        match frame.event_type() {
            "connected" => continue,
            "message" => {
                let data = data(&frame);
                return (
                    data["topic"].as_str().unwrap().to_owned(),
                    data["payload"].clone(),
                );
            }
            other => panic!("expected a message, got {other}: {frame:?}"),
        }
    }
}

/// The key-value view of `served`'s keys `cfg.>` now, as a new reader gets it.
async fn view(served: &Served, keys: usize) -> Vec<(String, Value)> {
    let mut reader = served.hub.subscribe("?topic=cfg.%3E&from=latest").await;
    let mut values = Vec::new();
    for _ in 0..keys {
        values.push(next_value(&mut reader).await);
    }
    // Then nothing more of the state: a live value comes next.
    served.hub.publish("cfg.marker", json!("end")).await;
    assert_eq!(next_value(&mut reader).await.0, "cfg.marker", "{values:?}");
    values
}

async fn a_state_stream_is_a_live_key_value_view(kind: Kind) {
    let served = start(&kind, admin_config(false), state()).await;
    let hub = &served.hub;
    for (key, value) in [
        ("cfg.a", 1),
        ("cfg.b", 1),
        ("cfg.a", 2),
        ("cfg.c", 1),
        ("cfg.b", 2),
    ] {
        hub.publish(key, json!(value)).await;
    }
    let values = view(&served, 3).await;
    let expected = [("cfg.a", 2), ("cfg.c", 1), ("cfg.b", 2)];
    assert_eq!(values, expected.map(|(k, v)| (k.to_owned(), json!(v))));

    // A live reader of the view: every change.
    let mut watcher = hub.subscribe("?topic=cfg.%3E&from=latest").await;
    for _ in 0..4 {
        next_value(&mut watcher).await;
    }
    hub.publish("cfg.c", json!(2)).await;
    assert_eq!(
        next_value(&mut watcher).await,
        ("cfg.c".to_owned(), json!(2))
    );
    let path = format!("/admin/streams/{}/purge", served.stream);
    let subject = served.subject("cfg.a");
    let answer = served
        .admin(
            "POST",
            &path,
            Some(&admin_token()),
            Some(json!({ "subject": subject })),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    // A tombstone is a value like any other.
    hub.publish("cfg.b", json!({ "deleted": true })).await;
    let tombstone = ("cfg.b".to_owned(), json!({ "deleted": true }));
    assert_eq!(next_value(&mut watcher).await, tombstone);

    // A new reader: the purged key is absent, the tombstone is the key's value.
    let values = view(&served, 3).await;
    assert_eq!(
        values,
        [
            ("cfg.marker".to_owned(), json!("end")),
            ("cfg.c".to_owned(), json!(2)),
            ("cfg.b".to_owned(), json!({ "deleted": true })),
        ]
    );
}

/// The `deleted` event of `topic` for `reason`, next on `client`.
async fn expect_deleted(client: &mut SseClient, topic: &str, reason: &str) {
    let deleted = expect_event(client, "deleted")
        .await
        .expect("a deleted event");
    let told = data(&deleted);
    assert_eq!(
        (&told["topic"], &told["reason"]),
        (&json!(topic), &json!(reason))
    );
}

/// With `subject_delete_marker_ttl`, a purge of a key's subject or a delete of its message
/// leaves a marker: a reader that holds the key's value is told it is gone, and a later reader
/// gets the deletion as the key's state, in stream order.
async fn a_purged_key_is_told_as_deleted(kind: Kind) {
    let settings = Settings {
        subject_delete_marker_ttl: std::time::Duration::from_secs(60),
        ..state()
    };
    let served = start(&kind, admin_config(false), settings).await;
    let hub = &served.hub;
    hub.publish("cfg.a", json!(1)).await;
    let b = hub.publish("cfg.b", json!(1)).await;
    let mut watcher = hub.subscribe("?topic=cfg.%3E&from=latest").await;
    assert_eq!(
        next_value(&mut watcher).await,
        ("cfg.a".to_owned(), json!(1))
    );
    assert_eq!(
        next_value(&mut watcher).await,
        ("cfg.b".to_owned(), json!(1))
    );

    let path = format!("/admin/streams/{}/purge", served.stream);
    let body = json!({ "subject": served.subject("cfg.a") });
    let answer = served
        .admin("POST", &path, Some(&admin_token()), Some(body))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    expect_deleted(&mut watcher, "cfg.a", "purge").await;

    let mut reader = hub.subscribe("?topic=cfg.%3E&from=latest").await;
    assert_eq!(
        next_value(&mut reader).await,
        ("cfg.b".to_owned(), json!(1))
    );
    expect_deleted(&mut reader, "cfg.a", "purge").await;
    // The key comes back as a value like any other.
    hub.publish("cfg.a", json!(2)).await;
    for client in [&mut watcher, &mut reader] {
        assert_eq!(next_value(client).await, ("cfg.a".to_owned(), json!(2)));
    }
    // Deleting a key's message by sequence deletes the key the same way.
    let path = format!("/admin/streams/{}/messages/{}", served.stream, b["seq"]);
    let answer = served
        .admin("DELETE", &path, Some(&admin_token()), None)
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    for client in [&mut watcher, &mut reader] {
        expect_deleted(client, "cfg.b", "remove").await;
    }
}

backends::on_both_backends!(
    a_state_stream_is_a_live_key_value_view,
    a_purged_key_is_told_as_deleted
);

/// Debian's nats-server 2.9 has no multi-filter consumers: the latest state is read through one
/// wider filter and narrowed in the hub, with the same result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_stream_on_an_old_server_is_the_same_view() {
    a_state_stream_is_a_live_key_value_view(Kind::old_jetstream()).await;
    let served = start(&Kind::old_jetstream(), admin_config(false), state()).await;
    let hub = &served.hub;
    for (key, value) in [("x.a", 1), ("y.b", 1), ("x.a", 2), ("z.c", 1)] {
        hub.publish(key, json!(value)).await;
    }
    let mut reader = hub.subscribe("?topic=x.a&topic=z.*&from=latest").await;
    assert_eq!(next_value(&mut reader).await, ("x.a".to_owned(), json!(2)));
    assert_eq!(next_value(&mut reader).await, ("z.c".to_owned(), json!(1)));
    let mut last = hub.subscribe("?topic=x.a&topic=y.*&from=last:1").await;
    assert_eq!(next_value(&mut last).await, ("x.a".to_owned(), json!(2)));
}
