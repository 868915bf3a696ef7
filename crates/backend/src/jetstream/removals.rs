//! The removals this hub made itself on the served stream through its administration API — a
//! delete, a purge of some subjects — kept so that its feeds can tell the readers of those
//! subjects ([`Delivery::Removed`](crate::Delivery::Removed)).
//!
//! JetStream cannot tell them: a consumer passes deleted and purged messages over without a
//! word (its delivery sequence does not jump), and the server keeps no subject for a position
//! that is gone — neither stream info (`num_deleted`, `deleted` sequences) nor a message get
//! names one. So what is told here is only what went through this hub, while it runs: a delete
//! names its message's subject (read before deleting), a purge its filter and the positions
//! below its bound. Removals by other clients, by another hub node, by the stream's own
//! `max_msgs_per_subject`, or by this hub before it (re)started pass in silence, as they do on
//! nats-server for every client.
//!
//! A purge names no positions: a reader whose filters overlap the purge's is told of the
//! positions it skips below the purge's bound (positions, not messages). With `keep`, the
//! newest messages of each subject stay: once a reader of one literal subject got one of
//! those, nothing of that subject before the bound is left for it to skip.
//!
//! At most [`MAX_NOTES`] are kept: beyond that the two oldest become one, for the union of
//! their positions and every subject (more gaps for some readers, never a silent skip).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use sluice_protocol::subject::{FilterSet, filter_matches, is_literal};
use tokio::sync::watch;

use crate::RemovedRange;

/// Most removals kept.
pub const MAX_NOTES: usize = 4096;
/// Most subjects one [`RemovedRange`] names before it names none (every reader).
const MAX_SUBJECTS: usize = 16;

/// One removal this hub made.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    /// The first and last positions it may have removed.
    first: u64,
    last: u64,
    /// The deleted message's subject, or the purge's filter.
    filter: String,
    /// A purge that kept the newest messages of each subject.
    keep: bool,
}

/// The removals of one stream incarnation, by the order they were made.
#[derive(Debug, Default)]
struct Notes {
    incarnation: u64,
    next_id: u64,
    notes: BTreeMap<u64, Note>,
}

/// The removals this hub made on its stream.
#[derive(Debug)]
pub(super) struct HubRemovals {
    inner: Mutex<Notes>,
    /// Counts the removals made, for feeds waiting at the end of the stream to tell them.
    made: watch::Sender<u64>,
}

impl Default for HubRemovals {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            made: watch::Sender::new(0),
        }
    }
}

impl HubRemovals {
    /// Changes each time a removal was made.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.made.subscribe()
    }

    fn lock(&self) -> MutexGuard<'_, Notes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records, before it is made, that message `seq` of `subject` is deleted from incarnation
    /// `incarnation`; returns the note's id.
    pub fn deleting(&self, incarnation: u64, seq: u64, subject: &str) -> u64 {
        self.add(incarnation, seq, seq, subject, false)
    }

    /// Records, before it is made, a purge of `filter` in incarnation `incarnation`, of
    /// positions up to `last` (all of them when not known yet: [`HubRemovals::settle`] says
    /// once the purge is done); returns the note's id.
    pub fn purging(&self, incarnation: u64, filter: &str, last: u64, keep: bool) -> u64 {
        self.add(incarnation, 1, last, filter, keep)
    }

    /// After the removal `id` was made: it removed nothing after `last`, nothing before the
    /// stream's first retained position `first_retained` needs telling (every reader is told
    /// of those anyway), and neither does any older removal before it.
    pub fn settle(&self, id: u64, last: u64, first_retained: u64) {
        {
            let mut notes = self.lock();
            if let Some(note) = notes.notes.get_mut(&id) {
                note.last = note.last.min(last);
            }
            notes
                .notes
                .retain(|_, note| note.last >= first_retained && note.first <= note.last);
        }
        self.made.send_modify(|made| *made += 1);
    }

    /// Forgets the removal `id`: it was not made.
    pub fn forget(&self, id: u64) {
        self.lock().notes.remove(&id);
    }

    fn add(&self, incarnation: u64, first: u64, last: u64, filter: &str, keep: bool) -> u64 {
        let mut notes = self.lock();
        if notes.incarnation != incarnation {
            // The stream was created again: what was removed from the old one is no matter.
            notes.notes.clear();
            notes.incarnation = incarnation;
        }
        let id = notes.next_id;
        notes.next_id += 1;
        notes.notes.insert(
            id,
            Note {
                first,
                last,
                filter: filter.to_owned(),
                keep,
            },
        );
        while notes.notes.len() > MAX_NOTES {
            let (Some((_, a)), Some((b_id, b))) =
                (notes.notes.pop_first(), notes.notes.pop_first())
            else {
                break;
            };
            let filter = if a.filter == b.filter {
                a.filter
            } else {
                ">".to_owned()
            };
            let merged = Note {
                first: a.first.min(b.first),
                last: a.last.max(b.last),
                filter,
                keep: false,
            };
            notes.notes.insert(b_id, merged);
        }
        id
    }

    /// What a reader of `filters` in incarnation `incarnation`, which has been given (or told
    /// of) everything before `from`, is told of positions `from..=upto` it skips: the removals
    /// this hub made there that its filters match, in one range, each from after the position
    /// the reader is known to have `passed` before it was made ([`Passed`]). `None` when there
    /// is none.
    pub fn told(
        &self,
        incarnation: u64,
        filters: &FilterSet,
        from: u64,
        upto: u64,
        passed: &Passed,
    ) -> Option<RemovedRange> {
        if from > upto {
            return None;
        }
        let notes = self.lock();
        if notes.incarnation != incarnation || notes.notes.is_empty() {
            return None;
        }
        let mut range: Option<(u64, u64)> = None;
        let mut subjects: Vec<String> = Vec::new();
        for (id, note) in &notes.notes {
            let after_passed = passed.get(id).map_or(0, |seq| seq.saturating_add(1));
            let first = note.first.max(from).max(after_passed);
            let last = note.last.min(upto);
            if first > last || !concerns(filters, &note.filter) {
                continue;
            }
            range = Some(range.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
            if !subjects.contains(&note.filter) {
                subjects.push(note.filter.clone());
            }
        }
        let (first, last) = range?;
        // ">" stands for every subject: every reader is concerned.
        if subjects.len() > MAX_SUBJECTS || subjects.iter().any(|s| s == ">") {
            subjects.clear();
        }
        subjects.sort_unstable();
        Some(RemovedRange {
            first,
            last,
            subjects,
        })
    }

    /// What a message of `subject` at `seq`, about to be given to a reader, shows it passed
    /// before a removal was made: a message the removal would have taken was read before it,
    /// so was everything before it. (A purge keeping the newest messages may have kept it:
    /// see [`HubRemovals::exhausted_by`].)
    pub fn passed_by(&self, subject: &str, seq: u64) -> Vec<(u64, u64)> {
        let notes = self.lock();
        notes
            .notes
            .iter()
            .filter(|(_, note)| {
                !note.keep
                    && (note.first..=note.last).contains(&seq)
                    && filter_matches(&note.filter, subject)
            })
            .map(|(id, _)| (*id, seq))
            .collect()
    }

    /// The purges keeping the newest messages of a literal subject that a message of `subject`
    /// at `seq`, given to a reader, shows are all behind it.
    pub fn exhausted_by(&self, subject: &str, seq: u64) -> Vec<(u64, u64)> {
        let notes = self.lock();
        notes
            .notes
            .iter()
            .filter(|(_, note)| note.keep && note.filter == subject && seq <= note.last)
            .map(|(id, _)| (*id, u64::MAX))
            .collect()
    }
}

