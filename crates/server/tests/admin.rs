//! The admin API (`/admin/streams…`) over real HTTP on both backends (a real nats-server for
//! JetStream): off without `[auth.admin]`, refused without an admin token, and listing,
//! describing, purging and deleting in one shape on both.

mod backends;
// The shared harness; this file runs its own cases, not the shared scenario list.
#[allow(unused_macros, unused_imports)]
mod common;

use backends::{Kind, Served, Settings, admin_config, admin_token, start, token_signed};
use serde_json::{Value, json};
use sluice_server::config::Config;

/// The answer's `(status, code)`, and its description.
fn refusal(answer: &sluice_test_support::HttpResponse) -> (u16, u64, String) {
    let body = answer.json().expect("a JSON error");
    (
        answer.status.as_u16(),
        body["code"].as_u64().expect("a code"),
        body["description"]
            .as_str()
            .expect("a description")
            .to_owned(),
    )
}

async fn the_admin_api_is_off_without_auth_admin(kind: Kind) {
    let served = start(&kind, Config::default(), Settings::default()).await;
    let path = format!("/admin/streams/{}", served.stream);
    for (method, path) in [
        ("GET", "/admin/streams"),
        ("GET", path.as_str()),
        ("POST", &format!("{path}/purge")),
        ("DELETE", &format!("{path}/messages/1")),
    ] {
        let answer = served.admin(method, path, Some(&admin_token()), None).await;
        let (status, code, description) = refusal(&answer);
        assert_eq!((status, code), (404, 404), "{method} {path}");
        assert!(description.contains("[auth.admin]"), "{description}");
    }
    assert_eq!(
        served
            .hub
            .metric("sluice_admin_refusals_total{reason=\"admin_off\"}"),
        4
    );
}

async fn admin_requests_need_a_valid_token_with_the_admin_grant(kind: Kind) {
    let served = start(&kind, admin_config(false), Settings::default()).await;
    let missing = served.admin("GET", "/admin/streams", None, None).await;
    assert_eq!(refusal(&missing).0, 401);
    assert_eq!(
        missing.header("www-authenticate"),
        Some("Bearer realm=\"sluice\"")
    );
    let forged = token_signed(
        "another-secret-0123456789abcdef-xyz",
        json!({ "admin": true }),
    );
    let bad = served
        .admin("GET", "/admin/streams", Some(&forged), None)
        .await;
    let (status, _, description) = refusal(&bad);
    assert_eq!(status, 401);
    assert!(description.contains("signature"), "{description}");
    // A token that verifies but grants only topics is not an admin's.
    let publisher = token_signed(backends::SECRET, json!({ "publish": ">" }));
    let path = format!("/admin/streams/{}/purge", served.stream);
    let not_admin = served.admin("POST", &path, Some(&publisher), None).await;
    let (status, _, description) = refusal(&not_admin);
    assert_eq!(status, 403);
    assert!(description.contains("administration"), "{description}");
    assert!(
        not_admin
            .header("www-authenticate")
            .is_some_and(|v| v.contains("insufficient_scope"))
    );
    for reason in ["missing_token", "bad_signature", "not_admin"] {
        let metric = format!("sluice_admin_refusals_total{{reason=\"{reason}\"}}");
        assert_eq!(served.hub.metric(&metric), 1, "{metric}");
    }
    assert_eq!(
        served
            .hub
            .metric("sluice_admin_requests_total{result=\"refused\"}"),
        3
    );
}

/// Publishes `payload` on each topic in turn.
async fn publish_all(served: &Served, topics: &[&str]) {
    for (n, topic) in topics.iter().enumerate() {
        served.hub.publish(topic, json!(n)).await;
    }
}

