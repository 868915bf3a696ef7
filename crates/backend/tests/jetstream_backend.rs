//! The JetStream backend against a real nats-server started per test on a free loopback port.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures::StreamExt;
use sluice_backend::jetstream::{JetStreamBackend, JetStreamConfig, ServerVersion};
use sluice_backend::{
    ApiError, Backend, BackendError, Health, MessageStream, PublishRequest, Recent,
};
use sluice_protocol::headers::Headers;
use sluice_test_support::{NatsServer, TcpProxy, eventually_async};
use tokio::time::Instant;

/// How long any single expected event may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

async fn start_server() -> NatsServer {
    NatsServer::start()
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Debian's nats-server 2.9, older than multi-filter consumers (`scripts/test` installs it).
async fn start_old_server() -> NatsServer {
    let binary = sluice_test_support::debian_nats_server_binary()
        .expect("Debian's nats-server is installed (apt-get install nats-server)");
    NatsServer::start_with(sluice_test_support::NatsOptions::binary(binary))
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// A JetStream context on a plain client, for setting the scene like an operator would.
async fn operator(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url())
        .await
        .expect("operator connects");
    jetstream::new(client)
}

async fn create_stream(js: &jetstream::Context, config: stream::Config) {
    js.create_stream(config).await.expect("stream created");
}

fn events_stream() -> stream::Config {
    stream::Config {
        name: "EVENTS".to_owned(),
        subjects: vec!["events.>".to_owned()],
        ..Default::default()
    }
}

/// Test settings: quick loss detection and reconnection.
fn backend_config(server: &NatsServer, stream: &str) -> JetStreamConfig {
    let mut config = JetStreamConfig::new(server.url(), stream);
    config.idle_heartbeat = Duration::from_millis(500);
    config.reconnect_wait = Duration::from_millis(50);
    config
}

async fn connect(server: &NatsServer, stream: &str) -> JetStreamBackend {
    JetStreamBackend::connect(&backend_config(server, stream))
        .await
        .unwrap_or_else(|err| panic!("backend connects: {err}"))
}

fn request(subject: &str, payload: &str) -> PublishRequest {
    PublishRequest {
        subject: subject.to_owned(),
        headers: Headers::new(),
        payload: Bytes::from(payload.to_owned()),
    }
}

async fn publish(backend: &JetStreamBackend, subject: &str, payload: &str) -> u64 {
    backend
        .publish(request(subject, payload))
        .await
        .unwrap_or_else(|err| panic!("publish to {subject}: {err}"))
        .seq
}

/// Publishes `count` messages `<prefix><i>` round-robin on `events.a.x`, `events.b.y` and
/// `events.c.z`; returns (seq, subject, payload) of those outside `events.c`.
async fn publish_round_robin(
    backend: &JetStreamBackend,
    count: usize,
    prefix: &str,
) -> Vec<(u64, String, String)> {
    let mut expected = Vec::new();
    for i in 0..count {
        let subject = ["events.a.x", "events.b.y", "events.c.z"][i % 3];
        let payload = format!("{prefix}{i}");
        let seq = publish(backend, subject, &payload).await;
        if !subject.starts_with("events.c") {
            expected.push((seq, subject.to_owned(), payload));
        }
    }
    expected
}

/// Publishes, retrying while the backend is reconnecting.
async fn publish_eventually(backend: &JetStreamBackend, subject: &str, payload: &str) -> u64 {
    let mut seq = None;
    eventually_async(&format!("a publish to {subject}"), async || {
        match backend.publish(request(subject, payload)).await {
            Ok(ack) => seq = Some(ack.seq),
            Err(BackendError::Unavailable(reason)) => {
                eprintln!("publish not possible yet: {reason}")
            }
            Err(err) => panic!("publish to {subject}: {err}"),
        }
        seq.is_some()
    })
    .await;
    seq.expect("published")
}

/// The next `count` messages of `feed` as (seq, subject, payload).
async fn take(feed: &mut MessageStream, count: usize) -> Vec<(u64, String, String)> {
    let mut taken = Vec::with_capacity(count);
    while taken.len() < count {
        let message = tokio::time::timeout(DEADLINE, feed.next())
            .await
            .unwrap_or_else(|_| panic!("no message after {taken:?}"))
            .expect("the feed goes on")
            .unwrap_or_else(|err| panic!("feed error after {taken:?}: {err}"))
            .message()
            .expect("JetStream reports no lost positions");
        taken.push((
            message.seq,
            message.subject,
            String::from_utf8(message.payload.to_vec()).expect("utf-8 payload"),
        ));
    }
    taken
}

async fn consumer_names(js: &jetstream::Context, stream: &str) -> Vec<String> {
    let stream = js.get_stream(stream).await.expect("stream exists");
    stream
        .consumer_names()
        .map(|name| name.expect("consumer name"))
        .collect()
        .await
}

#[tokio::test]
async fn connect_error_names_a_missing_stream_and_the_server() {
    let server = start_server().await;
    let err = JetStreamBackend::connect(&backend_config(&server, "NOPE"))
        .await
        .err()
        .expect("a missing stream is an error");
    match err {
        BackendError::Api(ApiError {
            status: 404,
            code: 10059,
            description,
        }) => {
            assert!(description.contains("\"NOPE\""), "{description}");
            assert!(description.contains(&server.url()), "{description}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn connect_error_never_shows_the_password() {
    let server = start_server().await;
    let mut config = backend_config(&server, "EVENTS");
    config.urls = vec![format!("nats://alice:s3cret@127.0.0.1:{}", server.port())];
    // The server has no users configured, so authentication fails or the stream is missing;
    // either way the message must not carry the password.
    let err = JetStreamBackend::connect(&config)
        .await
        .err()
        .expect("an error");
    let text = err.to_string();
    assert!(!text.contains("s3cret"), "{text}");
    assert!(text.contains("alice:redacted@127.0.0.1"), "{text}");
}

#[tokio::test]
async fn publish_returns_the_sequence_and_flags_duplicates() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;

    let mut with_id = request("events.a", "one");
    with_id.headers.append("Nats-Msg-Id", "m-1");
    let first = backend.publish(with_id.clone()).await.unwrap();
    assert_eq!((first.seq, first.duplicate), (1, false));
    let again = backend.publish(with_id).await.unwrap();
    assert_eq!((again.seq, again.duplicate), (1, true));
    assert_eq!(publish(&backend, "events.b", "two").await, 2);

    let state = backend.stream_state().await.unwrap();
    assert_eq!((state.first_seq, state.last_seq), (1, 2));
    assert!(state.first_time.is_some());
    assert_eq!(state.subjects, ["events.>"]);
}

#[tokio::test]
async fn headers_pass_through_to_subscribers() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    let mut with_headers = request("events.a", "h");
    with_headers.headers.append("X-Trace", "t-1");
    with_headers.headers.append("X-Trace", "t-2");
    backend.publish(with_headers).await.unwrap();

    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    let message = tokio::time::timeout(DEADLINE, feed.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .message()
        .unwrap();
    assert_eq!(
        message.headers.get_all("X-Trace").collect::<Vec<_>>(),
        ["t-1", "t-2"]
    );
}

#[tokio::test]
async fn api_errors_keep_their_status_and_code() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    publish(&backend, "events.a", "one").await;

    let mut expecting = request("events.a", "two");
    expecting
        .headers
        .append("Nats-Expected-Last-Sequence", "99");
    match backend.publish(expecting).await {
        Err(BackendError::Api(ApiError {
            status: 400,
            code: 10071,
            description,
        })) => assert!(description.contains("wrong last sequence"), "{description}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn subscribe_replays_then_tails_live_over_two_filters_in_order() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    let expected = publish_round_robin(&backend, 30, "old-").await;

    let filters = ["events.a.*".to_owned(), "events.b.>".to_owned()];
    let mut feed = backend.subscribe(&filters, 1).await.unwrap();
    assert_eq!(take(&mut feed, expected.len()).await, expected);

    let mut live = Vec::new();
    for i in 0..30 {
        let subject = ["events.c.z", "events.b.y", "events.a.x"][i % 3];
        let seq = publish(&backend, subject, &format!("new-{i}")).await;
        if !subject.starts_with("events.c") {
            live.push((seq, subject.to_owned(), format!("new-{i}")));
        }
    }
    assert_eq!(take(&mut feed, live.len()).await, live);
}

#[tokio::test]
async fn subscribe_from_a_sequence_starts_there() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    for i in 1..=5 {
        publish(&backend, "events.a", &i.to_string()).await;
    }
    let mut feed = backend
        .subscribe(&["events.a".to_owned()], 4)
        .await
        .unwrap();
    let seqs: Vec<u64> = take(&mut feed, 2).await.into_iter().map(|m| m.0).collect();
    assert_eq!(seqs, [4, 5]);
}

#[tokio::test]
async fn a_consumer_deleted_by_the_server_is_recreated_without_gap_or_duplicate() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    for i in 1..=10 {
        publish(&backend, "events.a", &format!("m{i}")).await;
    }
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    let mut seen: Vec<u64> = take(&mut feed, 4).await.into_iter().map(|m| m.0).collect();

    let names = consumer_names(&js, "EVENTS").await;
    assert_eq!(names.len(), 1, "one consumer for the feed: {names:?}");
    js.delete_consumer_from_stream(&names[0], "EVENTS")
        .await
        .expect("$JS.API.CONSUMER.DELETE");
    for i in 11..=20 {
        publish(&backend, "events.a", &format!("m{i}")).await;
    }
    seen.extend(take(&mut feed, 16).await.into_iter().map(|m| m.0));
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>());
    assert!(backend.stats().consumers_lost >= 1, "{:?}", backend.stats());
    let after = consumer_names(&js, "EVENTS").await;
    assert!(
        !after.contains(&names[0]),
        "a new consumer replaced {}: {after:?}",
        names[0]
    );
}

#[tokio::test]
async fn a_server_restart_mid_feed_resumes_without_gap_or_duplicate() {
    let mut server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    for i in 1..=10 {
        publish(&backend, "events.a", &format!("m{i}")).await;
    }
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    let mut seen: Vec<u64> = take(&mut feed, 5).await.into_iter().map(|m| m.0).collect();

    server.restart().await.unwrap_or_else(|err| panic!("{err}"));
    for i in 11..=20 {
        publish_eventually(&backend, "events.a", &format!("m{i}")).await;
    }
    seen.extend(take(&mut feed, 15).await.into_iter().map(|m| m.0));
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>());
    assert!(backend.stats().consumers_lost >= 1, "{:?}", backend.stats());
}

