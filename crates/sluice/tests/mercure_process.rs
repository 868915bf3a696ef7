//! The Mercure hub in the real binary: keys from Mercure's own environment variables, updates
//! that survive a kill -9 of the hub process, resume by custom id, hub-made id and `earliest`
//! from the new process, and no key in the process's output.

use sluice_test_support::serde_json::json;
use sluice_test_support::{SluiceProcess, SseClient, StartError, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const PUBLISHER_KEY: &str = "process-publisher-secret-0123456789abcdef";
const SUBSCRIBER_KEY: &str = "process-subscriber-secret-0123456789abcdef";
const BOOK: &str = "https%3A%2F%2Fexample.com%2Fbooks%2F1";

fn token(key: &str, claim: sluice_test_support::serde_json::Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "mercure": claim }),
        &jsonwebtoken::EncodingKey::from_secret(key.as_bytes()).unwrap(),
    )
    .unwrap()
}

async fn publish(hub: &SluiceProcess, form: &str) -> String {
    let bearer = format!(
        "Bearer {}",
        token(PUBLISHER_KEY, json!({ "publish": ["*"] }))
    );
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("authorization", bearer.as_str()),
    ];
    let request = http::request(
        "POST".parse().unwrap(),
        &hub.url("/.well-known/mercure"),
        &headers,
    )
    .unwrap()
    .body(form.to_owned().into())
    .unwrap();
    let answer = http::send(request).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.text()
}

/// `sluice serve` on a store in `root`, Mercure on with `mercure` as the rest of its section,
/// the keys given by the `MERCURE_` variables, and `env` besides.
async fn start_hub(
    root: &tempfile::TempDir,
    mercure: &str,
    env: &[(&str, &str)],
) -> Result<SluiceProcess, StartError> {
    let config = root.path().join("sluice.toml");
    let text = format!("topic_prefix = \"app\"\n[mercure]\nenabled = true\n{mercure}");
    std::fs::write(&config, text).unwrap();
    let args = [
        "serve".into(),
        "--config".into(),
        config.into_os_string(),
        "--data-dir".into(),
        root.path().join("data").into_os_string(),
    ];
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    SluiceProcess::start_configured(BIN, args, move |command| {
        command
            .env("MERCURE_PUBLISHER_JWT_KEY", PUBLISHER_KEY)
            .env("MERCURE_SUBSCRIBER_JWT_KEY", SUBSCRIBER_KEY)
            .envs(env.iter().cloned());
    })
    .await
}

async fn datas(client: &mut SseClient, count: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..count {
        out.push(client.next_event().await.unwrap().data.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercure_updates_survive_a_killed_hub_and_resume_by_any_id() {
    let root = tempfile::tempdir().unwrap();
    let mut hub = start_hub(&root, "", &[("SLUICE_LOG", "debug")])
        .await
        .expect("serve starts with the keys from MERCURE_ variables");

    publish(&hub, &format!("topic={BOOK}&data=a&id=custom-a")).await;
    let b = publish(&hub, &format!("topic={BOOK}&data=b&private=on")).await;
    publish(&hub, &format!("topic={BOOK}&data=c")).await;
    hub.kill().expect("kill -9 the hub");
    hub.restart().await.expect("the hub starts again");

    let bearer = format!(
        "Bearer {}",
        token(SUBSCRIBER_KEY, json!({ "subscribe": ["*"] }))
    );
    let url = hub.url(&format!("/.well-known/mercure?topic={BOOK}"));
    let subscribe = async |last_event_id: &str| {
        let headers = [
            ("authorization", bearer.as_str()),
            ("last-event-id", last_event_id),
        ];
        SseClient::connect_with_headers(&url, &headers)
            .await
            .unwrap()
    };
    assert_eq!(datas(&mut subscribe("custom-a").await, 2).await, ["b", "c"]);
    assert_eq!(datas(&mut subscribe(&b).await, 1).await, ["c"]);
    let mut everything = subscribe("earliest").await;
    assert_eq!(everything.header("last-event-id"), Some("earliest"));
    assert_eq!(datas(&mut everything, 3).await, ["a", "b", "c"]);

    // Without a token, a subscriber is refused (no `anonymous`).
    let refused = SseClient::connect(&url).await.unwrap();
    assert_eq!(refused.status(), 401);
    let output = hub.log_tail(10_000);
    assert!(
        !output.contains(PUBLISHER_KEY) && !output.contains(SUBSCRIBER_KEY),
        "a key in the output"
    );
}

/// The subscriptions the hub's API lists, with a token for every subscriptions resource.
async fn listed(hub: &SluiceProcess) -> sluice_test_support::serde_json::Value {
    let grant = "/.well-known/mercure/subscriptions{/topic}{/subscriber}";
    let bearer = format!(
        "Bearer {}",
        token(SUBSCRIBER_KEY, json!({ "subscribe": [grant] }))
    );
    let request = http::request(
        "GET".parse().unwrap(),
        &hub.url("/.well-known/mercure/subscriptions"),
        &[("authorization", bearer.as_str())],
    )
    .unwrap()
    .body(Default::default())
    .unwrap();
    let answer = http::send(request).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_restarted_after_kill_9_does_not_list_the_dead_process_subscriptions() {
    let root = tempfile::tempdir().unwrap();
    let mut hub = start_hub(&root, "anonymous = true\nsubscriptions = true\n", &[])
        .await
        .expect("serve starts");
    let url = hub.url(&format!("/.well-known/mercure?topic={BOOK}"));
    let mut client = SseClient::connect(&url).await.unwrap();
    client.next_frame().await.unwrap();
    let mut subscriber = None;
    sluice_test_support::eventually_async("the subscription listed", async || {
        let list = listed(&hub).await;
        subscriber = list["subscriptions"][0]["subscriber"]
            .as_str()
            .map(str::to_owned);
        subscriber.is_some()
    })
    .await;
    hub.kill().expect("kill -9 the hub");
    drop(client);
    hub.restart().await.expect("the hub starts again");

    sluice_test_support::eventually_async("the restarted hub has read the stream", async || {
        listed(&hub).await["lastEventID"] != "earliest"
    })
    .await;
    let list = listed(&hub).await;
    assert_eq!(list["subscriptions"], json!([]), "{list}");

    // It published the end the killed process could not.
    let grant = "/.well-known/mercure/subscriptions/{topic}/{subscriber}";
    let bearer = format!(
        "Bearer {}",
        token(SUBSCRIBER_KEY, json!({ "subscribe": [grant] }))
    );
    let events = hub.url(&format!(
        "/.well-known/mercure?topic={}",
        "%2F.well-known%2Fmercure%2Fsubscriptions%2F%7Btopic%7D%2F%7Bsubscriber%7D"
    ));
    let headers = [
        ("authorization", bearer.as_str()),
        ("last-event-id", "earliest"),
    ];
    let mut events = SseClient::connect_with_headers(&events, &headers)
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let data = events.next_event().await.unwrap().data.unwrap();
        let doc: sluice_test_support::serde_json::Value =
            sluice_test_support::serde_json::from_str(&data).unwrap();
        if doc["subscriber"].as_str() == subscriber.as_deref() {
            seen.push(doc["active"].clone());
        }
    }
    assert_eq!(seen, [json!(true), json!(false)]);
}
