//! A set of sequences kept as disjoint inclusive ranges: a block's deleted sequences, or a
//! stream's lost positions, cost one entry per run, never one per sequence.

use std::collections::BTreeMap;

/// Disjoint, non-adjacent inclusive ranges `start → end`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// The set of `ranges`, which must be ascending, disjoint and not adjacent (checked by the
    /// caller, e.g. the index.db decoder).
    pub fn from_sorted(ranges: Vec<(u64, u64)>) -> Self {
        Self {
            ranges: ranges.into_iter().collect(),
        }
    }

    /// Whether `seq` is in the set.
    pub fn contains(&self, seq: u64) -> bool {
        self.ranges
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, end)| *end >= seq)
    }

    /// Adds `start..=end`, merging with the ranges it touches.
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start > end {
            return;
        }
        // A range ending at `start - 1` or later that starts at or before `start` absorbs it.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e.saturating_add(1) >= start
        {
            start = s;
            end = end.max(e);
        }
        // Every range starting inside `start..=end + 1` is absorbed.
        let absorbed: Vec<(u64, u64)> = self
            .ranges
            .range(start..=end.saturating_add(1))
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in absorbed {
            self.ranges.remove(&s);
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }

    /// The smallest sequence at or above `from` that is not in the set.
    pub fn next_absent(&self, from: u64) -> u64 {
        match self.ranges.range(..=from).next_back() {
            Some((_, end)) if *end >= from => end.saturating_add(1),
            _ => from,
        }
    }

    /// The first range with a sequence in `[from, upto]` (unclipped); none when `from > upto`.
    pub fn first_overlapping(&self, from: u64, upto: u64) -> Option<(u64, u64)> {
        if from > upto {
            return None;
        }
        if let Some((&start, &end)) = self.ranges.range(..=from).next_back()
            && end >= from
        {
            return Some((start, end));
        }
        let (&start, &end) = self.ranges.range(from..=upto).next()?;
        Some((start, end))
    }

    /// The first sequence at or above `from` that is in the set.
    pub fn next_present(&self, from: u64) -> Option<u64> {
        if self.contains(from) {
            return Some(from);
        }
        self.ranges.range(from..).next().map(|(start, _)| *start)
    }

    /// Number of sequences in the set (saturating: one range may span every sequence).
    pub fn len(&self) -> u64 {
        self.ranges.iter().fold(0u64, |n, (s, e)| {
            n.saturating_add((e - s).saturating_add(1))
        })
    }

    /// Number of ranges.
    pub fn ranges_len(&self) -> usize {
        self.ranges.len()
    }

    /// The ranges, ascending, as `(start, end)`.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(s, e)| (*s, *e))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The set answers membership and the next absent sequence exactly like a plain set of
        /// its sequences, and its ranges stay disjoint and non-adjacent.
        #[test]
        fn behaves_like_a_set_of_sequences(
            inserts in proptest::collection::vec((0u64..64, 0u64..6), 0..40),
            probe in 0u64..72,
        ) {
            let mut set = RangeSet::default();
            let mut model = BTreeSet::new();
            for (start, n) in inserts {
                set.insert(start, start + n);
                model.extend(start..=start + n);
            }
            prop_assert_eq!(set.contains(probe), model.contains(&probe));
            prop_assert_eq!(set.len(), model.len() as u64);
            let next = (probe..).find(|s| !model.contains(s)).unwrap();
            prop_assert_eq!(set.next_absent(probe), next);
            let upto = (probe + 3).saturating_sub(probe % 5);
            let overlap = set.first_overlapping(probe, upto);
            let first_in = (probe..=upto).find(|s| model.contains(s));
            prop_assert_eq!(overlap.map(|(a, _)| probe.max(a)), first_in);
            if let Some((a, b)) = overlap {
                prop_assert!((a..=b).all(|s| model.contains(&s)));
            }
            let ranges: Vec<_> = set.ranges().collect();
            for w in ranges.windows(2) {
                prop_assert!(w[0].1 + 1 < w[1].0);
            }
        }
    }
}
