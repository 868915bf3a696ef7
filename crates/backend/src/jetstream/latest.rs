//! [`Backend::read_latest`](crate::Backend::read_latest) on JetStream: the latest message of
//! each subject below a bound, through short-lived `last_per_subject` consumers.
//!
//! JetStream's `last_per_subject` policy gives the last message of each subject in the whole
//! stream, not below a bound: a subject with a message at or above `until` has its latest
//! message below `until` elsewhere. So the read goes in three steps, every consumer deleted
//! once its step is over (or when the read is dropped):
//!
//! 1. A headers-only `last_per_subject` consumer lists where each subject's last message is
//!    ([`Deliver::LatestPerSubject`]): those below `until` are wanted as they are; the
//!    subjects whose last message lies at or above it are found again.
//! 2. For those, the latest message below `until` is looked for: first by reading the window
//!    just below `until` (headers only, a range read: [`SUBJECT_WINDOW`] positions per
//!    subject, the hot subjects' previous messages are found there at once), then, for each
//!    subject not found in it, with the stream's message API (`next_by_subj` from a position;
//!    JetStream cannot read backwards): from the window downwards in doubling steps, then by
//!    bisection, O(log distance) requests.
//! 3. The wanted messages are then given in sequence order: those of the list from a second
//!    `last_per_subject` consumer (with payloads, bounded by `until`), the others (the ones
//!    found in step 2, and any that consumer did not give) one request each, when their turn
//!    comes: nothing is read ahead of the reader beyond the consumer's pull.
//!
//! Every position below `until` was assigned before the read was opened (the trait's
//! contract), so later appends change no subject's latest message below it: the list of step 1
//! stays right whatever is stored during the read, and what the second consumer gives that is
//! not in it is passed over. A consumer lost in step 1 is created again as a feed's is (its
//! list drawn up again, the entries before its position skipped): a subject whose last message
//! moved above `until` meanwhile is then found again in step 2. A message removed while the
//! read goes on is passed over; so is, in the narrow window between a subject's message at or
//! above `until` being removed and step 1 reaching it, that subject's latest message below.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{RawMessageError, RawMessageErrorKind, Stream};
use futures::{StreamExt, TryStreamExt};

use super::Shared;
use super::error::{api_error, bounded, from_nats};
use super::filters::{FilterPlan, ServerVersion};
use super::info;
use super::publish::from_nats_headers;
use super::subscribe::{Deliver, open_feed};
use crate::{BackendError, BackendMessage, Delivery, MessageStream};

/// Subjects looked for at once with the message API in step 2.
const SEARCHES_AT_ONCE: usize = 16;
/// Positions below the bound read in step 2 per subject looked for: a message read costs far
/// less than one of the dozen requests a search takes.
const SUBJECT_WINDOW: u64 = 256;
/// The most positions below the bound read in step 2.
const MAX_WINDOW: u64 = 1 << 16;

/// Opens a latest read of `filters` below `until` (see the module documentation).
pub(super) async fn read_latest(
    shared: Arc<Shared>,
    filters: &[String],
    until: u64,
) -> Result<MessageStream, BackendError> {
    let version = ServerVersion::parse(&shared.client.server_info().version);
    // Bad filters are refused even when there is nothing to read.
    FilterPlan::new(filters, version)?;
    if until <= 1 {
        return Ok(futures::stream::empty().boxed());
    }
    let facts = shared.read_stream(shared.config.request_timeout).await?;
    let store = MessageApi::open(&shared).await?;
    let (listed, moved) = list_latest(&shared, filters, until).await?;
    // The second consumer gives only what the first listed below `until`.
    let bulk = !listed.is_empty();
    let found = find_below(
        &shared,
        &store,
        filters,
        moved,
        facts.state.first_seq,
        until,
    )
    .await?;
    let mut wanted: Vec<Wanted> = listed
        .into_iter()
        .map(|(seq, subject)| Wanted::Listed { seq, subject })
        .chain(found)
        .collect();
    wanted.sort_unstable_by_key(Wanted::seq);
    wanted.dedup_by_key(|wanted| wanted.seq());
    let feed = if bulk {
        Some(
            open_feed(
                shared.clone(),
                filters,
                1,
                Some(until),
                Deliver::LatestPerSubject,
                false,
            )
            .await?,
        )
    } else {
        None
    };
    let merge = Merge {
        shared,
        incarnation: facts.state.incarnation,
        store,
        wanted: wanted.into(),
        feed,
        peeked: None,
    };
    Ok(futures::stream::unfold(merge, |mut merge| async move {
        let item = merge.next().await?;
        Some((item, merge))
    })
    .boxed())
}

/// The served stream's message API (`$JS.API.STREAM.MSG.GET`), each request bounded.
struct MessageApi {
    stream: Stream<()>,
    limit: Duration,
}

