//! [`Backend::recent_start`](crate::Backend::recent_start) on JetStream: where a reader's recent
//! messages begin, asked of short-lived consumers that deliver at most one message — each is
//! created, read from its creation's answer (or one message fetched) and deleted at once.
//!
//! - [`Recent::Since`]: a consumer delivering from the time (`by_start_time`) per server filter;
//!   the first message it has is where the reader starts. When the server cannot be given the
//!   reader's filters as they are (see [`FilterPlan`]), one consumer per filter, the earliest first
//!   position winning: exact either way.
//! - [`Recent::Last`]: JetStream cannot read backwards, but a consumer created from a sequence
//!   (`by_start_sequence`) says how many messages of its filter it has pending. The reader's
//!   messages in `s..=upto` are those pending from `s` less those pending from `upto + 1` (a
//!   consumer kept for the search, its count read after each probe: a message stored between the
//!   two readings counts in the latter only, so a count is never too high and the start never too
//!   late). The start is the largest `s` where that count reaches `n`, found by bisection in
//!   O(log(upto - first)) probes; when fewer match, the first of them, asked of a consumer from the
//!   first position as for `Since`. Where the reader's filters are filtered in-process, each filter
//!   is counted on its own: pairwise disjoint filters add up exactly; overlapping ones (`a.*` and
//!   `*.b`) are counted through a disjoint subset, whose count is at most the reader's, so the
//!   position found is no later than the start, and the messages from there up to `upto` are read
//!   (headers only) to find it exactly.

use std::collections::VecDeque;
use std::sync::Arc;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use futures::StreamExt;
use futures::future::try_join_all;
use sluice_protocol::subject::filters_overlap;

use super::Shared;
use super::error::{bounded, from_nats};
use super::filters::{FilterPlan, ServerVersion};
use super::info::StreamFacts;
use super::subscribe::{Deliver, Probe, open_feed, probe, short_lived_config};
use crate::{ApiError, BackendError, Delivery, Recent, Unavailable};

/// Where the `recent` messages of `filters` up to `upto` begin (the trait's contract).
pub(super) async fn recent_start(
    shared: &Arc<Shared>,
    filters: &[String],
    recent: Recent,
    upto: u64,
) -> Result<u64, BackendError> {
    let version = ServerVersion::parse(&shared.client.server_info().version);
    let plan = FilterPlan::new(filters, version)?;
    let end = upto.saturating_add(1);
    if recent == Recent::Last(0) {
        return Ok(end);
    }
    let facts = shared.read_stream(shared.config.request_timeout).await?;
    if let Some(filter) = plan.outside(&facts.state.subjects) {
        return Err(ApiError::consumer_filter_not_subset(
            filter,
            &shared.config.stream,
            &facts.state.subjects,
        )
        .into());
    }
    if facts.state.first_seq > upto {
        return Ok(end);
    }
    let asking = Asking {
        shared,
        facts: &facts,
    };
    match recent {
        Recent::Since(time) => asking.first_since(&plan, time, end).await,
        Recent::Last(n) => asking.last_start(&plan, filters, n, upto).await,
    }
}

/// A filter as a consumer takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerFilter {
    /// `filter_subject`.
    subject: String,
    /// `filter_subjects`.
    subjects: Vec<String>,
}

impl ServerFilter {
    /// The plan's filter, when the server applies the reader's filters itself.
    fn of(plan: &FilterPlan) -> Self {
        Self {
            subject: plan.filter_subject.clone(),
            subjects: plan.filter_subjects.clone(),
        }
    }

    /// One filter.
    fn single(filter: &str) -> Self {
        Self {
            subject: filter.to_owned(),
            subjects: Vec::new(),
        }
    }
}

/// The server filters whose first positions give the reader's first: the plan's own, or one
/// per filter where the server cannot be given the reader's filters as they are.
fn separate(plan: &FilterPlan) -> Vec<ServerFilter> {
    match plan.local {
        None => vec![ServerFilter::of(plan)],
        Some(_) => plan.requested.iter().map(ServerFilter::single).collect(),
    }
}

/// The server filters to count the reader's messages with, and whether their counts add up to
/// exactly the reader's (else to at most it: a disjoint subset of overlapping filters).
fn counted(plan: &FilterPlan) -> (Vec<ServerFilter>, bool) {
    if plan.local.is_none() {
        return (vec![ServerFilter::of(plan)], true);
    }
    let mut chosen: Vec<&str> = Vec::new();
    for filter in plan.requested.iter() {
        if !chosen.iter().any(|other| filters_overlap(other, filter)) {
            chosen.push(filter);
        }
    }
    let exact = chosen.len() == plan.requested.len();
    (
        chosen.into_iter().map(ServerFilter::single).collect(),
        exact,
    )
}

