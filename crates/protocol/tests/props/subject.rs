//! Subjects and filters: the validators accept exactly the grammar, and matching, subset and
//! overlap agree with a reference token matcher over an exhaustive universe of subjects.

use proptest::prelude::*;
use sluice_protocol::subject::{
    FilterSet, MAX_SUBJECT_LEN, filter_is_subset, filter_matches, filters_overlap, is_literal,
    validate_filter, validate_subject,
};

/// The grammar, restated independently of the implementation.
fn grammar_holds(value: &str, filter: bool) -> bool {
    let tokens: Vec<&str> = value.split('.').collect();
    !value.is_empty()
        && value.len() <= MAX_SUBJECT_LEN
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
        && tokens.iter().all(|t| !t.is_empty())
        && tokens.iter().enumerate().all(|(i, t)| match *t {
            "*" => filter,
            ">" => filter && i == tokens.len() - 1,
            _ => true,
        })
}

/// A reference matcher: `*` is one token, `>` one or more.
fn reference_match(filter: &[&str], subject: &[&str]) -> bool {
    match (filter.split_first(), subject.split_first()) {
        (None, None) => true,
        (Some((&">", _)), Some(_)) => true,
        (Some((f, f_rest)), Some((s, s_rest))) => {
            (*f == "*" || f == s) && reference_match(f_rest, s_rest)
        }
        _ => false,
    }
}

fn matches_ref(filter: &str, subject: &str) -> bool {
    let f: Vec<&str> = filter.split('.').collect();
    let s: Vec<&str> = subject.split('.').collect();
    reference_match(&f, &s)
}

/// Every subject of 1 to 5 tokens over `a`, `b`, `c` and `q` (which stands for any token the
/// filters do not name). Filters of at most 4 tokens over `a`, `b`, `c` cannot tell apart two
/// subjects this universe does not already tell apart, so it decides subset and overlap exactly.
fn universe() -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    let mut layer = vec![String::new()];
    for _ in 0..5 {
        let mut next = Vec::new();
        for prefix in &layer {
            for t in ["a", "b", "c", "q"] {
                next.push(if prefix.is_empty() {
                    t.to_owned()
                } else {
                    format!("{prefix}.{t}")
                });
            }
        }
        all.extend(next.iter().cloned());
        layer = next;
    }
    all
}

/// Filters of 1 to 4 tokens over a small alphabet, `*` anywhere, `>` only last.
fn small_filter() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "*"]), 0..4),
        any::<bool>(),
    )
        .prop_filter_map("non-empty", |(mut tokens, full)| {
            if full {
                tokens.push(">");
            }
            (!tokens.is_empty()).then(|| tokens.join("."))
        })
}

/// A literal token: no dot, whitespace or control character, not a lone wildcard.
fn literal_token() -> impl Strategy<Value = String> {
    "[^.\\s\\p{Cc}]{1,12}".prop_filter("not a wildcard", |t| t != "*" && t != ">")
}

/// Strings over an alphabet rich in the characters the grammar cares about.
fn tricky_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "b", ".", "*", ">", " ", "\t", "\n", "\r", "\0", "\u{7f}", "\u{85}", "\u{a0}",
            "\u{2028}", "é", "ab*", "x>",
        ]),
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_subjects_are_accepted(tokens in prop::collection::vec(literal_token(), 1..8)) {
        let subject = tokens.join(".");
        prop_assert_eq!(validate_subject(&subject), Ok(()));
        prop_assert_eq!(validate_filter(&subject), Ok(()));
    }

    #[test]
    fn generated_filters_are_accepted(
        tokens in prop::collection::vec(prop_oneof![literal_token(), Just("*".to_owned())], 0..6),
        full in any::<bool>(),
    ) {
        let mut tokens = tokens;
        if full || tokens.is_empty() {
            tokens.push(">".to_owned());
        }
        let filter = tokens.join(".");
        prop_assert_eq!(validate_filter(&filter), Ok(()));
        let wild = tokens.iter().any(|t| t == "*" || t == ">");
        prop_assert_eq!(validate_subject(&filter).is_err(), wild);
    }

    #[test]
    fn validators_accept_exactly_the_grammar(value in prop_oneof![tricky_string(), any::<String>()]) {
        prop_assert_eq!(validate_subject(&value).is_ok(), grammar_holds(&value, false), "{:?}", value);
        if validate_filter(&value).is_ok() {
            prop_assert_eq!(is_literal(&value), validate_subject(&value).is_ok(), "{:?}", value);
        }
        prop_assert_eq!(validate_filter(&value).is_ok(), grammar_holds(&value, true), "{:?}", value);
    }

    #[test]
    fn length_limit_is_exact(token in "[a-z]{1,8}", extra in 0usize..3) {
        let value = token.repeat(MAX_SUBJECT_LEN / token.len() + 1);
        let at_limit = &value[..MAX_SUBJECT_LEN - extra];
        prop_assert_eq!(validate_subject(at_limit), Ok(()));
        prop_assert!(validate_subject(&value[..MAX_SUBJECT_LEN + 1]).is_err());
    }

    #[test]
    fn matching_agrees_with_the_reference(filter in small_filter()) {
        for subject in universe() {
            prop_assert_eq!(
                filter_matches(&filter, &subject),
                matches_ref(&filter, &subject),
                "{} vs {}", filter, subject
            );
        }
    }

    #[test]
    fn subset_is_exact(inner in small_filter(), outer in small_filter()) {
        let expected = universe()
            .iter()
            .all(|s| !matches_ref(&inner, s) || matches_ref(&outer, s));
        prop_assert_eq!(filter_is_subset(&inner, &outer), expected, "{} in {}", inner, outer);
        // A literal subject is inside a filter exactly when the filter matches it.
        for subject in universe().iter().take(84) {
            prop_assert_eq!(filter_is_subset(subject, &outer), filter_matches(&outer, subject));
        }
    }

    #[test]
    fn overlap_is_exact(a in small_filter(), b in small_filter()) {
        let expected = universe().iter().any(|s| matches_ref(&a, s) && matches_ref(&b, s));
        prop_assert_eq!(filters_overlap(&a, &b), expected, "{} and {}", a, b);
        prop_assert_eq!(filters_overlap(&b, &a), expected);
    }

    #[test]
    fn filter_set_keeps_the_meaning_and_is_canonical(
        filters in prop::collection::vec(small_filter(), 0..6),
        seed in any::<u64>(),
    ) {
        let set = FilterSet::new(filters.iter().cloned()).unwrap();
        for subject in universe() {
            prop_assert_eq!(set.matches(&subject), filters.iter().any(|f| matches_ref(f, &subject)));
        }
        let mut shuffled = filters.clone();
        shuffled.extend(filters.iter().take(2).cloned());
        let n = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % n);
        shuffled.reverse();
        prop_assert_eq!(&FilterSet::new(shuffled).unwrap(), &set);
        prop_assert_eq!(&FilterSet::new(set.iter()).unwrap(), &set);
        let members = set.as_slice();
        prop_assert!(members.windows(2).all(|w| w[0] < w[1]));
        for (i, a) in members.iter().enumerate() {
            for (j, b) in members.iter().enumerate() {
                prop_assert!(i == j || !filter_is_subset(a, b), "{} redundant with {}", a, b);
            }
        }
    }
}