impl MessageApi {
    /// The API of the served stream (no request is made).
    async fn open(shared: &Shared) -> Result<Self, BackendError> {
        let what = "opening the stream's message API";
        let stream = shared
            .context
            .get_stream_no_info(&shared.config.stream)
            .await
            .map_err(|err| from_nats(what, err))?;
        Ok(Self {
            stream,
            limit: shared.config.request_timeout,
        })
    }

    /// Message `seq`, if the stream holds it.
    async fn get(&self, seq: u64) -> Result<Option<BackendMessage>, BackendError> {
        let what = format!("reading message {seq}");
        let request = self.stream.raw_message_builder().sequence(seq).send();
        answer(
            bounded(self.limit, &what, async { Ok(request.await) }).await?,
            &what,
        )
    }

    /// The first message of `subject` at or after `from`, if any.
    async fn next_of(
        &self,
        subject: &str,
        from: u64,
    ) -> Result<Option<BackendMessage>, BackendError> {
        let what = format!("looking for a message of {subject:?} from {from}");
        let request = self
            .stream
            .raw_message_builder()
            .sequence(from)
            .next_by_subject(subject)
            .send();
        answer(
            bounded(self.limit, &what, async { Ok(request.await) }).await?,
            &what,
        )
    }
}

/// Step 1: where the last message of each subject `filters` match is, as (sequence, subject)
/// for those below `until`, and the subjects whose last message is at or above it.
async fn list_latest(
    shared: &Arc<Shared>,
    filters: &[String],
    until: u64,
) -> Result<(Vec<(u64, String)>, HashSet<String>), BackendError> {
    // Bounded by the consumer's own list, not by a position: its entries above `until` count.
    let mut feed = open_feed(
        shared.clone(),
        filters,
        1,
        Some(u64::MAX),
        Deliver::LatestPerSubject,
        true,
    )
    .await?;
    let (mut below, mut moved) = (Vec::new(), HashSet::new());
    while let Some(delivery) = feed.next().await {
        if let Delivery::Message(message) = delivery? {
            if message.seq < until {
                below.push((message.seq, message.subject));
            } else {
                moved.insert(message.subject);
            }
        }
    }
    Ok((below, moved))
}

/// Step 2: the latest message below `until` of each of `subjects` (matched by `filters`),
/// those that have one, among the positions from `first`.
async fn find_below(
    shared: &Arc<Shared>,
    store: &MessageApi,
    filters: &[String],
    subjects: HashSet<String>,
    first: u64,
    until: u64,
) -> Result<Vec<Wanted>, BackendError> {
    if subjects.is_empty() || first >= until {
        return Ok(Vec::new());
    }
    let count = u64::try_from(subjects.len()).unwrap_or(u64::MAX);
    let window = count.saturating_mul(SUBJECT_WINDOW).min(MAX_WINDOW);
    let from = until.saturating_sub(window).max(first);
    let in_window = read_window(shared, filters, &subjects, from, until).await?;
    let rest = subjects
        .into_iter()
        .filter(|subject| !in_window.contains_key(subject));
    // None of the others has a message from `from` on.
    let searched: Vec<BackendMessage> = futures::stream::iter(rest)
        .map(|subject| async move { latest_below(store, &subject, first, from).await })
        .buffer_unordered(SEARCHES_AT_ONCE)
        .try_filter_map(|found| std::future::ready(Ok(found)))
        .try_collect()
        .await?;
    Ok(in_window
        .into_iter()
        .map(|(subject, seq)| Wanted::Listed { seq, subject })
        .chain(searched.into_iter().map(Wanted::Held))
        .collect())
}

/// The latest position of each of `subjects` among `from..until`, read there (headers only).
async fn read_window(
    shared: &Arc<Shared>,
    filters: &[String],
    subjects: &HashSet<String>,
    from: u64,
    until: u64,
) -> Result<HashMap<String, u64>, BackendError> {
    let mut latest = HashMap::new();
    if from >= until {
        return Ok(latest);
    }
    let mut feed = open_feed(
        shared.clone(),
        filters,
        from,
        Some(until),
        Deliver::Range,
        true,
    )
    .await?;
    while let Some(delivery) = feed.next().await {
        if let Delivery::Message(message) = delivery?
            && message.seq < until
            && subjects.contains(&message.subject)
        {
            latest.insert(message.subject, message.seq);
        }
    }
    Ok(latest)
}

