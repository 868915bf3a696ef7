//! What `/metrics` says about latency, streams, feeds and JetStream consumers, scraped over HTTP
//! from real hubs (the embedded store; a real nats-server), and the Grafana dashboard in docs/
//! checked against what those hubs export.

#[allow(unused_macros, unused_imports)]
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream;
use common::{Embedded, HubFactory, TestHub, expect_event, metric_value};
use futures::StreamExt;
use serde_json::{Value, json};
use sluice_backend::embedded::EmbeddedBackend;
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig};
use sluice_server::config::{BackendKind, Config};
use sluice_test_support::{NatsServer, SseClient, eventually_async, http, repo_root};

/// `GET /metrics` as Prometheus scrapes it by default (the text format 0.0.4).
async fn scrape(hub: &TestHub) -> String {
    let response = hub.get("/metrics").await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.text()
}

/// Whether `text` has a sample named exactly `series` (name and labels).
fn has_series(text: &str, series: &str) -> bool {
    text.lines().any(|line| {
        line.strip_prefix(series)
            .is_some_and(|r| r.starts_with(' '))
    })
}

/// Publishes two messages on `t` as one batch; panics unless the batch is answered.
async fn publish_batch(hub: &TestHub) {
    let batch = json!([{ "topic": "t", "payload": "b1" }, { "topic": "t", "payload": "b2" }]);
    let response = http::post_json(&hub.url("/publish"), &batch)
        .await
        .expect("batch publish");
    assert_eq!(response.status, 200, "{}", response.text());
}

/// A client streaming topic `t` from the live end, past its `connected` event.
async fn live_client(hub: &TestHub) -> SseClient {
    let mut client = hub.subscribe("?topic=t").await;
    client.set_timeout(Duration::from_secs(30));
    expect_event(&mut client, "connected")
        .await
        .expect("connected");
    client
}

