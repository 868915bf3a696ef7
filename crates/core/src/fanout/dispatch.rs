//! The dispatch: per node and stream incarnation, one read of the stream, routed by subject to
//! the rings of exactly the topic sets whose filters match.
//!
//! A message costs one backend delivery, one lookup in the subject index (literal subjects in
//! one hash lookup, wildcards through a token trie) and one push per matching topic set;
//! readers of other topic sets are not woken. Up to `MAX_COALESCED` entries that are already
//! there are routed together, and each topic set that got any is woken once for all of them.
//!
//! The dispatch also keeps the latest entries of every topic (`recent`, as many as a ring
//! holds), so a topic set that starts now — a client that subscribes or comes back after a
//! short outage — gets its ring filled from them instead of reading the stream itself.
//!
//! All these rings together hold at most `fanout.ring_memory` bytes: past it, the dispatch
//! evicts the oldest entries of all of them, oldest position first (see [`RingMemory`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_protocol::subject::{FilterSet, is_literal};
use sluice_protocol::subject_index::SubjectIndex;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::feed::{FeedCore, Reading};
use super::memory::RingMemory;
use super::ring::{self, Audience, Ring, Routed};
use super::source::{Lost, Role, Source};
use super::view::View;

/// A topic set's key in the dispatch.
pub type FeedKey = u64;

/// Most entries routed before the woken readers are told.
const MAX_COALESCED: usize = 256;

/// A running dispatch; dropping it (with the last feed) stops its backend subscription.
#[derive(Debug)]
pub struct Dispatch {
    core: Arc<DispatchCore>,
    task: AbortHandle,
}

#[derive(Debug)]
struct DispatchCore {
    reading: Arc<Reading>,
    /// What the dispatch reads: every subject a topic can name.
    filters: FilterSet,
    ring_size: usize,
    routes: Mutex<Routes>,
    /// The next position the dispatch routes: everything below it has been.
    progress: watch::Sender<u64>,
}

/// Who gets what; changed by the dispatch and by feeds starting and ending.
#[derive(Debug)]
struct Routes {
    index: SubjectIndex<FeedKey>,
    feeds: HashMap<FeedKey, Arc<FeedCore>>,
    /// The latest entries of every topic; its `high` is the dispatch's position.
    recent: Ring<Routed>,
    /// What `recent` and every feed's ring hold.
    memory: RingMemory,
    next_key: FeedKey,
    /// Set when the stream was replaced: no feed of this dispatch gets anything any more.
    closed: bool,
}

impl Drop for Dispatch {
    fn drop(&mut self) {
        self.task.abort();
        // The task lets go of the core only when its runtime next polls it; the recent
        // entries go now.
        let mut routes = self.core.routes();
        let high = routes.recent.high();
        routes.recent = Ring::new(1, high);
        routes.memory.release_all();
    }
}

impl Dispatch {
    /// Starts reading `filters` at `start` for the topic sets attached later, on `runtime`;
    /// each ring holds up to `ring_size` entries, all of them `ring_memory` bytes.
    pub fn spawn(
        reading: Arc<Reading>,
        filters: FilterSet,
        start: u64,
        ring_size: usize,
        ring_memory: usize,
        runtime: &Handle,
    ) -> Self {
        let memory = RingMemory::new(ring_memory, reading.metrics.ring_bytes.clone());
        let core = Arc::new(DispatchCore {
            reading,
            filters,
            ring_size,
            routes: Mutex::new(Routes {
                index: SubjectIndex::default(),
                feeds: HashMap::new(),
                recent: Ring::new(ring_size, start),
                memory,
                next_key: 0,
                closed: false,
            }),
            progress: watch::Sender::new(start),
        });
        let task = runtime.spawn(run(core.clone(), start)).abort_handle();
        Self { core, task }
    }

    /// The stream incarnation this dispatch reads.
    pub fn incarnation(&self) -> u64 {
        self.core.reading.encoder.incarnation
    }

