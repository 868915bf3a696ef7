//! `sluice sub`: prints the events of topics from a running hub, one line each, and survives
//! the hub's restarts and outages.
//!
//! Whenever the stream ends or cannot be opened (the hub was killed, restarted, is not up yet,
//! answered 5xx), the command reports the reason on stderr and reconnects after a [`Backoff`]
//! delay, sending the id of the last event it printed as `Last-Event-ID`: the hub replays what
//! was published meanwhile, so nothing is lost and nothing is printed twice. A refusal that a
//! retry cannot change (any other 4xx) ends the command at once with the hub's answer.
//!
//! `--from` names where the first connection starts without a resume position (`from=`: the
//! latest message of each subject, the last N, those since a time…); like the hub, a resume
//! position wins over it, so a reconnect continues after the last event printed.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, RETRY_AFTER};
use hyper::{Request, StatusCode, Uri};
use serde_json::Value;
use sluice_protocol::duration::{format_duration, parse_duration};
use sluice_server::EventId;
use sluice_sse::{Frame, Parser};
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{self, HubArgs, HubClient};

/// `sluice sub <topic>...`.
#[derive(Debug, Args)]
pub struct SubArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// Topics (NATS wildcards `*` and `>` allowed).
    #[arg(required = true)]
    topics: Vec<String>,
    /// Resume after this event id: `<seq>-<incarnation>` as the hub writes them
    /// (`42-18c3f0a1b2`), or `0` for the start of the stream.
    #[arg(long, value_parser = event_id)]
    last_id: Option<EventId>,
    /// Where to start without a resume position, as the hub's `from=`: `live` (the default),
    /// `earliest`, `latest` (the latest retained message of each subject), `last:<N>` (the N
    /// most recent) or `since:<RFC 3339 time, or a duration such as 10m>`; then live. The hub
    /// judges the value. `--last-id`, and the last event printed when it reconnects, win over it.
    #[arg(long, value_name = "START")]
    from: Option<String>,
    /// Exit after this many messages (events of the hub's `sse.event_type`, `message` by
    /// default).
    #[arg(long)]
    count: Option<u64>,
    /// Give up (exit 1) after this long without a connection, e.g. `30s` or `5m`. Without it
    /// `sub` retries forever: 0.5 s doubling to 30 s with jitter, never sooner than the hub's
    /// `retry:` hint.
    #[arg(long, value_parser = duration)]
    max_wait: Option<Duration>,
}

fn event_id(text: &str) -> Result<EventId, String> {
    EventId::parse(text).map_err(|err| {
        format!(
            "{err}; expected `<seq>-<incarnation>` as in the hub's event ids (e.g. \
             `42-18c3f0a1b2`), or `0` for the start of the stream"
        )
    })
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|err| err.to_string())
}

/// The most of a refusal's body that is read (and quoted).
const MAX_REFUSAL_BYTES: usize = 64 * 1024;

/// How one connection ended.
enum Ended {
    /// `--count` messages were printed.
    Done,
    /// Worth another try; `connected` tells whether the hub had sent an event (its stream was
    /// open, so the time without a connection starts again).
    Retry { reason: String, connected: bool },
}

/// Runs the subscription until `--count` messages, a refusal, or `--max-wait` without a
/// connection.
pub async fn run(args: SubArgs) -> anyhow::Result<()> {
    let mut query: Vec<String> = args
        .topics
        .iter()
        .map(|t| format!("topic={}", client::encode(t)))
        .collect();
    // Sent on every connection: the hub checks it, and a resume position wins over it.
    if let Some(from) = &args.from {
        query.push(format!("from={}", client::encode(from)));
    }
    let uri = args.hub.uri(&format!("/events?{}", query.join("&")))?;
    let client = args.hub.client()?;
    let mut printer = Printer {
        last_id: args.last_id.map(|id| id.to_string()),
        messages: 0,
        count: args.count,
    };
    let mut backoff = Backoff::new();
    let mut down_since = Instant::now();
    loop {
        let (reason, connected) =
            match connection(&uri, &args.hub, &client, &mut printer, &mut backoff).await? {
                Ended::Done => return Ok(()),
                Ended::Retry { reason, connected } => (reason, connected),
            };
        if connected {
            backoff.reset();
            down_since = Instant::now();
        }
        let mut delay = backoff.next_delay();
        if let Some(max_wait) = args.max_wait {
            let down = down_since.elapsed();
            if down >= max_wait {
                bail!(
                    "GET {uri}: no connection for {} (--max-wait); giving up: {reason}",
                    format_duration(max_wait)
                );
            }
            // The last attempt is made when the wait runs out, not after it.
            delay = delay.min(max_wait - down);
        }
        tracing::warn!(
            reason,
            retry_in = %format_duration(delay),
            last_id = printer.last_id.as_deref().unwrap_or("-"),
            "reconnecting"
        );
        tokio::time::sleep(delay).await;
    }
}

