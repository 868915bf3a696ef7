//! Message schedules across a kill -9: the data directory a crash leaves holds `msgs/sched.db`
//! from the last snapshot (older than the fires stored after it) or none at all. Reopened, a
//! schedule fires at most once per period — the produced messages' own stored times are at
//! least a period apart, and each names the next one in `Nats-Schedule-Next` — and a one-shot
//! whose fire was stored never fires again.

mod killed;

use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use sluice_store::{FilterSet, Headers, Store, StoreOptions, StoredMessage, StreamConfig};

/// The schedule's period, `@every 1s`, in ns.
const PERIOD_NS: i128 = 1_000_000_000;

fn cfg() -> StreamConfig {
    StreamConfig {
        allow_msg_schedules: true,
        ..StreamConfig::new("S", ["sched.*", "out.*"])
    }
}

fn schedule(pattern: &str, target: &str) -> Headers {
    let mut h = Headers::new();
    h.insert("Nats-Schedule", pattern);
    h.insert("Nats-Schedule-Target", target);
    h
}

type Messages = Pin<Box<dyn Stream<Item = StoredMessage> + Send>>;

/// The messages on `subject` from sequence 1 on.
fn messages(s: &sluice_store::StreamHandle, subject: &str) -> Messages {
    Box::pin(
        s.subscribe(1, FilterSet::new([subject]).unwrap())
            .map(|d| d.unwrap().message().expect("nothing lost")),
    )
}

async fn next(sub: &mut Messages) -> StoredMessage {
    tokio::time::timeout(Duration::from_secs(20), sub.next())
        .await
        .expect("a message within 20 s")
        .expect("the subscription goes on")
}

/// The stamp of `msgs/sched.db`: the sequences it accounts for are below it.
fn sched_db_stamp(stream_dir: &Path) -> u64 {
    let bytes = std::fs::read(stream_dir.join("msgs/sched.db")).unwrap();
    u64::from_le_bytes(bytes[9..17].try_into().unwrap())
}

/// Every two successive fires are stored at least a period apart, and each fire names the next
/// one, a period after its own stored time, in `Nats-Schedule-Next`.
fn assert_a_period_apart(fires: &[StoredMessage]) {
    for pair in fires.windows(2) {
        let gap = pair[1].time.as_nanosecond() - pair[0].time.as_nanosecond();
        assert!(
            gap >= PERIOD_NS,
            "fires {} ({}) and {} ({}) stored {gap} ns apart, less than the period",
            pair[0].seq,
            pair[0].time,
            pair[1].seq,
            pair[1].time,
        );
    }
    for m in fires {
        assert_eq!(m.headers.get("Nats-Scheduler"), Some("sched.a"), "{m:?}");
        let next: jiff::Timestamp = m
            .headers
            .get("Nats-Schedule-Next")
            .expect("a repeating fire names the next")
            .parse()
            .unwrap();
        assert_eq!(
            next.as_nanosecond() - m.time.as_nanosecond(),
            PERIOD_NS,
            "{m:?}"
        );
    }
}

/// An `@every 1s` schedule fires twice; when `snapshot_between` the store writes its snapshots
/// after the first fire. The directory is copied right after the second fire is delivered (what
/// a kill -9 then leaves), `prepare` adjusts the copy, and the copy is reopened (after
/// `down_for` has passed since the second fire): the fires before and after the crash are at
/// least a period apart.
async fn fires_stay_a_period_apart_across_a_crash(
    snapshot_between: bool,
    down_for: Duration,
    prepare: impl FnOnce(&Path, &StoredMessage),
) {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let mut fires = Vec::new();
    {
        let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let s = store.create_stream(cfg()).unwrap();
        let mut sub = messages(&s, "out.a");
        s.publish("sched.a", schedule("@every 1s", "out.a"), "tick")
            .await
            .unwrap();
        fires.push(next(&mut sub).await);
        if snapshot_between {
            s.flush().await.unwrap();
        }
        fires.push(next(&mut sub).await);
        killed::copy_files(dir.path(), copy.path());
        store.close();
    }
    let stream_dir = copy.path().join("streams/S");
    prepare(&stream_dir, &fires[1]);
    let second = std::time::SystemTime::try_from(fires[1].time).unwrap();
    sluice_test_support::wall_clock_passes(second + down_for).await;
    let (store, _) = Store::open(copy.path(), StoreOptions::default()).unwrap();
    let s = store.stream("S").unwrap();
    let mut sub = messages(&s, "out.a");
    let mut after_restart = 0;
    // The fires the crash left, then two more: the first after the restart is the one a stale
    // snapshot fires at once; the second would follow at once if missed runs were made up.
    let mut seen = Vec::new();
    while after_restart < 2 {
        let m = next(&mut sub).await;
        after_restart += u64::from(m.seq > fires[1].seq);
        seen.push(m);
    }
    assert_eq!(
        seen[..2].iter().map(|m| m.seq).collect::<Vec<_>>(),
        fires.iter().map(|m| m.seq).collect::<Vec<_>>()
    );
    assert_a_period_apart(&seen);
    store.close();
}