    /// True once the stream was replaced under the dispatch, or its task is gone (the
    /// runtime it ran on was shut down: the hub stopped serving).
    pub fn is_closed(&self) -> bool {
        self.task.is_finished() || self.core.routes().closed
    }

    /// Adds a topic set. Its ring begins at `from`, or where the recent entries begin if they
    /// do not reach back that far, and holds the recent entries of the set from there on: a
    /// reader starting at `from` reads the stream itself only for what came before the ring.
    /// `view` is how the set's readers see its entries (`None`: as `/events` frames).
    pub fn attach(
        &self,
        filters: FilterSet,
        view: Option<Arc<dyn View>>,
        from: u64,
    ) -> (FeedKey, Arc<FeedCore>) {
        let mut routes = self.core.routes();
        let start = from.max(routes.recent.low());
        let feed = Arc::new(FeedCore::new(
            filters,
            view,
            self.core.reading.clone(),
            self.core.ring_size,
            start,
        ));
        let mut added = 0usize;
        for routed in routes.recent.from(start) {
            if routed.audience.concerns(&feed.filters)
                && let Some(entry) = feed.admit(routed)
            {
                added = added.saturating_add_signed(feed.push(entry));
            }
        }
        if routes.closed {
            feed.close();
        }
        let key = routes.next_key;
        routes.next_key += 1;
        for filter in feed.filters.iter() {
            routes.index.insert(filter, key);
        }
        routes.feeds.insert(key, feed.clone());
        routes.memory.changed(added as isize);
        routes.keep_to_budget();
        (key, feed)
    }

    /// Removes the topic set `key`.
    pub fn detach(&self, key: FeedKey, filters: &FilterSet) {
        let mut routes = self.core.routes();
        for filter in filters.iter() {
            routes.index.remove(filter, key);
        }
        if let Some(feed) = routes.feeds.remove(&key) {
            routes.memory.released(feed.ring_bytes());
            routes.memory.report();
        }
    }

    /// The next sequence the dispatch routes: every position below it has reached the feeds.
    pub fn position(&self) -> u64 {
        *self.core.progress.borrow()
    }

    /// A receiver of the dispatch's position (the next sequence it routes).
    #[cfg(test)]
    pub fn progress(&self) -> watch::Receiver<u64> {
        self.core.progress.subscribe()
    }
}

impl DispatchCore {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes the source's entries until the source is lost; says why it was.
    async fn fill(&self, source: &mut Source, failures: &mut u32) -> Lost {
        let mut batch = Vec::with_capacity(MAX_COALESCED);
        // Kept across batches, so routing allocates nothing once they have grown.
        let mut keys = Vec::new();
        let mut woken = Vec::new();
        loop {
            match source.next().await {
                Ok(Some(routed)) => batch.push(routed),
                Ok(None) => return Lost::Ended,
                Err(lost) => return lost,
            }
            *failures = 0;
            // Take every entry that is already there (up to MAX_COALESCED), then wake each
            // topic set that got any once: a burst costs one wake-up per reader, not one per
            // message. Nothing is taken from the source beyond the bound, so nothing is dropped.
            while batch.len() < MAX_COALESCED {
                match source.ready() {
                    Some(routed) => batch.push(routed),
                    None => break,
                }
            }
            self.routes()
                .route(batch.drain(..), source.position(), &mut keys, &mut woken);
            for feed in woken.drain(..) {
                feed.publish();
            }
            self.progress.send_replace(source.position());
            // A source with entries ready never returns Pending; without this the dispatch
            // would hold its worker and starve the readers it wakes.
            tokio::task::consume_budget().await;
        }
    }

    /// Ends every topic set: the stream was replaced.
    fn close(&self) {
        let mut routes = self.routes();
        routes.closed = true;
        for feed in routes.feeds.values() {
            feed.close();
        }
    }
}

