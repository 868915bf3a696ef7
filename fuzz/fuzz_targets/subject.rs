//! Subjects and filters, both directions: accepted ⇔ grammar, and matching, subset and overlap
//! consistent with a reference matcher. Input: `<filter>` or `<filter>\n<subject>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{reference_match, split_line, subject_grammar};
use sluice_protocol::subject::{
    FilterSet, filter_is_subset, filter_matches, filters_overlap, validate_filter, validate_subject,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = split_line(text);
    for value in [Some(a), b].into_iter().flatten() {
        assert_eq!(
            validate_subject(value).is_ok(),
            subject_grammar(value, false),
            "{value:?}"
        );
        assert_eq!(
            validate_filter(value).is_ok(),
            subject_grammar(value, true),
            "{value:?}"
        );
    }
    // Valid ⇒ accepted, on a value built to be valid from the input's letters.
    let built: String = a
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() || c == '.' {
                '_'
            } else {
                c
            }
        })
        .take(64)
        .collect();
    if !built.is_empty() && built != "*" && built != ">" {
        let subject = format!("{built}.x.{built}");
        assert!(validate_subject(&subject).is_ok(), "{subject:?}");
        assert!(
            validate_filter(&format!("{subject}.*.>")).is_ok(),
            "{subject:?}"
        );
    }
    let Some(b) = b else { return };
    if validate_filter(a).is_ok() && validate_subject(b).is_ok() {
        assert_eq!(filter_matches(a, b), reference_match(a, b), "{a:?} {b:?}");
        assert_eq!(filter_is_subset(b, a), filter_matches(a, b), "{a:?} {b:?}");
        assert!(filters_overlap(a, b) == filter_matches(a, b), "{a:?} {b:?}");
    }
    if validate_filter(a).is_ok() && validate_filter(b).is_ok() {
        assert!(filter_is_subset(a, a));
        assert_eq!(filters_overlap(a, b), filters_overlap(b, a));
        if filter_is_subset(a, b) {
            assert!(filters_overlap(a, b), "{a:?} ⊆ {b:?} but no overlap");
        }
        let set = FilterSet::new([a, b]).unwrap();
        assert_eq!(set, FilterSet::new([b, a, b]).unwrap());
        assert!(set.covers(a) && set.covers(b));
    }
});
