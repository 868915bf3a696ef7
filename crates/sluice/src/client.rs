//! `sluice pub` and `sluice sub`: small clients of a running hub.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use sluice_sse::Parser;

/// Where the hub is.
#[derive(Debug, Args)]
pub struct HubArgs {
    /// The hub's base URL.
    #[arg(long, env = "SLUICE_HUB", default_value = "http://127.0.0.1:8080")]
    hub: String,
}

impl HubArgs {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.hub.trim_end_matches('/'))
    }
}

/// `sluice pub <topic> <payload>`.
#[derive(Debug, Args)]
pub struct PubArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// The topic, e.g. `orders.eu`.
    topic: String,
    /// The payload: JSON (`{"a":1}`, `42`) is sent as JSON, anything else as text.
    payload: String,
    /// Deduplication id (`Nats-Msg-Id`).
    #[arg(long)]
    msg_id: Option<String>,
    /// Time to live, e.g. `30s` or `never`.
    #[arg(long)]
    ttl: Option<String>,
}

/// `sluice sub <topic>...`.
#[derive(Debug, Args)]
pub struct SubArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// Topics (NATS wildcards `*` and `>` allowed).
    #[arg(required = true)]
    topics: Vec<String>,
    /// Resume after this event id.
    #[arg(long)]
    last_id: Option<String>,
    /// Exit after this many `message` events.
    #[arg(long)]
    count: Option<u64>,
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// Publishes one message and prints the hub's answer.
pub async fn publish(args: PubArgs) -> anyhow::Result<()> {
    let payload =
        serde_json::from_str::<Value>(&args.payload).unwrap_or(Value::String(args.payload));
    let mut body = json!({ "topic": args.topic, "payload": payload });
    if let Some(id) = args.msg_id {
        body["msg_id"] = json!(id);
    }
    if let Some(ttl) = args.ttl {
        body["ttl"] = json!(ttl);
    }
    let url = args.hub.url("/publish");
    let request = Request::post(&url)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = client()
        .request(request)
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let answer = response.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&answer);
    if !status.is_success() {
        bail!("POST {url}: {status}: {text}");
    }
    println!("{text}");
    Ok(())
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Prints every event of the subscription, one line each (`<event> <id> <data>`), and
/// reconnects with `Last-Event-ID` when the stream ends, as a browser would.
pub async fn subscribe(args: SubArgs) -> anyhow::Result<()> {
    let query: Vec<String> = args
        .topics
        .iter()
        .map(|t| format!("topic={}", encode(t)))
        .collect();
    let url = args.hub.url(&format!("/events?{}", query.join("&")));
    let mut last_id = args.last_id.unwrap_or_default();
    let mut retry = Duration::from_secs(2);
    let mut messages = 0;
    loop {
        let mut request = Request::get(&url).header(ACCEPT, "text/event-stream");
        if !last_id.is_empty() {
            request = request.header("last-event-id", &last_id);
        }
        let response = client()
            .request(request.body(Full::default())?)
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.into_body().collect().await?.to_bytes();
            bail!("GET {url}: {status}: {}", String::from_utf8_lossy(&body));
        }
        let mut body = response.into_body();
        let mut parser = Parser::new();
        while let Some(frame) = body.frame().await {
            let Ok(chunk) = frame?.into_data() else {
                continue;
            };
            for event in parser.feed(&chunk)? {
                if let Some(ms) = event.retry {
                    retry = Duration::from_millis(ms);
                }
                let Some(data) = &event.data else { continue };
                let data = serde_json::from_str::<Value>(data)
                    .map_or_else(|_| data.clone(), |v| v.to_string());
                println!(
                    "{} {} {data}",
                    event.event_type(),
                    event.id.as_deref().unwrap_or("-")
                );
                if event.event_type() == "message" {
                    messages += 1;
                    if args.count.is_some_and(|count| messages >= count) {
                        return Ok(());
                    }
                }
            }
        }
        last_id = parser.last_event_id().to_owned();
        tracing::info!(?retry, last_id, "stream ended; reconnecting");
        tokio::time::sleep(retry).await;
    }
}
