//! One reader's position in a topic set's stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;

use super::feed::Feed;
use super::ring::{Entry, EntryKind, Read};
use super::source::{Lost, Role, SkipCheck, Source};

/// A subscription being opened to catch up (kept across cancellation of [`Cursor::next`]).
type Opening = Pin<Box<dyn Future<Output = Result<Source, Lost>> + Send>>;

/// One reader's position: it reads its feed's ring, and while it is behind the ring (it started
/// before it, or fell behind it) its own [`Source`], until it is back inside the ring.
///
/// # Contract
///
/// - Entries come in stream order from the start position: one for every message of the topic
///   set, no gap and no duplicate — also across leaving and rejoining the ring.
/// - Every loss arrives as an entry saying so: a message too large to send as a `TooLarge`
///   entry, positions removed from the stream before they were read as a `Lost` entry.
/// - A reader that is merely behind is never ended: it reads the stream itself instead.
/// - [`Cursor::next`] ends with [`Lost::Replaced`] when the stream is another incarnation (the
///   feed closed) and with [`Lost::Failed`] or [`Lost::Ended`] when reading the stream to
///   catch up failed; the reader resumes from its last entry's id.
/// - [`Cursor::next`] is cancel-safe: a subscription being opened is kept for the next call,
///   and no entry is taken from the ring or the stream unless it is returned.
pub struct Cursor {
    feed: Arc<Feed>,
    position: watch::Receiver<u64>,
    next: u64,
    /// The cursor's own read of the stream while it is behind the ring (boxed: most cursors
    /// never need one).
    source: Option<Box<Source>>,
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
            source: None,
            opening: None,
        }
    }

    /// The feed this cursor reads.
    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// True while the cursor reads the stream itself, behind the ring.
    pub fn is_catching_up(&self) -> bool {
        self.source.is_some() || self.opening.is_some()
    }

    /// The next entry if it is at hand without waiting (in the ring, or already read from the
    /// stream while catching up). Anything else — nothing yet, a subscription to open, an
    /// error — is left for [`Cursor::next`].
    pub fn ready(&mut self) -> Option<Entry> {
        loop {
            self.rejoin_if_covered();
            let Some(source) = self.source.as_mut() else {
                return match self.feed.core.read(self.next) {
                    Read::Entry(entry) => Some(self.advance(entry)),
                    Read::Wait | Read::Behind => None,
                };
            };
            let entry = source.ready()?;
            if let Some(entry) = self.take_from_source(entry) {
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
            if let Some(entry) = self.ready() {
                return Ok(Some(entry));
            }
            if let Some(opening) = self.opening.as_mut() {
                let source = opening.await;
                self.opening = None;
                self.source = Some(Box::new(source?));
                self.feed.core.count_catch_up();
                continue;
            }
            if let Some(source) = self.source.as_mut() {
                // A source with entries ready never returns Pending (see the feed).
                tokio::task::consume_budget().await;
                let entry = source.next().await?;
                if let Some(entry) = self.take_from_source(entry) {
                    return Ok(Some(entry));
                }
                continue;
            }
            match self.feed.core.read(self.next) {
                Read::Entry(_) => continue,
                Read::Behind => {
                    let spec = self.feed.core.source_spec(SkipCheck::Always, Role::CatchUp);
                    self.opening = Some(Box::pin(Source::open(spec, self.next)));
                    // The caller now waits on the stream, no longer on the feed alone.
                    return Ok(None);
                }
                Read::Wait => {
                    if self.feed.core.is_closed() {
                        return Err(Lost::Replaced);
                    }
                    if self.position.changed().await.is_err() {
                        return Err(Lost::Replaced);
                    }
                    return Ok(self.ready());
                }
            }
        }
    }

    /// An entry read from the cursor's own source, unless the ring covers its position now:
    /// then the cursor rejoins the ring there (the ring holds it, or will).
    fn take_from_source(&mut self, entry: Entry) -> Option<Entry> {
        if entry.kind != EntryKind::Lost && entry.seq >= self.feed.core.low() {
            self.source = None;
            self.next = entry.seq;
            return None;
        }
        Some(self.advance(entry))
    }

    /// Drops the cursor's own source once its position is inside the ring again.
    fn rejoin_if_covered(&mut self) {
        if self.source.is_some() && self.next >= self.feed.core.low() {
            self.source = None;
        }
    }

    fn advance(&mut self, entry: Entry) -> Entry {
        self.next = entry.seq + 1;
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::embedded::EmbeddedBackend;
    use crate::backend::{Backend, PublishRequest};
    use crate::config::Config;
    use crate::fanout::Encoder;
    use crate::fanout::feed::FeedStart;
    use crate::metrics::Metrics;
    use bytes::Bytes;
    use sluice_protocol::headers::Headers;
    use sluice_protocol::subject::FilterSet;

    async fn publish(backend: &dyn Backend, subject: &str) -> u64 {
        let request = PublishRequest {
            subject: subject.into(),
            headers: Headers::new(),
            payload: Bytes::from_static(b"1"),
        };
        backend.publish(request).await.unwrap().seq
    }

    /// A cursor that starts far behind a small ring reads the stream itself, rejoins the ring,
    /// and then follows it live: every message of its topic exactly once, in order.
    #[tokio::test]
    async fn a_cursor_behind_the_ring_catches_up_and_rejoins_without_gap_or_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.embedded.data_dir = dir.path().to_owned();
        config.embedded.sync = "never".into();
        let (backend, _) = EmbeddedBackend::open(&config).await.unwrap();
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let epoch = backend.stream_state().await.unwrap().epoch;
        let start = FeedStart {
            filters: FilterSet::new(["t"]).unwrap(),
            encoder: Encoder {
                epoch,
                topic_prefix: String::new(),
                max_event_size: 1 << 20,
            },
            start: 1,
            ring_size: 16,
        };
        let metrics = Arc::new(Metrics::new());
        let feed = Arc::new(Feed::spawn(
            start,
            backend.clone(),
            metrics,
            Box::new(|_| {}),
        ));
        let mut expected = Vec::new();
        for n in 0..200 {
            let subject = if n % 3 == 0 { "other" } else { "t" };
            let seq = publish(&*backend, subject).await;
            if subject == "t" {
                expected.push(seq);
            }
        }
        // The ring has moved on far past the cursor's start before it reads anything.
        let mut position = feed.core.subscribe();
        while feed.core.low() <= 100 {
            position.changed().await.unwrap();
        }
        let mut cursor = Cursor::new(feed.clone(), 1);
        let mut seen = Vec::new();
        let mut caught_up = false;
        while seen.len() < expected.len() {
            if let Some(entry) = cursor.next().await.unwrap() {
                assert_eq!(entry.kind, EntryKind::Message);
                seen.push(entry.seq);
            }
            caught_up |= cursor.is_catching_up();
        }
        assert!(caught_up, "the cursor read the stream itself");
        assert_eq!(seen, expected);
        assert!(!cursor.is_catching_up(), "back on the ring");
        let live = publish(&*backend, "t").await;
        let entry = loop {
            if let Some(entry) = cursor.next().await.unwrap() {
                break entry;
            }
        };
        assert_eq!(entry.seq, live);
    }
}
