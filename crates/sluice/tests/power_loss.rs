//! The real `sluice serve` on a data directory in a power-loss file system
//! ([`sluice_test_support::lossfs`]): what was not made durable — file data not fsynced,
//! directory entries whose directory was not fsynced — is dropped, torn or kept out of order at
//! a simulated power loss (SIGKILL first, then the loss). With the default `sync = "always"`,
//! every acknowledged message is there after each loss and restart, intact, under the id it was
//! acknowledged with, and no id is handed out twice — from a data directory created seconds
//! before the first loss too. A failed fsync is never acknowledged and stops the stream's
//! writes until a restart. Needs root and `/dev/fuse`; skipped with a message otherwise.
//!
//! `power_losses_side_by_side` (ignored; `scripts/power-loss-soak` runs it) runs the same
//! harness for longer against each sync policy and against nats-server's file store, and prints
//! the figures docs/OPERATIONS.md shows.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sluice_test_support::lossfs::{FaultOp, Loss, LossFs};
use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{
    HttpResponse, NatsOptions, NatsServer, SluiceProcess, SseClient, http, wall_clock_passes,
};
use tokio::sync::{Mutex, watch};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Publishers running at once while the power goes.
const PUBLISHERS: usize = 4;
/// Publishes acknowledged in a round before the power goes (more are in flight then).
const ACKED_PER_ROUND: usize = 60;
/// How long a log line may take to appear.
const WAIT: Duration = Duration::from_secs(10);

/// Every acknowledged publish, shared by the publishers.
type Acked = Arc<Mutex<Ledger>>;

/// Every acknowledged publish in the order acknowledged, with its id (a sluice event id, or a
/// JetStream sequence), and which of them were found lost after a loss. A system that hands
/// an id out again does not hide the first message under it: each acknowledgement is checked
/// after every loss until it is found lost, and counted once.
#[derive(Debug, Default)]
struct Ledger {
    /// (id, payload) per acknowledgement.
    acks: Vec<(String, String)>,
    /// The payload last acknowledged under each id.
    by_id: BTreeMap<String, String>,
    /// Indexes into `acks` found lost or changed after some loss.
    lost: std::collections::BTreeSet<usize>,
}

impl Ledger {
    /// Records an acknowledgement; the payload acknowledged under the same id before, if any.
    fn insert(&mut self, id: String, text: String) -> Option<String> {
        self.acks.push((id.clone(), text.clone()));
        self.by_id.insert(id, text)
    }

    /// How many publishes were acknowledged.
    fn len(&self) -> usize {
        self.acks.len()
    }

    /// The ids acknowledged.
    fn ids(&self) -> impl Iterator<Item = &String> {
        self.by_id.keys()
    }
}

/// What a system lost over its rounds of power losses.
#[derive(Debug, Default)]
struct Figures {
    rounds: usize,
    /// Publishes acknowledged.
    acked: usize,
    /// Acknowledged messages found missing or changed after some loss, each counted once (the
    /// first few named in `seen`).
    lost: usize,
    /// Ids acknowledged twice, for two different messages.
    reused: usize,
    /// The first problems found, for the failure message.
    seen: Vec<String>,
}

impl Figures {
    fn note(&mut self, problem: String) {
        if self.seen.len() < 10 {
            self.seen.push(problem);
        }
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} power losses, {} acknowledged, {} lost or changed, {} ids reused {:?}",
            self.rounds, self.acked, self.lost, self.reused, self.seen
        )
    }
}

/// The loss of round `round`: every kind in turn, with seeds from the round.
fn loss_of_round(round: usize) -> Loss {
    let seed = round as u64 + 1;
    match round % 5 {
        0 => Loss::DropAll,
        1 => Loss::Torn {
            boundary: 512,
            seed,
        },
        2 => Loss::Reorder {
            boundary: 4096,
            seed,
        },
        3 => Loss::Torn {
            boundary: 4096,
            seed,
        },
        _ => Loss::Reorder {
            boundary: 512,
            seed,
        },
    }
}