async fn admin_lists_describes_purges_and_deletes(kind: Kind) {
    let served = start(&kind, admin_config(false), Settings::default()).await;
    let admin = admin_token();
    let token = Some(admin.as_str());
    publish_all(&served, &["a", "b", "a", "b", "a"]).await;

    let list = served.admin("GET", "/admin/streams", token, None).await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(list.json().unwrap(), json!({ "streams": [served.stream] }));

    let info = served.info().await;
    assert_eq!(info["name"], served.stream);
    assert_eq!(
        (&info["messages"], &info["first_seq"], &info["last_seq"]),
        (&json!(5), &json!(1), &json!(5))
    );
    let subjects = json!({ served.subject("a"): 3, served.subject("b"): 2 });
    assert_eq!(info["subjects"], subjects, "{info}");
    assert_eq!(info["num_subjects"], 2);
    assert_eq!(info["lost"]["msgs"], 0);
    assert!(info["incarnation"].as_str().is_some_and(|i| !i.is_empty()));
    assert!(info["created"].as_str().is_some());
    assert!(info["config"].is_object());
    assert_eq!(info["sources"], json!([]));

    let stream = served.stream;
    let deleted = served
        .admin(
            "DELETE",
            &format!("/admin/streams/{stream}/messages/2"),
            token,
            None,
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(deleted.json().unwrap(), json!({ "deleted": 2 }));
    let again = served
        .admin(
            "DELETE",
            &format!("/admin/streams/{stream}/messages/2"),
            token,
            None,
        )
        .await;
    let (status, code, description) = refusal(&again);
    assert_eq!((status, code), (404, 10037), "{description}");
    assert!(description.contains(" 2"), "{description}");
    let info = served.info().await;
    assert_eq!(
        (&info["messages"], &info["num_deleted"]),
        (&json!(4), &json!(1))
    );

    let purge = |body: Value| {
        let path = format!("/admin/streams/{stream}/purge");
        let served = &served;
        async move { served.admin("POST", &path, token, Some(body)).await }
    };
    let by_subject = purge(json!({ "subject": served.subject("b") })).await;
    assert_eq!(by_subject.status, 200, "{}", by_subject.text());
    assert_eq!(by_subject.json().unwrap(), json!({ "purged": 1 }));
    let keep = purge(json!({ "keep": 2 })).await;
    assert_eq!(
        keep.json().unwrap(),
        json!({ "purged": 1 }),
        "{}",
        keep.text()
    );
    let below = purge(json!({ "up_to_seq": 5 })).await;
    assert_eq!(
        below.json().unwrap(),
        json!({ "purged": 1 }),
        "{}",
        below.text()
    );
    let info = served.info().await;
    assert_eq!(
        (&info["messages"], &info["first_seq"], &info["last_seq"]),
        (&json!(1), &json!(5), &json!(5)),
        "{info}"
    );
    let everything = served
        .admin(
            "POST",
            &format!("/admin/streams/{stream}/purge"),
            token,
            None,
        )
        .await;
    assert_eq!(everything.json().unwrap(), json!({ "purged": 1 }));
    assert_eq!(served.info().await["messages"], 0);
    assert_eq!(
        served
            .hub
            .metric("sluice_admin_requests_total{result=\"ok\"}"),
        10
    );
}

async fn admin_refusals_name_the_bad_value(kind: Kind) {
    let served = start(&kind, admin_config(false), Settings::default()).await;
    let admin = admin_token();
    let token = Some(admin.as_str());
    let stream = served.stream;
    let cases = [
        ("GET", "/admin/streams/NOPE".to_owned(), None, 404, "NOPE"),
        ("GET", "/admin/streams/a.b".to_owned(), None, 400, "a.b"),
        (
            "DELETE",
            format!("/admin/streams/{stream}/messages/x1"),
            None,
            400,
            "x1",
        ),
        (
            "DELETE",
            format!("/admin/streams/{stream}/messages/0"),
            None,
            400,
            "\"0\"",
        ),
        (
            "POST",
            format!("/admin/streams/{stream}/purge"),
            Some(json!({ "kept": 1 })),
            400,
            "kept",
        ),
        (
            "POST",
            format!("/admin/streams/{stream}/purge"),
            Some(json!({ "subject": "a..b" })),
            400,
            "a..b",
        ),
    ];
    for (method, path, body, status, named) in cases {
        let answer = served.admin(method, &path, token, body).await;
        let (got, _, description) = refusal(&answer);
        assert_eq!(got, status, "{method} {path}: {description}");
        assert!(
            description.contains(named),
            "{method} {path}: {description}"
        );
    }
    let missing = served
        .admin("GET", "/admin/streams/NOPE", token, None)
        .await;
    assert_eq!(
        refusal(&missing).1,
        10059,
        "stream not found, as JetStream says"
    );
    assert_eq!(
        served
            .hub
            .metric("sluice_admin_refusals_total{reason=\"invalid_request\"}"),
        5
    );
    assert_eq!(
        served
            .hub
            .metric("sluice_admin_refusals_total{reason=\"stream_refused\"}"),
        2
    );
}

backends::on_both_backends!(
    the_admin_api_is_off_without_auth_admin,
    admin_requests_need_a_valid_token_with_the_admin_grant,
    admin_lists_describes_purges_and_deletes,
    admin_refusals_name_the_bad_value,
);

/// The embedded store's sources in a stream's description: each origin with how its position
/// was found and what it copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_description_shows_each_source_and_how_it_resumed() {
    use sluice_backend::embedded::StreamDecl;
    let mut config = admin_config(false);
    let decl = |name: &str, subjects: &[&str]| StreamDecl {
        name: name.into(),
        subjects: subjects.iter().map(|s| (*s).into()).collect(),
        ..StreamDecl::default_stream()
    };
    let mut all = decl("ALL", &[]);
    all.sources.push(sluice_store::SourceConfig {
        name: "ORDERS".into(),
        opt_start_seq: None,
        opt_start_time: None,
        filter_subject: Some("orders.eu.>".into()),
        subject_transforms: vec![],
    });
    config.embedded.streams = vec![decl("ORDERS", &["orders.>"]), all];
    config.embedded.stream = "ALL".into();
    let (hub, _) = common::Embedded::start_with_store(config).await;
    let served = Served::embedded(hub, "ALL");
    served.hub.publish("orders.eu.1", json!(1)).await;
    let list = served
        .admin("GET", "/admin/streams", Some(&admin_token()), None)
        .await;
    assert_eq!(
        list.json().unwrap(),
        json!({ "streams": ["ALL", "ORDERS"] })
    );
    // The source's counters are updated once its append is acknowledged, a moment after the
    // message shows in the stream (its count first, then its position): wait for all three.
    sluice_test_support::eventually_async("the source copied the message", async || {
        let info = served.info().await;
        let source = &info["sources"][0];
        info["messages"] == 1 && source["sourced"] == 1 && source["last_origin_seq"] == 1
    })
    .await;
    let info = served.info().await;
    let sources = info["sources"].as_array().expect("sources");
    assert_eq!(sources.len(), 1, "{info}");
    let source = &sources[0];
    assert_eq!(
        (
            &source["name"],
            &source["filter_subject"],
            &source["resume"]
        ),
        (&json!("ORDERS"), &json!("orders.eu.>"), &json!("start")),
        "{source}"
    );
    assert_eq!(
        (
            &source["sourced"],
            &source["waiting_for_origin"],
            &source["last_origin_seq"]
        ),
        (&json!(1), &json!(false), &json!(1)),
        "{source}"
    );
}
