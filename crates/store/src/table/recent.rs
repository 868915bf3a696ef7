//! Where a reader's recent state is in the table: the latest message of each subject it
//! reads, and the first of its last N messages. Both come from the per-subject index and the
//! block ranges it keeps; neither reads a message that is not asked for.

use std::sync::Arc;

use super::{BlockEntry, SubjectSummary, Table};
use crate::error::Result;
use crate::proto::{FilterSet, is_literal};

impl Table {
    /// The subjects with live messages that `filter` matches: a literal filter is one lookup,
    /// a wildcard is matched against each subject's name (no message is read).
    pub fn matching_subjects(&self, filter: &FilterSet) -> Vec<Arc<str>> {
        if filter.iter().all(is_literal) {
            let mut subjects: Vec<Arc<str>> = filter
                .iter()
                .filter_map(|s| self.subjects.get_key_value(s).map(|(k, _)| k.clone()))
                .collect();
            subjects.sort_unstable();
            subjects.dedup();
            return subjects;
        }
        self.subjects
            .keys()
            .filter(|s| filter.matches(s))
            .cloned()
            .collect()
    }

    /// The latest live sequence of each subject `filter` matches at or below `upto`, as far as
    /// the subject index knows it (unordered), and the subjects it does not know it of, to be
    /// looked up with [`Table::latest_of`]: one pass over the matching subjects, no block read.
    pub fn latest_known(&self, filter: &FilterSet, upto: u64) -> (Vec<u64>, Vec<Arc<str>>) {
        let (mut known, mut unknown) = (Vec::new(), Vec::new());
        let mut sort = |subject: &Arc<str>, summary: &SubjectSummary| match summary.last_seq {
            0 => unknown.push(subject.clone()),
            last if last <= upto => known.push(last),
            // Its latest message is above the bound: an older one is looked up.
            _ => unknown.push(subject.clone()),
        };
        if filter.iter().all(is_literal) {
            let mut literals: Vec<&str> = filter.iter().collect();
            literals.dedup();
            for (subject, summary) in literals
                .iter()
                .filter_map(|s| self.subjects.get_key_value(*s))
            {
                sort(subject, summary);
            }
        } else {
            for (subject, summary) in self.subjects.iter().filter(|(s, _)| filter.matches(s)) {
                sort(subject, summary);
            }
        }
        (known, unknown)
    }

    /// The last live sequence of each of `subjects` at or below `upto`, in the subjects' order
    /// (a subject with none is left out): one index lookup each, reading at most the block
    /// that holds it.
    pub fn latest_of(&mut self, subjects: &[Arc<str>], upto: u64) -> Result<Vec<u64>> {
        let mut latest = Vec::with_capacity(subjects.len());
        for subject in subjects {
            let Some(seq) = self.last_for_subject(subject, upto)? else {
                continue;
            };
            // At or above the stream's end, it is the subject's last: remembered.
            if upto >= self.last_seq
                && let Some(summary) = self.subjects.get_mut(subject)
            {
                summary.last_seq = seq;
            }
            latest.push(seq);
        }
        Ok(latest)
    }

    /// The first of the `n` most recent live messages `filter` matches at or below `upto`:
    /// the first matching one when fewer match, `upto + 1` when none does or `n` is 0. Blocks
    /// are visited newest first, only those the matching subjects may be in, and each is
    /// searched from its end, so the work is bounded by the messages counted (and, for a
    /// wildcard, the other messages between them).
    pub fn last_n_start(&mut self, filter: &FilterSet, n: u64, upto: u64) -> Result<u64> {
        let mut start = upto.saturating_add(1);
        let subjects = self.matching_subjects(filter);
        let Some((lo, hi)) = subjects
            .iter()
            .filter_map(|s| self.subjects.get(s))
            .map(|s| (s.first_block, s.last_block))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
        else {
            return Ok(start);
        };
        let ids: Vec<u32> = self
            .blocks
            .range(lo..=hi)
            .rev()
            .filter(|(_, b)| b.stats.msgs > 0 && b.stats.first <= upto)
            .map(|(id, _)| *id)
            .collect();
        let mut wanted = n;
        for id in ids {
            if wanted == 0 {
                break;
            }
            let block = self.load(id)?;
            let (counted, oldest) = newest_matches(block, filter, &subjects, upto, wanted);
            wanted -= counted;
            if let Some(seq) = oldest {
                start = seq;
            }
        }
        Ok(start)
    }
}

