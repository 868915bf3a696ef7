//! The positions removed from a stream that the readers of their subjects are told of — by a
//! delete, a purge of some subjects, or the per-subject limit, anywhere in the stream — kept
//! with those subjects, so that a reader whose filter matches them gets a [`Removed`] in their
//! place and a reader of other subjects passes them in silence.
//!
//! They are kept as **runs**: a run covers positions `first..=last` none of which is live, and
//! the told removals inside it held one of its subjects (or any subject, [`Subjects::Any`]). A
//! removal joins the run before it or after it when no live message lies between them (the
//! table says so from its deleted ranges, without reading a block), so the runs follow the
//! live messages between them, not the removed ones: the per-subject limit that supersedes
//! message after message of a few subjects keeps one run. Each run lists at most
//! [`MAX_RUN_SUBJECTS`] subjects (a removal that would list more starts a run of its own), and
//! a stream keeps at most [`MAX_RUNS`] runs: beyond that the two oldest are folded into one
//! whose subjects are those of both, or any subject when they are too many. A folded run may
//! span live messages; a reader is told only of what lies before its next message, so folding
//! costs readers of other subjects a gap frame now and then (positions, not messages), never a
//! message and never a silent skip. Runs below the stream's `expired_below` are dropped: every
//! reader is told of those positions anyway.
//!
//! A reader's query ([`Removals::told`]) looks only at the runs its filter can match: for a
//! literal subject one range lookup in that subject's runs, for a wildcard the runs of its
//! matching subjects (while there are few), else — or for a filter matching everything — the
//! runs in its range in order.
//!
//! In index.db (version 4, FORMAT.md) after the last message id: the subjects once each, then
//! per run its positions as deltas and its subjects as indexes into that list.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::decode::{FileDecodeError, MAX_SEQ};
use crate::fsutil::{Reader, put_uvarint};
use crate::proto::{self, FilterSet, is_literal};

/// Most runs a stream keeps; beyond this the oldest are folded together.
pub const MAX_RUNS: usize = 1 << 18;
/// Most subjects one run lists; beyond this it stands for any subject.
pub const MAX_RUN_SUBJECTS: usize = 16;
/// Up to this many subjects with runs, a wildcard reader looks up its matching subjects' runs;
/// with more, it walks the runs in its range.
const NARROW_WILDCARD_MAX_SUBJECTS: usize = 256;

/// One subject's removed messages in a run: the first and the last position one of them held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// The subject.
    pub subject: Arc<str>,
    /// The first removed position of the subject in the run.
    pub first: u64,
    /// The last (at least `first`).
    pub last: u64,
}

/// Whose removed messages a run stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subjects {
    /// Messages of these subjects, each with where its removals lie (sorted by subject,
    /// distinct, at least one).
    Known(Vec<Extent>),
    /// Of any subject: not known (an unreadable record), or let go to keep memory bounded.
    /// Every reader passing them is told.
    Any,
}

impl Subjects {
    /// The union of `self` and `other`, or `None` when it would list more than `max` subjects.
    fn union(&self, other: &Self, max: usize) -> Option<Self> {
        match (self, other) {
            (Self::Known(a), Self::Known(b)) => {
                let mut all: Vec<Extent> = a.iter().chain(b).cloned().collect();
                all.sort_unstable_by(|x, y| x.subject.cmp(&y.subject));
                let mut merged: Vec<Extent> = Vec::with_capacity(all.len());
                for e in all {
                    match merged.last_mut() {
                        Some(m) if m.subject == e.subject => {
                            m.first = m.first.min(e.first);
                            m.last = m.last.max(e.last);
                        }
                        _ => merged.push(e),
                    }
                }
                (merged.len() <= max).then_some(Self::Known(merged))
            }
            _ => Some(Self::Any),
        }
    }

    /// The union, or [`Subjects::Any`] when it would list more than `max`.
    fn union_or_any(&self, other: &Self, max: usize) -> Self {
        self.union(other, max).unwrap_or(Self::Any)
    }
}

/// Positions removed from the stream that a reader's filter matches: what a subscription gives
/// in their place ([`crate::Delivery::Removed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// First position: at most the first removed position of the reader's subjects it covers.
    pub first: u64,
    /// Last position (inclusive), one that held a removed message of the reader's subjects.
    /// Every position in `first..=last` that held a message the reader's filter matches was
    /// removed; some of them may have held other subjects.
    pub last: u64,
    /// The subjects of the removed messages the reader's filter matched (sorted, distinct);
    /// empty when they are not known, and the removal concerns every reader.
    pub subjects: Vec<String>,
}

