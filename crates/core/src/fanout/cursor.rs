//! One reader's position in a topic set's stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, watch};

use super::handle::Feed;
use super::ring::Routed;
use super::ring::{Entry, Read};
use super::source::{Lost, Source};

/// A read behind the ring: the source, and the turn it holds while it reads.
struct CatchUp {
    source: Source,
    _turn: OwnedSemaphorePermit,
    /// It reads the latest state ([`Cursor::after_latest`]): the ring is not joined before it
    /// ends, whatever positions the ring holds.
    state: bool,
}

/// A read behind the ring being opened (kept across cancellation of [`Cursor::next`]).
type Opening = Pin<Box<dyn Future<Output = Result<CatchUp, Lost>> + Send>>;

/// One reader's position: it reads its feed's ring, and while it is behind the ring (it started
/// before it, or fell behind it) its own [`Source`], bounded to where the ring began when it was
/// opened, until it is back inside the ring.
///
/// # Contract
///
/// - Entries come in stream order from the start position: one for every message of the topic
///   set, no gap and no duplicate — also across leaving and rejoining the ring.
/// - Every loss arrives as an entry saying so: a message too large to send as a `TooLarge`
///   entry, positions removed from the stream before they were read as a `Lost` entry.
/// - A reader that is merely behind is never ended: it reads the stream itself instead (when
///   its turn comes: the hub bounds how many such reads run at once).
/// - [`Cursor::next`] ends with [`Lost::Replaced`] when the stream is another incarnation (the
///   feed closed) and with [`Lost::Failed`] or [`Lost::Ended`] when reading the stream to
///   catch up failed; the reader resumes from its last entry's id.
/// - [`Cursor::next`] is cancel-safe: a read being opened is kept for the next call, and no
///   entry is taken from the ring or the stream unless it is returned.
pub struct Cursor {
    feed: Arc<Feed>,
    position: watch::Receiver<u64>,
    next: u64,
    /// The cursor's own read of the stream while it is behind the ring (boxed: most cursors
    /// never need one).
    catch_up: Option<Box<CatchUp>>,
    opening: Option<Opening>,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("next", &self.next)
            .field("catching_up", &self.is_catching_up())
            .finish_non_exhaustive()
    }
}

impl Cursor {
    /// A cursor at position `start` of `feed`'s topic set.
    pub fn new(feed: Arc<Feed>, start: u64) -> Self {
        Self {
            position: feed.core.subscribe(),
            feed,
            next: start,
            catch_up: None,
            opening: None,
        }
    }

    /// A cursor that first reads the latest message of each subject of `feed`'s topic set
    /// among the positions below `until`, from the stream itself (in a catch-up turn), then
    /// goes on from `until` as [`Cursor::new`] does. Those latest messages come in stream
    /// order, each once; every other position below `until` is passed over, and only what
    /// the stream cannot deliver there is told (`Lost`).
    pub fn after_latest(feed: Arc<Feed>, until: u64) -> Self {
        let core = feed.core.clone();
        let mut cursor = Self::new(feed, until);
        cursor.opening = Some(Box::pin(async move {
            let turn = core.catch_up_turn().await?;
            let source = Source::open(core.state_spec(until), 1).await?;
            Ok(CatchUp {
                source,
                _turn: turn,
                state: true,
            })
        }));
        cursor
    }

    /// The feed this cursor reads.
    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// True while the cursor reads the stream itself, behind the ring.
    pub fn is_catching_up(&self) -> bool {
        self.catch_up.is_some() || self.opening.is_some()
    }

    /// True when the cursor has read everything the ring holds and waits for the feed: the
    /// stream's live end, not a pause while catching up.
    pub fn is_at_live_end(&self) -> bool {
        !self.is_catching_up() && matches!(self.feed.core.read(self.next), Read::Wait)
    }

    /// The next entry if it is at hand without waiting (in the ring, or already read from the
    /// stream while catching up). Anything else — nothing yet, a read to open or to finish, an
    /// error — is left for [`Cursor::next`].
    pub fn ready(&mut self) -> Option<Entry> {
        if self.opening.is_some() {
            return None;
        }
        loop {
            self.rejoin_if_covered();
            let Some(catch_up) = self.catch_up.as_mut() else {
                return match self.feed.core.read(self.next) {
                    Read::Entry(entry) => Some(self.advance(entry)),
                    Read::Wait | Read::Behind => None,
                };
            };
            if self.feed.core.views_run_elsewhere() {
                // Its view runs on a runtime of its own: only `next` can wait for that.
                return None;
            }
            let routed = catch_up.source.ready()?;
            if let Some(entry) = self.take_from_source(routed) {
                return Some(entry);
            }
        }
    }

