//! Selector sets: all the selectors of one subscription, with a normalised key so that
//! connections asking for the same selectors share one feed (as `/events` shares one per topic
//! set), matched once per update for all of them.

use crate::selector::{Selector, SelectorError, SelectorKind, TopicInput};

/// The most selectors one subscription may have (Mercure's limit).
pub const MAX_SELECTORS: usize = 100;

/// The most bytes of compiled URL patterns one subscription may hold, all its selectors
/// together (each is also bounded by [`crate::pattern::MAX_PATTERN_BYTES`]).
pub const MAX_SET_PATTERN_BYTES: usize = 1024 * 1024;

/// A set's identity: its distinct `(kind, selector)` pairs, sorted. Two sets with equal keys
/// select exactly the same topics; a set holding `*` is keyed as `*` alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SetKey(Vec<(SelectorKind, String)>);

impl SetKey {
    /// The `(kind, selector)` pairs, sorted and distinct.
    pub fn entries(&self) -> &[(SelectorKind, String)] {
        &self.0
    }
}

/// Why a set of selectors was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    /// No selector parameter at all.
    #[error("no selector: give at least one topic=, match= or match_urlpattern= parameter")]
    Empty,
    /// More than [`MAX_SELECTORS`] selectors.
    #[error("more than {max} selectors")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// Its URL patterns together compile to more than [`MAX_SET_PATTERN_BYTES`].
    #[error(
        "the URL patterns compile to {bytes} bytes together, more than the {max} one subscription may hold"
    )]
    TooLarge {
        /// Their compiled size, in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// One selector parameter was refused.
    #[error(transparent)]
    Selector(#[from] SelectorError),
}

/// A subscription's selectors, compiled, distinct and in key order.
///
/// The set lives as long as its feed, so it holds only the compiled selectors: its key is made
/// from them when asked for, not kept as a second copy of their texts.
#[derive(Debug)]
pub struct SelectorSet {
    selectors: Vec<Selector>,
}

impl SelectorSet {
    /// The set of `selectors` (duplicates dropped; `*` makes the others moot).
    pub fn new(selectors: Vec<Selector>) -> Result<SelectorSet, SetError> {
        if selectors.is_empty() {
            return Err(SetError::Empty);
        }
        if selectors.len() > MAX_SELECTORS {
            return Err(SetError::TooMany { max: MAX_SELECTORS });
        }
        let bytes: usize = selectors.iter().map(Selector::compiled_bytes).sum();
        if bytes > MAX_SET_PATTERN_BYTES {
            return Err(SetError::TooLarge {
                bytes,
                max: MAX_SET_PATTERN_BYTES,
            });
        }
        let mut selectors = selectors;
        if let Some(any) = selectors.iter().position(|s| s.kind() == SelectorKind::Any) {
            selectors.swap(0, any);
            selectors.truncate(1);
        }
        selectors.sort_by(|a, b| (a.kind(), a.as_str()).cmp(&(b.kind(), b.as_str())));
        selectors.dedup_by(|a, b| a.kind() == b.kind() && a.as_str() == b.as_str());
        // A set lives as long as its feed: keep no spare room from the query's parsing.
        selectors.shrink_to_fit();
        Ok(SelectorSet { selectors })
    }

    /// The set a subscription's query parameters ask for: every selector parameter (see
    /// [`Selector::from_query`]), other parameters ignored. `base` is the hub's base URL for
    /// relative URL patterns ([`crate::DEFAULT_BASE_URL`] when it has none).
    pub fn from_query<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        base: &str,
    ) -> Result<SelectorSet, SetError> {
        let mut selectors = Vec::new();
        let mut bytes = 0usize;
        for (key, value) in pairs {
            if let Some(selector) = Selector::from_query(key, value, base)? {
                if selectors.len() == MAX_SELECTORS {
                    return Err(SetError::TooMany { max: MAX_SELECTORS });
                }
                // Refused as soon as the budget is spent, before the rest are compiled.
                bytes += selector.compiled_bytes();
                if bytes > MAX_SET_PATTERN_BYTES {
                    return Err(SetError::TooLarge {
                        bytes,
                        max: MAX_SET_PATTERN_BYTES,
                    });
                }
                selectors.push(selector);
            }
        }
        Self::new(selectors)
    }

    /// The set's normalised key (made on each call: the selectors are already in key order).
    pub fn key(&self) -> SetKey {
        SetKey(
            self.selectors
                .iter()
                .map(|s| (s.kind(), s.as_str().to_owned()))
                .collect(),
        )
    }

    /// The selectors, distinct and in key order.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// Whether the set holds `*`.
    pub fn selects_everything(&self) -> bool {
        self.selectors.iter().any(|s| s.kind() == SelectorKind::Any)
    }

    /// Whether any selector selects any of `topics` (an update's canonical and alternate topics).
    /// Each topic is parsed as a URL at most once, however many URL patterns the set holds.
    pub fn matches_any(&self, topics: &[&str]) -> bool {
        any_selects(&self.selectors, topics)
    }
}