#[tokio::test]
async fn a_dropped_connection_mid_feed_resumes_without_gap_or_duplicate() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let proxy = TcpProxy::start(server.port()).await;
    let mut config = backend_config(&server, "EVENTS");
    config.urls = vec![proxy.nats_url()];
    let backend = JetStreamBackend::connect(&config)
        .await
        .expect("connects through the proxy");
    for i in 1..=10 {
        js.publish("events.a", format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    let mut seen: Vec<u64> = take(&mut feed, 3).await.into_iter().map(|m| m.0).collect();

    proxy.cut();
    // Published straight to the server while the backend's connection is down.
    for i in 11..=20 {
        js.publish("events.a", format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    seen.extend(take(&mut feed, 17).await.into_iter().map(|m| m.0));
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>());
    assert!(backend.stats().consumers_lost >= 1, "{:?}", backend.stats());
}

#[tokio::test]
async fn messages_removed_while_a_feed_recovers_end_the_feed_instead_of_a_silent_gap() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(
        &js,
        stream::Config {
            max_messages: 5,
            ..events_stream()
        },
    )
    .await;
    let proxy = TcpProxy::start(server.port()).await;
    let mut config = backend_config(&server, "EVENTS");
    config.urls = vec![proxy.nats_url()];
    let backend = JetStreamBackend::connect(&config)
        .await
        .expect("connects through the proxy");
    js.publish("events.a", "m1".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    assert_eq!(take(&mut feed, 1).await[0].0, 1);

    proxy.cut_and_hold();
    eventually_async("the backend notices the lost connection", async || {
        matches!(backend.health().await, Health::Unavailable { .. })
    })
    .await;
    // Sequences 2..=11 are published and 2..=6 already removed again by `max_messages`.
    for i in 2..=11 {
        js.publish("events.a", format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    proxy.resume();
    let ended = tokio::time::timeout(DEADLINE, feed.next())
        .await
        .expect("the feed reacts once reconnected");
    match ended {
        Some(Err(err @ BackendError::Dropped { .. })) => {
            let reason = err.to_string();
            assert!(reason.contains("dropped sequences 2 to 6"), "{reason}")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_recreated_stream_has_a_new_incarnation_and_ends_old_feeds() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    publish(&backend, "events.a", "old").await;
    let before = backend.stream_state().await.unwrap();
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    take(&mut feed, 1).await;

    js.delete_stream("EVENTS").await.expect("stream deleted");
    create_stream(&js, events_stream()).await;
    let after = backend.stream_state().await.unwrap();
    assert_ne!(before.incarnation, after.incarnation);
    assert_eq!((after.first_seq, after.last_seq), (1, 0));

    // The feed must not carry on into the new incarnation as if nothing happened.
    let ended = tokio::time::timeout(DEADLINE, feed.next())
        .await
        .expect("the feed reacts to the deleted stream");
    assert!(matches!(ended, Some(Err(_))), "{ended:?}");
}

#[tokio::test]
async fn health_names_the_cause_when_the_stream_or_the_server_goes_away() {
    let mut server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    assert_eq!(backend.health().await, Health::Ready);

    js.delete_stream("EVENTS").await.expect("stream deleted");
    match backend.health().await {
        Health::Unavailable { cause, detail } => {
            assert_eq!(cause, "stream_unavailable");
            assert!(detail.contains("EVENTS"), "{detail}");
        }
        Health::Ready => panic!("ready without a stream"),
    }

    server.stop().await.expect("server stops");
    eventually_async("health reports the disconnection", async || {
        matches!(
            backend.health().await,
            Health::Unavailable {
                cause: "backend_disconnected",
                ..
            }
        )
    })
    .await;
}

#[tokio::test]
async fn the_streams_consumer_inactivity_limit_is_respected() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(
        &js,
        stream::Config {
            consumer_limits: Some(stream::ConsumerLimits {
                inactive_threshold: Duration::from_secs(5),
                max_ack_pending: 0,
            }),
            ..events_stream()
        },
    )
    .await;
    let backend = connect(&server, "EVENTS").await;
    publish(&backend, "events.a", "one").await;
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    assert_eq!(take(&mut feed, 1).await[0].0, 1);
}

#[tokio::test]
async fn dropping_a_feed_deletes_its_consumer() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    let feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    assert_eq!(consumer_names(&js, "EVENTS").await.len(), 1);
    drop(feed);
    eventually_async("the consumer is deleted", async || {
        consumer_names(&js, "EVENTS").await.is_empty()
    })
    .await;
}

/// Debian's nats-server 2.9 predates multi-filter consumers: the feed asks for one common
/// filter and drops the rest in-process, counting what it drops.
#[tokio::test]
async fn old_servers_get_multi_filter_feeds_filtered_in_process() {
    let server = start_old_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    assert!(
        backend.server_version() < ServerVersion::MULTI_FILTER,
        "{}",
        backend.server_version()
    );
    let expected = publish_round_robin(&backend, 12, "m").await;
    let filters = ["events.a.*".to_owned(), "events.b.*".to_owned()];
    let mut feed = backend.subscribe(&filters, 1).await.unwrap();
    assert_eq!(take(&mut feed, expected.len()).await, expected);
    // The last message (events.c.z, seq 12) is read and dropped only when the feed is polled
    // again, so count what was dropped before it.
    assert!(backend.stats().filtered_out >= 3, "{:?}", backend.stats());
}

/// A long backlog arrives complete and in order through the pull batches; the replay rate is
/// printed (`--no-capture`) for information, never asserted.
#[tokio::test]
async fn a_long_replay_arrives_complete_and_in_order() {
    const COUNT: u64 = 20_000;
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    // Pipelined in chunks: the client holds only so many unacknowledged publishes.
    for chunk in (0..COUNT).collect::<Vec<_>>().chunks(1000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for i in chunk {
            let subject = if i % 2 == 0 {
                "events.even"
            } else {
                "events.odd"
            };
            acks.push(
                js.publish(subject, Bytes::from(format!("{i}")))
                    .await
                    .unwrap(),
            );
        }
        for ack in acks {
            ack.await.expect("stored");
        }
    }
    let backend = connect(&server, "EVENTS").await;
    let started = Instant::now();
    let mut feed = backend
        .subscribe(&["events.even".to_owned()], 1)
        .await
        .unwrap();
    let seqs: Vec<u64> = take(&mut feed, (COUNT / 2) as usize)
        .await
        .into_iter()
        .map(|m| m.0)
        .collect();
    let elapsed = started.elapsed();
    assert_eq!(seqs, (1..=COUNT).step_by(2).collect::<Vec<u64>>());
    eprintln!(
        "replayed {} messages in {elapsed:?} ({:.0}/s)",
        seqs.len(),
        seqs.len() as f64 / elapsed.as_secs_f64()
    );
}

/// A message larger than the feed's usual per-pull byte budget still comes through: the
/// budget grows with the server's `max_payload`.
#[tokio::test]
async fn messages_larger_than_the_usual_pull_budget_come_through() {
    let server = NatsServer::start_with(
        sluice_test_support::NatsOptions::default().with_config("max_payload: 8MB"),
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    let big = "x".repeat(6 * 1024 * 1024);
    publish(&backend, "events.big", &big).await;
    publish(&backend, "events.small", "after").await;
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    let got = take(&mut feed, 2).await;
    assert_eq!((got[0].0, got[0].2.len()), (1, big.len()));
    assert_eq!((got[1].0, got[1].2.as_str()), (2, "after"));
}

#[tokio::test]
async fn shutdown_drains_and_ends_open_feeds() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    publish(&backend, "events.a", "one").await;
    let mut feed = backend
        .subscribe(&["events.>".to_owned()], 1)
        .await
        .unwrap();
    take(&mut feed, 1).await;

    backend.shutdown().await;
    let ended = tokio::time::timeout(DEADLINE, feed.next())
        .await
        .expect("the feed ends after shutdown");
    assert!(!matches!(ended, Some(Ok(_))), "{ended:?}");
    assert!(
        matches!(
            backend.health().await,
            Health::Unavailable {
                cause: "backend_disconnected",
                ..
            }
        ),
        "unready after shutdown"
    );
}

#[tokio::test]
async fn a_filter_outside_the_stream_is_an_api_error() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    match backend.subscribe(&["other.x".to_owned()], 1).await {
        Err(BackendError::Api(ApiError {
            status: 400,
            description,
            ..
        })) => assert!(description.contains("\"other.x\""), "{description}"),
        Err(other) => panic!("unexpected {other:?}"),
        Ok(_) => panic!("subscribed outside the stream"),
    }
}

/// A publish no stream answers for — what a JetStream leader election looks like (here a
/// subject outside the stream) — says the stream is temporarily unavailable and to retry.
#[tokio::test]
async fn a_publish_no_stream_answers_reads_as_temporarily_unavailable() {
    let server = start_server().await;
    create_stream(&operator(&server).await, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    match backend.publish(request("elsewhere.x", "lost")).await {
        Err(BackendError::Unavailable(reason)) => {
            assert_eq!(reason.reason(), "stream_unavailable");
            let text = reason.to_string();
            assert!(
                text.contains("temporarily unavailable") && text.contains("retry"),
                "{text}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(publish(&backend, "events.a", "after").await, 1);
}

/// The stream's consumer count, from its info (`state.consumer_count`).
async fn consumer_count(js: &jetstream::Context, stream: &str) -> usize {
    let mut stream = js.get_stream(stream).await.expect("stream exists");
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .consumer_count
}

/// Every message a bounded read gives until it ends, as (seq, subject); fails when it is still
/// open after [`DEADLINE`] without a message (it must end by itself).
async fn read_to_end(feed: &mut MessageStream) -> Vec<(u64, String)> {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, feed.next()).await {
            Err(_) => panic!("the bounded read did not end after {seen:?}"),
            Ok(None) => return seen,
            Ok(Some(next)) => {
                let message = next
                    .unwrap_or_else(|err| panic!("read error after {seen:?}: {err}"))
                    .message()
                    .expect("JetStream reports no lost positions");
                seen.push((message.seq, message.subject));
            }
        }
    }
}

/// A bounded read of `filters` from `start` until `until`, read to its end: the sequences it
/// gave. Fails unless the stream's consumer count then goes back to what it was.
async fn bounded_seqs(
    backend: &JetStreamBackend,
    js: &jetstream::Context,
    filters: &[&str],
    start: u64,
    until: u64,
) -> Vec<u64> {
    let before = consumer_count(js, "EVENTS").await;
    let filters: Vec<String> = filters.iter().map(|f| (*f).to_owned()).collect();
    let mut feed = backend.read_range(&filters, start, until).await.unwrap();
    let seqs = read_to_end(&mut feed)
        .await
        .into_iter()
        .map(|m| m.0)
        .collect();
    eventually_async("the read's consumer is deleted", async || {
        consumer_count(js, "EVENTS").await == before
    })
    .await;
    seqs
}

/// Publishes 120 messages, one in 20 on `events.user.7` (seqs 7, 27, …, 107), the rest over
/// other users; returns the sparse topic's sequences.
async fn publish_sparse(backend: &JetStreamBackend) -> Vec<u64> {
    let mut sparse = Vec::new();
    for n in 1..=120u64 {
        let subject = if n % 20 == 7 {
            "events.user.7".to_owned()
        } else {
            format!("events.user.{}", 100 + n % 13)
        };
        let seq = publish(backend, &subject, "m").await;
        if subject == "events.user.7" {
            sparse.push(seq);
        }
    }
    sparse
}

#[tokio::test]
async fn a_bounded_read_of_a_sparse_topic_gives_what_is_below_the_bound_and_ends() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    let sparse = publish_sparse(&backend).await;
    assert_eq!(sparse, [7, 27, 47, 67, 87, 107]);
    let user7 = ["events.user.7"];
    // Later messages of the topic exist: the read ends at the first one above the bound.
    assert_eq!(
        bounded_seqs(&backend, &js, &user7, 1, 80).await,
        [7, 27, 47, 67]
    );
    // The bound right after a match.
    assert_eq!(bounded_seqs(&backend, &js, &user7, 20, 48).await, [27, 47]);
    // None exists yet: the read ends at the last match, not waiting for the next one.
    assert_eq!(bounded_seqs(&backend, &js, &user7, 1, 121).await, sparse);
    // Two filters.
    let two = ["events.user.7", "events.user.101"];
    assert_eq!(
        bounded_seqs(&backend, &js, &two, 80, 121).await,
        [87, 92, 105, 107, 118]
    );
    assert_eq!(consumer_count(&js, "EVENTS").await, 0);
}

#[tokio::test]
async fn a_bounded_read_with_nothing_to_give_ends_at_once() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    publish_sparse(&backend).await;
    let nobody = ["events.nobody"];
    assert_eq!(
        bounded_seqs(&backend, &js, &nobody, 1, 121).await,
        [0u64; 0]
    );
    assert_eq!(
        bounded_seqs(&backend, &js, &["events.user.7"], 108, 121).await,
        [0u64; 0]
    );
    // An empty range.
    assert_eq!(bounded_seqs(&backend, &js, &[">"], 50, 50).await, [0u64; 0]);
    assert_eq!(bounded_seqs(&backend, &js, &[">"], 50, 10).await, [0u64; 0]);
    assert_eq!(backend.stats().consumers_lost, 0, "{:?}", backend.stats());
}

/// The consumer of a bounded read is recreated when lost, and the read still ends.
#[tokio::test]
async fn a_bounded_read_whose_consumer_is_deleted_recovers_and_ends() {
    const COUNT: u64 = 6_000;
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(&server, "EVENTS").await;
    // Pipelined in chunks: the client holds only so many unacknowledged publishes. Message
    // `seq` goes to events.a when even.
    for chunk in (1..=COUNT).collect::<Vec<_>>().chunks(1000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for seq in chunk {
            let subject = if seq % 2 == 0 { "events.a" } else { "events.b" };
            acks.push(js.publish(subject, Bytes::from("m")).await.unwrap());
        }
        for ack in acks {
            ack.await.expect("stored");
        }
    }
    let until = COUNT - 199;
    let mut feed = backend
        .read_range(&["events.a".to_owned()], 1, until)
        .await
        .unwrap();
    let mut seen: Vec<u64> = take(&mut feed, 5).await.into_iter().map(|m| m.0).collect();
    let names = consumer_names(&js, "EVENTS").await;
    assert_eq!(names.len(), 1, "one consumer for the read: {names:?}");
    js.delete_consumer_from_stream(&names[0], "EVENTS")
        .await
        .expect("$JS.API.CONSUMER.DELETE");
    seen.extend(read_to_end(&mut feed).await.into_iter().map(|m| m.0));
    let want: Vec<u64> = (1..until).filter(|seq| seq % 2 == 0).collect();
    assert_eq!(seen, want);
    assert!(backend.stats().consumers_lost >= 1, "{:?}", backend.stats());
    eventually_async("the read's consumers are deleted", async || {
        consumer_count(&js, "EVENTS").await == 0
    })
    .await;
}

/// On a server filtering in-process (older than multi-filter consumers) the server's count of
/// what is pending is of the wider filter: the read still ends, at the bound or after the last
/// message the server has for it.
#[tokio::test]
async fn a_bounded_read_filtered_in_process_on_an_old_server_ends() {
    let server = start_old_server().await;
    let js = operator(&server).await;
    let mut config = events_stream();
    config.subjects.push("other.>".to_owned());
    create_stream(&js, config).await;
    let backend = connect(&server, "EVENTS").await;
    assert!(
        backend.server_version() < ServerVersion::MULTI_FILTER,
        "{}",
        backend.server_version()
    );
    // The last message under events (12) is on events.c.z, outside the filters but inside the
    // one the server is given; the three after it are outside both.
    let expected: Vec<u64> = publish_round_robin(&backend, 12, "m")
        .await
        .into_iter()
        .map(|m| m.0)
        .collect();
    for _ in 0..3 {
        publish(&backend, "other.x", "m").await;
    }
    let filters = ["events.a.*", "events.b.*"];
    assert_eq!(bounded_seqs(&backend, &js, &filters, 1, 16).await, expected);
    assert_eq!(
        bounded_seqs(&backend, &js, &filters, 1, 6).await,
        [1, 2, 4, 5]
    );
    assert_eq!(
        bounded_seqs(&backend, &js, &["events.c.*", "events.d.*"], 1, 12).await,
        [3, 6, 9]
    );
    assert!(backend.stats().filtered_out >= 3, "{:?}", backend.stats());
}

/// A latest read of `filters` below `until`, read to its end, as (seq, subject, payload).
/// Fails unless it ends by itself and the stream's consumers are then all gone.
async fn latest_of(
    backend: &JetStreamBackend,
    js: &jetstream::Context,
    filters: &[&str],
    until: u64,
) -> Vec<(u64, String, String)> {
    let filters: Vec<String> = filters.iter().map(|f| (*f).to_owned()).collect();
    let mut feed = backend.read_latest(&filters, until).await.unwrap();
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, feed.next()).await {
            Err(_) => panic!("the latest read did not end after {seen:?}"),
            Ok(None) => break,
            Ok(Some(next)) => {
                let message = next
                    .unwrap_or_else(|err| panic!("read error after {seen:?}: {err}"))
                    .message()
                    .expect("JetStream reports no lost positions");
                let payload = String::from_utf8(message.payload.to_vec()).expect("utf-8");
                seen.push((message.seq, message.subject, payload));
            }
        }
    }
    eventually_async("the latest read's consumers are deleted", async || {
        consumer_count(js, "EVENTS").await == 0
    })
    .await;
    seen
}

/// The sequences of [`latest_of`].
async fn latest_seqs(
    backend: &JetStreamBackend,
    js: &jetstream::Context,
    filters: &[&str],
    until: u64,
) -> Vec<u64> {
    latest_of(backend, js, filters, until)
        .await
        .into_iter()
        .map(|m| m.0)
        .collect()
}

/// A stream capturing `events.>` and `other.>` with three subjects under `events.a`, one under
/// `events.b` and `events.c` each, and one under `other`, several messages each:
///
/// ```text
/// seq      1   2   3   4   5   6   7   8   9   10  11  12
/// subject  a.x b.y o   a.x c.z b.y a.w a.x b.y c.z o   a.w
/// ```
async fn latest_scene(server: &NatsServer) -> (jetstream::Context, JetStreamBackend) {
    let js = operator(server).await;
    let mut config = events_stream();
    config.subjects.push("other.>".to_owned());
    create_stream(&js, config).await;
    let backend = connect(server, "EVENTS").await;
    let subjects = [
        "events.a.x",
        "events.b.y",
        "other.z",
        "events.a.x",
        "events.c.z",
        "events.b.y",
        "events.a.w",
        "events.a.x",
        "events.b.y",
        "events.c.z",
        "other.z",
        "events.a.w",
    ];
    for (i, subject) in subjects.iter().enumerate() {
        assert_eq!(
            publish(&backend, subject, &format!("m{}", i + 1)).await,
            i as u64 + 1
        );
    }
    (js, backend)
}

/// What both server versions must answer for [`latest_scene`].
async fn check_latest_reads(server: &NatsServer) {
    let (js, backend) = latest_scene(server).await;
    let all = latest_of(&backend, &js, &["events.>"], 13).await;
    let want = [
        (8, "events.a.x", "m8"),
        (9, "events.b.y", "m9"),
        (10, "events.c.z", "m10"),
        (12, "events.a.w", "m12"),
    ];
    let want: Vec<(u64, String, String)> = want
        .iter()
        .map(|(seq, subject, payload)| (*seq, (*subject).to_owned(), (*payload).to_owned()))
        .collect();
    assert_eq!(all, want);
    assert_eq!(
        latest_seqs(&backend, &js, &["events.a.*"], 13).await,
        [8, 12]
    );
    assert_eq!(
        latest_seqs(&backend, &js, &[">"], 13).await,
        [8, 9, 10, 11, 12]
    );
    let two = ["events.a.x", "events.c.*"];
    assert_eq!(latest_seqs(&backend, &js, &two, 13).await, [8, 10]);
    let overlapping = ["events.a.*", "events.*.x"];
    assert_eq!(latest_seqs(&backend, &js, &overlapping, 13).await, [8, 12]);
    // Below a bound: a subject with later messages gives its latest one below it.
    assert_eq!(
        latest_seqs(&backend, &js, &["events.>"], 9).await,
        [5, 6, 7, 8]
    );
    assert_eq!(
        latest_seqs(&backend, &js, &["events.>"], 7).await,
        [4, 5, 6]
    );
    let below = latest_of(&backend, &js, &two, 9).await;
    assert_eq!(below[0], (5, "events.c.z".to_owned(), "m5".to_owned()));
    assert_eq!(below[1], (8, "events.a.x".to_owned(), "m8".to_owned()));
    assert_eq!(below.len(), 2);
    assert_eq!(latest_seqs(&backend, &js, &["events.a.*"], 4).await, [1]);
    assert_eq!(
        latest_seqs(&backend, &js, &["events.*.y"], 2).await,
        [0u64; 0]
    );
    assert_eq!(
        latest_seqs(&backend, &js, &["events.a.x"], 1).await,
        [0u64; 0]
    );
    assert_eq!(
        latest_seqs(&backend, &js, &["events.none"], 13).await,
        [0u64; 0]
    );
    assert_eq!(consumer_count(&js, "EVENTS").await, 0);
}

#[tokio::test]
async fn latest_reads_give_each_subjects_last_message_below_the_bound() {
    let server = start_server().await;
    check_latest_reads(&server).await;
}

/// Debian's 2.9 takes one filter per consumer: latest reads of several filters get the last
/// messages of a wider one, restricted in-process.
#[tokio::test]
async fn latest_reads_on_an_old_server_filter_in_process() {
    let server = start_old_server().await;
    check_latest_reads(&server).await;
}

#[tokio::test]
async fn a_latest_read_of_a_missing_stream_subject_or_a_bad_filter_is_an_api_error() {
    let server = start_server().await;
    let (_js, backend) = latest_scene(&server).await;
    for filters in [["elsewhere.x".to_owned()], ["events..x".to_owned()]] {
        match backend.read_latest(&filters, 13).await {
            Err(BackendError::Api(ApiError { status: 400, .. })) => {}
            Err(other) => panic!("unexpected {other:?}"),
            Ok(_) => panic!("read {filters:?}"),
        }
    }
}

/// Publishes `rounds` rounds of one message on each of `events.k.<i>` for `i` in
/// `0..subjects`, pipelined: message `round * subjects + i + 1` is on `events.k.<i>`.
async fn publish_rounds(js: &jetstream::Context, subjects: u64, rounds: u64) {
    for round in 0..rounds {
        let mut acks = Vec::new();
        for i in 0..subjects {
            let payload = Bytes::from(format!("r{round}"));
            acks.push(js.publish(format!("events.k.{i}"), payload).await.unwrap());
        }
        for ack in acks {
            ack.await.expect("stored");
        }
    }
}

/// More subjects than one pull brings, and a bound in the middle of the last round: the
/// subjects updated at or above it are found again, below it.
#[tokio::test]
async fn a_latest_read_of_many_subjects_finds_those_updated_above_the_bound() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    publish_rounds(&js, 700, 3).await;
    let backend = connect(&server, "EVENTS").await;
    let started = Instant::now();
    let read = latest_of(&backend, &js, &["events.k.*"], 1800).await;
    eprintln!(
        "latest read of 700 subjects, 301 found again: {:?}",
        started.elapsed()
    );
    let seqs: Vec<u64> = read.iter().map(|m| m.0).collect();
    // Subjects 0..399 were last updated at 1401..1799 (round 2); the others' latest below
    // 1800 is in round 1, at 1100..1400.
    assert_eq!(seqs, (1100..1800).collect::<Vec<u64>>());
    assert!(read[..301].iter().all(|m| m.2 == "r1"), "{:?}", &read[..3]);
    assert!(read[301..].iter().all(|m| m.2 == "r2"));
    assert_eq!(read[0].1, "events.k.399");
    // To the end of the stream.
    let all = latest_seqs(&backend, &js, &["events.>"], 2101).await;
    assert_eq!(all, (1401..=2100).collect::<Vec<u64>>());
}

