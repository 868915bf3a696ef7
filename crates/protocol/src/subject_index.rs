//! An index of subject filters: which keys' filters match a subject.
//!
//! [`SubjectIndex`] maps filters (validated with [`validate_filter`](crate::subject::validate_filter))
//! to keys, and answers, for a subject, every key one of whose filters matches it, with exactly
//! the semantics of [`filter_matches`](crate::subject::filter_matches): tokens split on `.`, `*`
//! one token, `>` one or more trailing tokens. A hub node uses it to hand each message it reads
//! from the backend to exactly the feeds that deliver it.
//!
//! It is laid out as nats-server's sublist:
//!
//! - **literal filters** (no wildcard, the common case: one topic per user, `user.42`) sit in one
//!   hash map keyed by the whole filter, so a subject costs one hash lookup however many there are;
//! - **filters whose only wildcard is a last `*`** (`doc.9f3.*`: one document's kinds) sit in a
//!   second hash map keyed by the literal part before it, looked up with the subject less its
//!   last token: also one lookup, and no trie nodes per filter;
//! - **other wildcard filters** sit in a token trie: per level a map of literal children, one `*` child,
//!   the keys of filters ending there and the keys of filters ending with `>` there.
//!
//! # Costs
//!
//! [`matches`](SubjectIndex::matches) costs one lookup of the subject among the literal filters,
//! one of its prefix among the filters ending in `*` (only when there are such filters), then,
//! only when there are other wildcard filters, a walk of the trie along the subject's tokens (at
//! each level the literal child and the `*` child), plus the keys it appends: O(matching keys +
//! subject tokens), never O(all keys). It allocates nothing beyond `out` growing, with one
//! exception: a key is reported once even when several of its filters match, and that
//! deduplication only runs when some key has more than one filter *and* more than one filter
//! matched; it scans the keys found when they are few and otherwise uses a hash set sized for
//! them. [`insert`](SubjectIndex::insert) and [`remove`](SubjectIndex::remove) cost O(filter
//! tokens) plus a few hash operations; a node left empty by a removal is freed at once, and a map
//! left sparse is shrunk, so the index holds no memory for filters no longer present.
//!
//! Memory, for a key of 8 bytes on a 64-bit target: a literal filter with one key takes one slot
//! of 32 bytes (`Box<str>` and the key inline) plus a control byte in the literal map, the
//! filter's bytes in their own allocation (a 10-byte filter takes a 32-byte chunk from the
//! allocator), and one 16-byte slot plus a control byte in the count of filters per key. With
//! the tables between 7/16 and 7/8 full, a 10-byte literal filter for one key costs about
//! 90–140 bytes (the unit test `literal_filter_for_one_key_costs_well_under_200_bytes` computes
//! it from the tables' capacities). A filter shared by several keys holds them in a hash set. A
//! trie node takes 88 bytes, inline next to its token in its parent's map or boxed as a `*` child.
//!
//! # Example
//!
//! ```
//! use sluice_protocol::subject_index::SubjectIndex;
//!
//! let mut index = SubjectIndex::new();
//! index.insert("user.42", 1u32);
//! index.insert("user.*", 2);
//! index.insert("*.42", 2); // a second filter for key 2
//! index.insert("audit.>", 3);
//!
//! let mut found = Vec::new();
//! index.matches("user.42", &mut found);
//! found.sort_unstable();
//! assert_eq!(found, [1, 2]); // key 2 once, although both of its filters match
//!
//! found.clear();
//! index.matches("audit.login.ok", &mut found);
//! assert_eq!(found, [3]);
//!
//! assert!(index.remove("user.*", 2));
//! assert_eq!(index.len(), 3);
//! ```

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::iter::TakeWhile;
use std::str::Split;

use crate::subject::{FULL_WILDCARD, SINGLE_WILDCARD, is_literal};

/// Filters mapped to keys; answers which keys' filters match a subject.
///
/// See the [module docs](self) for the layout and its costs.
#[derive(Debug)]
pub struct SubjectIndex<K> {
    /// Filters without a wildcard, by the one subject each matches.
    literal: HashMap<Box<str>, Keys<K>>,
    /// Filters `<literal>.*`, by their literal part.
    last_any: HashMap<Box<str>, Keys<K>>,
    /// Filters with a wildcard, token by token; the root stands for the empty prefix.
    wildcard: Node<K>,
    /// How many filters each key has, to know whether a match can name a key twice.
    filters_per_key: HashMap<K, u32>,
    /// Keys with more than one filter; while there are none, `matches` never deduplicates.
    keys_with_several_filters: usize,
    /// Number of (filter, key) pairs.
    len: usize,
}

