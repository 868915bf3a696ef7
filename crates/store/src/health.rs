//! A stream's write health: whether its writes fail now, how many failed since open, and a log
//! of failures that does not flood while a condition lasts (a full disk fails every write
//! until space is freed): the first failure of a run is logged with its cause, then one summary
//! a minute while the run lasts, and one line when a write succeeds again.

use std::time::{Duration, Instant};

use crate::error::StoreError;
use crate::types::WriteHealth;

/// How often a run of failures that goes on is summarised in the log.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The write health of one stream: its block writes and its snapshot (index.db, sidecar) writes.
#[derive(Debug)]
pub struct Health {
    /// Writes of message batches to the block files.
    pub blocks: FailureLog,
    /// Writes of index.db and the sidecars.
    pub snapshots: FailureLog,
    /// Set once an fsync failed: writes fail until the process restarts.
    fenced: Option<String>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            blocks: FailureLog::new(
                "blocks",
                "writing the stream's blocks failed; nothing of the batch was stored, later writes are tried again",
            ),
            snapshots: FailureLog::new(
                "snapshots",
                "writing index.db or a sidecar failed; retried at the next flush (recovery rebuilds them from the blocks)",
            ),
            fenced: None,
        }
    }
}

impl Health {
    /// Records that an fsync failed (`why`): writes fail from now on, whatever succeeds later.
    pub fn fence(&mut self, why: String) {
        self.fenced = Some(why);
    }

    /// What readiness and the metrics report.
    pub fn report(&self) -> WriteHealth {
        WriteHealth {
            failing: (self.fenced.as_deref())
                .or(self.blocks.failing())
                .map(str::to_string),
            write_errors: self.blocks.total,
            snapshot_errors: self.snapshots.total,
        }
    }
}

/// Failures of one kind of write, counted, and logged once per run plus a summary a minute.
#[derive(Debug)]
pub struct FailureLog {
    /// Which writes: `blocks` or `snapshots` (a field of every line logged).
    kind: &'static str,
    /// The log message of a run's first failure.
    first_message: &'static str,
    /// The run of failures going on, if any.
    run: Option<Run>,
    /// Failures since open.
    total: u64,
}

/// Consecutive failures, from the first to the next success.
#[derive(Debug)]
struct Run {
    /// The latest failure's message.
    error: String,
    began: Instant,
    failures: u64,
    /// When the run was last logged, and how many failures it had then.
    logged_at: Instant,
    logged_failures: u64,
}

impl FailureLog {
    fn new(kind: &'static str, first_message: &'static str) -> Self {
        Self {
            kind,
            first_message,
            run: None,
            total: 0,
        }
    }

    /// While writes fail, the latest failure's message.
    pub fn failing(&self) -> Option<&str> {
        self.run.as_ref().map(|r| r.error.as_str())
    }

    /// Counts a failure of `stream`'s write; logs it when it starts a run, else a summary when
    /// the last one is a minute old.
    pub fn failed(&mut self, stream: &str, error: &StoreError) {
        self.total += 1;
        let now = Instant::now();
        let storage_full = error.is_storage_full();
        let Some(run) = &mut self.run else {
            tracing::error!(stream, writes = self.kind, error = %error, storage_full, "{}", self.first_message);
            self.run = Some(Run {
                error: error.to_string(),
                began: now,
                failures: 1,
                logged_at: now,
                logged_failures: 1,
            });
            return;
        };
        run.error = error.to_string();
        run.failures += 1;
        if now.duration_since(run.logged_at) >= SUMMARY_EVERY {
            tracing::warn!(
                stream,
                writes = self.kind,
                error = %error,
                storage_full,
                failures = run.failures,
                since_last_summary = run.failures - run.logged_failures,
                failing_for_s = now.duration_since(run.began).as_secs(),
                "writes still failing"
            );
            run.logged_at = now;
            run.logged_failures = run.failures;
        }
    }

    /// Ends a run of failures, if one was going on, with one line saying how long it lasted.
    pub fn succeeded(&mut self, stream: &str) {
        if let Some(run) = self.run.take() {
            tracing::warn!(
                stream,
                writes = self.kind,
                failures = run.failures,
                failed_for_ms = run.began.elapsed().as_millis() as u64,
                last_error = %run.error,
                "writes succeed again"
            );
        }
    }
}