/// Publishes from [`PUBLISHERS`] tasks with `publish` until [`ACKED_PER_ROUND`] more are
/// acknowledged, then runs `crash` with publishes still in flight, and waits for the tasks.
/// `publish` is given a text to publish and answers the messages acknowledged, as (id, payload):
/// one, or several for a batch.
async fn publish_until_crash<P, F>(
    round: usize,
    acked: &Acked,
    figures: &mut Figures,
    publish: P,
    crash: impl FnOnce(),
) where
    P: Fn(String) -> F + Clone + Send + 'static,
    F: Future<Output = Option<Vec<(String, String)>>> + Send,
{
    let target = acked.lock().await.len() + ACKED_PER_ROUND;
    let (enough_tx, mut enough) = watch::channel(false);
    let reused = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for publisher in 0..PUBLISHERS {
        let (acked, publish, enough_tx, reused) = (
            acked.clone(),
            publish.clone(),
            enough_tx.clone(),
            reused.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let text = format!("round-{round}-publisher-{publisher}-n-{n}");
                let Some(messages) = publish(text).await else {
                    return;
                };
                let mut acked = acked.lock().await;
                for (id, text) in messages {
                    if let Some(earlier) = acked.insert(id.clone(), text) {
                        reused
                            .lock()
                            .await
                            .push(format!("id {id} acknowledged for {earlier:?} and again"));
                    }
                }
                if acked.len() >= target {
                    enough_tx.send_replace(true);
                }
            }
        }));
    }
    // A publisher that stops early (refused) still ends the wait.
    drop(enough_tx);
    let _ = enough.wait_for(|enough| *enough).await;
    crash();
    for task in tasks {
        task.await.unwrap();
    }
    for problem in reused.lock().await.drain(..) {
        figures.reused += 1;
        figures.note(problem);
    }
}

/// Compares what the system holds now with every acknowledgement not found lost before.
async fn compare(acked: &Acked, held: &BTreeMap<String, String>, figures: &mut Figures) {
    let mut ledger = acked.lock().await;
    let Ledger { acks, lost, .. } = &mut *ledger;
    figures.acked = acks.len();
    for (at, (id, text)) in acks.iter().enumerate() {
        if !lost.contains(&at) && held.get(id) != Some(text) {
            lost.insert(at);
            figures.note(format!(
                "{id}: acknowledged {text:?}, found {:?}",
                held.get(id)
            ));
        }
    }
    figures.lost = lost.len();
}

// --- sluice ---

async fn sluice_publish(url: String, text: String) -> Option<String> {
    let body = json!({ "topic": "power.t", "payload": text });
    let answer = http::post_json(&url, &body).await.ok()?;
    (answer.status == 200).then(|| answer.json().unwrap()["id"].as_str().unwrap().to_owned())
}

/// Starts the hub on `fs/data` with `embedded.sync = sync` (the default is `always`).
async fn start_sluice(fs: &LossFs, sync: &str) -> SluiceProcess {
    start_sluice_with(fs, &[("SLUICE_EMBEDDED_SYNC", sync)]).await
}

/// Starts the hub on `fs/data` with these environment variables set.
async fn start_sluice_with(fs: &LossFs, env: &[(&str, &str)]) -> SluiceProcess {
    let data = fs.path().join("data");
    let args = ["serve".as_ref(), "--data-dir".as_ref(), data.as_os_str()];
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    SluiceProcess::start_configured(BIN, args, move |command| {
        command.envs(env.iter().map(|(name, value)| (name, value)));
    })
    .await
    .unwrap()
}

/// Every message of the stream from its start, read up to a sentinel published now (which is
/// acknowledged too), in order and each id once.
async fn sluice_holds(
    hub: &SluiceProcess,
    acked: &Acked,
    round: usize,
) -> BTreeMap<String, String> {
    let sentinel = format!("sentinel-{round}");
    let sentinel_id = sluice_publish(hub.url("/publish"), sentinel.clone())
        .await
        .expect("the hub takes a publish after the restart");
    let mut client = SseClient::connect(&hub.url("/events?topic=power.t&last-id=0"))
        .await
        .unwrap();
    let mut held = BTreeMap::new();
    let mut last_seq = 0;
    loop {
        let event = client.next_event().await.unwrap();
        if event.event_type() != "message" {
            continue;
        }
        let id = event.id.clone().unwrap();
        let seq: u64 = id.split_once('-').unwrap().0.parse().unwrap();
        assert!(seq > last_seq, "ids out of order: {seq} after {last_seq}");
        last_seq = seq;
        let data: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
        let payload = data["payload"].as_str().unwrap().to_owned();
        assert!(
            held.insert(id.clone(), payload.clone()).is_none(),
            "id {id} delivered twice"
        );
        if payload == sentinel {
            break;
        }
    }
    acked.lock().await.insert(sentinel_id, sentinel);
    held
}

