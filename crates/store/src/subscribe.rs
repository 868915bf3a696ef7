//! Subscriptions: replay from a position, then follow live, paced by the consumer; positions
//! that cannot be delivered are reported in order, never skipped in silence.

use futures::Stream;

use crate::error::{Result, StoreError};
use crate::losses::{LossCause, Lost};
use crate::proto::FilterSet;
use crate::state::{Next, PendingRead};
use crate::stream::StreamHandle;
use crate::types::{Delivery, StoredMessage};
use crate::writer::Shared;

impl StreamHandle {
    /// Every message with sequence ≥ `start_seq` matching `filter`: what is stored, then new
    /// messages as they become durable, with no gap and no duplicate between the two. Nothing
    /// is read ahead: each message is read from the store when the consumer polls for it.
    ///
    /// Positions the stream cannot deliver come as [`Delivery::Lost`], in sequence order: a
    /// damaged run the reader's range covers (whatever its filter — a damaged record's subject
    /// cannot be read), and first of all, for a reader resuming from inside an unconfirmed run
    /// (`start_seq - 1` is one of its positions), the rest of that run. Messages of its
    /// subjects removed by a delete, a purge of their subjects or the per-subject limit come
    /// as [`Delivery::Removed`] (one for the removals before each message it gets); removals
    /// of other subjects, and messages gone by their own TTL, are passed in silence. The
    /// stream ends with an error when the stream is closed or deleted.
    pub fn subscribe(
        &self,
        start_seq: u64,
        filter: FilterSet,
    ) -> impl Stream<Item = Result<Delivery>> + Send + 'static {
        self.read_range(start_seq, u64::MAX, filter)
    }

    /// [`Self::subscribe`] bounded by `until`: what it gives below `until` (a lost run that
    /// reaches `until` is cut there), after which the stream ends (`None`) as soon as every
    /// position below `until` is accounted for, without waiting for a later message — at
    /// once when `until <= start_seq`. It waits for new messages only while positions below
    /// `until` are not visible yet, and never reads a message at or above `until`.
    pub fn read_range(
        &self,
        start_seq: u64,
        until: u64,
        filter: FilterSet,
    ) -> impl Stream<Item = Result<Delivery>> + Send + 'static {
        let shared = self.shared.clone();
        let rx = shared.visible.subscribe();
        let start = start_seq.max(1);
        let unconfirmed = (start < until)
            .then(|| shared.lock().unconfirmed_after(start - 1))
            .flatten()
            .map(|lost| Lost {
                last: lost.last.min(until - 1),
                ..lost
            });
        let first = unconfirmed.map(|lost| Ok(Delivery::Lost(lost)));
        let after = unconfirmed.map_or(start, |lost| lost.last + 1);
        let rest = futures::stream::unfold(
            Some((shared, rx, after, filter)),
            move |cursor| async move {
                let (shared, mut rx, next, filter) = cursor?;
                loop {
                    if next >= until {
                        return None;
                    }
                    // Read before the search, so the search sees at least this much: when
                    // it covers `until - 1` and finds nothing, nothing below `until` is left.
                    let visible = *rx.borrow_and_update();
                    match read_next(&shared, next, until, &filter, true) {
                        Ok(Some(d)) => {
                            let after = d.last_seq() + 1;
                            return Some((Ok(d), Some((shared, rx, after, filter))));
                        }
                        Ok(None) if visible >= until - 1 => return None,
                        Ok(None) => {}
                        Err(e) => return Some((Err(e), None)),
                    }
                    if rx.changed().await.is_err() {
                        return Some((Err(StoreError::Closed(shared.name.clone())), None));
                    }
                }
            },
        );
        futures::StreamExt::chain(futures::stream::iter(first), rest)
    }

    /// The first message with sequence ≥ `from_seq` whose subject matches `filter`, found
    /// through the per-subject index. Positions before it that cannot be delivered give
    /// [`StoreError::Lost`]; the reader resumes after them. Removed messages are passed over
    /// (a source copies what its origin holds, as JetStream's does).
    pub fn next_matching(
        &self,
        from_seq: u64,
        filter: &FilterSet,
    ) -> Result<Option<StoredMessage>> {
        match read_next(&self.shared, from_seq, u64::MAX, filter, false)? {
            Some(Delivery::Message(m)) => Ok(Some(m)),
            Some(Delivery::Lost(lost)) => Err(StoreError::Lost {
                stream: self.shared.name.clone(),
                lost,
            }),
            Some(Delivery::Removed(_)) | None => Ok(None),
        }
    }
}

/// What a reader of `filter` meets first at or after `from` and below `until`: a message,
/// positions it cannot be given, or (with `tell_removed`) removed positions of its subjects. A
/// record found damaged only now (it changed on disk after its block was read) is reported as
/// a lost position of its own.
fn read_next(
    shared: &Shared,
    from: u64,
    until: u64,
    filter: &FilterSet,
    tell_removed: bool,
) -> Result<Option<Delivery>> {
    let next = {
        let mut st = shared.lock();
        if st.closed {
            return Err(StoreError::Closed(shared.name.clone()));
        }
        st.next_matching(from, until, filter, tell_removed)?
    };
    Ok(match next {
        Some(Next::Read(pending)) => Some(read_pending(shared, pending)?),
        Some(Next::Lost(lost)) => Some(Delivery::Lost(lost)),
        Some(Next::Removed(removed)) => Some(Delivery::Removed(removed)),
        None => None,
    })
}

/// Reads a located message: the message, or — for a record found damaged only now (it changed
/// on disk after its block was read), or one the disk failed to read — a lost position of its
/// own.
pub(crate) fn read_pending(shared: &Shared, pending: PendingRead) -> Result<Delivery> {
    delivery_of(shared, pending.seq(), pending.finish())
}

/// What a reader is given for the message at `seq`, read as `read`: the message, or a lost
/// position for a damaged record or one the disk failed to read.
pub(crate) fn delivery_of(
    shared: &Shared,
    seq: u64,
    read: Result<StoredMessage>,
) -> Result<Delivery> {
    Ok(match (seq, read) {
        (_, Ok(m)) => Delivery::Message(m),
        (_, Err(StoreError::Corrupt { seq, path })) => {
            tracing::error!(stream = %shared.name, seq, path = %path.display(), "damaged record: reported to the reader as lost");
            Delivery::Lost(Lost {
                first: seq,
                last: seq,
                cause: LossCause::Damaged,
            })
        }
        // The disk failed to read the record: its bytes may be intact, so no loss is
        // remembered, but this reader cannot have it now.
        (seq, Err(StoreError::Io { path, source })) if crate::fsutil::is_disk_failure(&source) => {
            tracing::error!(stream = %shared.name, seq, path = %path.display(), error = %source, "reading a record failed: reported to the reader as damaged");
            Delivery::Lost(Lost {
                first: seq,
                last: seq,
                cause: LossCause::Damaged,
            })
        }
        (_, Err(e)) => return Err(e),
    })
}
