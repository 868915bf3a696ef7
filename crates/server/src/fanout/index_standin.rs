//! Stand-in for `sluice_protocol::subject_index` (brute force), replaced when it lands.

use sluice_protocol::subject::filter_matches;

/// Filters mapped to keys.
#[derive(Debug)]
pub struct SubjectIndex<K> {
    pairs: Vec<(String, K)>,
}

impl<K> Default for SubjectIndex<K> {
    fn default() -> Self {
        Self { pairs: Vec::new() }
    }
}

impl<K: Copy + Eq + std::hash::Hash> SubjectIndex<K> {
    /// Adds.
    pub fn insert(&mut self, filter: &str, key: K) {
        if !self.pairs.iter().any(|(f, k)| f == filter && *k == key) {
            self.pairs.push((filter.to_owned(), key));
        }
    }
    /// Removes.
    pub fn remove(&mut self, filter: &str, key: K) -> bool {
        let before = self.pairs.len();
        self.pairs.retain(|(f, k)| !(f == filter && *k == key));
        before != self.pairs.len()
    }
    /// Matches.
    pub fn matches(&self, subject: &str, out: &mut Vec<K>) {
        let start = out.len();
        for (f, k) in &self.pairs {
            if filter_matches(f, subject) && !out[start..].contains(k) {
                out.push(*k);
            }
        }
    }
}