impl Routes {
    /// Pushes each entry to the topic sets it concerns (a `Lost` entry concerns all) and whose
    /// view admits it, keeps it in `recent`, and moves the position to `next`; the topic sets
    /// that got an entry are added to `woken`, once each (`keys` is scratch space, left empty).
    fn route(
        &mut self,
        batch: impl Iterator<Item = Routed>,
        next: u64,
        keys: &mut Vec<FeedKey>,
        woken: &mut Vec<Arc<FeedCore>>,
    ) {
        for routed in batch {
            let first = keys.len();
            match &routed.audience {
                Audience::Subject(subject) => self.index.matches(subject, keys),
                Audience::Subjects(subjects) => {
                    for subject in subjects.iter() {
                        if is_literal(subject) {
                            self.index.matches(subject, keys);
                        } else {
                            // A filter (a JetStream purge's): the sets it overlaps, rare.
                            let overlapping = self
                                .feeds
                                .iter()
                                .filter(|(_, feed)| ring::concerns(&feed.filters, subject));
                            keys.extend(overlapping.map(|(key, _)| *key));
                        }
                    }
                    // Several subjects may reach one set: it gets the entry once.
                    let mut reached = keys.split_off(first);
                    reached.sort_unstable();
                    reached.dedup();
                    keys.extend(reached);
                }
                Audience::Everyone => keys.extend(self.feeds.keys().copied()),
            }
            // Only the sets that got the entry stay in `keys`, to be woken: a view that leaves
            // an entry out wakes none of its readers.
            let mut admitted = first;
            for at in first..keys.len() {
                let key = keys[at];
                if let Some(feed) = self.feeds.get(&key)
                    && let Some(entry) = feed.admit(&routed)
                {
                    self.memory.changed(feed.push(entry));
                    keys[admitted] = key;
                    admitted += 1;
                }
            }
            keys.truncate(admitted);
            self.memory.changed(self.recent.push(routed));
        }
        self.recent.advance(next);
        self.keep_to_budget();
        keys.sort_unstable();
        keys.dedup();
        woken.extend(
            keys.drain(..)
                .filter_map(|key| self.feeds.get(&key).cloned()),
        );
    }

    /// When the rings hold more than the budget, evicts the oldest entries of all of them
    /// (`recent`'s and every feed's), oldest position first, until they hold an eighth less;
    /// then tells the gauge what they hold. A reader behind an evicted entry reads the stream
    /// for it, as behind a full ring.
    fn keep_to_budget(&mut self) {
        if self.memory.over_budget() {
            // The rings by their oldest entry: `None` is `recent`.
            let mut oldest: BinaryHeap<Reverse<(u64, Option<FeedKey>)>> = self
                .feeds
                .iter()
                .filter_map(|(key, feed)| Some(Reverse((feed.oldest()?, Some(*key)))))
                .collect();
            oldest.extend(self.recent.oldest().map(|seq| Reverse((seq, None))));
            while self.memory.above_target()
                && let Some(Reverse((_, ring))) = oldest.pop()
            {
                let (freed, next) = match ring {
                    None => (self.recent.evict_oldest(), self.recent.oldest()),
                    Some(key) => self
                        .feeds
                        .get(&key)
                        .map_or((0, None), |feed| feed.evict_oldest()),
                };
                self.memory.released(freed);
                oldest.extend(next.map(|seq| Reverse((seq, ring))));
            }
        }
        self.memory.report();
    }
}

/// Backoff between attempts to re-establish a lost backend subscription.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6))).min(Duration::from_secs(5))
}

