//! How every reader starts — an `/events` stream, a Mercure subscription, anything later — in
//! one place: [`HubCore::open_session`]. What differs between readers (the checks against the
//! stream, where they start, their opening frames, their feed) is a [`Reader`]; the rest —
//! the hub not shutting down, a connection slot, the stream's state, the plan, how the start is
//! counted, the session — is done here once, and every refusal, the protocol's own checks of the
//! request and of its credentials included, is a typed [`Refusal`] that each protocol answers
//! in its own form.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_backend::StreamState;

use crate::conn::ConnInfo;
use crate::fanout::{Feed, record};
use crate::frames::Repair;
use crate::hub::HubCore;
use crate::metrics::Metrics;
use crate::plan::{Plan, StartPosition};
use crate::session::{ConnectionGuard, Session};

/// The longest a reader waits for the stream's state before it is turned away for now.
const STATE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a reader cannot start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The hub is shutting down (may go away: the client retries).
    ShuttingDown,
    /// `limits.max_connections` (or the per-address limit) is reached (may go away).
    MaxConnections,
    /// The backend did not answer (in time); what it said instead (may go away).
    BackendUnavailable(String),
    /// The request cannot be served by this stream, whatever the client retries: what is
    /// wrong with it.
    BadRequest(String),
    /// The hub's configuration cannot serve the reader (an operator's error, not the
    /// client's): what is missing.
    Misconfigured(String),
    /// The reader's credentials do not let it read.
    Denied {
        /// How they fall short.
        denial: Denial,
        /// The label of the metric and the log: which check refused them (`expired`,
        /// `forbidden_topic`).
        reason: &'static str,
        /// What the client is told: fixed text, or the client's own input.
        detail: String,
    },
}

/// How a reader's credentials fall short, in the terms of bearer tokens (RFC 6750), which every
/// protocol of the hub uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// None were given, and the hub does not serve anonymous readers.
    Missing,
    /// They are given in a form the hub does not accept.
    Malformed,
    /// They do not verify: expired, not yet valid, badly signed, meant for another hub.
    Invalid,
    /// They verify but do not grant what the reader asked for.
    Insufficient,
}

impl Refusal {
    /// The label of `sluice_connections_rejected_total` and of the log.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::ShuttingDown => "shutting_down",
            Refusal::MaxConnections => "max_connections",
            Refusal::BackendUnavailable(_) => "backend_unavailable",
            Refusal::BadRequest(_) => "bad_request",
            Refusal::Misconfigured(_) => "misconfigured",
            Refusal::Denied { reason, .. } => reason,
        }
    }

    /// What the client is told.
    pub fn detail(&self) -> &str {
        match self {
            Refusal::ShuttingDown => "the hub is shutting down",
            Refusal::MaxConnections => "too many connections",
            Refusal::BackendUnavailable(detail)
            | Refusal::BadRequest(detail)
            | Refusal::Misconfigured(detail)
            | Refusal::Denied { detail, .. } => detail,
        }
    }

    /// True when the same request may succeed later (answered with a `retry:` hint or
    /// `Retry-After`).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Refusal::ShuttingDown | Refusal::MaxConnections | Refusal::BackendUnavailable(_)
        )
    }
}

/// What is a reader's own in how it starts. [`HubCore::open_session`] asks [`Reader::check`] once
/// the reader is admitted, plans the start it names, then [`Reader::open`]s it.
#[allow(async_fn_in_trait)] // readers are generic parameters, never trait objects
pub trait Reader: Sized {
    /// What the reader learnt from checking the stream, kept for its opening.
    type Checked;
    /// What the protocol answers besides the stream (Mercure: its `Last-Event-ID` header).
    type Answer;

    /// The resume position as the client sent it, if it sent one: counted as a resume, and
    /// logged when that position is lost.
    fn cursor(&self) -> Option<&str>;

    /// What the reader asked to get after the `gap` when its resume position is lost; `None`
    /// for the hub's default (`sse.repair`).
    fn repair(&self) -> Option<Repair> {
        None
    }

    /// Checks the request against the stream's `state` and says where the reader starts.
    async fn check(
        &self,
        hub: &HubCore,
        state: &StreamState,
    ) -> Result<(StartPosition, Self::Checked), Refusal>;

    /// Opens the reader at `start.plan`: nothing refuses it any more.
    async fn open(self, hub: &HubCore, start: Start<'_, Self::Checked>) -> Opening<Self::Answer>;
}

/// Where a checked reader starts.
pub struct Start<'a, C> {
    /// The stream's state when it was admitted.
    pub state: &'a StreamState,
    /// Where it starts: the position it asked for, planned.
    pub plan: &'a Plan,
    /// What its check learnt.
    pub checked: C,
    /// Its connection slot, held until its session ends.
    pub guard: &'a mut ConnectionGuard,
}

/// What an opened reader's session is made of, besides what the hub gives every session.
pub struct Opening<A> {
    /// The frames before the first message.
    pub preamble: Bytes,
    /// The feed it reads from the plan's start.
    pub feed: Arc<Feed>,
    /// Its heartbeat, when not `sse.heartbeat`.
    pub heartbeat: Option<Duration>,
    /// When its token expires, if it does.
    pub expires_in: Option<Duration>,
    /// What the protocol answers besides the stream.
    pub answer: A,
}

impl HubCore {
    /// Starts `reader` on connection `conn`, or says why not: every reader starts here.
    pub async fn open_session<R: Reader>(
        &self,
        conn: Option<&ConnInfo>,
        reader: R,
    ) -> Result<(Session, R::Answer), Refusal> {
        let (mut guard, state) = self.admit(conn).await?;
        let (position, checked) = reader.check(self, &state).await?;
        let settings = self.settings();
        let repair = reader.repair().unwrap_or(settings.repair);
        let plan = Plan::for_start(position, &state, settings.on_loss, repair);
        self.count_start(&plan, reader.cursor());
        let start = Start {
            state: &state,
            plan: &plan,
            checked,
            guard: &mut guard,
        };
        let opening = reader.open(self, start).await;
        let mut context = self.session_context();
        if let Some(heartbeat) = opening.heartbeat {
            context.heartbeat = heartbeat;
        }
        context.expires_in = opening.expires_in;
        let session = Session::new(context, guard, opening.feed, &plan, opening.preamble);
        Ok((session, opening.answer))
    }

    /// The hub not shutting down, a connection slot, and the stream's state.
    async fn admit(
        &self,
        conn: Option<&ConnInfo>,
    ) -> Result<(ConnectionGuard, StreamState), Refusal> {
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
        Ok((guard, state))
    }

    /// Counts a reader's start at `plan`: a resume when it asked for `cursor`, and the position
    /// lost when the plan has a gap (counted and logged as `resume position lost`).
    fn count_start(&self, plan: &Plan, cursor: Option<&str>) {
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
}