/// `rounds` power losses of a hub with `embedded.sync = sync`, publishers running. With
/// `aged`, everything the hub wrote while it started is made durable first (a data directory
/// that has run for a while); without, the first loss comes seconds after it was created.
async fn sluice_power_losses(
    fs: &LossFs,
    sync: &'static str,
    aged: bool,
    rounds: usize,
) -> Figures {
    let mut hub = start_sluice(fs, sync).await;
    if aged {
        fs.settle();
    }
    let figures = sluice_rounds(fs, &mut hub, rounds, Load::Single, async |_| {}).await;
    hub.kill().unwrap();
    figures
}

/// What the publishers of a round send, and what runs beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Single publishes.
    Single,
    /// Batches of three large messages, while another topic is published and purged over and
    /// over ([`purge_until_gone`]).
    BatchesAndPurges,
}

/// Publishes `text` as `load` says; the messages acknowledged.
async fn sluice_publish_as(load: Load, url: String, text: String) -> Option<Vec<(String, String)>> {
    match load {
        Load::Single => Some(vec![(sluice_publish(url, text.clone()).await?, text)]),
        Load::BatchesAndPurges => sluice_publish_batch(url, text).await,
    }
}

/// `rounds` power losses of the running `hub`: publishers send `load` until
/// [`ACKED_PER_ROUND`] more are acknowledged, then SIGKILL with publishes in flight, a loss of
/// the round's kind, a restart, and every acknowledged message checked; `after_each` runs once
/// each round is checked.
async fn sluice_rounds(
    fs: &LossFs,
    hub: &mut SluiceProcess,
    rounds: usize,
    load: Load,
    after_each: impl AsyncFn(&SluiceProcess),
) -> Figures {
    let acked: Acked = Arc::default();
    let mut figures = Figures::default();
    for round in 0..rounds {
        let url = hub.url("/publish");
        let publish = move |text| sluice_publish_as(load, url.clone(), text);
        let purger = (load == Load::BatchesAndPurges)
            .then(|| tokio::spawn(purge_until_gone(hub.base_url())));
        let crash = || {
            hub.kill().unwrap();
        };
        publish_until_crash(round, &acked, &mut figures, publish, crash).await;
        if let Some(purger) = purger {
            purger.await.unwrap();
        }
        fs.power_loss(loss_of_round(round));
        hub.restart().await.unwrap();
        let held = sluice_holds(hub, &acked, round).await;
        compare(&acked, &held, &mut figures).await;
        figures.rounds += 1;
        after_each(hub).await;
    }
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_power_losses_from_a_fresh_data_directory() {
    let test = "acknowledged_messages_survive_power_losses_from_a_fresh_data_directory";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    // The first loss comes seconds after the data directory was created: its directories'
    // names are durable only if their parents were fsynced.
    let figures = sluice_power_losses(&fs, "always", false, 5).await;
    assert_eq!((figures.lost, figures.reused), (0, 0), "{figures}");
    assert!(figures.acked >= 5 * ACKED_PER_ROUND, "{figures}");
}

/// Publishes `text` as a batch of three large messages (one write, one fsync); the
/// acknowledged ones.
async fn sluice_publish_batch(url: String, text: String) -> Option<Vec<(String, String)>> {
    let texts: Vec<String> = (0..3)
        .map(|item| format!("{text}-item-{item}-{}", "p".repeat(60_000)))
        .collect();
    let body: Vec<Value> = texts
        .iter()
        .map(|text| json!({ "topic": "power.t", "payload": text }))
        .collect();
    let answer = http::post_json(&url, &Value::Array(body)).await.ok()?;
    if answer.status != 200 {
        return None;
    }
    let answers = answer.json().ok()?;
    let acked = texts
        .into_iter()
        .zip(answers.as_array()?)
        .filter_map(|(text, answer)| Some((answer["id"].as_str()?.to_owned(), text)))
        .collect();
    Some(acked)
}

/// Publishes to another topic and purges it, over and over, until the hub is gone: purge
/// records and the blocks' removals going on when the power goes.
async fn purge_until_gone(hub_url: String) {
    let purge = format!("{hub_url}/admin/streams/sluice/purge");
    let publish = format!("{hub_url}/publish");
    loop {
        let body = json!({ "topic": "power.other", "payload": "x".repeat(10_000) });
        if http::post_json(&publish, &body).await.is_err() {
            return;
        }
        match http::post_json(&purge, &json!({ "subject": "power.other" })).await {
            Ok(answer) => assert_eq!(answer.status, 200, "{}", answer.text()),
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_batches_survive_power_losses_across_block_rollovers_and_purges() {
    let test = "acknowledged_batches_survive_power_losses_across_block_rollovers_and_purges";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let data = fs.path().join("data");
    let mut hub = start_sluice_with(&fs, &[("SLUICE_ADMIN_LOOPBACK", "true")]).await;
    // 60 × 60 KB a round: a block (8 MiB) fills every other round or so.
    let figures = sluice_rounds(&fs, &mut hub, 4, Load::BatchesAndPurges, async |_| {}).await;
    hub.kill().unwrap();
    assert_eq!((figures.lost, figures.reused), (0, 0), "{figures}");
    let blocks = std::fs::read_dir(data.join("streams/sluice/msgs"))
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().extension() == Some("blk".as_ref()))
        .count();
    assert!(
        blocks >= 2,
        "the blocks rolled over: {blocks} block file(s)"
    );
}

/// A served stream with a schedule, a stream sourcing it, and snapshots every 20 ms: the
/// power goes in the middle of index.db, lease, sched.db and sources.db rewrites too.
const SNAPSHOTTING: &str = r#"
[embedded]
stream = "sluice"
snapshot_interval = "20ms"

[[embedded.streams]]
name = "sluice"
subjects = ["power.>"]
allow_msg_schedules = true

[[embedded.streams]]
name = "copy"
subjects = []

[[embedded.streams.sources]]
name = "sluice"
"#;

/// Waits until the stream `copy` holds every message of `sluice` once: its sourcing position
/// (`sources.db`, or what recovery rebuilt) neither skipped nor repeated any across the loss.
async fn copies_each_message_once(hub: &SluiceProcess) {
    let info = async |name: &str| -> Value {
        let answer = http::get(&hub.url(&format!("/admin/streams/{name}")))
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
        answer.json().unwrap()
    };
    let mut last = (Value::Null, Value::Null);
    sluice_test_support::eventually_async("the copy holds each message once", async || {
        let (origin, copy) = (info("sluice").await, info("copy").await);
        let source = &copy["sources"][0];
        // The schedule message itself is read by no reader, a source included.
        let schedules = origin["subjects"]["power.schedule"].as_u64().unwrap_or(0);
        let done = copy["messages"].as_u64().unwrap() + source["dropped"].as_u64().unwrap()
            == origin["messages"].as_u64().unwrap() - schedules
            && source["last_origin_seq"] == origin["last_seq"];
        last = (origin, copy);
        done
    })
    .await;
    let copy = &last.1;
    assert_eq!(copy["sources"][0]["duplicates"], 0, "{copy}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_power_losses_amid_snapshots_sources_and_schedules() {
    let test = "acknowledged_messages_survive_power_losses_amid_snapshots_sources_and_schedules";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let config_dir = sluice_test_support::tempfile::tempdir().unwrap();
    let config = config_dir.path().join("sluice.toml");
    std::fs::write(&config, SNAPSHOTTING).unwrap();
    let data = fs.path().join("data");
    let config = config.to_str().unwrap();
    let mut hub = start_sluice_with(
        &fs,
        &[("SLUICE_CONFIG", config), ("SLUICE_ADMIN_LOOPBACK", "true")],
    )
    .await;
    let schedule = json!({
        "topic": "power.schedule",
        "payload": "tick",
        "headers": {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "power.tick"},
    });
    let answer = http::post_json(&hub.url("/publish"), &schedule)
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    // The snapshots follow the setting, not the 30 s default.
    let index = data.join("streams/sluice/msgs/index.db");
    sluice_test_support::eventually("index.db written within the snapshot interval", || {
        index.exists()
    })
    .await;
    let figures = sluice_rounds(&fs, &mut hub, 5, Load::Single, copies_each_message_once).await;
    // The schedule survived the losses in force: it still fires.
    let mut ticks = SseClient::connect(&hub.url("/events?topic=power.tick"))
        .await
        .unwrap();
    while ticks.next_event().await.unwrap().event_type() != "message" {}
    for sidecar in ["sluice/msgs/sched.db", "copy/sources.db"] {
        let path = data.join("streams").join(sidecar);
        assert!(
            path.exists(),
            "{} is written (and rewritten)",
            path.display()
        );
    }
    hub.kill().unwrap();
    assert_eq!((figures.lost, figures.reused), (0, 0), "{figures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_interval_policy_a_power_loss_takes_at_most_that_intervals_worth() {
    let test = "under_an_interval_policy_a_power_loss_takes_at_most_that_intervals_worth";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let mut hub = start_sluice(&fs, "1s").await;
    fs.settle();
    let url = hub.url("/publish");
    let acked: Acked = Arc::default();
    for n in 0..10 {
        let text = format!("older-than-the-interval-{n}");
        let id = sluice_publish(url.clone(), text.clone()).await.unwrap();
        acked.lock().await.insert(id, text);
    }
    // Twice the interval: the writer's next fsync is at most one interval away, with no
    // publish to trigger it.
    wall_clock_passes(std::time::SystemTime::now() + Duration::from_secs(2)).await;
    for n in 0..10 {
        sluice_publish(url.clone(), format!("within-the-interval-{n}"))
            .await
            .unwrap();
    }
    hub.kill().unwrap();
    fs.power_loss(Loss::DropAll);
    hub.restart().await.unwrap();
    let held = sluice_holds(&hub, &acked, 0).await;
    let mut figures = Figures::default();
    compare(&acked, &held, &mut figures).await;
    assert_eq!(figures.lost, 0, "{figures}");
    hub.kill().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_never_handed_out_twice_after_power_losses_whatever_the_sync_policy() {
    let test = "ids_are_never_handed_out_twice_after_power_losses_whatever_the_sync_policy";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let figures = sluice_power_losses(&fs, "never", false, 3).await;
    assert_eq!(figures.reused, 0, "{figures}");
}

fn description(answer: &HttpResponse) -> String {
    answer.json().unwrap()["description"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_is_not_acknowledged_and_stops_writes_until_a_restart() {
    let test = "a_failed_fsync_is_not_acknowledged_and_stops_writes_until_a_restart";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let mut hub = start_sluice(&fs, "always").await;
    let url = hub.url("/publish");
    let acked: Acked = Arc::default();
    for n in 0..5 {
        let text = format!("before-{n}");
        let id = sluice_publish(url.clone(), text.clone()).await.unwrap();
        acked.lock().await.insert(id, text);
    }
    let mut client = SseClient::connect(&hub.url("/events?topic=power.t&last-id=0"))
        .await
        .unwrap();

    fs.fail(FaultOp::Fsync, ".blk", 1);
    let body = |text: &str| json!({ "topic": "power.t", "payload": text });
    let failed = http::post_json(&url, &body("refused-by-the-fsync"))
        .await
        .unwrap();
    assert_eq!(failed.status, 507, "{}", failed.text());
    let why = description(&failed);
    assert!(
        why.contains("syncing") && why.contains("Input/output error"),
        "{why}"
    );
    let refused = http::post_json(&url, &body("refused-after-the-fsync"))
        .await
        .unwrap();
    assert_eq!(refused.status, 507, "{}", refused.text());
    assert!(
        description(&refused).contains("accepts no writes since syncing"),
        "{}",
        refused.text()
    );
    let ready = http::get(&hub.url("/readyz")).await.unwrap();
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json().unwrap()["cause"], "storage");
    hub.wait_for_log(
        "an fsync failed: the stream accepts no writes until sluice restarts",
        WAIT,
    )
    .await
    .unwrap();
    // Reads go on: the subscriber gets what was acknowledged, and nothing else.
    let mut delivered = Vec::new();
    while delivered.len() < 5 {
        let event = client.next_event().await.unwrap();
        if event.event_type() == "message" {
            let data: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
            delivered.push(data["payload"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(
        delivered,
        ["before-0", "before-1", "before-2", "before-3", "before-4"]
    );

    hub.kill().unwrap();
    fs.power_loss(Loss::DropAll);
    hub.restart().await.unwrap();
    let ready = http::get(&hub.url("/readyz")).await.unwrap();
    assert_eq!(ready.status, 200, "{}", ready.text());
    let held = sluice_holds(&hub, &acked, 0).await;
    let refused: Vec<_> = held
        .values()
        .filter(|text| text.starts_with("refused-"))
        .collect();
    assert!(refused.is_empty(), "refused publishes stored: {refused:?}");
    let mut figures = Figures::default();
    compare(&acked, &held, &mut figures).await;
    assert_eq!(figures.lost, 0, "{figures}");
    hub.kill().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_or_rename_is_refused_or_retried_and_loses_nothing() {
    let test = "a_failed_write_or_rename_is_refused_or_retried_and_loses_nothing";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let data = fs.path().join("data");
    let mut hub = start_sluice_with(&fs, &[("SLUICE_EMBEDDED_SNAPSHOT_INTERVAL", "50ms")]).await;
    let url = hub.url("/publish");
    let acked: Acked = Arc::default();
    let body = |text: &str| json!({ "topic": "power.t", "payload": text });
    for n in 0..3 {
        let text = format!("before-{n}");
        let id = sluice_publish(url.clone(), text.clone()).await.unwrap();
        acked.lock().await.insert(id, text);
    }
    // A write the disk fails is refused and undone; the next one goes through (transient).
    fs.fail(FaultOp::Write, ".blk", 1);
    let refused = http::post_json(&url, &body("refused-by-the-write"))
        .await
        .unwrap();
    assert_eq!(refused.status, 507, "{}", refused.text());
    // A snapshot whose rename fails is logged and written again at the next one.
    fs.fail(FaultOp::Rename, "index.db", 1);
    for n in 0..3 {
        let text = format!("after-{n}");
        let id = sluice_publish(url.clone(), text.clone()).await.unwrap();
        acked.lock().await.insert(id, text);
    }
    hub.wait_for_log("writing index.db or a sidecar failed", WAIT)
        .await
        .unwrap();
    let index = data.join("streams/sluice/msgs/index.db");
    let modified = || std::fs::metadata(&index).and_then(|m| m.modified()).ok();
    let before = modified();
    let text = "after-the-rename".to_owned();
    let id = sluice_publish(url.clone(), text.clone()).await.unwrap();
    acked.lock().await.insert(id, text);
    sluice_test_support::eventually("index.db written again", || modified() > before).await;

    hub.kill().unwrap();
    fs.power_loss(Loss::DropAll);
    hub.restart().await.unwrap();
    let held = sluice_holds(&hub, &acked, 0).await;
    assert!(
        !held.values().any(|text| text.starts_with("refused-")),
        "a refused publish is never stored: {held:?}"
    );
    let mut figures = Figures::default();
    compare(&acked, &held, &mut figures).await;
    assert_eq!(figures.lost, 0, "{figures}");
    hub.kill().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_the_disk_cannot_read_is_told_as_damaged_and_the_hub_serves_on() {
    let test = "a_block_the_disk_cannot_read_is_told_as_damaged_and_the_hub_serves_on";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    let mut hub = start_sluice(&fs, "always").await;
    let url = hub.url("/publish");
    // 12 × 900 KB: more than a block (8 MiB), so the first block is sealed.
    let big = |n: usize| format!("{n:02}-{}", "x".repeat(900_000));
    let mut seqs = Vec::new();
    for n in 0..12 {
        let id = sluice_publish(url.clone(), big(n)).await.unwrap();
        seqs.push(id.split_once('-').unwrap().0.parse::<u64>().unwrap());
    }
    // A clean stop leaves an index.db: after the restart the first block is read only when a
    // reader needs it, and the disk fails that read.
    hub.terminate(WAIT).await.unwrap();
    fs.fail(FaultOp::Read, "1.blk", 1_000_000);
    hub.restart().await.unwrap();

    let mut client = SseClient::connect(&hub.url("/events?topic=power.t&last-id=0"))
        .await
        .unwrap();
    let mut damaged = Vec::new();
    let mut delivered = Vec::new();
    while delivered.last() != seqs.last() {
        let event = client.next_event().await.unwrap();
        match event.event_type() {
            "gap" => {
                let gap: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
                assert_eq!(gap["reason"], "damaged", "{gap}");
                damaged.push((gap["from"].as_u64().unwrap(), gap["to"].as_u64().unwrap()));
            }
            "message" => {
                let id = event.id.clone().unwrap();
                delivered.push(id.split_once('-').unwrap().0.parse::<u64>().unwrap());
            }
            _ => {}
        }
    }
    assert_eq!(
        damaged.len(),
        1,
        "one gap for the unreadable block: {damaged:?}"
    );
    let (from, to) = damaged[0];
    assert_eq!(from, seqs[0], "the gap starts at the first message");
    let expected: Vec<u64> = seqs.iter().copied().filter(|seq| *seq > to).collect();
    assert!(
        !expected.is_empty(),
        "the second block's messages follow the gap"
    );
    assert_eq!(
        delivered, expected,
        "every message past the unreadable block, in order"
    );
    hub.wait_for_log("reading a block failed", WAIT)
        .await
        .unwrap();

    // The hub serves on: a new message reaches the subscriber, and the stream is ready.
    let id = sluice_publish(url.clone(), "after".to_owned())
        .await
        .unwrap();
    loop {
        let event = client.next_event().await.unwrap();
        if event.event_type() == "message" {
            assert_eq!(event.id.as_deref(), Some(id.as_str()));
            break;
        }
    }
    let ready = http::get(&hub.url("/readyz")).await.unwrap();
    assert_eq!(ready.status, 200, "{}", ready.text());

    // Not remembered as a loss: once the disk reads again, a restart gives every message.
    fs.heal();
    hub.terminate(WAIT).await.unwrap();
    hub.restart().await.unwrap();
    let mut client = SseClient::connect(&hub.url("/events?topic=power.t&last-id=0"))
        .await
        .unwrap();
    let mut again = Vec::new();
    while again.last().map(String::as_str) != Some(id.as_str()) {
        let event = client.next_event().await.unwrap();
        assert_ne!(event.event_type(), "gap", "{:?}", event.data);
        if event.event_type() == "message" {
            again.push(event.id.clone().unwrap());
        }
    }
    assert_eq!(again.len(), seqs.len() + 1, "{again:?}");
    hub.kill().unwrap();
}

/// The seq of a sluice event id (`<seq>-<incarnation>`).
fn seq_of(id: &str) -> u64 {
    id.split_once('-').unwrap().0.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_saw_an_id_a_power_loss_took_is_told_and_never_served_another_message_under_it()
 {
    let test = "a_client_that_saw_an_id_a_power_loss_took_is_told_and_never_served_another_message_under_it";
    let Some(fs) = LossFs::mount(test) else {
        return;
    };
    // Under "never" the blocks are never fsynced by the hub: the power loss takes what it wrote.
    let mut hub = start_sluice(&fs, "never").await;
    fs.settle();
    let url = hub.url("/publish");
    let mut client = SseClient::connect(&hub.url("/events?topic=power.t&last-id=0"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for n in 0..20 {
        let text = format!("seen-{n}");
        sluice_publish(url.clone(), text.clone()).await.unwrap();
        loop {
            let event = client.next_event().await.unwrap();
            if event.event_type() == "message" {
                seen.push((event.id.clone().unwrap(), event.data.clone().unwrap()));
                break;
            }
        }
    }
    assert!(
        fs.unsynced().bytes > 0,
        "the power loss has something to take"
    );
    hub.kill().unwrap();
    fs.power_loss(Loss::DropAll);
    hub.restart().await.unwrap();

    let new_id = sluice_publish(url.clone(), "after".to_owned())
        .await
        .unwrap();
    let last_seen = seq_of(&seen.last().unwrap().0);
    assert!(
        seq_of(&new_id) > last_seen,
        "{new_id} after {last_seen}: no id twice"
    );
    // Resuming from any id it saw, a client gets the messages still held under the ids it saw
    // unchanged, an `unconfirmed` gap for what the loss took, then the new message.
    for (resume, _) in seen.iter().step_by(7).chain(seen.last()) {
        let mut client = SseClient::connect_with_headers(
            &hub.url("/events?topic=power.t"),
            &[("last-event-id", resume.as_str())],
        )
        .await
        .unwrap();
        let mut unconfirmed = false;
        loop {
            let event = client.next_event().await.unwrap();
            match event.event_type() {
                "gap" => {
                    let gap: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
                    assert_eq!(gap["reason"], "unconfirmed", "{gap}");
                    assert!(gap["from"].as_u64().unwrap() > seq_of(resume), "{gap}");
                    unconfirmed = true;
                }
                "message" => {
                    let id = event.id.clone().unwrap();
                    if id == new_id {
                        break;
                    }
                    let before = seen.iter().find(|(seen_id, _)| *seen_id == id);
                    assert_eq!(
                        before.map(|(_, data)| data),
                        event.data.as_ref(),
                        "{id} is served only with the message first served under it"
                    );
                }
                _ => {}
            }
        }
        assert!(
            unconfirmed,
            "resuming from {resume}: the lost messages after it are told"
        );
    }
    hub.kill().unwrap();
}

// --- nats-server, side by side ---

const NATS_STREAM: &str = "POWER";

async fn jetstream(server: &NatsServer) -> async_nats::jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    async_nats::jetstream::new(client)
}

async fn nats_publish(js: async_nats::jetstream::Context, text: String) -> Option<String> {
    let ack = js.publish("power.t", text.into()).await.ok()?.await.ok()?;
    Some(ack.sequence.to_string())
}

/// `rounds` power losses of nats-server with its store on `fs`: its default sync, or
/// `sync_interval: always`; `aged` as for sluice.
async fn nats_power_losses(fs: &LossFs, sync_always: bool, aged: bool, rounds: usize) -> Figures {
    let mut options = NatsOptions::default().with_store_in(fs.path().join("nats"));
    if sync_always {
        options = options.with_config("jetstream { sync_interval: always }\n");
    }
    let mut server = NatsServer::start_with(options).await.unwrap();
    let js = jetstream(&server).await;
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: NATS_STREAM.to_owned(),
        subjects: vec!["power.>".to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    if aged {
        fs.settle();
    }
    let acked: Acked = Arc::default();
    let mut figures = Figures::default();
    for round in 0..rounds {
        let js = jetstream(&server).await;
        let publish = move |text: String| {
            let js = js.clone();
            async move { Some(vec![(nats_publish(js, text.clone()).await?, text)]) }
        };
        let crash = || server.kill().unwrap();
        publish_until_crash(round, &acked, &mut figures, publish, crash).await;
        fs.power_loss(loss_of_round(round));
        server.restart().await.unwrap();
        let js = jetstream(&server).await;
        let mut held = BTreeMap::new();
        // A stream lost whole holds nothing: every acknowledged message is counted lost.
        if let Ok(stream) = js.get_stream(NATS_STREAM).await {
            for id in acked.lock().await.ids() {
                let seq: u64 = id.parse().unwrap();
                if let Ok(message) = stream.get_raw_message(seq).await {
                    let text = String::from_utf8_lossy(&message.payload).into_owned();
                    held.insert(id.clone(), text);
                }
            }
        } else {
            js.get_or_create_stream(async_nats::jetstream::stream::Config {
                name: NATS_STREAM.to_owned(),
                subjects: vec!["power.>".to_owned()],
                ..Default::default()
            })
            .await
            .unwrap();
        }
        compare(&acked, &held, &mut figures).await;
        figures.rounds += 1;
    }
    figures
}

/// Rounds per run: the environment variable `name`, or `default`.
fn rounds_from(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "by hand (scripts/power-loss-soak): minutes of power losses, figures printed"]
async fn power_loss_soak() {
    let rounds = rounds_from("SLUICE_POWER_LOSS_SOAK_ROUNDS", 200);
    let Some(fs) = LossFs::mount("power_loss_soak") else {
        return;
    };
    let figures = sluice_power_losses(&fs, "always", false, rounds).await;
    println!("sluice, sync = \"always\", soak: {figures}");
    assert_eq!((figures.lost, figures.reused), (0, 0), "{figures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "by hand (scripts/power-loss-soak): minutes of power losses, figures printed"]
async fn power_losses_side_by_side() {
    let rounds = rounds_from("SLUICE_POWER_LOSS_ROUNDS", 20);
    let mut lines = Vec::new();
    for aged in [true, false] {
        let directory = if aged { "aged" } else { "fresh" };
        for sync in ["always", "1s", "never"] {
            let Some(fs) = LossFs::mount("power_losses_side_by_side") else {
                return;
            };
            let figures = sluice_power_losses(&fs, sync, aged, rounds).await;
            lines.push(format!(
                "sluice, sync = {sync:?}, {directory} directory: {figures}"
            ));
            println!("{}", lines.last().unwrap());
        }
        for (name, always) in [("default sync", false), ("sync_interval: always", true)] {
            let fs = LossFs::mount("power_losses_side_by_side").unwrap();
            let figures = nats_power_losses(&fs, always, aged, rounds).await;
            lines.push(format!(
                "nats-server, {name}, {directory} directory: {figures}"
            ));
            println!("{}", lines.last().unwrap());
        }
    }
    println!("\n{}", lines.join("\n"));
}