impl<K> Default for SubjectIndex<K> {
    fn default() -> Self {
        Self {
            literal: HashMap::new(),
            last_any: HashMap::new(),
            wildcard: Node::default(),
            filters_per_key: HashMap::new(),
            keys_with_several_filters: 0,
            len: 0,
        }
    }
}

impl<K: Copy + Eq + Hash> SubjectIndex<K> {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `filter` (already validated with `validate_filter`) for `key`. The same (filter, key)
    /// added twice is kept once.
    pub fn insert(&mut self, filter: &str, key: K) {
        let added = match Class::of(filter) {
            Class::Literal => insert_keyed(&mut self.literal, filter, key),
            Class::LastAny(prefix) => insert_keyed(&mut self.last_any, prefix, key),
            Class::Wildcard => self.wildcard.insert(filter, key),
        };
        if added {
            self.count_added(key);
        }
    }

    /// Removes `filter` for `key`; true if it was there. Nodes left empty are freed, so the index
    /// holds no memory for filters no longer present.
    pub fn remove(&mut self, filter: &str, key: K) -> bool {
        let removed = match Class::of(filter) {
            Class::Literal => remove_keyed(&mut self.literal, filter, key),
            Class::LastAny(prefix) => remove_keyed(&mut self.last_any, prefix, key),
            Class::Wildcard => self.wildcard.remove(filter, key),
        };
        if removed {
            self.count_removed(key);
        }
        removed
    }

    /// Appends to `out` every key one of whose filters matches `subject`, each key once even when
    /// several of its filters match (`a.*` and `*.b` both match `a.b`). Order unspecified.
    pub fn matches(&self, subject: &str, out: &mut Vec<K>) {
        let start = out.len();
        // How many key sets (one per matching filter) were appended: a key can only appear twice
        // when it sits in two of them.
        let mut sets = 0;
        if let Some(keys) = self.literal.get(subject) {
            sets += usize::from(keys.append_to(out));
        }
        if !self.last_any.is_empty()
            && let Some((prefix, _last)) = subject.rsplit_once('.')
            && let Some(keys) = self.last_any.get(prefix)
        {
            sets += usize::from(keys.append_to(out));
        }
        if !self.wildcard.is_empty() {
            self.wildcard.collect(subject.split('.'), out, &mut sets);
        }
        if sets > 1 && self.keys_with_several_filters > 0 {
            dedupe_from(out, start);
        }
    }

    /// Number of (filter, key) pairs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the index holds no filter.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn count_added(&mut self, key: K) {
        let count = self.filters_per_key.entry(key).or_insert(0);
        *count += 1;
        if *count == 2 {
            self.keys_with_several_filters += 1;
        }
        self.len += 1;
    }

    fn count_removed(&mut self, key: K) {
        if let Some(count) = self.filters_per_key.get_mut(&key) {
            *count -= 1;
            match *count {
                0 => {
                    self.filters_per_key.remove(&key);
                    shrink_if_sparse(&mut self.filters_per_key);
                }
                1 => self.keys_with_several_filters -= 1,
                _ => {}
            }
        }
        self.len -= 1;
    }
}

/// Where a filter is kept.
enum Class<'a> {
    /// No wildcard: in the literal map.
    Literal,
    /// `<literal>.*`: in the map of filters ending in `*`, under the literal part.
    LastAny(&'a str),
    /// Any other: in the trie.
    Wildcard,
}

impl<'a> Class<'a> {
    fn of(filter: &'a str) -> Self {
        if is_literal(filter) {
            return Class::Literal;
        }
        match filter.strip_suffix(".*") {
            Some(prefix) if is_literal(prefix) => Class::LastAny(prefix),
            _ => Class::Wildcard,
        }
    }
}

/// Adds `key` under `name` in `map`; false when it was already there.
fn insert_keyed<K: Copy + Eq + Hash>(
    map: &mut HashMap<Box<str>, Keys<K>>,
    name: &str,
    key: K,
) -> bool {
    match map.get_mut(name) {
        Some(keys) => keys.insert(key),
        None => {
            map.insert(name.into(), Keys::One(key));
            true
        }
    }
}