#[tokio::test]
async fn a_schedules_file_older_than_the_last_fire_does_not_fire_it_again() {
    fires_stay_a_period_apart_across_a_crash(true, Duration::ZERO, |stream_dir, last_fire| {
        let stamp = sched_db_stamp(stream_dir);
        assert!(
            stamp <= last_fire.seq,
            "sched.db (stamp {stamp}) must be older than the last fire ({})",
            last_fire.seq
        );
    })
    .await;
}

fn remove_sched_db(stream_dir: &Path, _: &StoredMessage) {
    match std::fs::remove_file(stream_dir.join("msgs/sched.db")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => other.unwrap(),
    }
}

#[tokio::test]
async fn a_missing_schedules_file_does_not_fire_the_last_fire_again() {
    fires_stay_a_period_apart_across_a_crash(false, Duration::ZERO, remove_sched_db).await;
}

/// Down for more than two periods: the runs missed are not made up, the schedule fires once
/// at start and a period after that.
#[tokio::test]
async fn runs_missed_while_down_fire_once() {
    let down = Duration::from_millis(2_500);
    fires_stay_a_period_apart_across_a_crash(false, down, remove_sched_db).await;
}

/// Offset and length of every record of a block file, in order, with its kind and sequence.
fn records(block: &[u8]) -> Vec<(usize, usize, u8, u64)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 14 <= block.len() {
        let len = 4 + u32::from_le_bytes(block[off..off + 4].try_into().unwrap()) as usize;
        let seq = u64::from_le_bytes(block[off + 6..off + 14].try_into().unwrap());
        out.push((off, len, block[off + 4], seq));
        off += len;
    }
    out
}

#[tokio::test]
async fn a_one_shot_whose_fire_was_stored_never_fires_again() {
    let dir = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    let fired_seq = {
        let (store, _) = Store::open(dir.path(), StoreOptions::default()).unwrap();
        let s = store.create_stream(cfg()).unwrap();
        let mut sub = messages(&s, "out.once");
        let ack = s
            .publish(
                "sched.once",
                schedule(&format!("@at {at}"), "out.once"),
                "boom",
            )
            .await
            .unwrap();
        assert_eq!(ack.seq, 1);
        let fired = next(&mut sub).await;
        assert_eq!(fired.headers.get("Nats-Schedule-Next"), Some("purge"));
        // The fire and the removal of the schedule message are one batch.
        assert!(s.get(1).unwrap().is_none());
        killed::copy_files(dir.path(), copy.path());
        store.close();
        fired.seq
    };
    // The crash cut the batch after the fire: the record removing the schedule message (a
    // purge marker below 2, the message being the first) is gone.
    let msgs = copy.path().join("streams/S/msgs");
    let block_path = msgs.join("1.blk");
    let mut block = std::fs::read(&block_path).unwrap();
    let all = records(&block);
    let &(off, _, kind, seq) = all.last().unwrap();
    assert!(
        matches!((kind, seq), (1, 1) | (2, 2)),
        "the last record (kind {kind}, seq {seq}) removes the schedule message"
    );
    assert!(all.iter().any(|&(_, _, k, s)| k == 0 && s == fired_seq));
    block.truncate(off);
    std::fs::write(&block_path, block).unwrap();
    for sidecar in ["index.db", "sched.db"] {
        match std::fs::remove_file(msgs.join(sidecar)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.unwrap(),
        }
    }

    let (store, _) = Store::open(copy.path(), StoreOptions::default()).unwrap();
    let s = store.stream("S").unwrap();
    // The schedule message is removed as the fire would have; it fires nothing more.
    sluice_test_support::eventually("the spent one-shot removed", || s.get(1).unwrap().is_none())
        .await;
    let info = s.info(Some(&FilterSet::new(["out.once"]).unwrap()));
    assert_eq!(
        info.state.subjects.unwrap().get("out.once"),
        Some(&1),
        "the one-shot fired again"
    );
    assert_eq!(info.state.num_schedules, 0);
    store.close();
}