/// Subjects updated above the bound whose previous messages lie far below it, out of the
/// window read there: they are looked for one by one.
async fn check_latest_far_below(server: &NatsServer) {
    let js = operator(server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(server, "EVENTS").await;
    // rare.a at 1, 2, 3; rare.b at 4 and 500; rare.c at 5; the rest on events.busy.
    for subject in ["events.rare.a"; 3] {
        publish(&backend, subject, "early").await;
    }
    publish(&backend, "events.rare.b", "early").await;
    publish(&backend, "events.rare.c", "early").await;
    let mut acks = Vec::new();
    for seq in 6..=1200u64 {
        let subject = if seq == 500 {
            "events.rare.b"
        } else {
            "events.busy"
        };
        acks.push(
            js.publish(subject, Bytes::from(format!("m{seq}")))
                .await
                .unwrap(),
        );
    }
    for ack in acks {
        ack.await.expect("stored");
    }
    // At and above the bound (1201): rare.a, rare.b and rare.new, which has nothing below.
    for subject in ["events.rare.a", "events.rare.b", "events.rare.new"] {
        publish(&backend, subject, "late").await;
    }
    let read = latest_of(&backend, &js, &["events.rare.*"], 1201).await;
    let got: Vec<(u64, &str, &str)> = read
        .iter()
        .map(|(seq, subject, payload)| (*seq, subject.as_str(), payload.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "events.rare.a", "early"),
            (5, "events.rare.c", "early"),
            (500, "events.rare.b", "m500"),
        ]
    );
    let all = latest_seqs(&backend, &js, &["events.>"], 1201).await;
    assert_eq!(all, [3, 5, 500, 1200]);
    let two = ["events.rare.a", "events.busy"];
    assert_eq!(latest_seqs(&backend, &js, &two, 1201).await, [3, 1200]);
}