/// Removes `key` under `name` from `map`, and the entry once it has no key; true if it was
/// there.
fn remove_keyed<K: Copy + Eq + Hash>(
    map: &mut HashMap<Box<str>, Keys<K>>,
    name: &str,
    key: K,
) -> bool {
    let Some(keys) = map.get_mut(name) else {
        return false;
    };
    let removed = keys.remove(key);
    if keys.is_empty() {
        map.remove(name);
        shrink_if_sparse(map);
    }
    removed
}

/// One level of the wildcard trie: the filters whose tokens so far lead here.
#[derive(Debug)]
struct Node<K> {
    /// Children by literal token.
    children: HashMap<Box<str>, Node<K>>,
    /// The child for a `*` token.
    any: Option<Box<Node<K>>>,
    /// Keys of the filters ending here.
    here: Keys<K>,
    /// Keys of the filters ending with `>` right after this level.
    rest: Keys<K>,
}

impl<K> Default for Node<K> {
    fn default() -> Self {
        Self {
            children: HashMap::new(),
            any: None,
            here: Keys::Empty,
            rest: Keys::Empty,
        }
    }
}

/// The tokens of a filter before its `>` (all of them when it has none).
type Path<'a> = TakeWhile<Split<'a, char>, fn(&&str) -> bool>;

/// Splits `filter` into the trie path it is stored under and whether it ends with `>`. Like
/// `filter_matches`, a `>` takes the rest of the filter, so an unvalidated `a.>.b` is `a.>`.
fn path_of(filter: &str) -> (Path<'_>, bool) {
    let before_full: fn(&&str) -> bool = |token| *token != FULL_WILDCARD;
    let ends_in_full = filter.split('.').any(|token| token == FULL_WILDCARD);
    (filter.split('.').take_while(before_full), ends_in_full)
}

impl<K: Copy + Eq + Hash> Node<K> {
    /// Adds `key` for `filter` below this node; false when it was already there.
    fn insert(&mut self, filter: &str, key: K) -> bool {
        let (path, ends_in_full) = path_of(filter);
        let mut node = self;
        for token in path {
            node = if token == SINGLE_WILDCARD {
                node.any.get_or_insert_with(Box::default)
            } else {
                node.children.entry(token.into()).or_default()
            };
        }
        if ends_in_full {
            node.rest.insert(key)
        } else {
            node.here.insert(key)
        }
    }

    /// Removes `key` for `filter` below this node, freeing the nodes left empty; true if it was
    /// there.
    fn remove(&mut self, filter: &str, key: K) -> bool {
        let (path, ends_in_full) = path_of(filter);
        let Some(end) = self.descend_mut(path.clone()) else {
            return false;
        };
        let removed = if ends_in_full {
            end.rest.remove(key)
        } else {
            end.here.remove(key)
        };
        if removed && end.is_empty() {
            self.prune(path);
        }
        removed
    }

    /// Cuts the chain of nodes along `path` that holds nothing but the emptied node at its end.
    ///
    /// Walks the path twice (once to find where the chain starts, once to cut it) rather than
    /// recursing, so the stack stays flat however deep the filter.
    fn prune(&mut self, path: Path<'_>) {
        // The deepest node on the path that keeps something besides the branch along the path:
        // everything below it holds only the chain down to the emptied node.
        let mut cut = 0;
        let mut node: &Node<K> = self;
        for (depth, token) in path.clone().enumerate() {
            if node.branches() > 1 || !node.here.is_empty() || !node.rest.is_empty() {
                cut = depth;
            }
            let Some(child) = node.child(token) else {
                return;
            };
            node = child;
        }
        let mut tokens = path;
        let mut node = self;
        for token in tokens.by_ref().take(cut) {
            let Some(child) = node.child_mut(token) else {
                return;
            };
            node = child;
        }
        if let Some(token) = tokens.next() {
            node.remove_child(token);
        }
    }

