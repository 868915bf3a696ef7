//! Subjects, subject filters and how they relate.
//!
//! A **subject** names where a message is published: `orders.eu.created`. It is a non-empty
//! sequence of non-empty tokens separated by `.`, at most [`MAX_SUBJECT_LEN`] bytes long, with no
//! whitespace or control characters anywhere, and no token that is exactly `*` or `>` (a token may
//! contain those characters among others, `a*b` is a literal token, as in NATS).
//!
//! A **filter** selects subjects. It follows the same grammar, except that a token may be the
//! wildcard `*` (exactly one token) and the last token may be the wildcard `>` (one or more
//! tokens). `orders.*.created` matches `orders.eu.created`; `orders.>` matches `orders.eu` and
//! `orders.eu.created` but not `orders`.
//!
//! The matching functions ([`filter_matches`], [`filter_is_subset`], [`filters_overlap`]) expect
//! validated input. On anything else they still never panic: they compare token by token,
//! treating a `*` token as any one token and a `>` token as the rest (one or more tokens).

use std::fmt;
use std::sync::Arc;

use crate::quote::shown;

/// The longest subject or filter accepted, in bytes.
///
/// Long enough for any realistic topic hierarchy, short enough that a subject always fits the
/// store's 16-bit length field and an SSE `id:` line with room to spare.
pub const MAX_SUBJECT_LEN: usize = 1024;

/// The wildcard token matching exactly one token.
pub(crate) const SINGLE_WILDCARD: &str = "*";

/// The wildcard token matching one or more trailing tokens.
pub(crate) const FULL_WILDCARD: &str = ">";

/// Why a subject or filter was rejected. Every variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// The value is the empty string.
    #[error("{kind} is empty")]
    Empty {
        /// Whether a subject or a filter was expected.
        kind: SubjectKind,
    },
    /// The value is longer than [`MAX_SUBJECT_LEN`].
    #[error("{kind} {} is {len} bytes long, more than the maximum of {MAX_SUBJECT_LEN}", shown(.value))]
    TooLong {
        /// Whether a subject or a filter was expected.
        kind: SubjectKind,
        /// The rejected value.
        value: String,
        /// Its length in bytes.
        len: usize,
    },
    /// Two consecutive dots, or a dot at the start or end.
    #[error("{kind} {} has an empty token at byte {at}", shown(.value))]
    EmptyToken {
        /// Whether a subject or a filter was expected.
        kind: SubjectKind,
        /// The rejected value.
        value: String,
        /// Byte offset where the empty token starts.
        at: usize,
    },
    /// A whitespace or control character.
    #[error("{kind} {} contains {ch:?} at byte {at}; whitespace and control characters are not allowed", shown(.value))]
    ForbiddenChar {
        /// Whether a subject or a filter was expected.
        kind: SubjectKind,
        /// The rejected value.
        value: String,
        /// The offending character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
    /// A `*` or `>` token in a subject, which must be literal.
    #[error("subject {} contains the wildcard token {token:?}; a publish subject must be literal", shown(.value))]
    Wildcard {
        /// The rejected value.
        value: String,
        /// The wildcard found.
        token: &'static str,
    },
    /// A `>` token in a filter that is not the last token.
    #[error("filter {} has '>' before its last token; '>' may only end a filter", shown(.value))]
    FullWildcardNotLast {
        /// The rejected value.
        value: String,
    },
}

/// Whether a literal subject or a filter was being validated (used in error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectKind {
    /// A publish subject: literal tokens only.
    Subject,
    /// A filter: `*` tokens and a trailing `>` allowed.
    Filter,
}

impl fmt::Display for SubjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubjectKind::Subject => "subject",
            SubjectKind::Filter => "filter",
        })
    }
}

/// Checks the grammar shared by subjects and filters: length, characters, no empty token.
fn validate_common(value: &str, kind: SubjectKind) -> Result<(), SubjectError> {
    if value.is_empty() {
        return Err(SubjectError::Empty { kind });
    }
    if value.len() > MAX_SUBJECT_LEN {
        return Err(SubjectError::TooLong {
            kind,
            value: value.to_owned(),
            len: value.len(),
        });
    }
    if let Some((at, ch)) = value
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || c.is_control())
    {
        return Err(SubjectError::ForbiddenChar {
            kind,
            value: value.to_owned(),
            ch,
            at,
        });
    }
    let mut start = 0;
    for token in value.split('.') {
        if token.is_empty() {
            return Err(SubjectError::EmptyToken {
                kind,
                value: value.to_owned(),
                at: start,
            });
        }
        start += token.len() + 1;
    }
    Ok(())
}

