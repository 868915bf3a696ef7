//! Reads that start from a reader's recent state instead of a position: the latest message of
//! each subject (a key-value view of the stream), the first of the last N messages, the first
//! message stored at or after a time. All of them come from the per-subject index and the
//! block ranges; none scans the stream.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::losses::{LossCause, Lost};
use crate::proto::FilterSet;
use crate::state::PendingRead;
use crate::stream::StreamHandle;
use crate::subscribe::delivery_of;
use crate::types::Delivery;
use crate::writer::Shared;

/// Subjects looked up per turn of the stream's lock: a reader of many subjects never holds up
/// the writer for long.
const SUBJECTS_PER_LOCK: usize = 1024;

/// Most messages a latest read reads ahead of its reader.
const READ_AHEAD_MSGS: usize = 256;

/// Most bytes of records a latest read reads ahead of its reader (one record more at most).
const READ_AHEAD_BYTES: usize = 1 << 20;

/// What a latest read gives, in sequence order.
enum Step {
    /// The latest message of a subject, read when the reader gets to it.
    Latest(u64),
    /// A damaged run: the latest message of a subject may have been there.
    Damaged(Lost),
}

impl Step {
    fn seq(&self) -> u64 {
        match self {
            Self::Latest(seq) => *seq,
            Self::Damaged(lost) => lost.first,
        }
    }
}

impl StreamHandle {
    /// The latest message of each subject `filter` matches among the positions below
    /// `until`, in sequence order, then the end. Known damaged runs below `until` come in
    /// their place as [`Delivery::Lost`] (a damaged record's subject cannot be read, so it may
    /// have held a subject's newer value); an error ends the read. A message removed after the
    /// read began is passed over: it is no longer anyone's latest state.
    ///
    /// The sequences are found first: one pass over the matching subjects, each with its last
    /// sequence in the subject index, the others looked up in the block that holds it (the
    /// stream's lock taken for a thousand of them at a time). The messages are then read a few
    /// hundred at a time (at most 1 MiB of records ahead of the reader), records that lie close
    /// together with one system call.
    pub fn read_latest(
        &self,
        until: u64,
        filter: FilterSet,
    ) -> impl Iterator<Item = Result<Delivery>> + Send + 'static {
        let read = self.latest_steps(until, &filter).map(|steps| LatestRead {
            shared: self.shared.clone(),
            steps: steps.into_iter(),
            ready: VecDeque::new(),
            ended: false,
        });
        let (read, failed) = match read {
            Ok(read) => (Some(read), None),
            Err(err) => (None, Some(Err(err))),
        };
        failed.into_iter().chain(read.into_iter().flatten())
    }

    /// The sequences of a latest read below `until`, with the damaged runs, in order.
    fn latest_steps(&self, until: u64, filter: &FilterSet) -> Result<Vec<Step>> {
        let (known, unknown) = {
            let st = self.shared.lock();
            let upto = st.visible.min(until.saturating_sub(1));
            st.table.latest_known(filter, upto)
        };
        let mut steps: Vec<Step> = known.into_iter().map(Step::Latest).collect();
        for chunk in unknown.chunks(SUBJECTS_PER_LOCK) {
            let mut st = self.shared.lock();
            let upto = st.visible.min(until.saturating_sub(1));
            let latest = st.table.latest_of(chunk, upto);
            st.settle_after_read();
            steps.extend(latest?.into_iter().map(Step::Latest));
        }
        let st = self.shared.lock();
        let upto = st.visible.min(until.saturating_sub(1));
        steps.extend(
            st.table
                .losses
                .damaged()
                .take_while(|(first, _)| *first <= upto)
                .map(|(first, last)| {
                    Step::Damaged(Lost {
                        first,
                        last: last.min(upto),
                        cause: LossCause::Damaged,
                    })
                }),
        );
        steps.sort_unstable_by_key(Step::seq);
        Ok(steps)
    }

    /// The first of the `n` most recent messages `filter` matches at or below `upto` (the
    /// first matching one when fewer match; `upto + 1` when none does or `n` is 0): reading
    /// `filter` from there up to `upto` gives exactly those messages.
    pub fn last_n_start(&self, filter: &FilterSet, n: u64, upto: u64) -> Result<u64> {
        let mut st = self.shared.lock();
        let upto = st.visible.min(upto);
        let start = st.table.last_n_start(filter, n, upto);
        st.settle_after_read();
        start
    }

    /// The first live sequence stored at or after `time` (`last_seq + 1` when none).
    pub fn first_stored_since(&self, time: jiff::Timestamp) -> Result<u64> {
        let ns = i64::try_from(time.as_nanosecond()).unwrap_or(if time.as_nanosecond() < 0 {
            i64::MIN
        } else {
            i64::MAX
        });
        self.first_seq_at_or_after(ns)
    }
}

/// A latest read under way: the steps left, and the deliveries read ahead of the reader.
struct LatestRead {
    shared: Arc<Shared>,
    steps: std::vec::IntoIter<Step>,
    ready: VecDeque<Result<Delivery>>,
    /// An error was given: nothing follows it.
    ended: bool,
}

impl Iterator for LatestRead {
    type Item = Result<Delivery>;

    /// The next delivery: the next message still stored, or a damaged run.
    fn next(&mut self) -> Option<Result<Delivery>> {
        if self.ended {
            return None;
        }
        if self.ready.is_empty() {
            self.read_ahead();
        }
        let next = self.ready.pop_front()?;
        self.ended = next.is_err();
        Some(next)
    }
}

impl LatestRead {
    /// Reads the next steps' messages: located under one turn of the stream's lock (at most
    /// [`READ_AHEAD_MSGS`] of them, [`READ_AHEAD_BYTES`] of records), then read outside it,
    /// records that lie close together with one system call.
    fn read_ahead(&mut self) {
        let mut located = Vec::new();
        let mut order = Vec::new();
        let mut bytes = 0;
        {
            let mut st = self.shared.lock();
            if st.closed {
                let closed = StoreError::Closed(self.shared.name.clone());
                self.ready.push_back(Err(closed));
                return;
            }
            while order.len() < READ_AHEAD_MSGS && bytes < READ_AHEAD_BYTES {
                let Some(step) = self.steps.next() else { break };
                let seq = match step {
                    Step::Latest(seq) => seq,
                    Step::Damaged(lost) => {
                        order.push(Slot::Told(Ok(Delivery::Lost(lost))));
                        continue;
                    }
                };
                match st.prepare(seq) {
                    Ok(Some(pending)) => {
                        bytes += pending.len();
                        order.push(Slot::Read(seq));
                        located.push(pending);
                    }
                    // Removed since the read began.
                    Ok(None) => {}
                    Err(err) => {
                        order.push(Slot::Told(Err(err)));
                        break;
                    }
                }
            }
        }
        let mut read = PendingRead::finish_all(located).into_iter();
        for slot in order {
            let delivery = match slot {
                Slot::Told(told) => told,
                Slot::Read(seq) => match read.next() {
                    Some(message) => delivery_of(&self.shared, seq, message),
                    None => continue,
                },
            };
            self.ready.push_back(delivery);
        }
    }
}

/// One step of a read ahead, in order.
enum Slot {
    /// Known without reading.
    Told(Result<Delivery>),
    /// The message at this position, read with the others.
    Read(u64),
}
