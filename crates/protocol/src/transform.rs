//! Subject transforms: JetStream's subject mapping syntax, as used by a stream source's
//! `subject_transforms: [{src, dest}]`.
//!
//! `src` is a filter; a subject matching it is rewritten by `dest`, a subject pattern whose tokens
//! are literals or references to what `src`'s wildcards matched:
//!
//! - `{{wildcard(N)}}` (function name in any case, spaces allowed inside the braces) or `$N`:
//!   the token the N-th `*` of `src` matched (1-based);
//! - `*`: the next `*` of `src` in order (the first `*` of `dest` is the first of `src`, …);
//! - `>`: as the last token only, the tokens `src`'s trailing `>` matched.
//!
//! An empty `dest`, or `dest` equal to `src`, leaves subjects unchanged. References are checked
//! when the transform is built, so [`SubjectTransform::apply`] always produces a valid subject.
//!
//! ```
//! use sluice_protocol::transform::SubjectTransform;
//! let t = SubjectTransform::new("orders.*.*", "eu.{{wildcard(2)}}.$1").unwrap();
//! assert_eq!(t.apply("orders.new.42").as_deref(), Some("eu.42.new"));
//! assert_eq!(t.apply("chat.x.y"), None);
//! ```

use crate::quote::shown;
use crate::subject::{
    FULL_WILDCARD, MAX_SUBJECT_LEN, SINGLE_WILDCARD, SubjectError, filter_matches, validate_filter,
    validate_subject,
};

/// Why a transform was rejected; every variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// `src` is not a valid filter.
    #[error("subject transform src {}: {source}", shown(.src))]
    Source {
        /// The rejected `src`.
        src: String,
        /// What is wrong with it.
        source: SubjectError,
    },
    /// `dest` is not a valid destination for this `src`.
    #[error("subject transform dest {} (src {}): {reason}", shown(.dest), shown(.src))]
    Destination {
        /// The `src` it was paired with.
        src: String,
        /// The rejected `dest`.
        dest: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One token of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dest {
    Literal(String),
    /// Index (0-based) into the tokens `src`'s `*` wildcards matched.
    Wildcard(usize),
    /// The tokens `src`'s trailing `>` matched.
    Tail,
}

/// A validated `{src, dest}` subject transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectTransform {
    src: String,
    /// Positions of `src`'s `*` tokens.
    wildcards: Vec<usize>,
    /// `None`: subjects pass unchanged.
    dest: Option<Vec<Dest>>,
}

impl SubjectTransform {
    /// Validates `src` (a filter; empty means `>`) and `dest` (see the [module docs](self)).
    pub fn new(src: &str, dest: &str) -> Result<Self, TransformError> {
        let src = if src.is_empty() { FULL_WILDCARD } else { src };
        validate_filter(src).map_err(|source| TransformError::Source {
            src: src.to_owned(),
            source,
        })?;
        let src_tokens: Vec<&str> = src.split('.').collect();
        let wildcards: Vec<usize> = src_tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == SINGLE_WILDCARD)
            .map(|(i, _)| i)
            .collect();
        let has_tail = src_tokens.last() == Some(&FULL_WILDCARD);
        let identity = dest.is_empty() || dest == src;
        let dest_tokens = if identity {
            None
        } else {
            Some(parse_dest(src, dest, wildcards.len(), has_tail)?)
        };
        Ok(Self {
            src: src.to_owned(),
            wildcards,
            dest: dest_tokens,
        })
    }

    /// The filter this transform applies to.
    pub fn src(&self) -> &str {
        &self.src
    }

    /// Whether `subject` matches `src`.
    pub fn matches(&self, subject: &str) -> bool {
        filter_matches(&self.src, subject)
    }

    /// A filter matching every subject this transform can produce: its dest with each
    /// wildcard reference as `*` and the tail as `>` (its `src` when it leaves subjects alone).
    pub fn output_filter(&self) -> String {
        let Some(dest) = &self.dest else {
            return self.src.clone();
        };
        let tokens: Vec<&str> = dest
            .iter()
            .map(|d| match d {
                Dest::Literal(s) => s.as_str(),
                Dest::Wildcard(_) => SINGLE_WILDCARD,
                Dest::Tail => FULL_WILDCARD,
            })
            .collect();
        tokens.join(".")
    }

    /// The rewritten subject, or `None` when `subject` does not match `src` (or the result
    /// would exceed the maximum subject length).
    pub fn apply(&self, subject: &str) -> Option<String> {
        if !self.matches(subject) {
            return None;
        }
        let Some(dest) = &self.dest else {
            return Some(subject.to_owned());
        };
        let tokens: Vec<&str> = subject.split('.').collect();
        // The tail starts where `src`'s `>` stands: its token count minus one.
        let tail_from = self.src.split('.').count() - 1;
        let mut out = String::with_capacity(subject.len());
        for (i, d) in dest.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            match d {
                Dest::Literal(s) => out.push_str(s),
                Dest::Wildcard(n) => out.push_str(tokens[self.wildcards[*n]]),
                Dest::Tail => out.push_str(&tokens[tail_from..].join(".")),
            }
        }
        (out.len() <= MAX_SUBJECT_LEN).then_some(out)
    }
}