/// One run: positions `first` (its key) `..= last`, none live.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    last: u64,
    subjects: Subjects,
}

/// The bounds a [`Removals`] keeps to (smaller ones in tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most runs.
    pub runs: usize,
    /// Most subjects a run lists.
    pub subjects: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            runs: MAX_RUNS,
            subjects: MAX_RUN_SUBJECTS,
        }
    }
}

/// The told removals of one stream.
#[derive(Debug, Clone, Default)]
pub struct Removals {
    /// Runs by first position: ascending, disjoint (they may touch).
    runs: BTreeMap<u64, Run>,
    /// The first positions of the runs listing each subject.
    by_subject: HashMap<Arc<str>, BTreeSet<u64>>,
    /// The first positions of the runs of any subject.
    any: BTreeSet<u64>,
    bounds: Bounds,
    /// Runs folded together so far (see [`Removals::folds`]).
    folds: u64,
}

impl PartialEq for Removals {
    fn eq(&self, other: &Self) -> bool {
        self.runs == other.runs
    }
}

impl Removals {
    /// No removals, keeping to `bounds`.
    pub fn with_bounds(bounds: Bounds) -> Self {
        Self {
            bounds: Bounds {
                runs: bounds.runs.max(2),
                subjects: bounds.subjects.max(1),
            },
            ..Self::default()
        }
    }

