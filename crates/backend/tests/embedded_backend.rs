//! The embedded backend on real store files, below the hub: bounded reads.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sluice_backend::embedded::{EmbeddedBackend, EmbeddedConfig};
use sluice_backend::{Backend, Delivery, LostRange, MessageStream, PublishRequest};
use sluice_protocol::headers::Headers;

/// How long any single expected event may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

async fn open(data_dir: &Path) -> EmbeddedBackend {
    let config = EmbeddedConfig {
        data_dir: data_dir.to_owned(),
        ..EmbeddedConfig::default()
    };
    EmbeddedBackend::open(&config).await.expect("store opens").0
}

async fn publish(backend: &EmbeddedBackend, subject: &str, payload: &str) -> u64 {
    backend
        .publish(PublishRequest {
            subject: subject.to_owned(),
            headers: Headers::new(),
            payload: Bytes::from(payload.to_owned()),
        })
        .await
        .unwrap_or_else(|err| panic!("publish to {subject}: {err}"))
        .seq
}

/// Every delivery of a bounded read until it ends, a message as `Ok(seq)`; fails when it is
/// still open after [`DEADLINE`] without a delivery (it must end by itself).
async fn read_to_end(mut feed: MessageStream) -> Vec<Result<u64, LostRange>> {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(DEADLINE, feed.next()).await {
            Err(_) => panic!("the bounded read did not end after {seen:?}"),
            Ok(None) => return seen,
            Ok(Some(next)) => seen.push(
                match next.unwrap_or_else(|err| panic!("read error after {seen:?}: {err}")) {
                    Delivery::Message(message) => Ok(message.seq),
                    Delivery::Lost(lost) => Err(lost),
                    Delivery::Removed(removed) => panic!("nothing is removed here: {removed:?}"),
                },
            ),
        }
    }
}

async fn bounded(
    backend: &EmbeddedBackend,
    filter: &str,
    start: u64,
    until: u64,
) -> Vec<Result<u64, LostRange>> {
    let feed = backend
        .read_range(&[filter.to_owned()], start, until)
        .await
        .expect("the read opens");
    read_to_end(feed).await
}

/// Publishes 120 messages, one in 20 on `user.7` (seqs 7, 27, …, 107), the rest over other
/// users; each message's payload is `m<seq>` with the seq in five digits, so that no payload is
/// a prefix of another (a damaged-payload search must find exactly one record).
async fn publish_sparse(backend: &EmbeddedBackend) {
    for n in 1..=120u64 {
        let subject = if n % 20 == 7 {
            "user.7".to_owned()
        } else {
            format!("user.{}", 100 + n % 13)
        };
        assert_eq!(publish(backend, &subject, &format!("m{n:05}")).await, n);
    }
}

#[tokio::test]
async fn a_bounded_read_of_a_sparse_topic_gives_what_is_below_the_bound_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(dir.path()).await;
    publish_sparse(&backend).await;
    // Later messages of the topic exist.
    assert_eq!(
        bounded(&backend, "user.7", 1, 80).await,
        [Ok(7), Ok(27), Ok(47), Ok(67)]
    );
    assert_eq!(bounded(&backend, "user.7", 20, 48).await, [Ok(27), Ok(47)]);
    // None exists yet: the read does not wait for the next one.
    assert_eq!(
        bounded(&backend, "user.7", 80, 121).await,
        [Ok(87), Ok(107)]
    );
    backend.shutdown().await;
}

#[tokio::test]
async fn a_bounded_read_with_nothing_to_give_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(dir.path()).await;
    publish_sparse(&backend).await;
    assert_eq!(bounded(&backend, "user.nobody", 1, 121).await, []);
    assert_eq!(bounded(&backend, "user.7", 108, 121).await, []);
    assert_eq!(bounded(&backend, ">", 50, 50).await, []);
    assert_eq!(bounded(&backend, ">", 50, 10).await, []);
    backend.shutdown().await;
}

/// Flips a byte of the one stored payload `payload`, in whichever block file holds it. The
/// payload's bytes must occur exactly once over all block files: a second occurrence (in another
/// record's header bytes, say) would damage a record the test does not expect.
fn damage_payload(data_dir: &Path, payload: &str) {
    let hits: Vec<_> = sluice_test_support::files_under(data_dir)
        .into_iter()
        .filter(|(path, _)| path.extension().is_some_and(|ext| ext == "blk"))
        .flat_map(|(path, bytes)| {
            let offsets: Vec<usize> = bytes
                .windows(payload.len())
                .enumerate()
                .filter(|(_, window)| *window == payload.as_bytes())
                .map(|(at, _)| at)
                .collect();
            offsets.into_iter().map(move |at| {
                let mut damaged = bytes.clone();
                damaged[at] ^= 0x20;
                (path.clone(), damaged)
            })
        })
        .collect();
    assert_eq!(hits.len(), 1, "{payload} is stored once");
    let (path, bytes) = &hits[0];
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn a_bounded_read_is_told_of_a_damaged_record_below_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(dir.path()).await;
    publish_sparse(&backend).await;
    backend.shutdown().await;
    damage_payload(dir.path(), "m00047");
    let backend = open(dir.path()).await;
    let lost = LostRange {
        first: 47,
        last: 47,
        damaged: true,
    };
    assert_eq!(
        bounded(&backend, "user.7", 1, 80).await,
        [Ok(7), Ok(27), Err(lost), Ok(67)]
    );
    // Whatever the topic: a damaged record's subject cannot be read.
    assert_eq!(
        bounded(&backend, "user.101", 40, 60).await,
        [Ok(40), Err(lost), Ok(53)]
    );
    backend.shutdown().await;
}