/// Validates a publish subject (see the [module docs](self) for the grammar).
pub fn validate_subject(subject: &str) -> Result<(), SubjectError> {
    if is_plain_ascii_subject(subject) {
        return Ok(());
    }
    validate_common(subject, SubjectKind::Subject)?;
    match subject
        .split('.')
        .find(|t| *t == SINGLE_WILDCARD || *t == FULL_WILDCARD)
    {
        Some(token) => Err(SubjectError::Wildcard {
            value: subject.to_owned(),
            token: if token == SINGLE_WILDCARD {
                SINGLE_WILDCARD
            } else {
                FULL_WILDCARD
            },
        }),
        None => Ok(()),
    }
}

/// The common case of a valid subject in one pass over its bytes: printable ASCII without
/// spaces, no empty token, no wildcard token. Anything else (including every invalid subject)
/// goes through the full check, which names what is wrong.
fn is_plain_ascii_subject(subject: &str) -> bool {
    let bytes = subject.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_SUBJECT_LEN {
        return false;
    }
    let plain_token = |token: &[u8]| !matches!(token, [] | [b'*'] | [b'>']);
    let mut token_start = 0;
    for (at, &byte) in bytes.iter().enumerate() {
        if byte == b'.' {
            if !plain_token(&bytes[token_start..at]) {
                return false;
            }
            token_start = at + 1;
        } else if !byte.is_ascii_graphic() {
            return false;
        }
    }
    plain_token(&bytes[token_start..])
}

/// Validates a subject filter (see the [module docs](self) for the grammar).
pub fn validate_filter(filter: &str) -> Result<(), SubjectError> {
    validate_common(filter, SubjectKind::Filter)?;
    let mut tokens = filter.split('.').peekable();
    while let Some(token) = tokens.next() {
        if token == FULL_WILDCARD && tokens.peek().is_some() {
            return Err(SubjectError::FullWildcardNotLast {
                value: filter.to_owned(),
            });
        }
    }
    Ok(())
}

/// True when `filter` has no wildcard token, i.e. it matches exactly one subject.
pub fn is_literal(filter: &str) -> bool {
    !filter
        .split('.')
        .any(|t| t == SINGLE_WILDCARD || t == FULL_WILDCARD)
}

/// True when `filter` matches `subject`.
pub fn filter_matches(filter: &str, subject: &str) -> bool {
    // Tokens are cut by hand: `str::split` costs more than the comparisons, and this runs for
    // every subject a wildcard read of the subject index passes.
    let (mut filter_rest, mut subject_rest) = (Some(filter.as_bytes()), Some(subject.as_bytes()));
    while let Some(f) = next_token(&mut filter_rest) {
        if f == FULL_WILDCARD.as_bytes() {
            return next_token(&mut subject_rest).is_some();
        }
        match next_token(&mut subject_rest) {
            Some(s) if f == SINGLE_WILDCARD.as_bytes() || f == s => {}
            _ => return false,
        }
    }
    subject_rest.is_none()
}

/// The next `.`-separated token of `rest`, as `split('.')` gives them (an empty text is one
/// empty token); `None` once they are all taken.
fn next_token<'a>(rest: &mut Option<&'a [u8]>) -> Option<&'a [u8]> {
    let text = (*rest)?;
    match text.iter().position(|&b| b == b'.') {
        Some(dot) => {
            *rest = Some(&text[dot + 1..]);
            Some(&text[..dot])
        }
        None => {
            *rest = None;
            Some(text)
        }
    }
}

/// True when every subject matched by `inner` is also matched by `outer`.
///
/// Used to check a requested filter against a grant (`orders.eu.*` is inside `orders.>`) and a
/// request against a stream's subjects. A literal subject is a filter matching only itself, so
/// this also answers "is this subject inside that filter".
pub fn filter_is_subset(inner: &str, outer: &str) -> bool {
    let mut inner_tokens = inner.split('.');
    for o in outer.split('.') {
        let Some(i) = inner_tokens.next() else {
            return false;
        };
        if o == FULL_WILDCARD {
            // `inner` has at least this token left, so it only matches subjects with one more.
            return true;
        }
        if i == FULL_WILDCARD {
            return false;
        }
        if o != SINGLE_WILDCARD && (i == SINGLE_WILDCARD || i != o) {
            return false;
        }
    }
    inner_tokens.next().is_none()
}