/// The latest message of `subject` (a literal one) among positions `first..until`: the first
/// window below `until` holding one, doubled each time, then bisected.
async fn latest_below(
    store: &MessageApi,
    subject: &str,
    first: u64,
    until: u64,
) -> Result<Option<BackendMessage>, BackendError> {
    // No message of the subject lies in `above..until`.
    let mut above = until;
    let mut step = 1_u64;
    let mut latest = loop {
        let from = above.saturating_sub(step).max(first);
        if from >= above {
            return Ok(None);
        }
        match store.next_of(subject, from).await? {
            Some(message) if message.seq < above => break message,
            _ if from == first => return Ok(None),
            _ => {
                above = from;
                step = step.saturating_mul(2);
            }
        }
    };
    // The latest is in `latest.seq..above`.
    let mut last = above - 1;
    while latest.seq < last {
        let middle = latest.seq + (last - latest.seq).div_ceil(2);
        match store.next_of(subject, middle).await? {
            Some(message) if message.seq < above => latest = message,
            _ => last = middle - 1,
        }
    }
    Ok(Some(latest))
}

/// The message a request of the message API got: `None` when there is none.
fn answer(
    got: Result<StreamMessage, RawMessageError>,
    what: &str,
) -> Result<Option<BackendMessage>, BackendError> {
    match got {
        Ok(message) => Ok(Some(BackendMessage {
            seq: message.sequence,
            subject: message.subject.to_string(),
            // Server times are always within jiff's range.
            time: info::timestamp(message.time).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
            headers: from_nats_headers(Some(&message.headers)),
            payload: message.payload,
        })),
        Err(err) => match err.kind() {
            RawMessageErrorKind::NoMessageFound => Ok(None),
            RawMessageErrorKind::JetStream(api) => Err(api_error(&api).into()),
            _ => Err(from_nats(what, err)),
        },
    }
}

/// A message the read gives.
enum Wanted {
    /// One of the consumer's list, read when its turn comes.
    Listed {
        /// Its sequence.
        seq: u64,
        /// Its subject, as listed.
        subject: String,
    },
    /// One found by a request of its own.
    Held(BackendMessage),
}

impl Wanted {
    fn seq(&self) -> u64 {
        match self {
            Self::Listed { seq, .. } => *seq,
            Self::Held(message) => message.seq,
        }
    }
}

/// Step 3: the wanted messages in sequence order, from the second consumer where it gives them.
struct Merge {
    shared: Arc<Shared>,
    /// The stream's incarnation when the read was opened.
    incarnation: u64,
    store: MessageApi,
    /// What is still to give, in sequence order.
    wanted: VecDeque<Wanted>,
    /// The second consumer's feed; dropped (and the consumer deleted) once it ended or the
    /// read did.
    feed: Option<MessageStream>,
    /// The feed's next message, not given yet.
    peeked: Option<BackendMessage>,
}

impl Merge {
    /// The next message; `None` once every wanted one was given (or passed over), or after
    /// an error.
    async fn next(&mut self) -> Option<Result<Delivery, BackendError>> {
        while let Some(wanted) = self.wanted.pop_front() {
            let got = match wanted {
                Wanted::Held(message) => Ok(Some(message)),
                Wanted::Listed { seq, subject } => match self.given_by_feed(seq).await {
                    Ok(Some(message)) => Ok(Some(message)),
                    Ok(None) => self.fetch(seq, &subject).await,
                    Err(err) => Err(err),
                },
            };
            match got {
                Ok(Some(message)) => return Some(Ok(Delivery::Message(message))),
                // Removed since it was listed.
                Ok(None) => {}
                Err(err) => {
                    self.wanted.clear();
                    self.feed = None;
                    return Some(Err(err));
                }
            }
        }
        self.feed = None;
        None
    }

    /// The feed's message at `seq`, if it gives it; what it gives before is not wanted.
    async fn given_by_feed(&mut self, seq: u64) -> Result<Option<BackendMessage>, BackendError> {
        loop {
            let next_seq = match &self.peeked {
                Some(message) => message.seq,
                None => {
                    let Some(feed) = self.feed.as_mut() else {
                        return Ok(None);
                    };
                    match feed.next().await {
                        Some(Ok(Delivery::Message(message))) => self.peeked = Some(message),
                        Some(Ok(_)) => {}
                        Some(Err(err)) => return Err(err),
                        None => self.feed = None,
                    }
                    continue;
                }
            };
            if next_seq > seq {
                return Ok(None);
            }
            let message = self.peeked.take();
            if next_seq == seq {
                return Ok(message);
            }
        }
    }

    /// Message `seq` of `subject`, asked for on its own; `None` when it was removed. (`&mut`:
    /// the merge is `Send` but not `Sync`.)
    async fn fetch(
        &mut self,
        seq: u64,
        subject: &str,
    ) -> Result<Option<BackendMessage>, BackendError> {
        let limit = self.shared.config.request_timeout;
        match self.store.get(seq).await? {
            Some(message) if message.subject != subject => {
                // Another message at the same position: the stream was created again.
                let now = self.shared.read_stream(limit).await?.state.incarnation;
                if now != self.incarnation {
                    return Err(BackendError::Recreated {
                        stream: self.shared.config.stream.clone(),
                        was: self.incarnation,
                        now,
                    });
                }
                Ok(None)
            }
            other => Ok(other),
        }
    }
}
