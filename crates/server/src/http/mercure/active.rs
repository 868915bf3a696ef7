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

use sluice_mercure::subscription::{Selection, Subscription, subscription_topic};

/// The most subscriptions one table lists.
pub const MAX_LISTED: usize = 100_000;

/// One listed subscription and the node that serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The node's identifier (the `Mercure-Node` header of its events).
    pub node: String,
    /// The subscription, as its start event carried it.
    pub doc: Subscription,
    /// The stream position of that start event.
    pub start: u64,
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

    /// The start event at `seq` of `node`'s subscription `doc`, read at `now`.
    pub fn start(&mut self, node: &str, doc: Subscription, seq: u64, now: Instant) -> Started {
        self.renew(node, now);
        let id = doc.id();
        if let Some(listed) = self.listed.get_mut(&id) {
            // Announced again by the node serving it: only an end of this newer start ends it.
            if listed.node == node {
                listed.start = listed.start.max(seq);
            }
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
            start: seq,
        };
        self.listed.insert(id, listed);
        Started::Listed
    }

    /// An end event of `node`'s subscription `id`, read at `now`, ending the start at stream
    /// position `ends` (`None`: whichever is listed). An end of another start than the listed
    /// one (an earlier start, announced again since) leaves it listed.
    pub fn end(&mut self, node: &str, id: &str, ends: Option<u64>, now: Instant) {
        self.renew(node, now);
        let Some(listed) = self.listed.get(id) else {
            return;
        };
        if ends.is_some_and(|start| start != listed.start) {
            return;
        }
        let node = listed.node.clone();
        self.listed.remove(id);
        if let Some(state) = self.nodes.get_mut(&node) {
            state.owned -= 1;
            if state.owned == 0 {
                self.nodes.remove(&node);
            }
        }
    }

    /// Every node is taken as heard of at `now` (nothing could be heard until now).
    pub fn renew_all(&mut self, now: Instant) {
        for state in self.nodes.values_mut() {
            state.seen = state.seen.max(now);
        }
    }

    /// `node` was heard of at `now` (an event or a lease message of its own).
    pub fn renew(&mut self, node: &str, now: Instant) {
        if let Some(state) = self.nodes.get_mut(node) {
            state.seen = state.seen.max(now);
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

    /// The subscriptions made with `selection`.
    pub fn with_selection(&self, selection: &Selection) -> Vec<Subscription> {
        let prefix = format!("{}/", selection.collection_id());
        self.listed
            .range(prefix.clone()..)
            .take_while(|(id, _)| id.starts_with(&prefix))
            .filter(|(_, listed)| listed.doc.selection == *selection)
            .map(|(_, listed)| listed.doc.clone())
            .collect()
    }

    /// The subscription of `subscriber` made with `selection`, if listed.
    pub fn one(&self, selection: &Selection, subscriber: &str) -> Option<Subscription> {
        let id = subscription_topic(selection, subscriber);
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
    use sluice_mercure::selector::MatchType;

    use super::*;

    fn topic(selector: &str) -> Selection {
        Selection::Topic(selector.into())
    }

    fn doc(selector: &str, subscriber: &str) -> Subscription {
        Subscription::new(topic(selector), subscriber, true, None)
    }

    #[test]
    fn starts_list_and_ends_unlist() {
        let now = Instant::now();
        let mut table = Table::new("me".into());
        table.start("a", doc("/books/{id}", "urn:1"), 1, now);
        table.start("a", doc("/books", "urn:1"), 2, now);
        table.start("b", doc("/books/{id}", "urn:2"), 3, now);
        let exact = Selection::Match {
            match_type: MatchType::Exact,
            pattern: "/books".into(),
        };
        table.start(
            "b",
            Subscription::new(exact.clone(), "urn:2", true, None),
            4,
            now,
        );
        assert_eq!(table.len(), 4);
        assert_eq!(table.with_selection(&topic("/books/{id}")).len(), 2);
        assert_eq!(
            table.with_selection(&topic("/books")).len(),
            1,
            "not a prefix match"
        );
        assert_eq!(table.with_selection(&exact).len(), 1, "the draft's apart");
        assert!(table.one(&topic("/books"), "urn:1").is_some());
        table.end("a", &doc("/books", "urn:1").id(), None, now);
        assert_eq!(table.one(&topic("/books"), "urn:1"), None);
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn an_end_of_an_earlier_start_leaves_the_listed_one() {
        let now = Instant::now();
        let mut table = Table::new("me".into());
        let id = doc("/a", "urn:1").id();
        table.start("a", doc("/a", "urn:1"), 7, now);
        table.end("a", &id, Some(3), now);
        assert_eq!(table.len(), 1);
        table.end("a", &id, Some(7), now);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn silent_nodes_expire_but_the_own_node_never_does() {
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        let mut table = Table::new("me".into());
        table.start("me", doc("/a", "urn:0"), 1, start);
        table.start("a", doc("/a", "urn:1"), 2, start);
        table.start("b", doc("/a", "urn:2"), 3, start);
        table.renew("b", start + Duration::from_secs(20));
        let gone = table.expire(start + Duration::from_secs(31), Some(lease));
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].node.as_str(), gone[0].start), ("a", 2));
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
        table.start("a", doc("/a", "urn:1"), 5, now);
        table.advance(3, 1);
        assert_eq!(table.position(), (5, 1));
        table.advance(2, 7);
        assert_eq!((table.position(), table.len()), ((2, 7), 0));
        for n in 0..MAX_LISTED {
            table.start("a", doc("/a", &n.to_string()), 1, now);
        }
        assert_eq!(
            table.start("a", doc("/a", "one more"), 1, now),
            Started::Full
        );
    }
}
