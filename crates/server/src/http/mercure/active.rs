//! The table of active subscriptions every node keeps: the subscription events of the served
//! stream folded in order (a start adds, an end removes), with the hub node that owns each one,
//! so that any node lists every node's subscribers. A node that stops renewing its lease (no
//! event or lease message from it for `mercure.subscriptions_lease`) is taken for dead and its
//! subscriptions are dropped ([`Table::expire`]); the caller publishes their ends.
//!
//! Bounded: at most [`MAX_LISTED`] subscriptions (further starts are not listed, with a
//! warning), and only nodes owning a listed subscription are tracked.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sluice_mercure::subscription::{Subscription, collection_id, subscription_topic};

/// The most subscriptions one table lists.
pub const MAX_LISTED: usize = 100_000;

/// One listed subscription and the node that serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The node's identifier (the `Mercure-Node` header of its events).
    pub node: String,
    /// The subscription's document, as its start event carried it.
    pub doc: Subscription,
}

/// A node owning listed subscriptions: when it was last heard of, and how many it owns.
#[derive(Debug)]
struct NodeState {
    seen: Instant,
    owned: usize,
}

/// What the stream says is active, as of [`Table::position`].
#[derive(Debug)]
pub struct Table {
    node: String,
    incarnation: u64,
    position: u64,
    /// By subscription topic: a selector's subscriptions are one key range.
    listed: BTreeMap<String, Listed>,
    nodes: HashMap<String, NodeState>,
}

/// What applying a start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Listed (or already listed).
    Listed,
    /// Not listed: the table holds [`MAX_LISTED`] subscriptions.
    Full,
}

impl Table {
    /// An empty table kept by node `node` (whose own subscriptions it never expires).
    pub fn new(node: String) -> Self {
        Self {
            node,
            incarnation: 0,
            position: 0,
            listed: BTreeMap::new(),
            nodes: HashMap::new(),
        }
    }

    /// The stream position every event up to which is folded in (0: none yet), and its
    /// incarnation.
    pub fn position(&self) -> (u64, u64) {
        (self.position, self.incarnation)
    }

    /// Everything up to `seq` of stream incarnation `incarnation` is folded in. Another
    /// incarnation (the stream was replaced) starts over empty.
    pub fn advance(&mut self, seq: u64, incarnation: u64) {
        if incarnation != self.incarnation {
            self.listed.clear();
            self.nodes.clear();
            self.incarnation = incarnation;
            self.position = 0;
        }
        self.position = self.position.max(seq);
    }

    /// A start or end event of `node`'s subscription `doc`, read at `now`.
    pub fn apply(&mut self, node: &str, doc: Subscription, now: Instant) -> Started {
        self.renew(node, now);
        if !doc.active {
            self.remove(&doc.id);
            return Started::Listed;
        }
        if self.listed.contains_key(&doc.id) {
            return Started::Listed;
        }
        if self.listed.len() >= MAX_LISTED {
            return Started::Full;
        }
        self.nodes
            .entry(node.to_owned())
            .or_insert(NodeState {
                seen: now,
                owned: 0,
            })
            .owned += 1;
        let listed = Listed {
            node: node.to_owned(),
            doc,
        };
        self.listed.insert(listed.doc.id.clone(), listed);
        Started::Listed
    }

    /// `node` was heard of at `now` (an event or a lease message of its own).
    pub fn renew(&mut self, node: &str, now: Instant) {
        if let Some(state) = self.nodes.get_mut(node) {
            state.seen = state.seen.max(now);
        }
    }

    fn remove(&mut self, id: &str) {
        let Some(listed) = self.listed.remove(id) else {
            return;
        };
        if let Some(state) = self.nodes.get_mut(&listed.node) {
            state.owned -= 1;
            if state.owned == 0 {
                self.nodes.remove(&listed.node);
            }
        }
    }

