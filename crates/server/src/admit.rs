//! What every reader — an `/events` stream, a Mercure subscription — needs before it can start,
//! in one place: the hub not shutting down, a connection slot, and the stream's state; and how
//! its start is counted. A refusal is typed here once; the HTTP layer answers each the same way
//! for every reader.

use std::time::Duration;

use crate::hub::Hub;
use sluice_backend::StreamState;
use sluice_core::conn::ConnInfo;
use sluice_core::fanout::record;
use sluice_core::metrics::Metrics;
use sluice_core::plan::Plan;
use sluice_core::session::ConnectionGuard;

/// The longest a reader waits for the stream's state before it is turned away for now.
const STATE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a reader cannot start now; each may go away by itself (the client retries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The hub is shutting down.
    ShuttingDown,
    /// `limits.max_connections` (or the per-address limit) is reached.
    MaxConnections,
    /// The backend did not say the stream's state (in time); what it said instead.
    BackendUnavailable(String),
}

impl Refusal {
    /// The label of `sluice_connections_rejected_total` and of the log.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::ShuttingDown => "shutting_down",
            Refusal::MaxConnections => "max_connections",
            Refusal::BackendUnavailable(_) => "backend_unavailable",
        }
    }

    /// What the client is told.
    pub(crate) fn detail(&self) -> &str {
        match self {
            Refusal::ShuttingDown => "the hub is shutting down",
            Refusal::MaxConnections => "too many connections",
            Refusal::BackendUnavailable(detail) => detail,
        }
    }
}

/// A reader let in: its connection slot and the stream's state when it was let in.
pub(crate) struct Admitted {
    /// Its place under the connection limits, held for as long as it streams.
    pub guard: ConnectionGuard,
    /// The served stream's state.
    pub state: StreamState,
}

impl Hub {
    /// Counts a reader's start at `plan`: a resume when it asked for `cursor`, and the position
    /// lost when the plan has a gap (counted and logged as `resume position lost`).
    pub(crate) fn count_start(&self, plan: &Plan, cursor: Option<&str>) {
        if cursor.is_some() {
            self.metrics.replay_requests.inc();
        }
        if let Some(gap) = &plan.gap {
            let reason = gap.reason.label();
            Metrics::count(&self.metrics.replay_fallbacks, "reason", reason);
            Metrics::count(&self.metrics.gaps, "reason", reason);
            tracing::info!(cursor, start = plan.start, reason, "resume position lost");
        }
    }

    /// Lets a reader on connection `conn` in, or says why not.
    pub(crate) async fn admit_reader(&self, conn: Option<&ConnInfo>) -> Result<Admitted, Refusal> {
        if self.is_shutting_down() {
            return Err(Refusal::ShuttingDown);
        }
        let guard = self.acquire_slot(conn).ok_or(Refusal::MaxConnections)?;
        let state = match tokio::time::timeout(STATE_TIMEOUT, self.backend.stream_state()).await {
            Ok(Ok(state)) => state,
            Ok(Err(err)) => {
                record(&self.metrics, &err, "reading the stream's state failed");
                return Err(Refusal::BackendUnavailable(err.to_string()));
            }
            Err(_) => {
                return Err(Refusal::BackendUnavailable(
                    "stream state timed out".to_owned(),
                ));
            }
        };
        Ok(Admitted { guard, state })
    }
}