#[tokio::test]
async fn a_latest_read_looks_for_subjects_far_below_the_bound() {
    let server = start_server().await;
    check_latest_far_below(&server).await;
}

#[tokio::test]
async fn a_latest_read_looks_for_subjects_far_below_the_bound_on_an_old_server() {
    let server = start_old_server().await;
    check_latest_far_below(&server).await;
}

#[tokio::test]
async fn dropping_a_latest_read_deletes_its_consumers() {
    let server = start_server().await;
    let js = operator(&server).await;
    create_stream(&js, events_stream()).await;
    publish_rounds(&js, 700, 2).await;
    let backend = connect(&server, "EVENTS").await;
    let mut feed = backend
        .read_latest(&["events.>".to_owned()], 1401)
        .await
        .unwrap();
    let first = take(&mut feed, 3).await;
    assert_eq!(
        first.iter().map(|m| m.0).collect::<Vec<_>>(),
        [701, 702, 703]
    );
    assert_eq!(
        consumer_count(&js, "EVENTS").await,
        1,
        "the delivering consumer"
    );
    drop(feed);
    eventually_async("the latest read's consumers are deleted", async || {
        consumer_count(&js, "EVENTS").await == 0
    })
    .await;
}

/// `recent_start` of `filters` for `recent` up to `upto`; fails unless the stream's consumers
/// are then all gone.
async fn recent(
    backend: &JetStreamBackend,
    js: &jetstream::Context,
    filters: &[&str],
    recent: Recent,
    upto: u64,
) -> u64 {
    let filters: Vec<String> = filters.iter().map(|f| (*f).to_owned()).collect();
    let start = backend
        .recent_start(&filters, recent, upto)
        .await
        .unwrap_or_else(|err| panic!("recent_start {filters:?} {recent:?}: {err}"));
    eventually_async("the probing consumers are deleted", async || {
        consumer_count(js, "EVENTS").await == 0
    })
    .await;
    start
}