async fn read_messages(client: &mut SseClient, count: usize) {
    for _ in 0..count {
        expect_event(client, "message").await.expect("a message");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_and_live_deliveries_are_timed_once_each_and_backlog_is_not() {
    let hub = Embedded.start(Config::default()).await;
    let mut client = live_client(&hub).await;
    hub.publish("t", json!(1)).await;
    publish_batch(&hub).await;
    read_messages(&mut client, 3).await;

    let text = scrape(&hub).await;
    let single = "sluice_publish_latency_seconds_count{shape=\"single\"}";
    let batch = "sluice_publish_latency_seconds_count{shape=\"batch\"}";
    assert_eq!(metric_value(&text, single), 1, "{text}");
    assert_eq!(metric_value(&text, batch), 1, "{text}");
    assert_eq!(
        metric_value(
            &text,
            "sluice_publish_latency_seconds_bucket{shape=\"single\",le=\"+Inf\"}"
        ),
        1,
        "{text}"
    );
    assert_eq!(
        metric_value(&text, "sluice_delivery_latency_seconds_count"),
        3,
        "one observation per live message written: {text}"
    );
    assert_eq!(
        metric_value(&text, "sluice_delivery_latency_seconds_bucket{le=\"+Inf\"}"),
        3,
        "{text}"
    );
    assert!(
        has_series(&text, "sluice_delivery_latency_seconds_sum"),
        "{text}"
    );

    // A resume from the start replays the three as backlog: delivered, but their age says when
    // the client left, not how fast the hub delivers.
    let mut replay = hub.subscribe("?topic=t&last-id=0").await;
    expect_event(&mut replay, "connected").await.unwrap();
    read_messages(&mut replay, 3).await;
    let text = scrape(&hub).await;
    assert_eq!(metric_value(&text, "sluice_messages_delivered_total"), 6);
    assert_eq!(
        metric_value(&text, "sluice_delivery_latency_seconds_count"),
        3,
        "{text}"
    );
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_gauges_and_feed_lag_are_read_from_the_store_at_each_scrape() {
    let hub = Embedded.start(Config::default()).await;
    let text = scrape(&hub).await;
    for (series, value) in [
        ("sluice_stream_messages{stream=\"sluice\"}", 0),
        ("sluice_stream_bytes{stream=\"sluice\"}", 0),
        ("sluice_stream_first_seq{stream=\"sluice\"}", 1),
        ("sluice_stream_last_seq{stream=\"sluice\"}", 0),
        ("sluice_stream_lost_messages{stream=\"sluice\"}", 0),
        ("sluice_feed_lag_messages", 0),
    ] {
        assert!(has_series(&text, series), "{series} missing:\n{text}");
        assert_eq!(metric_value(&text, series), value, "{series}:\n{text}");
    }
    for n in 0..3 {
        hub.publish("t", json!(n)).await;
    }
    let text = scrape(&hub).await;
    assert_eq!(
        metric_value(&text, "sluice_stream_messages{stream=\"sluice\"}"),
        3
    );
    assert_eq!(
        metric_value(&text, "sluice_stream_last_seq{stream=\"sluice\"}"),
        3
    );
    assert!(metric_value(&text, "sluice_stream_bytes{stream=\"sluice\"}") > 0);
    // No feed runs: nothing lags.
    assert_eq!(metric_value(&text, "sluice_feed_lag_messages"), 0);

    let mut client = live_client(&hub).await;
    hub.publish("t", json!("live")).await;
    read_messages(&mut client, 1).await;
    eventually_async(
        "the feeds have routed the stream's last message",
        async || {
            let text = scrape(&hub).await;
            metric_value(&text, "sluice_stream_last_seq{stream=\"sluice\"}") == 4
                && has_series(&text, "sluice_feed_lag_messages")
                && metric_value(&text, "sluice_feed_lag_messages") == 0
        },
    )
    .await;
    hub.stop().await;
}

/// What durability costs is counted: with `sync = "always"` (the default) each publish
/// acknowledged before the next is sent is a batch of its own with at least one fsync, and a
/// request of two messages is one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_batches_and_fsyncs_of_the_store_are_counted() {
    // The store as `sluice serve` opens it by default (the test hubs do not fsync).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.embedded.data_dir = dir.path().to_owned();
    assert_eq!(config.embedded.sync, "always");
    let (backend, _) = EmbeddedBackend::open(&config.embedded)
        .await
        .expect("open store");
    let hub = TestHub::start(config, Arc::new(backend)).await;
    let counts = |text: &str| {
        (
            metric_value(text, "sluice_store_write_batches_total"),
            metric_value(text, "sluice_store_fsyncs_total"),
        )
    };
    let text = scrape(&hub).await;
    assert!(has_series(&text, "sluice_store_fsyncs_total"), "{text}");
    let (batches, fsyncs) = counts(&text);
    for n in 0..3 {
        hub.publish("t", json!(n)).await;
    }
    let (after_batches, after_fsyncs) = counts(&scrape(&hub).await);
    assert_eq!(after_batches - batches, 3, "one batch per publish");
    assert!(after_fsyncs - fsyncs >= 3, "{fsyncs} → {after_fsyncs}");
    publish_batch(&hub).await;
    let (last_batches, last_fsyncs) = counts(&scrape(&hub).await);
    assert_eq!(last_batches - after_batches, 1, "two messages, one batch");
    assert!(last_fsyncs > after_fsyncs);
    hub.stop().await;
}

/// A hub with topic prefix `app` over the JetStream stream `EVENTS` (`app.>`) on `server`.
async fn jetstream_hub(server: &NatsServer) -> TestHub {
    operator(server)
        .await
        .create_stream(stream::Config {
            name: "EVENTS".to_owned(),
            subjects: vec!["app.>".to_owned()],
            ..Default::default()
        })
        .await
        .expect("stream created");
    let mut jetstream = JetStreamConfig::new(server.url(), "EVENTS");
    jetstream.idle_heartbeat = Duration::from_millis(500);
    let config = Config {
        topic_prefix: "app".to_owned(),
        backend: BackendKind::Jetstream,
        jetstream: Some(jetstream.clone()),
        ..Config::default()
    };
    let backend = JetStreamBackend::connect(&jetstream)
        .await
        .unwrap_or_else(|err| panic!("backend connects: {err}"));
    TestHub::start(config, Arc::new(backend)).await
}

async fn operator(server: &NatsServer) -> async_nats::jetstream::Context {
    let client = async_nats::connect(server.url())
        .await
        .expect("operator connects");
    async_nats::jetstream::new(client)
}

async fn start_nats() -> NatsServer {
    NatsServer::start()
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_gauges_come_from_the_stream_and_a_deleted_consumer_counts_as_recreated() {
    let server = start_nats().await;
    let hub = jetstream_hub(&server).await;
    let recreations = "sluice_jetstream_consumer_recreations_total";
    let text = scrape(&hub).await;
    assert!(has_series(&text, recreations), "{text}");
    assert_eq!(metric_value(&text, recreations), 0);
    assert!(
        has_series(&text, "sluice_stream_messages{stream=\"EVENTS\"}"),
        "{text}"
    );

    let mut client = live_client(&hub).await;
    hub.publish("t", json!(1)).await;
    hub.publish("t", json!(2)).await;
    read_messages(&mut client, 2).await;
    let js = operator(&server).await;
    let names: Vec<String> = js
        .get_stream("EVENTS")
        .await
        .expect("the stream")
        .consumer_names()
        .map(|name| name.expect("a consumer name"))
        .collect()
        .await;
    assert!(!names.is_empty(), "the hub reads through a consumer");
    for name in &names {
        js.delete_consumer_from_stream(name, "EVENTS")
            .await
            .expect("consumer deleted");
    }
    // Stored after every consumer was gone: only a recreated one can deliver it.
    eventually_async("a publish is accepted", async || {
        hub.publish_raw(json!({ "topic": "t", "payload": 3 }))
            .await
            .status
            == 200
    })
    .await;
    read_messages(&mut client, 1).await;

    let text = scrape(&hub).await;
    assert!(metric_value(&text, recreations) >= 1, "{text}");
    for (series, value) in [
        ("sluice_stream_messages{stream=\"EVENTS\"}", 3),
        ("sluice_stream_first_seq{stream=\"EVENTS\"}", 1),
        ("sluice_stream_last_seq{stream=\"EVENTS\"}", 3),
        ("sluice_stream_lost_messages{stream=\"EVENTS\"}", 0),
    ] {
        assert_eq!(metric_value(&text, series), value, "{series}:\n{text}");
    }
    assert!(metric_value(&text, "sluice_stream_bytes{stream=\"EVENTS\"}") > 0);
    eventually_async(
        "the feeds have routed the stream's last message",
        async || {
            let text = scrape(&hub).await;
            has_series(&text, "sluice_feed_lag_messages")
                && metric_value(&text, "sluice_feed_lag_messages") == 0
        },
    )
    .await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_while_nats_is_down_leaves_the_stream_gauges_out() {
    let mut server = start_nats().await;
    let hub = jetstream_hub(&server).await;
    assert!(has_series(
        &scrape(&hub).await,
        "sluice_stream_last_seq{stream=\"EVENTS\"}"
    ));
    server.kill().expect("nats-server killed");
    eventually_async("the scrape leaves the stream gauges out", async || {
        let text = scrape(&hub).await;
        !text.contains("sluice_stream_last_seq") && !text.contains("sluice_feed_lag_messages")
    })
    .await;
    let text = scrape(&hub).await;
    assert!(
        metric_value(&text, "sluice_backend_errors_total{kind=\"unavailable\"}") >= 1,
        "{text}"
    );
    hub.stop().await;
}

/// The names a query may select in a scrape (the Prometheus text format): every family
/// declared, a histogram's with its `_bucket`, `_sum` and `_count` series, and every sample.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').expect("# TYPE name kind");
            if kind == "histogram" {
                names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
            }
            names.insert(name.to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            names.extend(line.split(['{', ' ']).next().map(str::to_owned));
        }
    }
    names
}

/// Every PromQL expression of the dashboard's panels (rows' nested panels included), and the
/// metric each `label_values(metric, label)` variable reads.
fn dashboard_queries(dashboard: &Value) -> (Vec<String>, Vec<String>) {
    fn walk(panels: &Value, exprs: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    exprs.push(expr.to_owned());
                }
            }
            walk(&panel["panels"], exprs);
        }
    }
    let mut exprs = Vec::new();
    walk(&dashboard["panels"], &mut exprs);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variable| variable["query"]["query"].as_str())
        .map(|query| {
            let inner = query
                .strip_prefix("label_values(")
                .unwrap_or_else(|| panic!("a label_values query: {query}"));
            inner.split(',').next().unwrap().trim().to_owned()
        })
        .collect();
    (exprs, variables)
}