/// One connection: opens the stream, prints its events until it ends.
async fn connection(
    uri: &Uri,
    hub: &HubArgs,
    client: &HubClient,
    printer: &mut Printer,
    backoff: &mut Backoff,
) -> anyhow::Result<Ended> {
    let retry = |reason: String, connected| Ok(Ended::Retry { reason, connected });
    let mut request = hub
        .authorize(Request::get(uri))
        .header(ACCEPT, "text/event-stream");
    if let Some(id) = &printer.last_id {
        request = request.header("last-event-id", id);
    }
    let response = match client.send(request.body(Full::default())?).await {
        Ok(response) => response,
        // A certificate the client does not trust stays untrusted however often it tries.
        Err(err) if crate::client::certificate_refusal(&err).is_some() => {
            bail!(crate::one_line(&err))
        }
        Err(err) => return retry(crate::one_line(&err), false),
    };
    let status = response.status();
    if !status.is_success() {
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok()?.trim().parse::<u64>().ok());
        let body = Limited::new(response.into_body(), MAX_REFUSAL_BYTES)
            .collect()
            .await;
        let body = body.map(|b| b.to_bytes()).unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        let reason = format!("GET {uri}: {status}: {}", text.trim());
        if !retryable(status) {
            bail!(reason);
        }
        if let Some(seconds) = retry_after {
            backoff.set_floor(Duration::from_secs(seconds));
        }
        return retry(reason, false);
    }
    let mut body = response.into_body();
    let mut parser = Parser::new();
    let mut connected = false;
    loop {
        let chunk = match body.frame().await {
            None => return retry("the hub ended the stream".to_owned(), connected),
            Some(Err(err)) => return retry(crate::one_line(&anyhow!(err)), connected),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => chunk,
                Err(_) => continue,
            },
        };
        let frames = match parser.feed(&chunk) {
            Ok(frames) => frames,
            Err(err) => return retry(format!("unreadable event stream: {err}"), connected),
        };
        for frame in frames {
            if let Some(ms) = frame.retry {
                backoff.set_floor(Duration::from_millis(ms));
            }
            match printer.print(&frame)? {
                Printed::Nothing => {}
                Printed::Event => connected = true,
                Printed::Last => return Ok(Ended::Done),
            }
        }
    }
}

/// Whether a refusal may go away by itself: a timeout, a limit (429) or a server-side error.
/// Anything else (400, 401, 403, 404, …) is answered the same way every time.
fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// Writes events to stdout and remembers the id of the last one written.
struct Printer {
    last_id: Option<String>,
    messages: u64,
    count: Option<u64>,
}

/// The event types of the hub's own frames; every other event carries a stream message (a
/// message, or a `deleted` event for a subject delete marker) and counts toward `--count`.
const HUB_EVENTS: &[&str] = &["connected", "gap", "token_expired"];

impl Printer {
    /// Prints `frame` if it is an event: `<event> <id> <data>`.
    fn print(&mut self, frame: &Frame) -> anyhow::Result<Printed> {
        let Some(data) = &frame.data else {
            return Ok(Printed::Nothing);
        };
        let data =
            serde_json::from_str::<Value>(data).map_or_else(|_| data.clone(), |v| v.to_string());
        let id = frame.id.as_deref().unwrap_or("-");
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{} {id} {data}", frame.event_type())
            .and_then(|()| stdout.flush())
            .context("cannot write to stdout")?;
        if let Some(id) = &frame.id {
            self.last_id = Some(id.clone());
        }
        // A message is any event but the hub's own: its type is `sse.event_type`.
        if !HUB_EVENTS.contains(&frame.event_type()) {
            self.messages += 1;
            if self.count.is_some_and(|count| self.messages >= count) {
                return Ok(Printed::Last);
            }
        }
        Ok(Printed::Event)
    }
}

/// What [`Printer::print`] did.
enum Printed {
    /// The frame was no event (a `retry:` hint, a comment).
    Nothing,
    /// It printed an event.
    Event,
    /// It printed the last message `--count` asked for.
    Last,
}