    /// Drops the subscriptions of every other node not heard of for `lease` (every other node
    /// when `lease` is `None`) and returns them, to publish their ends.
    pub fn expire(&mut self, now: Instant, lease: Option<Duration>) -> Vec<Listed> {
        let dead: Vec<String> = self
            .nodes
            .iter()
            .filter(|(node, state)| {
                **node != self.node
                    && lease.is_none_or(|lease| now.saturating_duration_since(state.seen) > lease)
            })
            .map(|(node, _)| node.clone())
            .collect();
        if dead.is_empty() {
            return Vec::new();
        }
        for node in &dead {
            self.nodes.remove(node);
        }
        let (gone, kept) = std::mem::take(&mut self.listed)
            .into_iter()
            .partition(|(_, listed)| dead.contains(&listed.node));
        self.listed = kept;
        gone.into_values().collect()
    }

    /// Every listed subscription, in topic order.
    pub fn all(&self) -> Vec<Subscription> {
        self.listed.values().map(|l| l.doc.clone()).collect()
    }

    /// The subscriptions made with `selector`.
    pub fn with_selector(&self, selector: &str) -> Vec<Subscription> {
        let prefix = format!("{}/", collection_id(Some(selector)));
        self.listed
            .range(prefix.clone()..)
            .take_while(|(id, _)| id.starts_with(&prefix))
            .filter(|(_, listed)| listed.doc.topic == selector)
            .map(|(_, listed)| listed.doc.clone())
            .collect()
    }

    /// The subscription of `subscriber` made with `selector`, if listed.
    pub fn one(&self, selector: &str, subscriber: &str) -> Option<Subscription> {
        let id = subscription_topic(selector, subscriber);
        self.listed.get(&id).map(|listed| listed.doc.clone())
    }

    /// How many subscriptions are listed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.listed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(selector: &str, subscriber: &str, active: bool) -> Subscription {
        Subscription::new(selector, subscriber, active, None)
    }

    #[test]
    fn starts_list_and_ends_unlist() {
        let now = Instant::now();
        let mut table = Table::new("me".into());
        table.apply("a", doc("/books/{id}", "urn:1", true), now);
        table.apply("a", doc("/books", "urn:1", true), now);
        table.apply("b", doc("/books/{id}", "urn:2", true), now);
        assert_eq!(table.len(), 3);
        assert_eq!(table.with_selector("/books/{id}").len(), 2);
        assert_eq!(table.with_selector("/books").len(), 1, "not a prefix match");
        assert!(table.one("/books", "urn:1").is_some());
        table.apply("a", doc("/books", "urn:1", false), now);
        assert_eq!(table.one("/books", "urn:1"), None);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn silent_nodes_expire_but_the_own_node_never_does() {
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        let mut table = Table::new("me".into());
        table.apply("me", doc("/a", "urn:0", true), start);
        table.apply("a", doc("/a", "urn:1", true), start);
        table.apply("b", doc("/a", "urn:2", true), start);
        table.renew("b", start + Duration::from_secs(20));
        let gone = table.expire(start + Duration::from_secs(31), Some(lease));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].node, "a");
        assert_eq!(table.len(), 2);
        let gone = table.expire(start + Duration::from_secs(31), None);
        assert_eq!(gone.len(), 1, "every other node, at once");
        assert_eq!(table.all()[0].subscriber, "urn:0");
    }

    #[test]
    fn another_incarnation_starts_over_and_the_table_is_bounded() {
        let now = Instant::now();
        let mut table = Table::new("me".into());
        table.advance(5, 1);
        table.apply("a", doc("/a", "urn:1", true), now);
        table.advance(3, 1);
        assert_eq!(table.position(), (5, 1));
        table.advance(2, 7);
        assert_eq!((table.position(), table.len()), ((2, 7), 0));
        for n in 0..MAX_LISTED {
            table.apply("a", doc("/a", &n.to_string(), true), now);
        }
        assert_eq!(
            table.apply("a", doc("/a", "one more", true), now),
            Started::Full
        );
    }
}
