//! A message schedule through the real binary, killed (SIGKILL) at random points of its period
//! several times: every produced message is stored at least a period after the one before it
//! (their `time`s, as the stream stored them), across every crash and restart.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{Frame, SluiceProcess, SseClient, http, tempfile, wall_clock_passes};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// The served stream takes schedules.
const CONFIG: &str = r#"
[embedded]
stream = "sluice"

[[embedded.streams]]
name = "sluice"
subjects = [">"]
allow_msg_schedules = true
"#;

/// The schedule's period, `@every 1s`, in ns.
const PERIOD_NS: i128 = 1_000_000_000;
/// How many times the hub is killed.
const KILLS: usize = 6;

/// A random delay within the period, from the process's random hasher keys.
fn random_point_of_the_period() -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    Duration::from_millis(h.finish() % 1000)
}

/// Nanoseconds since the Unix epoch of an RFC 3339 UTC time as the hub writes it
/// (`2026-11-29T19:07:50.123456789Z`, the fraction optional).
fn unix_ns(time: &str) -> i128 {
    fn bad(time: &str) -> ! {
        panic!("not an RFC 3339 UTC time: {time:?}")
    }
    let text = time.strip_suffix('Z').unwrap_or_else(|| bad(time));
    let (date, clock) = text.split_once('T').unwrap_or_else(|| bad(time));
    let num = |s: &str| s.parse::<i128>().unwrap_or_else(|_| bad(time));
    let d: Vec<i128> = date.split('-').map(num).collect();
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let t: Vec<i128> = hms.split(':').map(num).collect();
    let frac_ns = if fraction.is_empty() {
        0
    } else {
        num(&format!("{fraction:0<9}")[..9])
    };
    let [y, m, day] = d[..] else { bad(time) };
    let [hh, mm, ss] = t[..] else { bad(time) };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000_000) + frac_ns
}

async fn serve(root: &std::path::Path) -> SluiceProcess {
    SluiceProcess::serve(BIN, root, Some(CONFIG))
        .await
        .expect("serve starts")
}

/// A subscription to the schedule's target, after the event `last_id` (from the start: `0`).
async fn subscribe(hub: &SluiceProcess, last_id: &str) -> SseClient {
    let mut client =
        SseClient::connect(&hub.url(&format!("/events?topic=ticks&last-id={last_id}")))
            .await
            .unwrap();
    let connected = client.next_event().await.unwrap();
    assert_eq!(connected.event_type(), "connected", "{connected:?}");
    client
}

/// The next produced message (`gap` frames, such as the unconfirmed positions a kill leaves
/// before the sequence lease, are passed over): its id and stored time.
async fn next_fire(client: &mut SseClient) -> (String, String) {
    loop {
        let frame: Frame = client.next_event().await.unwrap();
        if frame.event_type() != "message" {
            continue;
        }
        let data: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        assert_eq!(data["topic"], "ticks", "{data}");
        let time = data["time"].as_str().expect("a stored time").to_owned();
        return (frame.id.clone().expect("an event id"), time);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_schedule_fires_at_most_once_per_period_across_kills() {
    let root = tempfile::tempdir().unwrap();
    let mut hub = serve(root.path()).await;
    let mut client = subscribe(&hub, "0").await;
    let answer = http::post_json(
        &hub.url("/publish"),
        &json!({
            "topic": "jobs.tick",
            "payload": "tick",
            "headers": {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "ticks"},
        }),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let mut kill_points = Vec::new();
    for _ in 0..KILLS {
        // A fire (the first after the start, or after the restart), then a kill at a random
        // point of the period that follows it.
        let last_id = next_fire(&mut client).await.0;
        let point = random_point_of_the_period();
        kill_points.push(point);
        wall_clock_passes(std::time::SystemTime::now() + point).await;
        hub.kill().unwrap();
        drop(client);
        hub = serve(root.path()).await;
        client = subscribe(&hub, &last_id).await;
    }
    // The first fire after the last restart.
    let last_id = next_fire(&mut client).await.0;
    // Every produced message, from the start.
    let mut replay = subscribe(&hub, "0").await;
    let mut fires = Vec::new();
    loop {
        let (id, time) = next_fire(&mut replay).await;
        fires.push((id.clone(), time));
        if id == last_id {
            break;
        }
    }
    assert!(fires.len() > KILLS, "{fires:?}");
    for pair in fires.windows(2) {
        let gap = unix_ns(&pair[1].1) - unix_ns(&pair[0].1);
        assert!(
            gap >= PERIOD_NS,
            "fires {:?} and {:?} stored {gap} ns apart, less than the period \
             (kills {kill_points:?} after a fire; all fires {fires:?})",
            pair[0],
            pair[1],
        );
    }
    hub.terminate(Duration::from_secs(10)).await.unwrap();
}

#[test]
fn unix_ns_reads_the_hubs_times() {
    assert_eq!(unix_ns("1970-01-01T00:00:00Z"), 0);
    assert_eq!(unix_ns("1970-01-02T00:00:01.5Z"), 86_401_500_000_000);
    assert_eq!(
        unix_ns("2026-11-29T19:07:50.123456789Z"),
        1_795_979_270_123_456_789
    );
}
