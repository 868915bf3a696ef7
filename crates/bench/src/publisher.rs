//! Publishers: publishes on a fixed schedule, each message stamped with its send time.
//!
//! Message `i` of the run is due at `start + i / rate`, goes to topic `i % topics`, and is sent
//! by publisher `i % publishers` over that publisher's keep-alive connection. A publisher that
//! falls behind sends as fast as the hub acknowledges; what is still unsent when the duration
//! is over is skipped and reported (so the achieved rate shows what the hub can take).

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::http::{Sender, read_body};
use crate::run_context::Run;
use crate::stats::new_histogram;

/// How long one publish may take before it counts as failed.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// The publishing schedule shared by all publishers.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// When message 0 is due.
    pub start: Instant,
    /// Messages per second over all publishers.
    pub rate: f64,
    /// How long publishing lasts.
    pub duration: Duration,
    /// How many publishers share the schedule.
    pub publishers: usize,
}

impl Schedule {
    /// Messages in the whole run: those due before the duration ends.
    pub fn total(&self) -> u64 {
        (self.rate * self.duration.as_secs_f64()).ceil() as u64
    }

    fn due(&self, message: u64) -> Instant {
        self.start + Duration::from_secs_f64(message as f64 / self.rate)
    }
}

/// What one publisher did.
#[derive(Debug)]
pub struct Published {
    /// Messages the hub acknowledged.
    pub sent: u64,
    /// Messages refused or failed.
    pub errors: u64,
    /// Messages not sent because the duration was over.
    pub skipped: u64,
    /// Time from sending a publish to its acknowledgement, in microseconds.
    pub ack: Histogram<u64>,
}

/// Runs publisher `which` of `schedule`.
pub async fn publish(run: Arc<Run>, which: usize, schedule: Schedule) -> Published {
    let mut published = Published {
        sent: 0,
        errors: 0,
        skipped: 0,
        ack: new_histogram(),
    };
    let end = schedule.start + schedule.duration;
    let total = schedule.total();
    let step = schedule.publishers as u64;
    let mut sender: Option<Sender> = None;
    let mut message = which as u64;
    while message < total {
        if Instant::now() >= end {
            published.skipped += (total - message).div_ceil(step);
            break;
        }
        tokio::time::sleep_until(schedule.due(message)).await;
        let topic = (message % run.topic_names.len() as u64) as usize;
        let sent_at = Instant::now();
        let result =
            tokio::time::timeout(PUBLISH_TIMEOUT, send(&run, &mut sender, topic, message)).await;
        match result {
            Ok(Ok(())) => {
                published.sent += 1;
                let micros = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
                published.ack.saturating_record(micros.max(1));
                run.stats.published(topic);
            }
            Ok(Err(err)) => {
                published.errors += 1;
                sender = None;
                run.stats
                    .error(&run.stats.publish_errors, "publish", || format!("{err:#}"));
            }
            Err(_) => {
                published.errors += 1;
                sender = None;
                run.stats.error(&run.stats.publish_errors, "publish", || {
                    format!("no answer within {PUBLISH_TIMEOUT:?}")
                });
            }
        }
        message += step;
    }
    published
}

/// Sends message `message` on `topic`, (re)connecting when needed.
async fn send(
    run: &Run,
    sender: &mut Option<Sender>,
    topic: usize,
    message: u64,
) -> anyhow::Result<()> {
    let connection = match sender {
        Some(connection) if !connection.is_closed() => connection,
        _ => sender.insert(run.target.connect().await?),
    };
    connection.ready().await?;
    let topic = &run.topic_names[topic];
    let body = run
        .payload
        .body(topic, &run.run_id, message, run.stats.now_us());
    let authorization = run.authorization.as_ref();
    let request = run
        .hub
        .publish_request(&run.target, topic, body, authorization)?;
    let uri = request.uri().clone();
    let response = connection.send(request).await?;
    let status = response.status();
    let answer = read_body(response.into_body()).await?;
    if !status.is_success() {
        anyhow::bail!(
            "POST {uri} answered {status}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_counts_messages_due_within_the_duration() {
        let schedule = Schedule {
            start: Instant::now(),
            rate: 50.0,
            duration: Duration::from_millis(2500),
            publishers: 2,
        };
        assert_eq!(schedule.total(), 125);
        assert_eq!(schedule.due(50) - schedule.start, Duration::from_secs(1));
    }
}