    /// Appends the keys of the filters below this node that match the remaining `tokens`.
    fn collect(&self, mut tokens: Split<'_, char>, out: &mut Vec<K>, sets: &mut usize) {
        let Some(token) = tokens.next() else {
            *sets += usize::from(self.here.append_to(out));
            return;
        };
        // At least this token is left, so the filters ending with `>` here match.
        *sets += usize::from(self.rest.append_to(out));
        if let Some(child) = self.children.get(token) {
            child.collect(tokens.clone(), out, sets);
        }
        if let Some(any) = &self.any {
            any.collect(tokens, out, sets);
        }
    }

    fn descend_mut(&mut self, path: Path<'_>) -> Option<&mut Node<K>> {
        let mut node = self;
        for token in path {
            node = node.child_mut(token)?;
        }
        Some(node)
    }

    fn child(&self, token: &str) -> Option<&Node<K>> {
        if token == SINGLE_WILDCARD {
            self.any.as_deref()
        } else {
            self.children.get(token)
        }
    }

    fn child_mut(&mut self, token: &str) -> Option<&mut Node<K>> {
        if token == SINGLE_WILDCARD {
            self.any.as_deref_mut()
        } else {
            self.children.get_mut(token)
        }
    }

    fn remove_child(&mut self, token: &str) {
        if token == SINGLE_WILDCARD {
            self.any = None;
        } else {
            self.children.remove(token);
            shrink_if_sparse(&mut self.children);
        }
    }
}

impl<K> Node<K> {
    fn branches(&self) -> usize {
        self.children.len() + usize::from(self.any.is_some())
    }

    fn is_empty(&self) -> bool {
        self.here.is_empty() && self.rest.is_empty() && self.branches() == 0
    }

    /// Trie nodes below this one.
    #[cfg(test)]
    fn descendants(&self) -> usize {
        self.children
            .values()
            .chain(self.any.as_deref())
            .map(|child| 1 + child.descendants())
            .sum()
    }
}

/// The keys of one filter: inline while there is one, a set once there are several.
#[derive(Debug)]
enum Keys<K> {
    Empty,
    One(K),
    #[expect(
        clippy::box_collection,
        reason = "boxed, the set is 8 bytes in every slot instead of 48; filters shared by several keys are the rare case"
    )]
    Many(Box<HashSet<K>>),
}

impl<K: Copy + Eq + Hash> Keys<K> {
    /// False when `key` was already there.
    fn insert(&mut self, key: K) -> bool {
        match self {
            Keys::Empty => {
                *self = Keys::One(key);
                true
            }
            Keys::One(one) if *one == key => false,
            Keys::One(one) => {
                *self = Keys::Many(Box::new(HashSet::from([*one, key])));
                true
            }
            Keys::Many(set) => set.insert(key),
        }
    }

    /// True if `key` was there.
    fn remove(&mut self, key: K) -> bool {
        match self {
            Keys::Empty => false,
            Keys::One(one) => {
                let removed = *one == key;
                if removed {
                    *self = Keys::Empty;
                }
                removed
            }
            Keys::Many(set) => {
                let removed = set.remove(&key);
                if set.len() == 1
                    && let Some(&last) = set.iter().next()
                {
                    *self = Keys::One(last);
                } else if is_sparse(set.len(), set.capacity()) {
                    set.shrink_to_fit();
                }
                removed
            }
        }
    }

    /// Appends the keys to `out`; true if there were any.
    fn append_to(&self, out: &mut Vec<K>) -> bool {
        match self {
            Keys::Empty => false,
            Keys::One(one) => {
                out.push(*one);
                true
            }
            Keys::Many(set) => {
                out.extend(set.iter().copied());
                true
            }
        }
    }
}

impl<K> Keys<K> {
    fn is_empty(&self) -> bool {
        matches!(self, Keys::Empty)
    }
}

/// Up to this many keys found, deduplication compares them pairwise instead of hashing them.
const PAIRWISE_DEDUPE_MAX: usize = 16;

/// Drops the repeated keys of `out[start..]`, keeping each one's first place.
fn dedupe_from<K: Copy + Eq + Hash>(out: &mut Vec<K>, start: usize) {
    let mut kept = start;
    if out.len() - start <= PAIRWISE_DEDUPE_MAX {
        for read in start..out.len() {
            let key = out[read];
            if !out[start..kept].contains(&key) {
                out[kept] = key;
                kept += 1;
            }
        }
    } else {
        let mut seen = HashSet::with_capacity(out.len() - start);
        for read in start..out.len() {
            let key = out[read];
            if seen.insert(key) {
                out[kept] = key;
                kept += 1;
            }
        }
    }
    out.truncate(kept);
}