/// Per removal (by id), the last position a reader is known to have passed before the removal
/// was made: nothing of the removal lies at or before it for that reader.
pub(super) type Passed = HashMap<u64, u64>;

/// Whether a removal of `filter` (a subject, or a purge's filter) concerns a reader of
/// `filters`.
fn concerns(filters: &FilterSet, filter: &str) -> bool {
    if is_literal(filter) {
        filters.matches(filter)
    } else {
        filters.overlaps(filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(filters: &[&str]) -> FilterSet {
        FilterSet::new(filters.iter().copied()).unwrap()
    }

    #[test]
    fn a_delete_is_told_to_the_readers_of_its_subject_where_they_skip_it() {
        let removals = HubRemovals::default();
        removals.deleting(7, 5, "app.a");
        let none = Passed::new();
        let told = removals.told(7, &set(&["app.a"]), 3, 9, &none).unwrap();
        assert_eq!(
            (told.first, told.last, told.subjects),
            (5, 5, vec!["app.a".into()])
        );
        assert_eq!(removals.told(7, &set(&["app.b"]), 3, 9, &none), None);
        assert_eq!(removals.told(7, &set(&["app.a"]), 6, 9, &none), None);
        assert_eq!(
            removals.told(8, &set(&["app.a"]), 3, 9, &none),
            None,
            "other incarnation"
        );
    }

    #[test]
    fn a_purge_is_told_below_its_bound_to_readers_it_overlaps_until_a_kept_message() {
        let removals = HubRemovals::default();
        let id = removals.purging(1, "app.a", u64::MAX, true);
        removals.settle(id, 20, 1);
        let mut exhausted = Passed::new();
        let told = removals
            .told(1, &set(&["app.*"]), 4, 30, &exhausted)
            .unwrap();
        assert_eq!((told.first, told.last), (4, 20));
        assert_eq!(removals.told(1, &set(&["app.b"]), 4, 30, &exhausted), None);
        exhausted.extend(removals.exhausted_by("app.a", 12));
        assert_eq!(removals.told(1, &set(&["app.a"]), 13, 30, &exhausted), None);
        assert!(removals.exhausted_by("app.a", 21).is_empty());
    }

    #[test]
    fn a_message_the_purge_would_have_taken_shows_what_was_read_before_it() {
        let removals = HubRemovals::default();
        let id = removals.purging(1, "app.a", u64::MAX, false);
        removals.settle(id, 20, 1);
        let mut passed = Passed::new();
        // Message 9 of app.a came although the purge took every app.a up to 20: the reader
        // had read it, and all before it, before the purge.
        passed.extend(removals.passed_by("app.a", 9));
        assert_eq!(removals.told(1, &set(&["app.a"]), 4, 8, &passed), None);
        let told = removals.told(1, &set(&["app.a"]), 4, 30, &passed).unwrap();
        assert_eq!((told.first, told.last), (10, 20));
        assert!(
            removals.passed_by("app.b", 9).is_empty(),
            "not of the purge"
        );
        assert!(
            removals.passed_by("app.a", 21).is_empty(),
            "after its bound"
        );
    }

    #[test]
    fn beyond_the_bound_the_oldest_become_one_for_every_subject() {
        let removals = HubRemovals::default();
        for seq in 1..=(MAX_NOTES as u64 + 1) {
            removals.deleting(1, seq * 2, if seq == 1 { "a" } else { "b" });
        }
        let none = Passed::new();
        let told = removals.told(1, &set(&["c"]), 1, 5, &none).unwrap();
        assert_eq!((told.first, told.last), (2, 4));
        assert!(told.subjects.is_empty(), "every reader: {told:?}");
    }
}