    /// The next entry, waiting for it; `Ok(None)` when the feed woke its readers without one
    /// (the hub's shutdown does) or the cursor started catching up, so the caller can look at
    /// its own state (and, while [`Cursor::is_catching_up`], watch for shutdown itself: the
    /// feed's wake-ups no longer reach it).
    pub async fn next(&mut self) -> Result<Option<Entry>, Lost> {
        loop {
            self.rejoin_if_covered();
            if let Some(opening) = self.opening.as_mut() {
                let catch_up = opening.await;
                self.opening = None;
                self.catch_up = Some(Box::new(catch_up?));
                continue;
            }
            if let Some(catch_up) = self.catch_up.as_mut() {
                // A source with entries ready never returns Pending (see the dispatch).
                tokio::task::consume_budget().await;
                match catch_up.source.next().await? {
                    Some(routed) if self.feed.core.views_run_elsewhere() => {
                        if self.rejoins_at(&routed) {
                            continue;
                        }
                        let seq = routed.entry.seq;
                        let core = self.feed.core.clone();
                        // Boxed: this rare path must not grow every stream's task.
                        match Box::pin(core.admit_where_views_run(routed)).await {
                            Some(entry) => return Ok(Some(self.advance(entry))),
                            None => self.next = seq + 1,
                        }
                    }
                    Some(routed) => {
                        if let Some(entry) = self.take_from_source(routed) {
                            return Ok(Some(entry));
                        }
                    }
                    // Everything up to where the ring began (or the state's bound) is
                    // read: on to the ring.
                    None => {
                        self.next = self.next.max(catch_up.source.position());
                        self.catch_up = None;
                    }
                }
                continue;
            }
            match self.feed.core.read(self.next) {
                Read::Entry(entry) => return Ok(Some(self.advance(entry))),
                Read::Behind => {
                    let core = self.feed.core.clone();
                    let start = self.next;
                    self.opening = Some(Box::pin(async move {
                        let turn = core.catch_up_turn().await?;
                        let source = Source::open(core.catch_up_spec(), start).await?;
                        Ok(CatchUp {
                            source,
                            _turn: turn,
                            state: false,
                        })
                    }));
                    // The caller now waits on the stream, no longer on the feed alone.
                    return Ok(None);
                }
                Read::Wait => {
                    if self.feed.core.is_closed() || self.position.changed().await.is_err() {
                        return Err(Lost::Replaced);
                    }
                    return Ok(self.ready());
                }
            }
        }
    }

    /// An entry read from the cursor's own source, as the feed's view admits it, unless the
    /// ring covers its position now: then the cursor rejoins the ring there (the ring holds
    /// it, or will). `None` also for an entry the view leaves out (passed over).
    fn take_from_source(&mut self, routed: Routed) -> Option<Entry> {
        if self.rejoins_at(&routed) {
            return None;
        }
        match self.feed.core.admit(&routed) {
            Some(entry) => Some(self.advance(entry)),
            None => {
                self.next = routed.entry.seq + 1;
                None
            }
        }
    }

    /// Whether the ring covers `routed`'s position now: then the cursor has rejoined the ring
    /// there (the ring holds it, or will).
    fn rejoins_at(&mut self, routed: &Routed) -> bool {
        let entry = &routed.entry;
        if !self.reads_state() && !entry.kind.is_lost() && entry.seq >= self.feed.core.low() {
            self.catch_up = None;
            self.next = entry.seq;
            return true;
        }
        false
    }

    /// Drops the cursor's own source once its position is inside the ring again.
    fn rejoin_if_covered(&mut self) {
        if self.catch_up.is_some() && !self.reads_state() && self.next >= self.feed.core.low() {
            self.catch_up = None;
        }
    }

    /// True while the cursor reads the latest state.
    fn reads_state(&self) -> bool {
        self.catch_up.as_ref().is_some_and(|c| c.state)
    }