/// Applies the first transform of `transforms` whose `src` matches `subject` (JetStream's rule
/// for a source with several transforms); `None` when none matches.
pub fn apply_first(transforms: &[SubjectTransform], subject: &str) -> Option<String> {
    transforms
        .iter()
        .find(|t| t.matches(subject))
        .and_then(|t| t.apply(subject))
}

fn parse_dest(
    src: &str,
    dest: &str,
    wildcard_count: usize,
    has_tail: bool,
) -> Result<Vec<Dest>, TransformError> {
    let bad = |reason: String| TransformError::Destination {
        src: src.to_owned(),
        dest: dest.to_owned(),
        reason,
    };
    if dest.len() > MAX_SUBJECT_LEN {
        return Err(bad(format!(
            "is {} bytes long, more than the maximum of {MAX_SUBJECT_LEN}",
            dest.len()
        )));
    }
    let tokens: Vec<&str> = dest.split('.').collect();
    let mut next_star = 0;
    let mut out = Vec::with_capacity(tokens.len());
    let reference = |n: u64, token: &str| {
        usize::try_from(n)
            .ok()
            .filter(|n| (1..=wildcard_count).contains(n))
            .map(|n| Dest::Wildcard(n - 1))
            .ok_or_else(|| {
                bad(format!(
                    "{token:?} refers to wildcard {n}, but src has {wildcard_count} '*' wildcard(s)"
                ))
            })
    };
    for (i, token) in tokens.iter().enumerate() {
        let d = if token.is_empty() {
            return Err(bad(format!("has an empty token (token {})", i + 1)));
        } else if *token == FULL_WILDCARD {
            if i + 1 != tokens.len() {
                return Err(bad("'>' may only be the last token".into()));
            }
            if !has_tail {
                return Err(bad("uses '>' but src does not end with '>'".into()));
            }
            Dest::Tail
        } else if *token == SINGLE_WILDCARD {
            next_star += 1;
            reference(next_star as u64, token)?
        } else if let Some(digits) = token.strip_prefix('$').filter(|d| is_number(d)) {
            reference(digits.parse().unwrap_or(u64::MAX), token)?
        } else if token.contains("{{") || token.contains("}}") {
            let n = parse_function(token).map_err(bad)?;
            reference(n, token)?
        } else {
            validate_subject(token).map_err(|e| bad(e.to_string()))?;
            Dest::Literal((*token).to_owned())
        };
        out.push(d);
    }
    Ok(out)
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses a whole-token `{{wildcard(N)}}`; returns N.
fn parse_function(token: &str) -> Result<u64, String> {
    let inner = token
        .strip_prefix("{{")
        .and_then(|t| t.strip_suffix("}}"))
        .ok_or_else(|| format!("{token:?}: a mapping function must be a whole token"))?;
    let (name, rest) = inner
        .trim()
        .split_once('(')
        .ok_or_else(|| format!("{token:?}: expected name(arguments)"))?;
    let args = rest
        .strip_suffix(')')
        .ok_or_else(|| format!("{token:?}: missing ')'"))?;
    if !name.trim().eq_ignore_ascii_case("wildcard") {
        return Err(format!(
            "{token:?}: unsupported mapping function {:?} (only wildcard is supported)",
            name.trim()
        ));
    }
    let arg = args.trim();
    if !is_number(arg) {
        return Err(format!(
            "{token:?}: wildcard takes one wildcard number, got {arg:?}"
        ));
    }
    Ok(arg.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn t(src: &str, dest: &str) -> SubjectTransform {
        SubjectTransform::new(src, dest).unwrap()
    }

    #[test]
    fn mapping_forms() {
        assert_eq!(t("a.*.*", "b.$2.$1").apply("a.x.y").unwrap(), "b.y.x");
        assert_eq!(
            t("a.*.*", "b.{{wildcard(2)}}.{{ Wildcard( 1 ) }}")
                .apply("a.x.y")
                .unwrap(),
            "b.y.x"
        );
        assert_eq!(t("a.*.>", "b.*.>").apply("a.x.y.z").unwrap(), "b.x.y.z");
        assert_eq!(t("a.>", "b.>").apply("a.x").unwrap(), "b.x");
        assert_eq!(t("a.>", "").apply("a.x").unwrap(), "a.x");
        assert_eq!(t("", "").apply("q").unwrap(), "q");
        assert_eq!(t("a.b", "c").apply("a.b").unwrap(), "c");
        assert_eq!(t("a.*", "c.$1").apply("b.x"), None);
    }

    #[test]
    fn bad_transforms_name_the_value() {
        for (src, dest, needle) in [
            ("a..b", "x", "a..b"),
            ("a.*", "b.$2", "$2"),
            ("a.*", "b.{{wildcard(0)}}", "wildcard 0"),
            ("a.*", "b.{{partition(3,1)}}", "partition"),
            ("a.*", "b.{{wildcard(1)}}x", "whole token"),
            ("a.*", "b.>", "does not end with '>'"),
            ("a.>", "b.>.c", "last token"),
            ("a.*", "b.*.*", "wildcard 2"),
            ("a.*", "b c", "b c"),
            ("a.*", "b..c", "empty token"),
            ("a.*", "b.{{wildcard(x)}}", "\"x\""),
        ] {
            let e = SubjectTransform::new(src, dest).unwrap_err().to_string();
            assert!(e.contains(needle), "{src} -> {dest}: {e}");
        }
    }

    #[test]
    fn output_filter_covers_what_the_transform_produces() {
        assert_eq!(t("a.*.*", "b.$2.{{wildcard(1)}}").output_filter(), "b.*.*");
        assert_eq!(t("a.*.>", "b.*.>").output_filter(), "b.*.>");
        assert_eq!(t("a.b", "c").output_filter(), "c");
        assert_eq!(t("a.>", "").output_filter(), "a.>");
    }

    #[test]
    fn first_matching_transform_wins() {
        let ts = [t("a.*", "x.$1"), t("a.>", "y.>")];
        assert_eq!(apply_first(&ts, "a.1").unwrap(), "x.1");
        assert_eq!(apply_first(&ts, "a.1.2").unwrap(), "y.1.2");
        assert_eq!(apply_first(&ts, "b"), None);
    }

    fn token() -> impl Strategy<Value = String> {
        "[a-z0-9_$-]{1,4}"
    }

    proptest! {
        /// A dest built from `src`'s wildcards in some order maps a matching subject to the
        /// matched tokens in that order, and the result is a valid subject.
        #[test]
        fn references_pick_the_matched_tokens(
            prefix in proptest::collection::vec(token(), 0..3),
            values in proptest::collection::vec(token(), 1..5),
            tail in proptest::collection::vec(token(), 0..3),
            order in proptest::collection::vec(any::<proptest::sample::Index>(), 1..6),
            func in any::<bool>(),
        ) {
            let mut src: Vec<String> = prefix.clone();
            src.extend(values.iter().map(|_| "*".to_string()));
            let mut subject: Vec<String> = prefix.clone();
            subject.extend(values.iter().cloned());
            if !tail.is_empty() {
                src.push(">".into());
                subject.extend(tail.iter().cloned());
            }
            let picks: Vec<usize> = order.iter().map(|i| i.index(values.len())).collect();
            let mut dest: Vec<String> = vec!["out".into()];
            dest.extend(picks.iter().map(|n| if func { format!("{{{{wildcard({})}}}}", n + 1) } else { format!("${}", n + 1) }));
            if !tail.is_empty() {
                dest.push(">".into());
            }
            let tr = SubjectTransform::new(&src.join("."), &dest.join(".")).unwrap();
            let out = tr.apply(&subject.join(".")).unwrap();
            let mut want: Vec<String> = vec!["out".into()];
            want.extend(picks.iter().map(|n| values[*n].clone()));
            want.extend(tail.iter().cloned());
            prop_assert_eq!(&out, &want.join("."));
            prop_assert!(validate_subject(&out).is_ok());
            prop_assert!(filter_matches(&tr.output_filter(), &out), "{} !~ {}", out, tr.output_filter());
        }

        /// Arbitrary src/dest: never a panic; an accepted transform maps every subject it
        /// matches to a valid subject and leaves the others alone.
        #[test]
        fn arbitrary_input_never_panics(src in "[a-c*>.${}()w1-3 ]{0,16}", dest in "[a-c*>.${}()wildcar1-3 ]{0,24}", subject in "[a-c]{1,2}(\\.[a-c]{1,2}){0,3}") {
            if let Ok(tr) = SubjectTransform::new(&src, &dest) {
                match tr.apply(&subject) {
                    Some(out) => prop_assert!(validate_subject(&out).is_ok(), "{out:?}"),
                    None => prop_assert!(!tr.matches(&subject) || subject.len() > MAX_SUBJECT_LEN),
                }
            }
        }
    }
}