    /// Number of runs.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// The runs, ascending: `(first, last, subjects)`.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, &Subjects)> + '_ {
        self.runs.iter().map(|(f, r)| (*f, r.last, &r.subjects))
    }

    /// Records that position `seq`, which held a message of `subject` (`None`: not known), was
    /// removed and readers of its subject are to be told. `live_in(a, b)` says whether a live
    /// message may lie in `a..=b` (a removal joins a neighbouring run only when none does).
    pub fn record(
        &mut self,
        seq: u64,
        subject: Option<Arc<str>>,
        live_in: impl Fn(u64, u64) -> bool,
    ) {
        if seq == 0 {
            return;
        }
        let added = match subject {
            Some(subject) if !subject.is_empty() => Subjects::Known(vec![Extent {
                subject,
                first: seq,
                last: seq,
            }]),
            _ => Subjects::Any,
        };
        // Only after damage can a removed position already be inside a run.
        if let Some((&first, run)) = self.runs.range(..=seq).next_back()
            && run.last >= seq
        {
            let subjects = run.subjects.union_or_any(&added, self.bounds.subjects);
            let last = run.last;
            self.take(first);
            self.put(first, last, subjects);
            return;
        }
        // Nothing live between `a` and `b` (none at all when they touch).
        let joinable = |a: u64, b: u64| a > b || !live_in(a, b);
        let (mut first, mut last, mut subjects) = (seq, seq, added);
        let before = self.runs.range(..seq).next_back();
        if let Some((&start, run)) = before
            && joinable(run.last + 1, seq - 1)
            && let Some(union) = run.subjects.union(&subjects, self.bounds.subjects)
        {
            self.take(start);
            (first, subjects) = (start, union);
        }
        let after = seq
            .checked_add(1)
            .and_then(|next| self.runs.range(next..).next());
        if let Some((&start, run)) = after
            && joinable(seq + 1, start - 1)
            && let Some(union) = run.subjects.union(&subjects, self.bounds.subjects)
        {
            let end = run.last;
            self.take(start);
            (last, subjects) = (end, union);
        }
        self.put(first, last, subjects);
        while self.runs.len() > self.bounds.runs {
            self.fold_oldest();
        }
    }

    /// How many times two runs were folded into one to keep within the bounds.
    pub fn folds(&self) -> u64 {
        self.folds
    }

    /// Folds the two oldest runs into one spanning both.
    fn fold_oldest(&mut self) {
        let mut oldest = self.runs.keys().take(2).copied();
        let (Some(a), Some(b)) = (oldest.next(), oldest.next()) else {
            return;
        };
        let (Some(ra), Some(rb)) = (self.take(a), self.take(b)) else {
            return;
        };
        let subjects = ra.subjects.union_or_any(&rb.subjects, self.bounds.subjects);
        self.put(a, rb.last, subjects);
        if self.folds == 0 {
            tracing::warn!(
                runs = self.bounds.runs,
                "more runs of removed positions than kept: the oldest are folded together, and \
                 readers passing them may be told of removals of other subjects"
            );
        }
        self.folds += 1;
    }

    /// Drops every position below `seq` (readers are told of them as expired).
    pub fn forget_below(&mut self, seq: u64) {
        while let Some((&first, run)) = self.runs.first_key_value() {
            if first >= seq {
                break;
            }
            let (last, subjects) = (run.last, run.subjects.clone());
            self.take(first);
            if last < seq {
                continue;
            }
            let subjects = match subjects {
                Subjects::Any => Subjects::Any,
                Subjects::Known(extents) => {
                    let kept: Vec<Extent> = extents
                        .into_iter()
                        .filter(|e| e.last >= seq)
                        .map(|e| Extent {
                            first: e.first.max(seq),
                            ..e
                        })
                        .collect();
                    if kept.is_empty() {
                        break;
                    }
                    Subjects::Known(kept)
                }
            };
            self.put(seq, last, subjects);
            break;
        }
    }

    /// What a reader of `filter` at `from` is told before it reaches `upto + 1` (its next
    /// matching message, or the end of what it may read): the removed positions its filter
    /// matches from the first one at or after `from`, as far as one [`Removed`] can cover them
    /// (no further than `upto`, at most [`MAX_RUN_SUBJECTS`] subjects). The caller makes sure
    /// no live message `filter` matches lies in `from..=upto`.
    pub fn told(&self, from: u64, upto: u64, filter: &FilterSet) -> Option<Removed> {
        if from > upto || self.runs.is_empty() {
            return None;
        }
        let everything = proto::matches_everything(filter);
        // Literal filters are looked up; wildcards ask the subjects that have runs while they
        // are few, else walk the runs.
        let literals = filter.iter().all(is_literal);
        let walk =
            everything || (!literals && self.by_subject.len() > NARROW_WILDCARD_MAX_SUBJECTS);
        // The run holding `from`, if any, starts before it.
        let lo = self
            .runs
            .range(..=from)
            .next_back()
            .filter(|(_, r)| r.last >= from)
            .map_or(from, |(f, _)| *f);
        let runs: Box<dyn Iterator<Item = (u64, &Run)> + '_> = if walk {
            Box::new(self.runs.range(lo..=upto).map(|(f, r)| (*f, r)))
        } else {
            let mut starts: Vec<u64> = self.any.range(lo..=upto).copied().collect();
            let mut add = |set: &BTreeSet<u64>| starts.extend(set.range(lo..=upto).copied());
            if literals {
                for subject in filter.iter() {
                    if let Some(set) = self.by_subject.get(subject) {
                        add(set);
                    }
                }
            } else {
                for (_, set) in self.by_subject.iter().filter(|(s, _)| filter.matches(s)) {
                    add(set);
                }
            }
            starts.sort_unstable();
            starts.dedup();
            Box::new(
                starts
                    .into_iter()
                    .filter_map(|f| self.runs.get(&f).map(|r| (f, r))),
            )
        };
        self.coalesce(runs, from, upto, filter)
    }

    /// Joins the matching runs of `runs` (ascending, within `lo..=upto`) into one [`Removed`]:
    /// from the first removed position of the reader's subjects at or after `from` (or `from`
    /// itself, inside a subject's extent) to the last one of the runs joined.
    fn coalesce<'a>(
        &self,
        runs: impl Iterator<Item = (u64, &'a Run)>,
        from: u64,
        upto: u64,
        filter: &FilterSet,
    ) -> Option<Removed> {
        let mut told: Option<(u64, u64, Subjects)> = None;
        for (first, run) in runs {
            let (matched, start, end) = match &run.subjects {
                Subjects::Any => (Subjects::Any, first, run.last),
                Subjects::Known(all) => {
                    let mine: Vec<Extent> = all
                        .iter()
                        .filter(|e| e.last >= from && e.first <= upto)
                        .filter(|e| filter.matches(&e.subject))
                        .cloned()
                        .collect();
                    let Some(start) = mine.iter().map(|e| e.first).min() else {
                        continue;
                    };
                    let end = mine.iter().map(|e| e.last).max().unwrap_or(start);
                    (Subjects::Known(mine), start, end)
                }
            };
            let end = end.min(upto);
            let Some((told_first, told_last, so_far)) = told.take() else {
                told = Some((start.max(from), end, matched));
                continue;
            };
            // A removal of any subject concerns every reader: it may absorb known subjects,
            // but known subjects stop short of one (they are routed more narrowly).
            let joined = match (&so_far, &matched) {
                (Subjects::Known(_), Subjects::Any) => None,
                _ => so_far.union(&matched, self.bounds.subjects),
            };
            match joined {
                Some(subjects) => told = Some((told_first, end, subjects)),
                None => return Some(removed(told_first, told_last, so_far)),
            }
        }
        told.map(|(first, last, subjects)| removed(first, last, subjects))
    }

    /// Removes run `first` from the maps; returns it.
    fn take(&mut self, first: u64) -> Option<Run> {
        let run = self.runs.remove(&first)?;
        match &run.subjects {
            Subjects::Any => {
                self.any.remove(&first);
            }
            Subjects::Known(extents) => {
                for e in extents {
                    if let Some(set) = self.by_subject.get_mut(&e.subject) {
                        set.remove(&first);
                        if set.is_empty() {
                            self.by_subject.remove(&e.subject);
                        }
                    }
                }
            }
        }
        Some(run)
    }

    /// Adds run `first..=last` to the maps.
    fn put(&mut self, first: u64, last: u64, subjects: Subjects) {
        match &subjects {
            Subjects::Any => {
                self.any.insert(first);
            }
            Subjects::Known(extents) => {
                for e in extents {
                    self.by_subject
                        .entry(e.subject.clone())
                        .or_default()
                        .insert(first);
                }
            }
        }
        self.runs.insert(first, Run { last, subjects });
    }

    /// Appends the index.db section: the subjects once each, then the runs.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut names: Vec<&Arc<str>> = self.by_subject.keys().collect();
        names.sort_unstable();
        let index: HashMap<&str, u64> = names
            .iter()
            .enumerate()
            .map(|(i, s)| (&***s, i as u64))
            .collect();
        put_uvarint(out, names.len() as u64);
        for s in &names {
            put_uvarint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        put_uvarint(out, self.runs.len() as u64);
        let mut prev = 0;
        for (&first, run) in &self.runs {
            put_uvarint(out, first - prev);
            put_uvarint(out, run.last - first);
            match &run.subjects {
                Subjects::Any => put_uvarint(out, 0),
                Subjects::Known(extents) => {
                    put_uvarint(out, extents.len() as u64);
                    for e in extents {
                        put_uvarint(out, index.get(&*e.subject).copied().unwrap_or(0));
                        put_uvarint(out, e.first - first);
                        put_uvarint(out, e.last - e.first);
                    }
                }
            }
            prev = run.last;
        }
    }

    /// Reads the index.db section: runs ascending and disjoint, none past `last_seq`, each
    /// naming listed subjects (at most [`MAX_RUN_SUBJECTS`] of them).
    pub fn decode(r: &mut Reader<'_>, last_seq: u64) -> Result<Self, FileDecodeError> {
        let bad = FileDecodeError::Malformed;
        let n = r.count(1).ok_or(bad("removed subject count"))?;
        let mut names: Vec<Arc<str>> = Vec::with_capacity(n);
        for _ in 0..n {
            let s = r.string().ok_or(bad("removed subject"))?;
            if s.is_empty() {
                return Err(bad("removed subject"));
            }
            names.push(Arc::from(s));
        }
        let mut out = Self::default();
        let runs = r.count(3).ok_or(bad("removed run count"))?;
        if runs > out.bounds.runs {
            return Err(bad("removed run count"));
        }
        let mut prev = 0u64;
        for i in 0..runs {
            let first = prev
                .checked_add(r.uvarint().ok_or(bad("removed run"))?)
                .ok_or(bad("removed run"))?;
            let last = first
                .checked_add(r.uvarint().ok_or(bad("removed run"))?)
                .ok_or(bad("removed run"))?;
            // Ascending and disjoint; they may touch.
            if first == 0 || (i > 0 && first <= prev) {
                return Err(bad("removed runs out of order"));
            }
            if last > last_seq || last > MAX_SEQ {
                return Err(FileDecodeError::PastHighestSequence {
                    what: "removed run",
                    seq: last,
                });
            }
            let refs = r.count(1).ok_or(bad("removed run subjects"))?;
            if refs > out.bounds.subjects {
                return Err(bad("removed run subjects"));
            }
            let subjects = if refs == 0 {
                Subjects::Any
            } else {
                let mut extents: Vec<Extent> = Vec::with_capacity(refs);
                for _ in 0..refs {
                    let extent = (|| {
                        let at = usize::try_from(r.uvarint()?).ok()?;
                        let subject = names.get(at)?.clone();
                        let from = first.checked_add(r.uvarint()?)?;
                        let to = from.checked_add(r.uvarint()?)?;
                        (to <= last).then_some(Extent {
                            subject,
                            first: from,
                            last: to,
                        })
                    })()
                    .ok_or(bad("removed run subject"))?;
                    extents.push(extent);
                }
                extents.sort_unstable_by(|x, y| x.subject.cmp(&y.subject));
                if extents.windows(2).any(|w| w[0].subject == w[1].subject) {
                    return Err(bad("removed run subject"));
                }
                Subjects::Known(extents)
            };
            out.put(first, last, subjects);
            prev = last;
        }
        Ok(out)
    }
}

