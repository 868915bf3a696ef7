//! Mercure selectors, both ways: `Selector::from_query` never panics on any parameter and value;
//! what it accepts is a protocol string within `MAX_SELECTOR_LEN`, is `*` exactly when it
//! selects everything, compares exactly when it is exact, and selects itself when it is a URI
//! Template; what it refuses is refused naming the parameter. A set of the selector given twice
//! holds it once, and matches an update's topics exactly when the selector matches one of them.
//!
//! Input: a parameter byte (`0`: `topic`, `1`: `match`, `2`: `match_exact`, `3`:
//! `match_urlpattern`, `4`: `match_<value>` (unknown), else `other`), then `<value>` and
//! `\n`-separated topics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_mercure::selector::MAX_SELECTOR_LEN;
use sluice_mercure::{DEFAULT_BASE_URL, Selector, SelectorError, SelectorKind, SelectorSet};

fuzz_target!(|data: &[u8]| {
    let [choice, rest @ ..] = data else { return };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let mut lines = text.split('\n');
    let value = lines.next().unwrap_or_default();
    let topics: Vec<&str> = lines.take(8).collect();
    let unknown = format!("match_{value}");
    let key = match choice % 6 {
        0 => "topic",
        1 => "match",
        2 => "match_exact",
        3 => "match_urlpattern",
        4 => unknown.as_str(),
        _ => "other",
    };
    let known = matches!(key, "topic" | "match" | "match_exact" | "match_urlpattern");
    let selector = match Selector::from_query(key, value, DEFAULT_BASE_URL) {
        Ok(Some(selector)) => selector,
        Ok(None) => {
            assert_eq!(key, "other");
            return;
        }
        Err(SelectorError::UnknownParameter { param }) => {
            assert!(!known, "{key:?} is known");
            assert!(key.starts_with(param.trim_end_matches('…')), "{param:?}");
            return;
        }
        Err(SelectorError::Invalid { param, .. }) => {
            assert_eq!(param, key);
            return;
        }
    };
    assert!(known, "{key:?} accepted");
    assert_eq!(selector.as_str(), value);
    assert!(value.len() <= MAX_SELECTOR_LEN);
    assert!(!value.chars().any(char::is_control), "{value:?}");
    assert_eq!(selector.kind() == SelectorKind::Any, value == "*");
    for topic in &topics {
        let matched = selector.matches(topic);
        match selector.kind() {
            SelectorKind::Any => assert!(matched),
            SelectorKind::Exact => assert_eq!(matched, value == *topic),
            SelectorKind::Template | SelectorKind::UrlPattern => {}
        }
    }
    if selector.kind() == SelectorKind::Template {
        assert!(selector.matches(value), "a template selects its own text");
    }
    let set = SelectorSet::from_query([(key, value), (key, value)], DEFAULT_BASE_URL)
        .expect("accepted once, accepted twice");
    assert_eq!(set.selectors().len(), 1);
    assert_eq!(set.matches_any(&topics), selector.matches_any(&topics));
});