/// True when a table of `capacity` holding `len` entries should give memory back. A quarter is
/// far enough below the point where it grows (7/8) that alternating inserts and removes do not
/// resize it back and forth; an emptied table is freed entirely.
fn is_sparse(len: usize, capacity: usize) -> bool {
    len * 4 < capacity
}

fn shrink_if_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if is_sparse(map.len(), map.capacity()) {
        map.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;
    use crate::subject::filter_matches;

    impl<K> SubjectIndex<K> {
        /// Trie nodes, the root not counted: zero once no wildcard filter is left.
        fn node_count(&self) -> usize {
            self.wildcard.descendants()
        }

        /// True when nothing is held on the heap for filters any more.
        fn holds_nothing(&self) -> bool {
            self.node_count() == 0
                && self.wildcard.is_empty()
                && self.literal.capacity() == 0
                && self.last_any.capacity() == 0
                && self.filters_per_key.capacity() == 0
                && self.keys_with_several_filters == 0
                && self.len == 0
        }
    }

    fn found(index: &SubjectIndex<u32>, subject: &str) -> Vec<u32> {
        let mut out = Vec::new();
        index.matches(subject, &mut out);
        out.sort_unstable();
        out
    }

    fn index_of(pairs: &[(&str, u32)]) -> SubjectIndex<u32> {
        let mut index = SubjectIndex::new();
        for &(filter, key) in pairs {
            index.insert(filter, key);
        }
        index
    }

    #[test]
    fn full_wildcard_alone_matches_every_subject() {
        let index = index_of(&[(">", 1)]);
        for subject in ["a", "a.b", "a.b.c.d"] {
            assert_eq!(found(&index, subject), [1], "{subject}");
        }
    }

    #[test]
    fn single_wildcard_alone_matches_one_token_only() {
        let index = index_of(&[("*", 1)]);
        assert_eq!(found(&index, "a"), [1]);
        assert!(found(&index, "a.b").is_empty());
    }

    #[test]
    fn full_wildcard_needs_a_token_after_its_prefix() {
        let index = index_of(&[("a.>", 1), ("a", 2)]);
        assert_eq!(found(&index, "a"), [2]);
        assert_eq!(found(&index, "a.b"), [1]);
        assert_eq!(found(&index, "a.b.c"), [1]);
        assert!(found(&index, "b.a").is_empty());
    }

    #[test]
    fn two_single_wildcards_need_two_tokens() {
        let index = index_of(&[("*.*", 1)]);
        assert!(found(&index, "a").is_empty());
        assert_eq!(found(&index, "a.b"), [1]);
        assert!(found(&index, "a.b.c").is_empty());
    }

    #[test]
    fn literal_filters_match_the_whole_subject_only() {
        let index = index_of(&[("user.42", 1), ("user.4", 2), ("user", 3)]);
        assert_eq!(found(&index, "user.42"), [1]);
        assert_eq!(found(&index, "user.4"), [2]);
        assert!(found(&index, "user.42.x").is_empty());
        assert!(found(&index, "user.43").is_empty());
    }

    #[test]
    fn a_key_is_reported_once_when_several_of_its_filters_match() {
        let index = index_of(&[("a.*", 1), ("*.b", 1), ("a.b", 1), ("a.>", 1), ("a.b", 2)]);
        assert_eq!(found(&index, "a.b"), [1, 2]);
        assert_eq!(found(&index, "a.c"), [1]);
    }

    #[test]
    fn many_keys_with_several_matching_filters_are_each_reported_once() {
        // More keys than the pairwise comparison handles, so the hash set path runs.
        let mut index = SubjectIndex::new();
        for key in 0..100u32 {
            index.insert("a.*", key);
            index.insert("*.b", key);
        }
        assert_eq!(found(&index, "a.b"), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn matches_appends_and_leaves_what_out_held() {
        let index = index_of(&[("a.*", 1), ("*.b", 1), ("a.b", 2)]);
        let mut out = vec![1, 1];
        index.matches("a.b", &mut out);
        assert_eq!(out[..2], [1, 1]);
        let mut new: Vec<_> = out[2..].to_vec();
        new.sort_unstable();
        assert_eq!(new, [1, 2]);
    }

    #[test]
    fn duplicate_insert_is_kept_once() {
        let mut index = index_of(&[("a.b", 1), ("a.b", 1), ("a.*", 1), ("a.*", 1)]);
        assert_eq!(index.len(), 2);
        assert_eq!(index.keys_with_several_filters, 1);
        assert_eq!(found(&index, "a.b"), [1]);
        assert!(index.remove("a.b", 1));
        assert!(!index.remove("a.b", 1));
        assert!(index.remove("a.*", 1));
        assert!(!index.remove("a.*", 1));
        assert!(index.is_empty());
        assert!(index.holds_nothing());
    }

    #[test]
    fn removing_what_is_not_there_changes_nothing() {
        let mut index = index_of(&[("a.*.c", 1), ("d", 1)]);
        for (filter, key) in [
            ("a.*.c", 2),
            ("a.*", 1),
            ("a.*.c.>", 1),
            ("x.*", 1),
            ("d", 2),
        ] {
            assert!(!index.remove(filter, key), "{filter} {key}");
        }
        assert_eq!(index.len(), 2);
        assert_eq!(index.node_count(), 3);
        assert_eq!(found(&index, "a.b.c"), [1]);
    }

    #[test]
    fn removal_frees_the_nodes_left_empty_and_keeps_the_rest() {
        let mut index = index_of(&[("a.*.c.d", 1), ("a.*.>", 2), ("a.x.>", 3)]);
        // a, a.*, a.*.c, a.*.c.d, a.x
        assert_eq!(index.node_count(), 5);
        assert!(index.remove("a.*.c.d", 1));
        assert_eq!(index.node_count(), 3);
        assert_eq!(found(&index, "a.q.r"), [2]);
        assert_eq!(found(&index, "a.x.y"), [2, 3]);
        assert!(index.remove("a.*.>", 2));
        assert_eq!(index.node_count(), 2);
        assert_eq!(found(&index, "a.x.y"), [3]);
        assert!(index.remove("a.x.>", 3));
        assert!(index.holds_nothing());
    }

    #[test]
    fn a_filter_whose_only_wildcard_is_a_last_star_takes_no_trie_node() {
        let mut index = index_of(&[("doc.9f3.*", 1), ("doc.9f3", 2), ("doc.*.x", 3)]);
        // Only `doc.*.x` is in the trie: doc, doc.*, doc.*.x.
        assert_eq!(index.node_count(), 3);
        assert_eq!(found(&index, "doc.9f3.x"), [1, 3]);
        assert_eq!(found(&index, "doc.9f3.y"), [1]);
        assert_eq!(found(&index, "doc.9f3"), [2]);
        assert!(found(&index, "doc.9f3.y.z").is_empty());
        assert!(found(&index, "doc.9f4.y").is_empty());
        assert!(index.remove("doc.9f3.*", 1));
        assert!(found(&index, "doc.9f3.y").is_empty());
        assert!(index.remove("doc.9f3", 2));
        assert!(index.remove("doc.*.x", 3));
        assert!(index.holds_nothing());
    }

    #[test]
    fn removal_of_an_inner_filter_keeps_the_deeper_ones() {
        let mut index = index_of(&[("a.*", 1), ("a.*.b", 2), (">", 3)]);
        assert!(index.remove("a.*", 1));
        assert_eq!(index.node_count(), 3);
        assert_eq!(found(&index, "a.x"), [3]);
        assert_eq!(found(&index, "a.x.b"), [2, 3]);
        assert!(index.remove(">", 3));
        assert!(index.remove("a.*.b", 2));
        assert!(index.holds_nothing());
    }

    #[test]
    fn a_filter_shared_by_many_keys_shrinks_back_when_they_leave() {
        let mut index = SubjectIndex::new();
        for key in 0..1000u32 {
            index.insert("news", key);
            index.insert("news.*", key);
        }
        assert_eq!(found(&index, "news").len(), 1000);
        for key in 0..1000u32 {
            assert!(index.remove("news", key));
            assert!(index.remove("news.*", key));
        }
        assert!(index.holds_nothing());
    }

    /// Heap bytes of a hash table of `capacity` entries of `T` (hashbrown's layout: a power of two
    /// of buckets at most 7/8 full, a control byte per bucket and one group of trailing ones).
    fn table_bytes<T>(capacity: usize) -> usize {
        if capacity == 0 {
            return 0;
        }
        let buckets = (capacity * 8).div_ceil(7).next_power_of_two();
        buckets * (size_of::<T>() + 1) + 16
    }

    #[test]
    fn literal_filter_for_one_key_costs_well_under_200_bytes() {
        assert_eq!(size_of::<(Box<str>, Keys<u64>)>(), 32);
        assert_eq!(size_of::<Node<u64>>(), 88);
        // glibc hands out at least 32 bytes (with its header) for a 10-byte string.
        let string_bytes = 32;
        let mut costs = Vec::new();
        let mut index = SubjectIndex::new();
        for user in 10_000..30_000u64 {
            let filter = format!("user.{user}");
            assert_eq!(filter.len(), 10);
            index.insert(&filter, user);
            let entries = index.len();
            if entries % 1000 == 0 {
                let heap = table_bytes::<(Box<str>, Keys<u64>)>(index.literal.capacity())
                    + table_bytes::<(u64, u32)>(index.filters_per_key.capacity())
                    + entries * string_bytes;
                costs.push(heap / entries);
            }
        }
        let (least, most) = (costs.iter().min().unwrap(), costs.iter().max().unwrap());
        println!("a 10-byte literal filter for one key costs {least}–{most} bytes");
        assert!(*most < 150, "{costs:?}");
    }

    /// A step of the model test.
    #[derive(Debug, Clone)]
    enum Op {
        Insert(String, u8),
        /// Removes a pair that may or may not be there.
        Remove(String, u8),
        /// Removes the live pair at this index (modulo their number).
        RemoveLive(usize),
    }

    fn token() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["a", "b", "c"])
    }

    fn filter() -> impl Strategy<Value = String> {
        let tokens = prop::collection::vec(prop_oneof![3 => token(), 1 => Just("*")], 0..=3);
        (tokens, any::<bool>()).prop_map(|(mut tokens, full)| {
            if full || tokens.is_empty() {
                tokens.push(">");
            }
            tokens.join(".")
        })
    }

    fn subject() -> impl Strategy<Value = String> {
        prop::collection::vec(token(), 1..=4).prop_map(|tokens| tokens.join("."))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (filter(), 0..6u8).prop_map(|(f, k)| Op::Insert(f, k)),
            1 => (filter(), 0..6u8).prop_map(|(f, k)| Op::Remove(f, k)),
            3 => any::<usize>().prop_map(Op::RemoveLive),
        ]
    }

    fn check(index: &SubjectIndex<u8>, live: &[(String, u8)], subject: &str) {
        let mut out = Vec::new();
        index.matches(subject, &mut out);
        let distinct: HashSet<u8> = out.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            out.len(),
            "{subject}: {out:?} repeats a key"
        );
        let expected: HashSet<u8> = live
            .iter()
            .filter(|(filter, _)| filter_matches(filter, subject))
            .map(|&(_, key)| key)
            .collect();
        assert_eq!(distinct, expected, "{subject} with {live:?}");
    }

    proptest! {
        #[test]
        fn matches_equal_brute_force_over_the_live_filters(
            ops in prop::collection::vec(op(), 1..80),
            subjects in prop::collection::vec(subject(), 1..10),
        ) {
            let mut index = SubjectIndex::new();
            let mut live: Vec<(String, u8)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(filter, key) => {
                        index.insert(&filter, key);
                        if !live.contains(&(filter.clone(), key)) {
                            live.push((filter, key));
                        }
                    }
                    Op::Remove(filter, key) => {
                        let at = live.iter().position(|pair| *pair == (filter.clone(), key));
                        prop_assert_eq!(index.remove(&filter, key), at.is_some());
                        if let Some(at) = at {
                            live.swap_remove(at);
                        }
                    }
                    Op::RemoveLive(at) if !live.is_empty() => {
                        let (filter, key) = live.swap_remove(at % live.len());
                        prop_assert!(index.remove(&filter, key));
                    }
                    Op::RemoveLive(_) => {}
                }
                prop_assert_eq!(index.len(), live.len());
                for subject in &subjects {
                    check(&index, &live, subject);
                }
            }
            for (filter, key) in live.drain(..) {
                prop_assert!(index.remove(&filter, key));
            }
            prop_assert!(index.is_empty());
            prop_assert!(index.holds_nothing(), "{:?}", index);
        }
    }
}