/// The metric names a PromQL expression selects: identifiers that are not functions,
/// aggregations, keywords, label names (in `{…}`, `by (…)`, `without (…)`, …), durations,
/// strings, numbers or Grafana variables.
fn metric_names(expr: &str) -> Vec<String> {
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
    ];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    const KEYWORDS: [&str; 5] = ["offset", "bool", "and", "or", "unless"];
    let chars: Vec<char> = expr.chars().collect();
    let skip_to = |from: usize, end: char| {
        let mut i = from + 1;
        while i < chars.len() && chars[i] != end {
            if chars[i] == '"' {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += usize::from(chars[i] == '\\') + 1;
                }
            }
            i += 1;
        }
        i + 1
    };
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = skip_to(i, '}');
        } else if c == '[' {
            i = skip_to(i, ']');
        } else if c == '"' {
            i = skip_to(i, '"');
        } else if c == '$' || c.is_ascii_digit() {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = skip_to(next, ')');
                }
            } else if !call
                && !AGGREGATIONS.contains(&word.as_str())
                && !KEYWORDS.contains(&word.as_str())
            {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_told_from_functions_labels_and_keywords() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le, shape) (rate(a_bucket{instance=~\"$instance\",x=\"y}\"}[$__rate_interval])))"
        ),
        ["a_bucket"]
    );
    assert_eq!(
        metric_names("sum without (reason) (rate(b_total[5m])) / on (instance) group_left c"),
        ["b_total", "c"]
    );
    assert_eq!(metric_names("max(d) offset 1h > bool 1e3"), ["d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_only_metrics_the_hubs_export() {
    let embedded = Embedded.start(Config::default()).await;
    let server = start_nats().await;
    let jetstream = jetstream_hub(&server).await;
    let mut exported = BTreeSet::new();
    for hub in [&embedded, &jetstream] {
        // A client, a single publish and a batch: every series the dashboard reads exists.
        let mut client = live_client(hub).await;
        hub.publish("t", json!(1)).await;
        publish_batch(hub).await;
        read_messages(&mut client, 3).await;
        exported.extend(exported_names(&scrape(hub).await));
    }
    let path = repo_root().join("docs/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("docs/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let (exprs, variables) = dashboard_queries(&dashboard);
    assert!(exprs.len() >= 10, "{exprs:?}");
    assert!(!variables.is_empty());
    let mut used = BTreeSet::new();
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr}");
        used.extend(names);
    }
    used.extend(variables);
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard reads {missing:?}, which no hub exports; exported: {exported:?}"
    );
    for new in [
        "sluice_publish_latency_seconds_bucket",
        "sluice_delivery_latency_seconds_bucket",
        "sluice_stream_messages",
        "sluice_stream_bytes",
        "sluice_stream_first_seq",
        "sluice_stream_last_seq",
        "sluice_stream_lost_messages",
        "sluice_feed_lag_messages",
        "sluice_jetstream_consumer_recreations_total",
    ] {
        assert!(used.contains(new), "the dashboard shows {new}");
    }
    embedded.stop().await;
    jetstream.stop().await;
}
