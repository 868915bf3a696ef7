//! Message schedules through `POST /publish` and subject delete markers, over real HTTP on both
//! backends (a real nats-server 2.15 for JetStream; 2.9, which has neither, refuses schedules
//! clearly): produced messages reach subscribers, schedule definitions never do, and a delete
//! marker reaches the readers of its subject as a `deleted` event.

mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;

use std::time::Duration;

use backends::{Kind, Served, Settings, admin_config, start, token_signed};
use common::{data, expect_event};
use serde_json::{Value, json};

/// A one-shot schedule firing a second from now.
fn at_next_second() -> String {
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    format!("@at {}", at.strftime("%Y-%m-%dT%H:%M:%SZ"))
}

/// A publish of `payload` on `topic` with `headers`; the answer's status and body.
async fn publish_with(served: &Served, topic: &str, headers: Value) -> (u16, Value) {
    let answer = served
        .hub
        .publish_raw(json!({ "topic": topic, "payload": "tick", "headers": headers }))
        .await;
    (
        answer.status.as_u16(),
        answer.json().expect("a JSON answer"),
    )
}

fn schedules() -> Settings {
    Settings {
        allow_msg_schedules: true,
        ..Settings::default()
    }
}

async fn a_schedule_fires_into_its_target_and_only_the_produced_message_is_delivered(kind: Kind) {
    let served = start(&kind, admin_config(false), schedules()).await;
    let mut client = served
        .hub
        .subscribe("?topic=jobs.nightly&topic=reports")
        .await;
    expect_event(&mut client, "connected").await.unwrap();
    let (status, answer) = publish_with(
        &served,
        "jobs.nightly",
        json!({
            "Nats-Schedule": at_next_second(),
            "Nats-Schedule-Target": "reports",
            "Nats-Schedule-TTL": "5m",
        }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["seq"], 1);
    let produced = expect_event(&mut client, "message").await.unwrap();
    let produced_data = data(&produced);
    assert_eq!(
        (&produced_data["topic"], &produced_data["payload"]),
        (&json!("reports"), &json!("tick")),
        "{produced:?}"
    );
    // The schedule definition (sequence 1) came before it and was not delivered.
    let produced_seq: u64 = produced
        .id
        .as_deref()
        .and_then(|id| id.split('-').next()?.parse().ok())
        .expect("an event id");
    assert!(produced_seq > 1, "{produced:?}");
    served.hub.publish("reports", json!("after")).await;
    let after = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(data(&after)["payload"], json!("after"));
    let info = served.info().await;
    assert_eq!(info["subjects"][served.subject("reports")], 2, "{info}");
}

async fn schedule_headers_follow_jetstream_rules(kind: Kind) {
    let served = start(&kind, admin_config(false), schedules()).await;
    let cases = [
        (
            json!({ "Nats-Schedule": "@sometimes", "Nats-Schedule-Target": "reports" }),
            10189,
        ),
        (json!({ "Nats-Schedule": at_next_second() }), 10190),
        (
            json!({ "Nats-Schedule": at_next_second(), "Nats-Schedule-Target": "jobs.a" }),
            10190,
        ),
        (
            json!({
                "Nats-Schedule": at_next_second(),
                "Nats-Schedule-Target": "reports",
                "Nats-Schedule-TTL": "soon",
            }),
            10191,
        ),
        (json!({ "Nats-Schedule-Target": "reports" }), 400),
        (json!({ "Nats-Schedule-Rollup": "sub" }), 400),
    ];
    for (headers, code) in cases {
        let (status, answer) = publish_with(&served, "jobs.a", headers.clone()).await;
        assert_eq!(status, 400, "{headers}: {answer}");
        assert_eq!(answer["code"], code, "{headers}: {answer}");
    }
}

async fn a_stream_without_schedules_refuses_them(kind: Kind) {
    let served = start(&kind, admin_config(false), Settings::default()).await;
    let (status, answer) = publish_with(
        &served,
        "jobs.a",
        json!({ "Nats-Schedule": at_next_second(), "Nats-Schedule-Target": "reports" }),
    )
    .await;
    assert_eq!((status, &answer["code"]), (400, &json!(10188)), "{answer}");
    assert!(
        answer["description"]
            .as_str()
            .is_some_and(|d| d.contains("schedules")),
        "{answer}"
    );
    assert_eq!(served.info().await["messages"], 0, "nothing was stored");
}

async fn a_schedule_target_outside_the_grant_is_forbidden(kind: Kind) {
    let served = start(&kind, admin_config(true), schedules()).await;
    let token = token_signed(backends::SECRET, json!({ "publish": "jobs.>" }));
    let bearer = format!("Bearer {token}");
    let body = json!({
        "topic": "jobs.a",
        "payload": 1,
        "headers": { "Nats-Schedule": at_next_second(), "Nats-Schedule-Target": "reports" },
    });
    let request = sluice_test_support::http::request(
        "POST".parse().unwrap(),
        &served.hub.url("/publish"),
        &[
            ("content-type", "application/json"),
            ("authorization", &bearer),
        ],
    )
    .unwrap()
    .body(body.to_string().into())
    .unwrap();
    let answer = sluice_test_support::http::send(request).await.unwrap();
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert!(answer.text().contains("reports"), "{}", answer.text());
}

async fn a_delete_marker_is_a_deleted_event(kind: Kind) {
    let settings = Settings {
        max_age: Duration::from_secs(1),
        subject_delete_marker_ttl: Duration::from_secs(60),
        ..Settings::default()
    };
    let served = start(&kind, admin_config(false), settings).await;
    let mut client = served.hub.subscribe("?topic=t").await;
    expect_event(&mut client, "connected").await.unwrap();
    served.hub.publish("t", json!("first")).await;
    let first = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(data(&first)["payload"], json!("first"));
    // The message ages out; the stream leaves a marker on its subject at sequence 2, which the
    // reader gets as the topic's deletion, under the marker's own id.
    let deleted = expect_event(&mut client, "deleted").await.unwrap();
    let told = data(&deleted);
    assert_eq!(
        (&told["topic"], &told["reason"]),
        (&json!("t"), &json!("max_age"))
    );
    assert!(told["time"].is_string(), "{told}");
    let id = deleted.id.clone().expect("an id");
    assert!(id.starts_with("2-"), "{id}");
    let ack = served.hub.publish("t", json!("second")).await;
    assert_eq!(ack["seq"], 3);
    let second = expect_event(&mut client, "message").await.unwrap();
    assert_eq!(data(&second)["payload"], json!("second"));
    // A reader resuming from before the marker gets it again, in its place.
    let mut resumed = served
        .hub
        .subscribe(&format!("?topic=t&last-id={}", first.id.unwrap()))
        .await;
    expect_event(&mut resumed, "connected").await.unwrap();
    let again = expect_event(&mut resumed, "deleted").await.unwrap();
    assert_eq!(again.id.as_deref(), Some(id.as_str()));
}

backends::on_both_backends!(
    a_schedule_fires_into_its_target_and_only_the_produced_message_is_delivered,
    schedule_headers_follow_jetstream_rules,
    a_stream_without_schedules_refuses_them,
    a_schedule_target_outside_the_grant_is_forbidden,
    a_delete_marker_is_a_deleted_event,
);

/// nats-server 2.9 knows no schedules: it would store one as a plain message that never
/// fires, so the hub refuses it with JetStream's own code and says which server is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_schedules_refuses_them_naming_the_version_needed() {
    let served = start(
        &Kind::old_jetstream(),
        admin_config(false),
        Settings::default(),
    )
    .await;
    let (status, answer) = publish_with(
        &served,
        "jobs.a",
        json!({ "Nats-Schedule": at_next_second(), "Nats-Schedule-Target": "reports" }),
    )
    .await;
    assert_eq!((status, &answer["code"]), (400, &json!(10188)), "{answer}");
    assert!(
        answer["description"]
            .as_str()
            .is_some_and(|d| d.contains("2.12")),
        "{answer}"
    );
    assert_eq!(served.info().await["messages"], 0, "nothing was stored");
}