fn removed(first: u64, last: u64, subjects: Subjects) -> Removed {
    Removed {
        first,
        last,
        subjects: match subjects {
            Subjects::Any => Vec::new(),
            Subjects::Known(extents) => extents.iter().map(|e| e.subject.to_string()).collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// What happened at one position of the model stream.
    #[derive(Debug, Clone, PartialEq)]
    enum Pos {
        Live(String),
        /// Removed, told to readers of its subject.
        Told(String),
        /// Removed in silence (its own TTL).
        Silent,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Publish(usize),
        /// Remove the n-th live message (modulo), told or in silence.
        Remove(usize, bool),
        Forget(u64),
    }

    const SUBJECTS: [&str; 5] = ["a.x", "a.y", "b.x", "b.y", "c"];
    const FILTERS: [&str; 6] = ["a.x", "a.*", "*.y", ">", "c", "d"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..SUBJECTS.len()).prop_map(Op::Publish),
            3 => (0usize..64, any::<bool>()).prop_map(|(n, told)| Op::Remove(n, told)),
            1 => (0u64..40).prop_map(Op::Forget),
        ]
    }

    /// Whether the model has a live message in `a..=b`.
    fn live_in(model: &BTreeMap<u64, Pos>, a: u64, b: u64) -> bool {
        model.range(a..=b).any(|(_, p)| matches!(p, Pos::Live(_)))
    }

    proptest! {
        /// Against a model of the stream: a reader of any filter that steps from message to
        /// message, asking what it is told between, is told of every removed position of its
        /// subjects at or above the forgotten bound, never across a live message it matches,
        /// and (while no run was folded) never of removals that are not its own; the runs stay
        /// ascending, disjoint, free of live messages (while none was folded) and within their
        /// bounds; and they survive index.db's encoding.
        #[test]
        fn readers_are_told_exactly_their_removals(
            ops in proptest::collection::vec(op(), 0..80),
            runs in prop_oneof![2usize..6, Just(1000)],
            subjects in prop_oneof![1usize..3, Just(16)],
            filter in 0..FILTERS.len(),
        ) {
            let bounds = Bounds { runs, subjects };
            let mut removals = Removals::with_bounds(bounds);
            let mut model: BTreeMap<u64, Pos> = BTreeMap::new();
            let mut forgotten = 0u64;
            for op in ops {
                match op {
                    Op::Publish(s) => {
                        let seq = model.len() as u64 + 1;
                        model.insert(seq, Pos::Live(SUBJECTS[s].to_owned()));
                    }
                    Op::Remove(n, told) => {
                        let live: Vec<u64> = model
                            .iter()
                            .filter(|(_, p)| matches!(p, Pos::Live(_)))
                            .map(|(s, _)| *s)
                            .collect();
                        if live.is_empty() {
                            continue;
                        }
                        let seq = live[n % live.len()];
                        let Some(Pos::Live(subject)) = model.get(&seq).cloned() else {
                            continue;
                        };
                        if told {
                            model.insert(seq, Pos::Told(subject.clone()));
                            let snapshot = model.clone();
                            removals.record(seq, Some(Arc::from(subject.as_str())), |a, b| {
                                live_in(&snapshot, a, b)
                            });
                        } else {
                            model.insert(seq, Pos::Silent);
                        }
                    }
                    Op::Forget(below) => {
                        // As the store's `expired_below`: never past the first live message.
                        let first_live = model
                            .iter()
                            .find(|(_, p)| matches!(p, Pos::Live(_)))
                            .map_or(model.len() as u64 + 1, |(s, _)| *s);
                        let below = below.min(first_live);
                        forgotten = forgotten.max(below);
                        removals.forget_below(below);
                    }
                }
            }
            let folded = removals.folds() > 0;
            // The runs' own rules.
            let runs: Vec<(u64, u64, Subjects)> =
                removals.runs().map(|(f, l, s)| (f, l, s.clone())).collect();
            prop_assert!(runs.len() <= bounds.runs);
            for w in runs.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "disjoint and ascending: {runs:?}");
            }
            for (first, last, subjects) in &runs {
                prop_assert!(first <= last && *first >= forgotten);
                if let Subjects::Known(extents) = subjects {
                    prop_assert!(!extents.is_empty() && extents.len() <= bounds.subjects);
                    for e in extents.iter().filter(|_| !folded) {
                        let told = Some(Pos::Told(e.subject.to_string()));
                        prop_assert!(first <= &e.first && e.first <= e.last && e.last <= *last);
                        prop_assert!(
                            model.get(&e.first).cloned() == told || e.first == forgotten,
                            "an extent begins at a removal of its subject (or where the rest \
                             was forgotten)"
                        );
                        prop_assert_eq!(
                            model.get(&e.last).cloned(),
                            told,
                            "an extent ends at a removal of its subject"
                        );
                    }
                }
                if !folded {
                    prop_assert!(!live_in(&model, *first, *last), "no live message in {runs:?}");
                }
            }
            let mut bytes = Vec::new();
            removals.encode(&mut bytes);
            let last_seq = model.len() as u64;
            let decoded = Removals::decode(&mut Reader::new(&bytes), last_seq.max(1))
                .expect("its own encoding decodes");
            prop_assert_eq!(&decoded, &removals);

            // A reader from 1.
            let f = FilterSet::new([FILTERS[filter]]).unwrap();
            let matches = |p: &Pos, live: bool| match p {
                Pos::Live(s) => live && f.matches(s),
                Pos::Told(s) => !live && f.matches(s),
                Pos::Silent => false,
            };
            let mut told: Vec<(u64, u64)> = Vec::new();
            let mut from = 1;
            while from <= last_seq {
                let next = model
                    .range(from..)
                    .find(|(_, p)| matches(p, true))
                    .map_or(last_seq + 1, |(s, _)| *s);
                match removals.told(from, next - 1, &f) {
                    Some(r) => {
                        prop_assert!(from <= r.first && r.first <= r.last && r.last < next);
                        prop_assert!(r.subjects.iter().all(|s| f.matches(s)));
                        if !folded {
                            prop_assert!(
                                model.range(r.first..=r.last).any(|(_, p)| matches(p, false)),
                                "told {r:?} of nothing of its own: {model:?}"
                            );
                        }
                        told.push((r.first, r.last));
                        from = r.last + 1;
                    }
                    None => from = next + 1,
                }
            }
            for (seq, p) in model.range(forgotten..) {
                if matches(p, false) {
                    prop_assert!(
                        told.iter().any(|(a, b)| (a..=b).contains(&seq)),
                        "removed {seq} ({p:?}) passed in silence: told {told:?}, runs {runs:?}"
                    );
                }
            }
        }
    }

    /// The per-subject limit superseding message after message of a few subjects keeps one
    /// run, whatever the number of removals.
    #[test]
    fn superseded_messages_of_few_subjects_keep_one_run() {
        let mut removals = Removals::default();
        let subjects = ["a", "b", "c"];
        // Positions 1..=300, the last three live; each removal supersedes the one 3 back.
        for seq in 1..=297u64 {
            let subject = Arc::from(subjects[(seq as usize - 1) % 3]);
            removals.record(seq, Some(subject), |_, b| b >= 298);
        }
        assert_eq!(removals.len(), 1);
        let f = FilterSet::new(["b"]).unwrap();
        let told = removals.told(1, 297, &f).expect("told");
        assert_eq!((told.first, told.last), (2, 296));
        assert_eq!(told.subjects, ["b"]);
        assert_eq!(removals.told(1, 297, &FilterSet::new(["d"]).unwrap()), None);
    }
}