    fn advance(&mut self, entry: Entry) -> Entry {
        self.next = entry.seq + 1;
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::EntryKind;
    use crate::fanout::Fanout;
    use crate::fanout::FanoutConfig;
    use crate::fanout::testing::{Remote, encoder, open_backend, publish};
    use crate::frames::GapReason;
    use crate::metrics::Metrics;
    use proptest::prelude::*;
    use sluice_backend::Backend;
    use sluice_protocol::subject::FilterSet;
    use sluice_store::PurgeRequest;
    use std::time::Duration;

    /// The feed of topic `t`, started at the stream's live end as the hub starts its feeds.
    async fn feed_at_live_end(backend: Arc<dyn Backend>, ring_size: usize) -> Arc<Feed> {
        let state = backend.stream_state().await.unwrap();
        let metrics = Arc::new(Metrics::new());
        let settings = FanoutConfig {
            ring_size,
            ..FanoutConfig::default()
        };
        let fanout = Fanout::new(backend, metrics, encoder(state.incarnation), &settings);
        let filters = FilterSet::new(["t"]).unwrap();
        fanout.feed(&filters, &state, state.last_seq + 1)
    }

    /// Waits until the feed has read up to `last`.
    async fn feed_read_to(feed: &Feed, last: u64) {
        let mut position = feed.core.subscribe();
        while *position.borrow_and_update() <= last {
            position.changed().await.unwrap();
        }
    }

    /// The next `count` entries of `cursor`.
    async fn read(cursor: &mut Cursor, count: usize) -> Vec<Entry> {
        let mut entries = Vec::new();
        while entries.len() < count {
            if let Some(entry) = cursor.next().await.unwrap() {
                entries.push(entry);
            }
        }
        entries
    }

    /// A cursor that starts far behind a small ring reads the stream itself, rejoins the ring,
    /// and then follows it live: every message of its topic exactly once, in order.
    #[tokio::test]
    async fn a_cursor_behind_the_ring_catches_up_and_rejoins_without_gap_or_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let backend = open_backend(dir.path()).await;
        let feed = feed_at_live_end(backend.clone(), 16).await;
        let mut expected = Vec::new();
        for n in 0..200 {
            let subject = if n % 3 == 0 { "other" } else { "t" };
            let seq = publish(&*backend, subject).await;
            if subject == "t" {
                expected.push(seq);
            }
        }
        feed_read_to(&feed, 200).await;
        assert!(feed.core.low() > 100, "the ring has moved on");
        let mut cursor = Cursor::new(feed.clone(), 1);
        let first = read(&mut cursor, 1).await;
        assert!(
            cursor.is_catching_up(),
            "the cursor reads the stream itself"
        );
        let rest = read(&mut cursor, expected.len() - 1).await;
        let seen: Vec<u64> = first.iter().chain(&rest).map(|e| e.seq).collect();
        assert_eq!(seen, expected);
        assert!(!cursor.is_catching_up(), "back on the ring");
        let live = publish(&*backend, "t").await;
        assert_eq!(read(&mut cursor, 1).await[0].seq, live);
    }