/// What both server versions must answer for the last messages of [`publish_sparse`]'s
/// stream: `events.user.7` at 7, 27, …, 107 and `events.user.101` at 1, 14, 40, 53, 66, 79,
/// 92, 105, 118.
async fn check_recent_last(server: &NatsServer) {
    let js = operator(server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(server, "EVENTS").await;
    publish_sparse(&backend).await;
    let user7 = ["events.user.7"];
    for (n, start) in [(0, 121), (1, 107), (3, 67), (6, 7), (7, 7), (1000, 7)] {
        assert_eq!(
            recent(&backend, &js, &user7, Recent::Last(n), 120).await,
            start,
            "Last({n})"
        );
    }
    // Below the end: later messages do not count.
    assert_eq!(recent(&backend, &js, &user7, Recent::Last(2), 80).await, 47);
    assert_eq!(recent(&backend, &js, &user7, Recent::Last(1), 67).await, 67);
    assert_eq!(recent(&backend, &js, &user7, Recent::Last(1), 6).await, 7);
    assert_eq!(
        recent(&backend, &js, &["events.nobody"], Recent::Last(5), 120).await,
        121
    );
    for recent in [Recent::Last(1), Recent::Since(jiff::Timestamp::UNIX_EPOCH)] {
        match backend
            .recent_start(&["other.x".to_owned()], recent, 120)
            .await
        {
            Err(BackendError::Api(ApiError { status: 400, .. })) => {}
            other => panic!("a filter outside the stream: {other:?}"),
        }
    }
    // Two filters: 1 7 14 27 40 47 53 66 67 79 87 92 105 107 118.
    let two = ["events.user.7", "events.user.101"];
    for (n, start) in [(1, 118), (3, 105), (5, 87), (15, 1), (16, 1)] {
        assert_eq!(
            recent(&backend, &js, &two, Recent::Last(n), 120).await,
            start,
            "Last({n})"
        );
    }
    assert_eq!(recent(&backend, &js, &two, Recent::Last(2), 100).await, 87);
    let users = ["events.user.*"];
    assert_eq!(
        recent(&backend, &js, &users, Recent::Last(5), 120).await,
        116
    );
    assert_eq!(
        recent(&backend, &js, &users, Recent::Last(120), 120).await,
        1
    );
    // Overlapping filters, counted through a subset and then read.
    let overlapping = ["events.user.*", "events.*.7"];
    publish(&backend, "events.other.7", "m").await;
    publish(&backend, "events.other.8", "m").await;
    for (n, start) in [(1, 121), (3, 119), (122, 1)] {
        let got = recent(&backend, &js, &overlapping, Recent::Last(n), 122).await;
        assert_eq!(got, start, "Last({n})");
    }
    assert_eq!(
        recent(&backend, &js, &overlapping, Recent::Last(2), 110).await,
        109
    );
}

#[tokio::test]
async fn recent_start_finds_the_first_of_the_last_messages() {
    let server = start_server().await;
    check_recent_last(&server).await;
}

#[tokio::test]
async fn recent_start_finds_the_first_of_the_last_messages_on_an_old_server() {
    let server = start_old_server().await;
    check_recent_last(&server).await;
}

/// What both server versions must answer for messages stored since a time.
async fn check_recent_since(server: &NatsServer) {
    let js = operator(server).await;
    create_stream(&js, events_stream()).await;
    let backend = connect(server, "EVENTS").await;
    let before = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
    for subject in ["events.a", "events.b", "events.a"] {
        publish(&backend, subject, "early").await;
    }
    // Stored before it, so earlier; the late ones only once the clock has passed it.
    let at = std::time::SystemTime::now();
    let middle = jiff::Timestamp::try_from(at).expect("a time jiff holds");
    sluice_test_support::wall_clock_passes(at).await;
    // 4, 5, 6, 7
    for subject in ["events.c", "events.b", "events.a", "events.b"] {
        publish(&backend, subject, "late").await;
    }
    let after = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    let since = |time| Recent::Since(time);
    assert_eq!(
        recent(&backend, &js, &["events.>"], since(before), 7).await,
        1
    );
    assert_eq!(
        recent(&backend, &js, &["events.b"], since(before), 7).await,
        2
    );
    assert_eq!(
        recent(&backend, &js, &["events.>"], since(middle), 7).await,
        4
    );
    assert_eq!(
        recent(&backend, &js, &["events.a"], since(middle), 7).await,
        6
    );
    let two = ["events.a", "events.b"];
    assert_eq!(recent(&backend, &js, &two, since(middle), 7).await, 5);
    assert_eq!(recent(&backend, &js, &two, since(before), 7).await, 1);
    assert_eq!(
        recent(&backend, &js, &["events.>"], since(after), 7).await,
        8
    );
    assert_eq!(
        recent(&backend, &js, &["events.x"], since(before), 7).await,
        8
    );
    // Later messages do not count.
    assert_eq!(
        recent(&backend, &js, &["events.a"], since(middle), 5).await,
        6
    );
    assert_eq!(
        recent(&backend, &js, &["events.>"], since(middle), 3).await,
        4
    );
}

#[tokio::test]
async fn recent_start_since_a_time() {
    let server = start_server().await;
    check_recent_since(&server).await;
}

#[tokio::test]
async fn recent_start_since_a_time_on_an_old_server() {
    let server = start_old_server().await;
    check_recent_since(&server).await;
}
