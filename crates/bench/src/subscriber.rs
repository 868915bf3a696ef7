//! One SSE client: subscribes to one topic, checks every frame with the strict parser, and
//! measures publish→receive latency of each message.
//!
//! A client takes part in the run only if it is subscribed before publishing begins (its
//! `connected` frame arrived; for nchan, its response head); then every message published on
//! its topic must reach it exactly once, in stream order. Anything else is counted: connect
//! errors, disconnects, gap frames, frames out of order, and messages that are not this run's
//! (but those a start option replays ahead of the run's own are counted as replayed).

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_sse::{FrameRef, Limits, Parser};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::event_stream::{End, EventStream};
use crate::message;
use crate::run_context::Run;
use crate::stats::bump;

/// Where the run is; clients watch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Clients are subscribing; nothing is published yet.
    Connecting,
    /// Messages are being published (and then drained).
    Publishing,
    /// The run is over: clients hang up.
    Stopping,
}

/// What one client saw, for the exactly-once check.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The client's topic index.
    pub topic: usize,
    /// Whether it was subscribed before publishing began.
    pub participated: bool,
    /// Messages of this run it received.
    pub received: u64,
    /// Whether its stream had no anomaly (disconnect, gap, disorder, foreign or bad frame).
    pub clean: bool,
}

/// How long a client may take to connect and receive its `connected` frame.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds for the parser: bench frames are small, so a runaway stream fails fast.
const PARSER_LIMITS: Limits = Limits {
    max_line_bytes: 1 << 20,
    max_frame_bytes: 1 << 20,
};

/// Runs client number `client` on topic `topic`, connecting from `source` when given, until
/// the run stops or its stream fails.
///
/// Over HTTP/1.1 the stream is read from its socket inside this task (no connection task of
/// its own), and the stop signal is registered once, so a chunk from the hub costs one task
/// wake-up and one read. Over HTTP/2 the stream is one of its connection's; the checks are the
/// same.
pub async fn subscribe(
    run: Arc<Run>,
    client: usize,
    topic: usize,
    source: Option<IpAddr>,
    phase: watch::Receiver<Phase>,
) -> Outcome {
    let mut client = Client {
        run: &run,
        client,
        outcome: Outcome {
            topic,
            participated: false,
            received: 0,
            clean: true,
        },
        last: None,
        replaying: run.from.is_some(),
        latencies: Vec::new(),
    };
    let stats = &run.stats;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let path = run.events_path(topic);
    let multiplex = run.multiplex.as_ref();
    let open = EventStream::open(&run.target, multiplex, client.client, source, &path);
    let opened = tokio::time::timeout_at(deadline, open).await;
    let mut stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => {
            stats.error(&stats.connect_errors, "connect", || format!("{err:#}"));
            return client.outcome;
        }
        Err(_) => {
            stats.error(&stats.connect_errors, "connect", || {
                // Streams over the hub's limit on one connection wait for one to close.
                let hint = match multiplex {
                    Some(_) => " (more --streams-per-connection than the hub's http2.max_concurrent_streams?)",
                    None => "",
                };
                format!("no stream within {CONNECT_TIMEOUT:?}{hint}")
            });
            return client.outcome;
        }
    };
    if run.hub.subscribed_by_head() {
        if *phase.borrow() != Phase::Connecting {
            stats.error(&stats.connect_errors, "connect", || {
                "subscribed after publishing had begun".to_owned()
            });
            return client.outcome;
        }
        client.participate();
    }
    let mut stopping = phase.clone();
    let stop = stopping.wait_for(|phase| *phase == Phase::Stopping);
    let connect_deadline = tokio::time::sleep_until(deadline);
    tokio::pin!(stop, connect_deadline);
    let mut parser = Parser::with_limits(PARSER_LIMITS);
    loop {
        let waiting = !client.outcome.participated;
        let read = tokio::select! {
            biased;
            _ = &mut stop => return client.outcome,
            read = stream.read() => read,
            () = &mut connect_deadline, if waiting => {
                stats.error(&stats.connect_errors, "connect", || {
                    format!("no `connected` frame within {CONNECT_TIMEOUT:?}")
                });
                return client.outcome;
            }
        };
        let now = stats.now_us();
        let current = *phase.borrow();
        // The first problem ends the checks; the rest is not looked at.
        let mut verdict = Ok(());
        let mut fed = Ok(());
        let decoded = read.and_then(|()| {
            stream.decode(|bytes| {
                if verdict.is_ok() && fed.is_ok() {
                    fed = parser.feed_with(bytes, |frame| {
                        if verdict.is_ok() {
                            verdict = client.handle(frame, current, now);
                        }
                    });
                }
            })
        });
        match (verdict, fed, decoded) {
            (Err(Stop::Late), _, _) => return client.outcome,
            (Err(Stop::Broken(why)), _, _) => return client.fail(why),
            (Ok(()), Err(err), _) => return client.fail(format!("invalid SSE: {err}")),
            (Ok(()), Ok(()), Err(End::Finished)) => {
                return client.ended("the hub ended the stream");
            }
            (Ok(()), Ok(()), Err(End::Failed(why))) => {
                return client.ended(&format!("stream failed: {why}"));
            }
            (Ok(()), Ok(()), Ok(())) => client.flush(),
        }
    }
}