/// Source → rings, for as long as the dispatch runs: when the subscription is lost it resumes
/// from the source's position (so nothing is skipped), unless the stream was replaced by a new
/// incarnation: then every topic set closes and its readers end their streams.
async fn run(core: Arc<DispatchCore>, start: u64) {
    let mut next = start;
    let mut failures = 0;
    loop {
        let spec = core
            .reading
            .source_spec(&core.filters, Role::Dispatch, None);
        let lost = match Source::open(spec, next).await {
            Ok(mut source) => {
                let lost = core.fill(&mut source, &mut failures).await;
                next = source.position();
                lost
            }
            Err(lost) => lost,
        };
        if let Lost::Replaced = lost {
            tracing::info!(filters = %core.filters, "stream was recreated; closing its feeds");
            core.close();
            return;
        }
        failures += 1;
        tokio::time::sleep(backoff(failures)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::FanoutConfig;
    use crate::fanout::testing::{encoder, open_backend, publish};
    use crate::fanout::{Cursor, Entry, Fanout, Feed};
    use crate::metrics::Metrics;
    use proptest::prelude::*;
    use sluice_backend::Backend;
    use sluice_protocol::subject::filter_matches;

    fn fanout(backend: Arc<dyn Backend>, ring_size: usize) -> Fanout {
        fanout_within(backend, ring_size, usize::MAX, Arc::new(Metrics::new()))
    }

    /// A fan-out whose rings hold at most `ring_memory` bytes, told to `metrics`.
    fn fanout_within(
        backend: Arc<dyn Backend>,
        ring_size: usize,
        ring_memory: usize,
        metrics: Arc<Metrics>,
    ) -> Fanout {
        Fanout::new(
            backend,
            metrics,
            encoder(0),
            &FanoutConfig {
                ring_size,
                ring_memory,
                ..FanoutConfig::default()
            },
        )
    }

    /// The feed of `filters` at the stream's live end, as a subscription gets it.
    async fn live_feed(fanout: &Fanout, backend: &dyn Backend, filters: &[&str]) -> Arc<Feed> {
        let state = backend.stream_state().await.unwrap();
        let filters = FilterSet::new(filters.iter().copied()).unwrap();
        fanout.feed(&filters, &state, state.last_seq + 1)
    }

    /// Waits until the dispatch of `feed` has routed every position up to `last`.
    async fn dispatched_to(feed: &Feed, last: u64) {
        let mut progress = feed.dispatch().progress();
        let wait = progress.wait_for(|next| *next > last);
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .expect("the dispatch reads the stream")
            .unwrap();
    }

    /// The next `count` entries of `cursor`, within a deadline.
    async fn read(cursor: &mut Cursor, count: usize) -> Vec<Entry> {
        let mut entries = Vec::new();
        let reading = async {
            while entries.len() < count {
                if let Some(entry) = cursor.next().await.unwrap() {
                    entries.push(entry);
                }
            }
        };
        let done = tokio::time::timeout(Duration::from_secs(20), reading).await;
        assert!(
            done.is_ok(),
            "only {} of {count} entries came",
            entries.len()
        );
        entries
    }

    /// A burst larger than one round of coalescing (`MAX_COALESCED`) reaches the ring whole.
    #[tokio::test]
    async fn a_burst_longer_than_one_round_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let fanout = fanout(backend.clone(), 4096);
        let feed = live_feed(&fanout, &*backend, &["t"]).await;
        let burst = (MAX_COALESCED * 3 + 7) as u64;
        for _ in 0..burst {
            publish(&*backend, "t").await;
        }
        let mut cursor = Cursor::new(feed, 1);
        let seqs: Vec<u64> = read(&mut cursor, burst as usize)
            .await
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=burst).collect::<Vec<_>>());
        assert!(!cursor.is_catching_up(), "all of it came through the ring");
    }

    /// Past `fanout.ring_memory`, the oldest entries of all rings go first, whichever topic
    /// set they belong to: the rings of a hundred topic sets stay within the budget, each
    /// keeps its newest entries, and a reader from the start gets every message (reading
    /// the stream for what its ring let go).
    #[tokio::test]
    async fn the_rings_together_keep_within_their_memory_oldest_going_first() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let metrics = Arc::new(Metrics::new());
        let budget = 96 << 10;
        let fanout = fanout_within(backend.clone(), 4096, budget, metrics.clone());
        let topics: Vec<String> = (0..100).map(|i| format!("user.{i}")).collect();
        let mut feeds = Vec::new();
        for topic in &topics {
            feeds.push(live_feed(&fanout, &*backend, &[topic.as_str()]).await);
        }
        // Ten rounds over every topic: unbounded, the rings would hold about 400 KB.
        for _ in 0..10 {
            for topic in &topics {
                publish(&*backend, topic).await;
            }
        }
        dispatched_to(&feeds[0], 1000).await;
        let held = metrics.ring_bytes.get() as usize;
        assert!(held <= budget, "the rings hold {held} bytes, over {budget}");
        assert!(
            held > budget / 2,
            "the rings keep what the budget allows: {held}"
        );
        let kept: usize = feeds.iter().map(|feed| feed.core.ring_bytes()).sum();
        assert!(
            kept > 0 && kept < held,
            "the feeds' rings are counted with the dispatch's"
        );
        // The last round (901..=1000) outlives every earlier one: oldest first.
        let oldest = feeds.iter().filter_map(|feed| feed.core.oldest()).min();
        assert!(
            oldest.is_some_and(|seq| seq > 100),
            "evicted oldest first: {oldest:?}"
        );
        for (i, feed) in feeds.iter().enumerate() {
            let newest = 901 + i as u64;
            assert!(
                matches!(feed.core.read(newest), ring::Read::Entry(e) if e.seq == newest),
                "user.{i} keeps its newest entry"
            );
        }
        let mut cursor = Cursor::new(feeds[7].clone(), 1);
        let seqs: Vec<u64> = read(&mut cursor, 10).await.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (0..10).map(|round| round * 100 + 8).collect::<Vec<_>>()
        );
        drop((cursor, feeds));
        assert_eq!(metrics.ring_bytes.get(), 0, "a dispatch gone holds nothing");
    }

    /// The lag is what the stream holds beyond the dispatch's position, the same for every
    /// feed; nothing lags while no feed runs, and the dispatch catches up by itself.
    #[tokio::test]
    async fn the_lag_is_what_the_dispatch_has_not_routed_yet() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let fanout = fanout(backend.clone(), 64);
        publish(&*backend, "t").await;
        assert_eq!(fanout.lag(1), 0, "no feed runs");
        let feed = live_feed(&fanout, &*backend, &["t"]).await;
        let _other = live_feed(&fanout, &*backend, &["u"]).await;
        assert_eq!(fanout.lag(1), 0, "started at the live end");
        // As a scrape may see it: the stream already at 4, the dispatch still at 2.
        assert_eq!(fanout.lag(4), 3);
        for _ in 0..3 {
            publish(&*backend, "t").await;
        }
        dispatched_to(&feed, 4).await;
        assert_eq!(fanout.lag(4), 0);
    }

    /// Readers of a topic set are woken only by messages of that set: a burst on another
    /// topic leaves them asleep, and their ring empty.
    #[tokio::test]
    async fn messages_of_other_topics_wake_no_reader() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let fanout = fanout(backend.clone(), 64);
        let quiet = live_feed(&fanout, &*backend, &["user.1"]).await;
        let busy = live_feed(&fanout, &*backend, &["user.2"]).await;
        let quiet_position = quiet.core.subscribe();
        let mut last = 0;
        for _ in 0..100 {
            last = publish(&*backend, "user.2").await;
        }
        dispatched_to(&busy, last).await;
        assert!(
            !quiet_position.has_changed().unwrap(),
            "woken by another topic's messages"
        );
        assert!(matches!(quiet.core.read(1), super::super::ring::Read::Wait));
        let busy_position = busy.core.subscribe();
        publish(&*backend, "user.1").await;
        dispatched_to(&quiet, last + 1).await;
        assert!(quiet_position.has_changed().unwrap());
        assert!(!busy_position.has_changed().unwrap());
    }

    /// Messages removed before a reader got to them are told as `removed` gaps to the readers
    /// of their subjects only: a reader behind its ring is told by its own read of the stream,
    /// and the dispatch routes a removal by its subjects (or, for a subject filter, to the
    /// topic sets it overlaps), never to every topic set.
    #[tokio::test]
    async fn removals_reach_the_topic_sets_of_their_subjects_only() {
        use crate::fanout::EntryKind;
        use crate::frames::GapReason;
        let dir = tempfile::tempdir().unwrap();
        let embedded = open_backend(dir.path()).await;
        let backend: Arc<dyn Backend> = embedded.clone();
        for subject in ["a", "b", "a", "b"] {
            publish(&*backend, subject).await;
        }
        let stream = embedded.store().unwrap().stream("sluice").unwrap();
        assert!(stream.delete_msg(1).await.unwrap());
        assert!(stream.delete_msg(2).await.unwrap());
        let fanout = fanout(backend.clone(), 64);
        let state = backend.stream_state().await.unwrap();
        let feed = |filters: &[&str]| {
            let filters = FilterSet::new(filters.iter().copied()).unwrap();
            fanout.feed(&filters, &state, 1)
        };
        let (a, b, c, xy) = (feed(&["a"]), feed(&["b"]), feed(&["c"]), feed(&["x.y"]));
        let kinds = |entries: Vec<Entry>| -> Vec<(u64, EntryKind)> {
            entries.into_iter().map(|e| (e.seq, e.kind)).collect()
        };
        let removed = EntryKind::Lost(GapReason::Removed);
        let mut reader = Cursor::new(a.clone(), 1);
        assert_eq!(
            kinds(read(&mut reader, 2).await),
            [(1, removed), (3, EntryKind::Message)]
        );
        let mut reader = Cursor::new(b.clone(), 1);
        assert_eq!(
            kinds(read(&mut reader, 2).await),
            [(2, removed), (4, EntryKind::Message)]
        );
        publish(&*backend, "c").await;
        let mut reader = Cursor::new(c.clone(), 1);
        assert_eq!(kinds(read(&mut reader, 1).await), [(5, EntryKind::Message)]);

        // Through the dispatch: removals at positions far ahead of anything published.
        let encoder = a.core.encoder().clone();
        let removal = |seq: u64, subjects: &[&str]| Routed {
            entry: encoder.lost(seq, seq, GapReason::Removed),
            audience: Audience::Subjects(subjects.iter().map(|s| (*s).into()).collect()),
            message: None,
        };
        let (mut keys, mut woken) = (Vec::new(), Vec::new());
        a.dispatch().core.routes().route(
            [removal(1000, &["a"]), removal(1001, &["x.*", "a"])].into_iter(),
            1002,
            &mut keys,
            &mut woken,
        );
        let got = |feed: &Arc<Feed>| -> Vec<u64> {
            let mut seqs = Vec::new();
            let mut next = 1000;
            while let super::super::ring::Read::Entry(entry) = feed.core.read(next) {
                assert_eq!(entry.kind, removed);
                seqs.push(entry.seq);
                next = entry.seq + 1;
            }
            seqs
        };
        assert_eq!(got(&a), [1000, 1001]);
        assert_eq!(
            got(&xy),
            [1001],
            "a removal by filter reaches the sets it overlaps"
        );
        assert!(got(&b).is_empty() && got(&c).is_empty());
        assert_eq!(woken.len(), 2, "each set woken once");
    }

    /// Admits the entries at even positions only, re-encoded.
    #[derive(Debug)]
    struct EvenOnly;

    impl crate::fanout::View for EvenOnly {
        fn key(&self) -> Box<str> {
            "even".into()
        }

        fn entry(&self, routed: &Routed) -> Option<Entry> {
            routed.entry.seq.is_multiple_of(2).then(|| Entry {
                frame: bytes::Bytes::from_static(b"even\n\n"),
                ..routed.entry.clone()
            })
        }

        fn gap(&self, _: crate::event_id::EventId, _: &crate::frames::Gap) -> bytes::Bytes {
            bytes::Bytes::new()
        }
    }

    /// A feed with a view holds what its view makes of the entries, and is not woken by those
    /// the view leaves out; a feed of the same filters without the view is another feed.
    #[tokio::test]
    async fn a_view_encodes_its_feed_and_wakes_it_only_for_what_it_admits() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        let fanout = fanout(backend.clone(), 64);
        let state = backend.stream_state().await.unwrap();
        let filters = FilterSet::new(["t"]).unwrap();
        let view: Arc<dyn crate::fanout::View> = Arc::new(EvenOnly);
        let viewed = fanout.feed_with_view(&filters, view, &state, 1).await;
        let plain = live_feed(&fanout, &*backend, &["t"]).await;
        assert_eq!(fanout.feed_count(), 2);
        let woken = viewed.core.subscribe();
        publish(&*backend, "t").await;
        dispatched_to(&plain, 1).await;
        assert!(!woken.has_changed().unwrap(), "woken for an entry left out");
        publish(&*backend, "t").await;
        let mut cursor = Cursor::new(viewed, 1);
        let entries = read(&mut cursor, 1).await;
        assert_eq!(entries[0].seq, 2);
        assert_eq!(&entries[0].frame[..], b"even\n\n");
        let mut plain = Cursor::new(plain, 1);
        assert_eq!(read(&mut plain, 2).await.len(), 2);
    }

    /// Records the thread each entry was selected on.
    #[derive(Debug, Default)]
    struct Threads(Mutex<Vec<Option<String>>>);

    impl crate::fanout::View for Threads {
        fn key(&self) -> Box<str> {
            "threads".into()
        }

        fn entry(&self, routed: &Routed) -> Option<Entry> {
            let name = std::thread::current().name().map(str::to_owned);
            self.0.lock().unwrap().push(name);
            Some(routed.entry.clone())
        }

        fn gap(&self, _: crate::event_id::EventId, _: &crate::frames::Gap) -> bytes::Bytes {
            bytes::Bytes::new()
        }
    }

    /// A fan-out for views on a runtime of its own runs its views there — in the dispatch, and
    /// for a reader catching up behind its ring — never on the threads that deliver other
    /// feeds' events (here, the test's own runtime).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_fanout_for_views_selects_on_its_own_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
        // Before any feed: a reader from 1 reads these behind its ring, itself.
        for _ in 0..20 {
            publish(&*backend, "t").await;
        }
        let views = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("views-only")
            .enable_all()
            .build()
            .unwrap();
        let fanout =
            fanout(backend.clone(), 64).for_views("t".to_owned(), Some(views.handle().clone()));
        let state = backend.stream_state().await.unwrap();
        let threads = Arc::new(Threads::default());
        let view: Arc<dyn crate::fanout::View> = threads.clone();
        let feed = fanout
            .feed_with_view(&FilterSet::new(["t"]).unwrap(), view, &state, 1)
            .await;
        publish(&*backend, "t").await;
        publish(&*backend, "other").await;
        let mut cursor = Cursor::new(feed, 1);
        let seqs: Vec<u64> = read(&mut cursor, 21).await.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=21).collect::<Vec<_>>(), "caught up, then live");
        let names = threads.0.lock().unwrap().clone();
        assert!(names.len() >= 21, "{names:?}");
        assert!(
            names
                .iter()
                .all(|name| name.as_deref() == Some("views-only")),
            "every entry selected on its runtime: {names:?}"
        );
        drop(cursor);
        views.shutdown_background();
    }

    /// One step of the dispatch model.
    #[derive(Debug, Clone)]
    enum Step {
        Publish(String),
        /// Subscribe to these filters from `back` positions before the live end.
        Subscribe(Vec<String>, u64),
        /// End the subscription with this index (modulo the live ones).
        Unsubscribe(usize),
    }

    fn token() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("a"), Just("b"), Just("c")]
    }

    fn subject() -> impl Strategy<Value = String> {
        proptest::collection::vec(token(), 1..4).prop_map(|t| t.join("."))
    }

    fn filter() -> impl Strategy<Value = String> {
        let part = prop_oneof![3 => token(), 1 => Just("*")];
        (proptest::collection::vec(part, 1..4), any::<bool>()).prop_map(|(mut t, tail)| {
            if tail {
                t.push(">");
            }
            t.join(".")
        })
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => subject().prop_map(Step::Publish),
            2 => (proptest::collection::vec(filter(), 1..3), 0u64..12)
                .prop_map(|(f, back)| Step::Subscribe(f, back)),
            1 => any::<usize>().prop_map(Step::Unsubscribe),
        ]
    }

    /// A live subscription of the model: its cursor, filters and first position.
    struct Subscription {
        cursor: Cursor,
        filters: FilterSet,
        start: u64,
        seen: Vec<u64>,
    }

    impl Subscription {
        /// The sequences of `published` it must get, up to now.
        fn expected(&self, published: &[String]) -> Vec<u64> {
            (self.start..=published.len() as u64)
                .filter(|seq| {
                    let subject = &published[*seq as usize - 1];
                    self.filters.iter().any(|f| filter_matches(f, subject))
                })
                .collect()
        }

        /// Reads everything it is owed so far and checks it is exactly that, in order.
        async fn check(&mut self, published: &[String]) -> Result<(), TestCaseError> {
            let expected = self.expected(published);
            let owed = expected.len() - self.seen.len();
            let entries = read(&mut self.cursor, owed).await;
            self.seen.extend(entries.iter().map(|e| e.seq));
            prop_assert_eq!(&self.seen, &expected, "filters {}", self.filters);
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Random filters with `*` and `>`, random subjects, subscriptions starting (live or a
        /// little behind) and ending while messages flow: every subscription gets exactly the
        /// messages its filters match from its start, in stream order, and nothing else.
        #[test]
        fn every_subscription_gets_exactly_what_its_filters_match(
            steps in proptest::collection::vec(step(), 1..60),
            ring_size in 1usize..8,
            ring_memory in prop_oneof![Just(usize::MAX), 100usize..3000],
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let dir = tempfile::tempdir().unwrap();
                let backend: Arc<dyn Backend> = open_backend(dir.path()).await;
                let metrics = Arc::new(Metrics::new());
                let fanout = fanout_within(backend.clone(), ring_size, ring_memory, metrics.clone());
                let mut published: Vec<String> = Vec::new();
                let mut live: Vec<Subscription> = Vec::new();
                for step in steps {
                    match step {
                        Step::Publish(subject) => {
                            publish(&*backend, &subject).await;
                            published.push(subject);
                        }
                        Step::Subscribe(filters, back) => {
                            let state = backend.stream_state().await.unwrap();
                            let filters = FilterSet::new(filters).unwrap();
                            let start = (state.last_seq + 1).saturating_sub(back).max(1);
                            let feed = fanout.feed(&filters, &state, start);
                            live.push(Subscription { cursor: Cursor::new(feed, start), filters, start, seen: Vec::new() });
                        }
                        Step::Unsubscribe(index) if !live.is_empty() => {
                            let mut ended = live.remove(index % live.len());
                            ended.check(&published).await?;
                        }
                        Step::Unsubscribe(_) => {}
                    }
                    let held = metrics.ring_bytes.get() as usize;
                    prop_assert!(held <= ring_memory, "the rings hold {} bytes, over {}", held, ring_memory);
                }
                for subscription in &mut live {
                    subscription.check(&published).await?;
                }
                // Once the dispatch has routed everything, nothing more is at hand for anyone.
                if let Some(first) = live.first() {
                    dispatched_to(first.cursor.feed(), published.len() as u64).await;
                }
                for subscription in &mut live {
                    prop_assert!(subscription.cursor.ready().is_none(), "an extra entry for {}", subscription.filters);
                }
                Ok(())
            })?;
        }
    }
}