/// The deliver policy of a consumer starting at stream sequence `seq`.
fn from_seq(seq: u64) -> DeliverPolicy {
    match seq {
        0 | 1 => DeliverPolicy::All,
        start_sequence => DeliverPolicy::ByStartSequence { start_sequence },
    }
}

/// What the questions of one call share.
struct Asking<'a> {
    shared: &'a Arc<Shared>,
    /// The stream when the call began.
    facts: &'a StreamFacts,
}

impl Asking<'_> {
    /// A headers-only consumer of `filter` delivering as `policy` says, deleted when dropped.
    async fn probe(
        &self,
        filter: &ServerFilter,
        policy: DeliverPolicy,
    ) -> Result<Probe, BackendError> {
        let config = pull::Config {
            description: Some("sluice recent start".to_owned()),
            deliver_policy: policy,
            filter_subject: filter.subject.clone(),
            filter_subjects: filter.subjects.clone(),
            headers_only: true,
            ..short_lived_config(self.facts)
        };
        let what = format!(
            "creating a consumer on stream {:?}",
            self.shared.config.stream
        );
        probe(self.shared, config, what).await
    }

    /// The first position at or after `time` holding a message of the plan's filters; `end`
    /// when there is none before it.
    async fn first_since(
        &self,
        plan: &FilterPlan,
        time: jiff::Timestamp,
        end: u64,
    ) -> Result<u64, BackendError> {
        // The server counts times in i64 nanoseconds (years 1678 to 2262): a later time holds
        // no message, an earlier one is before every message.
        let nanos = time.as_nanosecond();
        if nanos > i128::from(i64::MAX) {
            return Ok(end);
        }
        let nanos = nanos.max(i128::from(i64::MIN));
        let start_time =
            async_nats::datetime::DateTime::from_unix_timestamp_nanos(nanos).map_err(|err| {
                ApiError::bad_request().described(format!("start time {time}: {err}"))
            })?;
        self.earliest(plan, DeliverPolicy::ByStartTime { start_time }, end)
            .await
    }

    /// The first position holding a message of the plan's filters that consumers delivering as
    /// `policy` says would send; `end` when there is none before it.
    async fn earliest(
        &self,
        plan: &FilterPlan,
        policy: DeliverPolicy,
        end: u64,
    ) -> Result<u64, BackendError> {
        let filters = separate(plan);
        let firsts = try_join_all(filters.iter().map(|filter| self.first(filter, policy))).await?;
        Ok(firsts.into_iter().flatten().fold(end, u64::min))
    }

    /// The stream sequence of the first message a consumer of `filter` delivering as `policy`
    /// says would send, if any.
    async fn first(
        &self,
        filter: &ServerFilter,
        policy: DeliverPolicy,
    ) -> Result<Option<u64>, BackendError> {
        let probe = self.probe(filter, policy).await?;
        if probe.consumer.cached_info().num_pending == 0 {
            return Ok(None);
        }
        let what = format!("reading the first message of {filter:?} ({policy:?})");
        bounded(self.shared.config.request_timeout, &what, async {
            let mut batch = probe
                .consumer
                .fetch()
                .max_messages(1)
                .messages()
                .await
                .map_err(|err| from_nats(&what, err))?;
            match batch.next().await {
                Some(Ok(message)) => message
                    .info()
                    .map(|delivery| Some(delivery.stream_sequence))
                    .map_err(|source| {
                        Unavailable::Request {
                            what: what.clone(),
                            source,
                        }
                        .into()
                    }),
                Some(Err(source)) => Err(Unavailable::Request {
                    what: what.clone(),
                    source,
                }
                .into()),
                // Removed since the consumer was created: none left.
                None => Ok(None),
            }
        })
        .await
    }

    /// The first of the last `n` (≥ 1) messages of `filters` up to `upto`.
    async fn last_start(
        &self,
        plan: &FilterPlan,
        filters: &[String],
        n: u64,
        upto: u64,
    ) -> Result<u64, BackendError> {
        let (counted, exact) = counted(plan);
        let (first, end) = (self.facts.state.first_seq, upto.saturating_add(1));
        let counter = Counter::open(self, counted, end).await?;
        let total = counter.count(first).await?;
        if exact && total >= n {
            return counter.largest_start(first, upto, n).await;
        }
        if exact {
            // Fewer (as far as counted: a count may fall short, never exceed): the first one.
            drop(counter);
            return self.earliest(plan, from_seq(first), end).await;
        }
        // Counted through a subset: no later than the start; read from there to find it.
        let from = if total >= n {
            counter.largest_start(first, upto, n).await?
        } else {
            first
        };
        drop(counter);
        self.last_n_read(filters, from, upto, n).await
    }

    /// The first of the last `n` messages of `filters` in `from..=upto`, found by reading them
    /// (headers only); `upto + 1` when there is none.
    async fn last_n_read(
        &self,
        filters: &[String],
        from: u64,
        upto: u64,
        n: u64,
    ) -> Result<u64, BackendError> {
        let shared = self.shared.clone();
        let mut feed = open_feed(
            shared,
            filters,
            from,
            Some(upto.saturating_add(1)),
            Deliver::Range,
            true,
        )
        .await?;
        let mut last: VecDeque<u64> = VecDeque::new();
        while let Some(delivery) = feed.next().await {
            if let Delivery::Message(message) = delivery?
                && message.seq <= upto
            {
                if u64::try_from(last.len()).is_ok_and(|len| len >= n) {
                    last.pop_front();
                }
                last.push_back(message.seq);
            }
        }
        Ok(last.front().copied().unwrap_or(upto.saturating_add(1)))
    }
}