/// An embedded stream holds at most `max_msg_schedules` schedules in force: one more is
/// refused naming the limit (a schedule replacing a subject's own still goes through), and
/// `sluice_store_schedules` shows how many are in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_beyond_the_streams_limit_are_refused_naming_it() {
    let mut config = admin_config(false);
    config.embedded.streams = vec![sluice_server::config::StreamDecl {
        allow_msg_schedules: true,
        max_msg_schedules: 2,
        ..sluice_server::config::StreamDecl::default_stream()
    }];
    let (hub, _) = common::Embedded::start_with_store(config).await;
    let served = Served::embedded(hub, "sluice");
    let every = json!({ "Nats-Schedule": "@every 1h", "Nats-Schedule-Target": "reports" });
    for subject in ["jobs.a", "jobs.b", "jobs.a"] {
        let (status, answer) = publish_with(&served, subject, every.clone()).await;
        assert_eq!(status, 200, "{subject}: {answer}");
    }
    let (status, answer) = publish_with(&served, "jobs.c", every.clone()).await;
    assert_eq!(status, 400, "{answer}");
    let description = answer["description"].as_str().unwrap_or("");
    assert!(
        description.contains("message schedules limit reached")
            && description.contains("max_msg_schedules is 2"),
        "{answer}"
    );
    assert_eq!(served.hub.metric("sluice_store_schedules"), 2);
    assert_eq!(
        served
            .hub
            .metric("sluice_publish_refusals_total{reason=\"schedules_limit\"}"),
        1
    );
}