/// True when some subject is matched by both `a` and `b`.
pub fn filters_overlap(a: &str, b: &str) -> bool {
    let mut a_tokens = a.split('.');
    let mut b_tokens = b.split('.');
    loop {
        match (a_tokens.next(), b_tokens.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) => {
                if x == FULL_WILDCARD || y == FULL_WILDCARD {
                    return true;
                }
                if x != SINGLE_WILDCARD && y != SINGLE_WILDCARD && x != y {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// A canonical set of validated filters.
///
/// Canonical means: a filter already covered by another one in the set is dropped (`orders.eu`
/// goes when `orders.>` is present), duplicates are dropped, and the rest is sorted. Two sets that
/// differ only in order, repetition or redundant members are therefore equal and hash the same,
/// so the set can key a map of shared backend feeds. The remaining filters may still overlap
/// partially (`a.*` and `*.b`). An empty set matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FilterSet {
    /// Shared: a set is cloned into every place that names a feed (its map key, the dispatch,
    /// the feed), and a clone costs a reference count, not a copy of the filters.
    filters: Arc<[String]>,
}

impl FilterSet {
    /// Validates every filter and builds the canonical set; the first invalid filter is the error.
    pub fn new<I, S>(filters: I) -> Result<Self, SubjectError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut all = Vec::new();
        for filter in filters {
            let filter = filter.into();
            validate_filter(&filter)?;
            all.push(filter);
        }
        all.sort();
        all.dedup();
        let canonical: Vec<String> = all
            .iter()
            .filter(|f| !all.iter().any(|o| o != *f && filter_is_subset(f, o)))
            .cloned()
            .collect();
        Ok(Self {
            filters: canonical.into(),
        })
    }

    /// True when some filter of the set matches `subject`.
    pub fn matches(&self, subject: &str) -> bool {
        self.filters.iter().any(|f| filter_matches(f, subject))
    }

    /// True when a single filter of the set covers every subject `filter` matches.
    ///
    /// Conservative: a filter covered only by the union of several members (`a.>` by `a.*` and
    /// `a.*.>`) is reported as not covered.
    pub fn covers(&self, filter: &str) -> bool {
        self.filters.iter().any(|o| filter_is_subset(filter, o))
    }

    /// True when some subject is matched both by this set and by `filter`.
    pub fn overlaps(&self, filter: &str) -> bool {
        self.filters.iter().any(|o| filters_overlap(filter, o))
    }

    /// The filters, in canonical order.
    pub fn as_slice(&self) -> &[String] {
        &self.filters
    }

    /// The filters, in canonical order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.filters.iter().map(String::as_str)
    }

    /// How many filters remain after canonicalisation.
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    /// True when the set matches nothing.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

/// Space-separated filters in canonical order.
impl fmt::Display for FilterSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.filters.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The one-pass check never accepts what the full grammar refuses.
        #[test]
        fn the_plain_ascii_check_accepts_only_valid_subjects(value in "[a-c.*> \t\u{7f}é>]{0,12}") {
            if is_plain_ascii_subject(&value) {
                proptest::prop_assert!(validate_common(&value, SubjectKind::Subject).is_ok());
                proptest::prop_assert!(value.split('.').all(|t| t != "*" && t != ">"));
            }
        }
    }

    #[test]
    fn the_plain_ascii_check_takes_the_common_subjects() {
        for s in ["a", "orders.eu.created", "a*b.c>d", "_INBOX.x-y", "bench.t"] {
            assert!(is_plain_ascii_subject(s), "{s}");
        }
        for s in ["", "a..b", ".a", "a.", "a.*", ">", "a b", "ünï", "a\tb"] {
            assert!(!is_plain_ascii_subject(s), "{s:?}");
        }
    }

    #[test]
    fn subjects_accept_literal_tokens() {
        for s in [
            "a",
            "orders.eu.created",
            "a*b.c>d",
            "ünï.cödé",
            "_INBOX.x-y",
        ] {
            assert_eq!(validate_subject(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn subject_errors_name_the_value() {
        let cases = [
            ("", "subject is empty"),
            ("a..b", "subject \"a..b\" has an empty token at byte 2"),
            (".a", "subject \".a\" has an empty token at byte 0"),
            ("a.", "subject \"a.\" has an empty token at byte 2"),
            ("a b", "subject \"a b\" contains ' ' at byte 1"),
            ("a\nb", "subject \"a\\nb\" contains '\\n' at byte 1"),
            ("a.*", "subject \"a.*\" contains the wildcard token \"*\""),
            ("a.>", "subject \"a.>\" contains the wildcard token \">\""),
        ];
        for (value, message) in cases {
            let err = validate_subject(value).unwrap_err().to_string();
            assert!(err.starts_with(message), "{value:?}: {err}");
        }
    }

    #[test]
    fn too_long_subject_is_named_and_cut_short() {
        let long = "a".repeat(MAX_SUBJECT_LEN + 1);
        let err = validate_subject(&long).unwrap_err();
        assert!(matches!(err, SubjectError::TooLong { len, .. } if len == MAX_SUBJECT_LEN + 1));
        let text = err.to_string();
        assert!(text.contains(&format!("\"{}\"…", "a".repeat(64))), "{text}");
        assert!(text.len() < 200, "{text}");
        assert_eq!(validate_subject(&long[1..]), Ok(()));
    }

    #[test]
    fn filters_allow_wildcards_in_place() {
        for f in ["*", ">", "a.*.c", "a.>", "*.*.>", "a*.b>"] {
            assert_eq!(validate_filter(f), Ok(()), "{f}");
        }
        let err = validate_filter("a.>.c").unwrap_err();
        assert_eq!(
            err.to_string(),
            "filter \"a.>.c\" has '>' before its last token; '>' may only end a filter"
        );
        assert!(
            validate_filter("a..*")
                .unwrap_err()
                .to_string()
                .starts_with("filter \"a..*\"")
        );
    }

    #[test]
    fn literal_filters_have_no_wildcard_token() {
        assert!(is_literal("a.b") && is_literal("a*.b>"));
        assert!(!is_literal("a.*") && !is_literal("*.b") && !is_literal("a.>") && !is_literal(">"));
    }

    #[test]
    fn matching_follows_token_rules() {
        assert!(filter_matches("a.*.c", "a.b.c"));
        assert!(!filter_matches("a.*.c", "a.b.c.d"));
        assert!(filter_matches("a.>", "a.b"));
        assert!(filter_matches("a.>", "a.b.c"));
        assert!(!filter_matches("a.>", "a"));
        assert!(filter_matches(">", "x"));
        assert!(!filter_matches("a.b", "a.bc"));
        assert!(!filter_matches("a*", "ab"));
    }

    #[test]
    fn subset_relation() {
        assert!(filter_is_subset("a.b", "a.b"));
        assert!(filter_is_subset("a.b", "a.*"));
        assert!(filter_is_subset("a.*.c", "a.>"));
        assert!(filter_is_subset("a.>", "a.>"));
        assert!(filter_is_subset("a.b.>", "a.*.>"));
        assert!(filter_is_subset("a.*", ">"));
        assert!(!filter_is_subset("a.>", "a.*"));
        assert!(!filter_is_subset("a.*", "a.b"));
        assert!(!filter_is_subset("a", "a.>"));
        assert!(!filter_is_subset(">", "a.>"));
        assert!(!filter_is_subset("a.b.c", "a.b"));
    }

    #[test]
    fn overlap_relation() {
        assert!(filters_overlap("a.*", "*.b"));
        assert!(filters_overlap("a.>", "a.b.c"));
        assert!(filters_overlap(">", "a"));
        assert!(!filters_overlap("a.*", "a.b.c"));
        assert!(!filters_overlap("a.>", "a"));
        assert!(!filters_overlap("a.b", "a.c"));
    }

    #[test]
    fn filter_set_is_canonical() {
        let a = FilterSet::new(["b.*", "a.x", "a.>", "b.*", "c"]).unwrap();
        let b = FilterSet::new(vec!["c".to_owned(), "a.>".to_owned(), "b.*".to_owned()]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_slice(), ["a.>", "b.*", "c"]);
        assert_eq!(a.iter().collect::<Vec<_>>(), ["a.>", "b.*", "c"]);
        assert_eq!((a.len(), a.is_empty()), (3, false));
        assert_eq!(a.to_string(), "a.> b.* c");
        let mut map = std::collections::HashMap::new();
        map.insert(a.clone(), 1);
        assert_eq!(map.get(&b), Some(&1));
        assert!(a.matches("a.x.y") && a.matches("b.q") && a.matches("c"));
        assert!(!a.matches("b.q.r") && !a.matches("d"));
        assert!(a.covers("a.*.z") && !a.covers("b.>"));
        assert!(a.overlaps("*.q") && !a.overlaps("d.>"));
    }

    #[test]
    fn filter_set_rejects_invalid_member_by_name() {
        let err = FilterSet::new(["a", "b..c"]).unwrap_err();
        assert!(err.to_string().contains("\"b..c\""), "{err}");
        assert!(FilterSet::new(Vec::<String>::new()).unwrap().is_empty());
    }
}