    /// Reads behind the ring take turns: with `fanout.max_catch_up_reads = 1`, a second reader
    /// behind the ring waits while the first reads, and goes on once the first is done.
    #[tokio::test]
    async fn reads_behind_the_ring_wait_for_a_turn() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let state = backend.stream_state().await.unwrap();
        let metrics = Arc::new(Metrics::new());
        let settings = FanoutConfig {
            ring_size: 16,
            max_catch_up_reads: 1,
            ..FanoutConfig::default()
        };
        let fanout = Fanout::new(
            backend.clone(),
            metrics.clone(),
            encoder(state.incarnation),
            &settings,
        );
        let feed = fanout.feed(&FilterSet::new(["t"]).unwrap(), &state, state.last_seq + 1);
        for _ in 0..40 {
            publish(&*backend, "t").await;
        }
        // Both start before the ring, which begins at the live end it was created at.
        let mut first = Cursor::new(feed.clone(), 1);
        let mut second = Cursor::new(feed.clone(), 1);
        assert_eq!(read(&mut first, 1).await[0].seq, 1);
        assert!(first.is_catching_up(), "the first reads behind the ring");
        assert!(matches!(second.next().await, Ok(None)), "opening its read");
        for _ in 0..10 {
            let waiting = futures::poll!(std::pin::pin!(second.next()));
            assert!(waiting.is_pending(), "the second read waits for a turn");
            tokio::task::yield_now().await;
        }
        assert_eq!(metrics.catchups.get(), 1);
        drop(first);
        assert_eq!(read(&mut second, 1).await[0].seq, 1);
        assert_eq!(metrics.catchups.get(), 2);
    }

    /// Dropping `next()` wherever it waits (opening a catch-up subscription, reading the
    /// stream, checking skipped positions, waiting on the ring) loses nothing: with every other
    /// call polled once and dropped if not ready, the cursor still yields every message once.
    #[tokio::test]
    async fn next_is_cancel_safe() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = Arc::new(Remote::new(open_backend(dir.path()).await));
        let feed = feed_at_live_end(backend.clone(), 16).await;
        let mut expected = Vec::new();
        for n in 0..120 {
            let subject = if n % 4 == 0 { "other" } else { "t" };
            let seq = publish(&*backend, subject).await;
            if subject == "t" {
                expected.push(seq);
            }
        }
        feed_read_to(&feed, 120).await;
        let mut cursor = Cursor::new(feed.clone(), 1);
        let mut seen = Vec::new();
        let mut cancelled = 0;
        let mut call: usize = 0;
        let read_all = async {
            while seen.len() < expected.len() {
                // Polled 1, 2, 3 or 4 times, then dropped if still waiting; every fifth call runs
                // to the end, so the cursor always gets on.
                call += 1;
                let polls = call % 5;
                let next = {
                    let mut next = std::pin::pin!(cursor.next());
                    let mut outcome = None;
                    for _ in 0..if polls == 0 { usize::MAX } else { polls } {
                        if let std::task::Poll::Ready(ready) = futures::poll!(next.as_mut()) {
                            outcome = Some(ready);
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    outcome
                };
                match next {
                    Some(Ok(Some(entry))) => seen.push(entry.seq),
                    Some(Ok(None)) => {}
                    Some(Err(lost)) => panic!("cursor ended: {lost:?}"),
                    None => cancelled += 1,
                }
            }
        };
        // A message lost by a dropped call would leave the cursor waiting for it forever.
        let deadline = tokio::time::timeout(Duration::from_secs(20), read_all).await;
        assert!(
            deadline.is_ok(),
            "the cursor stalled after {} entries",
            seen.len()
        );
        assert!(cancelled > 0, "calls were dropped while waiting");
        assert_eq!(seen, expected);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Whatever the history (topics interleaved, a purge of the front), the ring's size,
        /// the cursor's start and how far live messages run ahead of it before it reads: the
        /// cursor yields one `Lost` entry for the purged positions it was owed, then every
        /// message of its topic from its start, exactly once and in order.
        #[test]
        fn a_cursor_yields_every_message_once_and_reports_what_was_purged(
            history in proptest::collection::vec(any::<bool>(), 1..80),
            purge_below in 0u64..90,
            start_at in 1u64..90,
            ring_size in 1usize..24,
            live in proptest::collection::vec(any::<bool>(), 0..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let backend = open_backend(dir.path()).await;
                let mut topics = Vec::new();
                for &is_t in &history {
                    let subject = if is_t { "t" } else { "other" };
                    publish(&*backend, subject).await;
                    topics.push(is_t);
                }
                let stream = backend.store().unwrap().stream("sluice").unwrap();
                let purge = PurgeRequest { up_to_seq: Some(purge_below.max(1)), ..Default::default() };
                stream.purge(purge).await.unwrap();
                let first = stream.info(None).state.first_seq;
                let feed = feed_at_live_end(backend.clone(), ring_size).await;
                let start = start_at.min(topics.len() as u64 + 1);
                let mut cursor = Cursor::new(feed.clone(), start);
                for &is_t in &live {
                    publish(&*backend, if is_t { "t" } else { "other" }).await;
                    topics.push(is_t);
                }
                let lost = (start < first).then(|| (start, first - 1));
                let messages: Vec<u64> = (start.max(first)..=topics.len() as u64)
                    .filter(|seq| topics[*seq as usize - 1])
                    .collect();
                let count = messages.len() + usize::from(lost.is_some());
                let entries = read(&mut cursor, count).await;
                let mut seen = entries.iter();
                if let Some((from, to)) = lost {
                    let gap = seen.next().unwrap();
                    prop_assert_eq!(gap.kind, EntryKind::Lost(GapReason::Expired));
                    prop_assert_eq!(gap.seq, to);
                    let text = String::from_utf8_lossy(&gap.frame).into_owned();
                    prop_assert!(text.contains(&format!("\"from\":{from},")), "{}", text);
                }
                let got: Vec<u64> = seen.map(|e| { assert_eq!(e.kind, EntryKind::Message); e.seq }).collect();
                prop_assert_eq!(got, messages);
                prop_assert!(cursor.ready().is_none(), "nothing more");
                Ok(())
            })?;
        }
    }
}
