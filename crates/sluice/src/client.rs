//! `sluice pub`, and what it shares with `sluice sub`: the hub's address and the HTTP client.

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Where the hub is, and the token to show it.
#[derive(Debug, Args)]
pub struct HubArgs {
    /// The hub's base URL.
    #[arg(long, env = "SLUICE_HUB", default_value = "http://127.0.0.1:8080")]
    hub: String,
    /// A token the hub's authorization accepts (a JWT), sent as `Authorization: Bearer`.
    /// Prefer the environment variable: a flag is visible to other users of the machine.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl HubArgs {
    /// The hub at `hub`, shown `token` when given.
    pub fn new(hub: String, token: Option<String>) -> Self {
        Self { hub, token }
    }

    /// `request` with the token, if one was given.
    pub fn authorize(
        &self,
        request: hyper::http::request::Builder,
    ) -> hyper::http::request::Builder {
        match &self.token {
            Some(token) => request.header(AUTHORIZATION, format!("Bearer {token}")),
            None => request,
        }
    }

    /// The URL of `path` on the hub; an error naming `--hub` when it is no `http://` URL.
    pub fn uri(&self, path: &str) -> anyhow::Result<Uri> {
        let text = format!("{}{path}", self.hub.trim_end_matches('/'));
        let bad = |why: &str| anyhow::anyhow!("invalid --hub {:?}: {why}", self.hub);
        let uri: Uri = text
            .parse()
            .map_err(|_| bad("expected a URL such as http://127.0.0.1:8080"))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(bad("expected http://<host>:<port>"));
        }
        Ok(uri)
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

/// How long one attempt to open a TCP connection to the hub may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The HTTP/1.1 client both commands use.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    Client::builder(TokioExecutor::new()).build(connector)
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
    let url = args.hub.uri("/publish")?;
    let request = args
        .hub
        .authorize(Request::post(&url))
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
pub fn encode(value: &str) -> String {
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