/// Counts up to `wanted` of the newest messages of a loaded block at or below `upto` that
/// `filter` matches; answers how many it counted and the oldest of them.
fn newest_matches(
    block: &BlockEntry,
    filter: &FilterSet,
    subjects: &[Arc<str>],
    upto: u64,
    wanted: u64,
) -> (u64, Option<u64>) {
    let take = usize::try_from(wanted).unwrap_or(usize::MAX);
    let counted: Vec<u64> = match subjects {
        // One subject: its own sequences in the block.
        [one] => block
            .by_subject
            .get(one)
            .map(|set| set.range(..=upto).rev().take(take).copied().collect())
            .unwrap_or_default(),
        _ => block
            .msgs
            .range(..=upto)
            .rev()
            .filter(|(_, m)| filter.matches(&m.subject))
            .take(take)
            .map(|(seq, _)| *seq)
            .collect(),
    };
    (counted.len() as u64, counted.last().copied())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::table_of;
    use super::*;

    /// The model: the messages as `(seq, subject)`, ascending.
    fn latest_model(messages: &[(u64, &str)], filter: &FilterSet, upto: u64) -> Vec<u64> {
        let mut latest = std::collections::BTreeMap::new();
        for &(seq, subject) in messages {
            if seq <= upto && filter.matches(subject) {
                latest.insert(subject, seq);
            }
        }
        let mut seqs: Vec<u64> = latest.into_values().collect();
        seqs.sort_unstable();
        seqs
    }

    fn last_n_model(messages: &[(u64, &str)], filter: &FilterSet, n: u64, upto: u64) -> u64 {
        let matching: Vec<u64> = messages
            .iter()
            .filter(|(seq, s)| *seq <= upto && filter.matches(s))
            .map(|(seq, _)| *seq)
            .collect();
        let n = usize::try_from(n).unwrap();
        match matching.len() {
            _ if n == 0 => upto + 1,
            0 => upto + 1,
            len if len <= n => matching[0],
            len => matching[len - n],
        }
    }

    const SUBJECTS: [&str; 5] = ["a.x", "a.y", "b.x", "b.y.z", "c"];
    const FILTERS: [&[&str]; 6] = [
        &["a.x"],
        &["a.*"],
        &["a.x", "c"],
        &[">"],
        &["*.x", "b.>"],
        &["nothing"],
    ];

    proptest! {
        /// Whatever the messages and the filter: the latest of each matching subject at or
        /// below the bound, and the first of the last N matching, are what the model says.
        #[test]
        fn recent_positions_are_what_the_model_says(
            picks in proptest::collection::vec(0usize..SUBJECTS.len(), 0..60),
            filter in 0usize..FILTERS.len(),
            n in 0u64..70,
            upto in 0u64..70,
        ) {
            let messages: Vec<(u64, &str)> = picks
                .iter()
                .enumerate()
                .map(|(i, &p)| (i as u64 + 1, SUBJECTS[p]))
                .collect();
            let filter = FilterSet::new(FILTERS[filter].iter().copied()).unwrap();
            let mut table = table_of(&messages);
            let subjects = table.matching_subjects(&filter);
            let mut latest = table.latest_of(&subjects, upto).unwrap();
            latest.sort_unstable();
            prop_assert_eq!(&latest, &latest_model(&messages, &filter, upto));
            // Through what the index knows, twice: the second time it knows more.
            for _ in 0..2 {
                let (mut known, unknown) = table.latest_known(&filter, upto);
                known.extend(table.latest_of(&unknown, upto).unwrap());
                known.sort_unstable();
                prop_assert_eq!(&known, &latest);
            }
            prop_assert_eq!(
                table.last_n_start(&filter, n, upto).unwrap(),
                last_n_model(&messages, &filter, n, upto)
            );
        }
    }
}