/// Why a client hangs up early.
#[derive(Debug)]
enum Stop {
    /// Its `connected` frame came after publishing began (already counted).
    Late,
    /// The stream broke the protocol.
    Broken(String),
}

/// One client's state while its stream runs.
struct Client<'a> {
    run: &'a Run,
    client: usize,
    outcome: Outcome,
    /// The position of the last event: the stream sequence in its id (the `connected`
    /// frame's at first), or for nchan the message's `n` (none before the first message).
    last: Option<u64>,
    /// Whether messages that are not this run's are still the retained ones its start option
    /// replays: until the first of the run's own arrives.
    replaying: bool,
    /// Latencies of the current chunk's messages, recorded together.
    latencies: Vec<u64>,
}

impl Client<'_> {
    fn handle(&mut self, frame: FrameRef<'_>, phase: Phase, now: u64) -> Result<(), Stop> {
        if !frame.dispatches_event() {
            return Ok(()); // heartbeats and retry hints
        }
        let stats = &self.run.stats;
        match frame.event_type() {
            "connected" if self.outcome.participated => {
                return Err(Stop::Broken("a second `connected` frame".to_owned()));
            }
            "connected" if phase != Phase::Connecting => {
                stats.error(&stats.connect_errors, "connect", || {
                    "connected after publishing had begun".to_owned()
                });
                return Err(Stop::Late);
            }
            "connected" => {
                self.last = sequence(self.run.hub, frame)?;
                self.participate();
            }
            other if !self.outcome.participated => {
                return Err(Stop::Broken(format!(
                    "a {other:?} frame before the `connected` frame"
                )));
            }
            "message" => self.message(frame, now)?,
            "gap" => {
                self.outcome.clean = false;
                stats.error(&stats.gaps, "gap", || {
                    frame.data.unwrap_or_default().to_owned()
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// From now on the client takes part in the run.
    fn participate(&mut self) {
        self.outcome.participated = true;
        self.run.stats.subscribed(self.outcome.topic);
    }

    /// A `message` frame received at `now` (microseconds of the run's clock).
    fn message(&mut self, frame: FrameRef<'_>, now: u64) -> Result<(), Stop> {
        let stats = &self.run.stats;
        let data = frame.data.unwrap_or_default();
        let topic = &self.run.topic_names[self.outcome.topic];
        let message = message::read(data, topic, &self.run.run_id);
        let (position, what) = if self.run.hub.orders_by_payload() {
            (message.and_then(|message| message.n), "message")
        } else {
            (sequence(self.run.hub, frame)?, "sequence")
        };
        if let Some(position) = position {
            if let Some(last) = self.last.filter(|&last| position <= last) {
                self.outcome.clean = false;
                stats.error(&stats.out_of_order, "out of order", || {
                    format!("{what} {position} after {last}")
                });
                return Ok(());
            }
            self.last = Some(position);
        }
        match message.filter(|_| position.is_some()) {
            Some(message) => {
                self.replaying = false;
                self.outcome.received += 1;
                self.latencies.push(now.saturating_sub(message.sent_us));
            }
            None if self.replaying => bump(&stats.replayed),
            None => {
                self.outcome.clean = false;
                stats.error(&stats.foreign, "foreign message", || {
                    format!("not this run's message on {topic}: {}", shorten(data))
                });
            }
        }
        Ok(())
    }

    /// Records the latencies gathered from one chunk.
    fn flush(&mut self) {
        self.run
            .stats
            .record_latencies(self.client, &self.latencies);
        self.latencies.clear();
    }

    /// The stream ended or failed while the run was going on.
    fn ended(mut self, why: &str) -> Outcome {
        self.flush();
        let stats = &self.run.stats;
        if self.outcome.participated {
            self.outcome.clean = false;
            stats.error(&stats.disconnects, "disconnect", || why.to_owned());
        } else {
            stats.error(&stats.connect_errors, "connect", || {
                format!("before `connected`: {why}")
            });
        }
        self.outcome
    }

    /// The stream broke the protocol; the client hangs up.
    fn fail(mut self, why: String) -> Outcome {
        self.flush();
        let stats = &self.run.stats;
        self.outcome.clean = false;
        stats.error(&stats.protocol_errors, "protocol", || why);
        if !self.outcome.participated {
            bump(&stats.connect_errors);
        }
        self.outcome
    }
}

/// The stream sequence in a frame's id: `<seq>-<incarnation>` (or a bare `<seq>`), behind a
/// `#` on a Mercure hub; `None` for a Mercure custom id, which no message of the run has.
fn sequence(hub: crate::Hub, frame: FrameRef<'_>) -> Result<Option<u64>, Stop> {
    let id = frame.id.unwrap_or_default();
    hub.sequence(id).map_err(|()| {
        let form = match hub {
            crate::Hub::Mercure => "#<seq>-<incarnation> or a custom id",
            crate::Hub::Sluice | crate::Hub::Nchan => "<seq>-<incarnation>",
        };
        Stop::Broken(format!(
            "{:?} frame with id {id:?}, not {form}",
            frame.event_type()
        ))
    })
}

/// At most 200 characters of `text`, for error messages.
fn shorten(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &text[..end]).into(),
        None => text.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use sluice_sse::Frame;

    use super::*;
    use crate::Hub;
    use crate::http::Target;
    use crate::payload::PayloadShape;
    use crate::stats::Stats;

    const RUN: &str = "0123456789abcdef";

    /// A run against `hub` with one topic, `bench.0`.
    fn run_of(hub: Hub) -> Run {
        Run {
            target: Target::parse("http://127.0.0.1:9", crate::Protocol::Http1, None).unwrap(),
            multiplex: None,
            hub,
            stats: Stats::new(1),
            run_id: RUN.to_owned(),
            topic_names: vec!["bench.0".to_owned()],
            payload: PayloadShape::new(0),
            authorization: None,
            from: None,
        }
    }

    fn client_of(run: &Run) -> Client<'_> {
        Client {
            run,
            client: 0,
            outcome: Outcome {
                topic: 0,
                participated: false,
                received: 0,
                clean: true,
            },
            last: None,
            replaying: run.from.is_some(),
            latencies: Vec::new(),
        }
    }

    /// Message `n` of the run as it was published: what nchan hands out.
    fn published(n: u64) -> String {
        PayloadShape::new(0).body("bench.0", RUN, n, 10)
    }

    /// A message of the run without its number `n`.
    fn unnumbered() -> String {
        format!(r#"{{"topic":"bench.0","payload":{{"run":"{RUN}","sent_us":1}}}}"#)
    }

    /// Feeds `frame` to `client` as received at 25 µs, while publishing.
    fn feed(client: &mut Client<'_>, frame: &Frame) {
        assert!(
            client.handle(frame.view(), Phase::Publishing, 25).is_ok(),
            "{frame:?}"
        );
    }

    fn count(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    #[test]
    fn nchan_streams_are_ordered_by_the_messages_own_numbers() {
        let run = run_of(Hub::Nchan);
        let mut client = client_of(&run);
        // As `subscribe` does once the response head is in: nchan sends no `connected` frame.
        client.participate();
        assert_eq!(count(&run.stats.connected), 1);
        // nchan's ids are its own (`<time>:<tag>`); they play no part.
        feed(
            &mut client,
            &Frame::data(published(0)).with_id("1796148451:0"),
        );
        feed(
            &mut client,
            &Frame::data(published(5)).with_id("1796148451:1"),
        );
        assert_eq!(client.outcome.received, 2);
        assert!(client.outcome.clean);
        assert_eq!(client.latencies, [15, 15]);

        feed(
            &mut client,
            &Frame::data(published(5)).with_id("1796148451:2"),
        );
        assert_eq!(count(&run.stats.out_of_order), 1);
        assert!(!client.outcome.clean);
        feed(&mut client, &Frame::data(published(3)));
        assert_eq!(count(&run.stats.out_of_order), 2);
        feed(&mut client, &Frame::data(published(10)));
        assert_eq!(client.outcome.received, 3);

        // Without its number a message cannot be placed: not one this run published.
        feed(&mut client, &Frame::data(unnumbered()));
        let other_run = published(11).replace(RUN, "fedcba9876543210");
        feed(&mut client, &Frame::data(other_run));
        assert_eq!(count(&run.stats.foreign), 2);
        assert_eq!(client.outcome.received, 3);
        assert_eq!(count(&run.stats.out_of_order), 2);
        assert_eq!(
            run.stats.first_errors(),
            [
                "out of order: message 5 after 5".to_owned(),
                format!(
                    "foreign message: not this run's message on bench.0: {}",
                    unnumbered()
                ),
            ]
        );
    }

    #[test]
    fn sluice_streams_are_ordered_by_the_event_ids() {
        let run = run_of(Hub::Sluice);
        let mut client = client_of(&run);
        let connected = Frame::data("{}").with_event("connected").with_id("4-18c3");
        assert!(
            client
                .handle(connected.view(), Phase::Connecting, 0)
                .is_ok()
        );
        assert!(client.outcome.participated);
        assert_eq!(count(&run.stats.connected), 1);
        let hub_layout = |n| published(n).replace("}}", r#"},"time":"2026-12-01T18:00:00Z"}"#);
        // The ids decide, not the messages' numbers.
        feed(&mut client, &Frame::data(hub_layout(9)).with_id("5-18c3"));
        feed(&mut client, &Frame::data(hub_layout(2)).with_id("6-18c3"));
        feed(&mut client, &Frame::data(unnumbered()).with_id("7-18c3"));
        assert_eq!(client.outcome.received, 3);
        assert!(client.outcome.clean);
        feed(&mut client, &Frame::data(hub_layout(3)).with_id("7-18c3"));
        assert_eq!(count(&run.stats.out_of_order), 1);
        assert_eq!(client.outcome.received, 3);
        assert_eq!(
            run.stats.first_errors(),
            ["out of order: sequence 7 after 7"]
        );
        let unordered = Frame::data(hub_layout(4));
        assert!(matches!(
            client.handle(unordered.view(), Phase::Publishing, 25),
            Err(Stop::Broken(_))
        ));
    }

    #[test]
    fn retained_messages_a_start_option_replays_before_the_runs_own_are_not_foreign() {
        let run = Run {
            from: Some("latest".to_owned()),
            ..run_of(Hub::Sluice)
        };
        assert_eq!(run.events_path(0), "/events?topic=bench.0&from=latest");
        let mut client = client_of(&run);
        let connected = Frame::data("{}").with_event("connected").with_id("1-18c3");
        assert!(
            client
                .handle(connected.view(), Phase::Connecting, 0)
                .is_ok()
        );
        let hub_layout = |n| published(n).replace("}}", r#"},"time":"2026-12-01T18:00:00Z"}"#);
        let earlier = hub_layout(1).replace(RUN, "fedcba9876543210");
        feed(&mut client, &Frame::data(earlier.clone()).with_id("2-18c3"));
        let plain = r#"{"topic":"bench.0","payload":"state","time":"2026-12-01T18:00:00Z"}"#;
        feed(&mut client, &Frame::data(plain).with_id("4-18c3"));
        assert_eq!(count(&run.stats.replayed), 2);
        feed(&mut client, &Frame::data(hub_layout(0)).with_id("5-18c3"));
        assert_eq!(client.outcome.received, 1);
        // After the run's own, a message of another run is foreign again.
        feed(&mut client, &Frame::data(earlier).with_id("6-18c3"));
        assert_eq!(count(&run.stats.replayed), 2);
        assert_eq!(count(&run.stats.foreign), 1);
        assert!(!client.outcome.clean);

        // Without a start option nothing is replayed: the same message is foreign at once.
        let run = run_of(Hub::Sluice);
        assert_eq!(run.events_path(0), "/events?topic=bench.0");
        let mut client = client_of(&run);
        assert!(
            client
                .handle(connected.view(), Phase::Connecting, 0)
                .is_ok()
        );
        let earlier = hub_layout(1).replace(RUN, "fedcba9876543210");
        feed(&mut client, &Frame::data(earlier).with_id("2-18c3"));
        assert_eq!(count(&run.stats.foreign), 1);
        assert_eq!(count(&run.stats.replayed), 0);
    }

    #[test]
    fn sequence_comes_from_the_id() {
        let frame = Frame::data("{}").with_id("42-18c3f0a1b2");
        assert_eq!(sequence(Hub::Sluice, frame.view()).unwrap(), Some(42));
        let bare = Frame::data("{}").with_id("7");
        assert_eq!(sequence(Hub::Sluice, bare.view()).unwrap(), Some(7));
        let id_less = Frame::data("{}").with_event("gap");
        let Err(Stop::Broken(err)) = sequence(Hub::Sluice, id_less.view()) else {
            panic!("an id-less frame has no sequence");
        };
        assert!(err.contains("\"gap\" frame with id \"\""), "{err}");
        let Err(Stop::Broken(err)) = sequence(Hub::Mercure, id_less.view()) else {
            panic!("an id-less frame has no sequence");
        };
        assert!(
            err.ends_with("not #<seq>-<incarnation> or a custom id"),
            "{err}"
        );
    }

    #[test]
    fn mercure_streams_are_ordered_by_the_hub_made_ids() {
        let run = run_of(Hub::Mercure);
        let mut client = client_of(&run);
        // As `subscribe` does once the response head is in: Mercure sends no `connected` frame.
        client.participate();
        // The opening comment and heartbeats dispatch nothing.
        for comment in [Frame::comment(""), Frame::comment("heartbeat")] {
            feed(&mut client, &comment);
        }
        // The data is the published document as it was posted; the ids decide the order.
        feed(&mut client, &Frame::data(published(9)).with_id("#5-18c3"));
        feed(&mut client, &Frame::data(published(2)).with_id("#6-18c3"));
        assert_eq!(client.outcome.received, 2);
        assert!(client.outcome.clean);
        assert_eq!(client.latencies, [15, 15]);
        feed(&mut client, &Frame::data(published(3)).with_id("#6-18c3"));
        assert_eq!(count(&run.stats.out_of_order), 1);
        // A custom id is never one of the run's messages, whatever its data.
        feed(
            &mut client,
            &Frame::data(published(4)).with_id("urn:uuid:1"),
        );
        assert_eq!(count(&run.stats.foreign), 1);
        assert_eq!(client.outcome.received, 2);
        // `sluice_gaps=1`: a loss arrives as a `gap` event with a hub-made id.
        let gap = Frame::data(r#"{"reason":"expired"}"#)
            .with_id("#9-18c3")
            .with_event("gap");
        feed(&mut client, &gap);
        assert_eq!(count(&run.stats.gaps), 1);
        assert_eq!(
            run.stats.first_errors(),
            [
                "out of order: sequence 6 after 6".to_owned(),
                format!(
                    "foreign message: not this run's message on bench.0: {}",
                    published(4)
                ),
                r#"gap: {"reason":"expired"}"#.to_owned(),
            ]
        );
    }

    #[test]
    fn shortens_long_text_on_a_character_boundary() {
        assert_eq!(shorten("abc"), "abc");
        let long = "é".repeat(300);
        assert_eq!(shorten(&long).chars().count(), 201);
    }
}