/// Counts of the messages of some server filters from a position up to a bound.
struct Counter<'a, 'b> {
    asking: &'a Asking<'b>,
    filters: Vec<ServerFilter>,
    /// Per filter, a consumer from the bound: what it has pending is not counted.
    ends: Vec<Probe>,
}

impl<'a, 'b> Counter<'a, 'b> {
    /// Counts of `filters` up to `end` (exclusive).
    async fn open(
        asking: &'a Asking<'b>,
        filters: Vec<ServerFilter>,
        end: u64,
    ) -> Result<Self, BackendError> {
        let ends = try_join_all(
            filters
                .iter()
                .map(|filter| asking.probe(filter, from_seq(end))),
        )
        .await?;
        Ok(Self {
            asking,
            filters,
            ends,
        })
    }

    /// How many messages of the filters lie from `start` up to the bound, added up: exactly so
    /// many unless messages are stored meanwhile, and then fewer, never more.
    async fn count(&self, start: u64) -> Result<u64, BackendError> {
        let policy = from_seq(start);
        // The consumers from `start` first, then the ends' counts read again.
        let starts = try_join_all(self.filters.iter().map(|filter| async move {
            let probe = self.asking.probe(filter, policy).await?;
            Ok::<_, BackendError>(probe.consumer.cached_info().num_pending)
        }))
        .await?;
        let ends = try_join_all(self.ends.iter().map(|end| self.pending_now(end))).await?;
        Ok(starts
            .iter()
            .zip(&ends)
            .map(|(start, end)| start.saturating_sub(*end))
            .sum())
    }

    /// What `end` has pending now.
    async fn pending_now(&self, end: &Probe) -> Result<u64, BackendError> {
        let what = "reading a counting consumer";
        let limit = self.asking.shared.config.request_timeout;
        let info = bounded(limit, what, async {
            end.consumer
                .get_info()
                .await
                .map_err(|err| from_nats(what, err))
        })
        .await?;
        Ok(info.num_pending)
    }

    /// The largest position in `low..=high` from which at least `target` messages are counted,
    /// given that `low` is one: bisection, one count per halving.
    async fn largest_start(
        &self,
        mut low: u64,
        mut high: u64,
        target: u64,
    ) -> Result<u64, BackendError> {
        while low < high {
            let middle = low + (high - low).div_ceil(2);
            if self.count(middle).await? >= target {
                low = middle;
            } else {
                high = middle - 1;
            }
        }
        Ok(low)
    }
}

#[cfg(test)]
mod tests {
    use super::super::filters::tests::{NEW, OLD, plan};
    use super::*;

    #[test]
    fn filters_the_server_applies_are_counted_at_once() {
        let (filters, exact) = counted(&plan(&["a.x", "b.*"], NEW));
        assert!(exact);
        assert_eq!(filters.len(), 1);
        assert_eq!(filters[0].subjects, ["a.x", "b.*"]);
    }

    #[test]
    fn disjoint_filters_filtered_in_process_are_counted_one_by_one_exactly() {
        let (filters, exact) = counted(&plan(&["a.x", "b.*"], OLD));
        assert!(exact);
        assert_eq!(
            filters,
            [ServerFilter::single("a.x"), ServerFilter::single("b.*")]
        );
    }

    #[test]
    fn overlapping_filters_are_counted_through_a_disjoint_subset() {
        let (filters, exact) = counted(&plan(&["*.b", "a.*", "c.d"], NEW));
        assert!(!exact);
        assert_eq!(
            filters,
            [ServerFilter::single("*.b"), ServerFilter::single("c.d")]
        );
        // First positions are exact with overlaps: the earliest of each filter's.
        assert_eq!(separate(&plan(&["*.b", "a.*"], NEW)).len(), 2);
    }
}