/// Whether any of `selectors` selects any of `topics`, each topic parsed as a URL at most once.
pub(crate) fn any_selects<'a>(
    selectors: impl IntoIterator<Item = &'a Selector> + Clone,
    topics: &[&str],
) -> bool {
    topics.iter().any(|topic| {
        let mut input = TopicInput::default();
        selectors
            .clone()
            .into_iter()
            .any(|selector| selector.matches_input(topic, &mut input))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::DEFAULT_BASE_URL;

    fn set(pairs: &[(&str, &str)]) -> SelectorSet {
        SelectorSet::from_query(pairs.iter().copied(), DEFAULT_BASE_URL).unwrap()
    }

    #[test]
    fn the_key_ignores_order_and_duplicates() {
        let a = set(&[("topic", "/b"), ("topic", "/a/{x}"), ("topic", "/b")]);
        let b = set(&[("topic", "/a/{x}"), ("topic", "/b")]);
        assert_eq!(a.key(), b.key());
        assert_eq!(a.selectors().len(), 2);
    }

    #[test]
    fn the_key_tells_kinds_apart() {
        let template = set(&[("topic", "/a/{x}")]);
        let exact = set(&[("match", "/a/{x}")]);
        assert_ne!(template.key(), exact.key());
    }

    #[test]
    fn a_wildcard_set_is_keyed_as_the_wildcard_alone() {
        let a = set(&[
            ("topic", "/a"),
            ("topic", "*"),
            ("match_urlpattern", "/b/:x"),
        ]);
        let b = set(&[("match", "*")]);
        assert_eq!(a.key(), b.key());
        assert!(a.selects_everything());
    }

    #[test]
    fn an_update_matches_through_any_of_its_topics() {
        let s = set(&[
            ("topic", "/books/{id}"),
            ("match_urlpattern", "/authors/:id"),
        ]);
        assert!(s.matches_any(&["/books/1"]));
        assert!(
            s.matches_any(&["/other", "/authors/2"]),
            "an alternate topic"
        );
        assert!(!s.matches_any(&["/other", "/books/1/reviews"]));
        assert!(!s.matches_any(&[]));
    }

    #[test]
    fn sets_are_bounded_and_never_empty() {
        assert_eq!(
            SelectorSet::from_query([("lastEventID", "x")], DEFAULT_BASE_URL).unwrap_err(),
            SetError::Empty
        );
        let many: Vec<String> = (0..=MAX_SELECTORS).map(|i| format!("/t/{i}")).collect();
        let pairs = many.iter().map(|t| ("topic", t.as_str()));
        assert_eq!(
            SelectorSet::from_query(pairs, DEFAULT_BASE_URL).unwrap_err(),
            SetError::TooMany { max: MAX_SELECTORS }
        );
        let error = SelectorSet::from_query([("match_foo", "x")], DEFAULT_BASE_URL).unwrap_err();
        assert!(error.to_string().contains("match_foo"), "{error}");
    }

    /// URL patterns of about 16 KiB compiled each: a subscription holds at most
    /// [`MAX_SET_PATTERN_BYTES`] of them, and is refused, naming the budget, beyond it.
    #[test]
    fn a_sets_compiled_patterns_stay_within_its_budget() {
        let patterns: Vec<String> = (0..100)
            .map(|i| format!("https://ex.com/:x{i}([a-z]+)/:y(\\d{{1,9}})"))
            .collect();
        let pairs = |n: usize| {
            patterns[..n]
                .iter()
                .map(|p| ("match_urlpattern", p.as_str()))
        };
        let set = SelectorSet::from_query(pairs(40), DEFAULT_BASE_URL).unwrap();
        let held: usize = set.selectors().iter().map(Selector::compiled_bytes).sum();
        assert!(held > 40 * 4096 && held <= MAX_SET_PATTERN_BYTES, "{held}");
        let error = SelectorSet::from_query(pairs(100), DEFAULT_BASE_URL).unwrap_err();
        assert!(
            matches!(
                error,
                SetError::TooLarge {
                    max: MAX_SET_PATTERN_BYTES,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("one subscription may hold"),
            "{error}"
        );
    }

    use proptest::prelude::*;

    fn pair() -> impl Strategy<Value = (&'static str, String)> {
        (
            prop::sample::select(vec!["topic", "match", "match_urlpattern"]),
            prop_oneof![
                Just("*".to_owned()),
                "/[ab]{0,2}(/\\{x\\})?",
                "/[ab]{0,2}(/:x)?",
            ],
        )
    }

    proptest! {
        #[test]
        fn the_key_and_matching_ignore_order_and_repeats(
            pairs in prop::collection::vec(pair(), 1..6),
            topics in prop::collection::vec("/[ab]{0,2}(/[ab{}x]{1,3})?", 0..3),
        ) {
            let query = |pairs: &[(&'static str, String)]| {
                SelectorSet::from_query(pairs.iter().map(|(k, v)| (*k, v.as_str())), DEFAULT_BASE_URL)
                    .unwrap()
            };
            let mut reordered = pairs.clone();
            reordered.reverse();
            reordered.push(pairs[0].clone());
            let (a, b) = (query(&pairs), query(&reordered));
            prop_assert_eq!(a.key(), b.key());
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            prop_assert_eq!(a.matches_any(&topics), b.matches_any(&topics));
            let one_by_one = pairs.iter().any(|(k, v)| {
                Selector::from_query(k, v, DEFAULT_BASE_URL)
                    .unwrap()
                    .unwrap()
                    .matches_any(&topics)
            });
            prop_assert_eq!(a.matches_any(&topics), one_by_one);
        }
    }
}
