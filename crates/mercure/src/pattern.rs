//! URL patterns compiled to bounded deterministic automata: matching a topic is one pass over
//! each of its URL components, whatever the pattern, and a pattern's compiled form has a size
//! known — and capped — when it is compiled.
//!
//! The WHATWG URL Pattern syntax lets a subscriber write regular expressions (`:id(\d+)`) and
//! any number of wildcards. Matched by a backtracking or capturing engine, a pattern such as
//! `https://ex.com/` followed by a thousand `*` costs time proportional to pattern × topic for
//! every update, and counted repetitions (`a{1,100}{1,100}`) expand to programs of megabytes.
//! Here every component's regular expression becomes a DFA built up front, under these
//! limits (a pattern over any of them is refused when it is compiled, never while matching):
//!
//! - [`MAX_PATTERN_GROUPS`] groups (named, wildcard or regular expression) in all components;
//! - [`MAX_PATTERN_BYTES`] of compiled automata for the whole pattern.
//!
//! A match only says whether the topic is selected: the automata report no captures.

use std::cell::RefCell;

use regex_automata::dfa::{Automaton, StartKind, dense, sparse};
use regex_automata::nfa::thompson;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input};
use urlpattern::regexp::RegExp;
use urlpattern::{RegexSyntax, UrlPattern, UrlPatternInit, UrlPatternOptions};

/// The most groups (`:name`, `*`, `(regexp)`) a URL pattern may have, all components together.
pub const MAX_PATTERN_GROUPS: usize = 32;

/// The most bytes of compiled automata one URL pattern may take, all components together.
pub const MAX_PATTERN_BYTES: usize = 256 * 1024;

/// The most a single automaton may grow while it is built (its compiled NFA, and its DFA
/// during determinization), so that refusing a pattern costs little too.
const MAX_BUILD_BYTES: usize = MAX_PATTERN_BYTES;

/// Why a URL pattern was not compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatternError {
    /// Not a URL pattern.
    #[error("not a URL pattern: {0}")]
    Syntax(String),
    /// More groups than [`MAX_PATTERN_GROUPS`].
    #[error("{groups} groups, more than the {MAX_PATTERN_GROUPS} allowed")]
    TooManyGroups {
        /// How many the pattern has.
        groups: usize,
    },
    /// Its compiled form would be larger than [`MAX_PATTERN_BYTES`].
    #[error(
        "too complex to match: its compiled form is over {} KiB (limit {} KiB)",
        MAX_PATTERN_BYTES / 1024,
        MAX_PATTERN_BYTES / 1024
    )]
    TooComplex,
}

/// A compiled URL pattern and the bytes its automata take.
pub(crate) struct BoundedPattern {
    pub(crate) pattern: UrlPattern<Dfa>,
    pub(crate) bytes: usize,
}

/// Compiles `value` as a URL pattern, relative ones resolved against `base`, within the limits.
pub(crate) fn compile(value: &str, base: &str) -> Result<BoundedPattern, PatternError> {
    let base = url::Url::parse(base).map_err(|e| PatternError::Syntax(e.to_string()))?;
    BUILD.with(|build| *build.borrow_mut() = Build::default());
    let parsed = UrlPatternInit::parse_constructor_string::<Dfa>(value, Some(base))
        .and_then(|init| UrlPattern::<Dfa>::parse(init, UrlPatternOptions::default()));
    let build = BUILD.with(|build| std::mem::take(&mut *build.borrow_mut()));
    if let Some(groups) = build.too_many_groups {
        return Err(PatternError::TooManyGroups { groups });
    }
    if build.too_complex {
        return Err(PatternError::TooComplex);
    }
    let pattern = parsed.map_err(|e| PatternError::Syntax(e.to_string()))?;
    let components = [
        &pattern.protocol,
        &pattern.username,
        &pattern.password,
        &pattern.hostname,
        &pattern.port,
        &pattern.pathname,
        &pattern.search,
        &pattern.hash,
    ];
    let groups = components.iter().map(|c| c.group_name_list.len()).sum();
    if groups > MAX_PATTERN_GROUPS {
        return Err(PatternError::TooManyGroups { groups });
    }
    Ok(BoundedPattern {
        pattern,
        bytes: build.bytes,
    })
}

/// What the automata built for the pattern being compiled took, on this thread: the URL
/// Pattern parser builds them through [`RegExp::parse`], which has no room for it.
#[derive(Default)]
struct Build {
    /// Bytes of every automaton built (each component's, and its matcher's when it has one).
    bytes: usize,
    /// An automaton went over its build limit, or all of them over the pattern's.
    too_complex: bool,
    /// A component had more groups than the whole pattern may have (how many).
    too_many_groups: Option<usize>,
}

thread_local! {
    static BUILD: RefCell<Build> = RefCell::default();
}

/// Whether building an automaton failed on a size limit (of its NFA or of its DFA), not on
/// its syntax.
fn exceeded_a_limit(error: &dense::BuildError) -> bool {
    if error.is_size_limit_exceeded() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<thompson::BuildError>()
            .is_some_and(|e| e.size_limit().is_some())
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// One component's regular expression as an anchored DFA, built dense (bounded while it is
/// built) and kept sparse (a fraction of the memory; still one step per byte).
pub(crate) struct Dfa {
    dfa: sparse::DFA<Vec<u8>>,
    text: String,
}

impl Dfa {
    /// The bytes the automaton takes.
    pub(crate) fn memory_usage(&self) -> usize {
        self.dfa.memory_usage() + self.text.capacity()
    }

    /// Whether the expression, anchored at both ends, matches all of `text`.
    pub(crate) fn matches_whole(&self, text: &str) -> bool {
        let input = Input::new(text).anchored(Anchored::Yes);
        // The expression is `^…$`: any match spans the whole text.
        matches!(self.dfa.try_search_fwd(&input), Ok(Some(_)))
    }

    /// The DFA of `pattern`; `Err(true)` when it went over a size limit, `Err(false)` when it
    /// is not a usable expression.
    pub(crate) fn build(pattern: &str, ignore_case: bool) -> Result<Dfa, bool> {
        let failed = |e: dense::BuildError| exceeded_a_limit(&e);
        let dfa = dense::Builder::new()
            .syntax(
                syntax::Config::new()
                    .case_insensitive(ignore_case)
                    .nest_limit(64),
            )
            .thompson(thompson::Config::new().nfa_size_limit(Some(MAX_BUILD_BYTES)))
            .configure(
                dense::Config::new()
                    .start_kind(StartKind::Anchored)
                    .dfa_size_limit(Some(MAX_BUILD_BYTES))
                    .determinize_size_limit(Some(MAX_BUILD_BYTES)),
            )
            .build(pattern)
            .map_err(failed)?;
        Ok(Dfa {
            dfa: dfa.to_sparse().map_err(failed)?,
            text: pattern.to_owned(),
        })
    }
}

impl RegExp for Dfa {
    fn syntax() -> RegexSyntax {
        RegexSyntax::Rust
    }

    fn parse(pattern: &str, flags: &str, _force_eval: bool) -> Result<Self, ()> {
        // Once the pattern's budget is spent, its remaining components are not built at all.
        if BUILD.with(|build| {
            let build = build.borrow();
            build.too_complex || build.too_many_groups.is_some()
        }) {
            return Err(());
        }
        // Groups are counted on the parsed expression, before anything is built for it.
        if let Ok(hir) = syntax::parse(pattern) {
            let groups = hir.properties().explicit_captures_len();
            if groups > MAX_PATTERN_GROUPS {
                BUILD.with(|build| build.borrow_mut().too_many_groups = Some(groups));
                return Err(());
            }
        }
        match Dfa::build(pattern, flags.contains('i')) {
            Ok(dfa) => {
                BUILD.with(|build| {
                    let mut build = build.borrow_mut();
                    build.bytes += dfa.memory_usage();
                    build.too_complex |= build.bytes > MAX_PATTERN_BYTES;
                });
                Ok(dfa)
            }
            Err(over_a_limit) => {
                if over_a_limit {
                    BUILD.with(|build| build.borrow_mut().too_complex = true);
                }
                Err(())
            }
        }
    }

    /// Whether all of `text` matches: the automaton reports no captures, so every group
    /// reads as not matched (only [`UrlPattern::test`] is used).
    fn matches<'a>(&self, text: &'a str) -> Option<Vec<Option<&'a str>>> {
        self.matches_whole(text).then(Vec::new)
    }

    fn pattern_string(&self) -> &str {
        &self.text
    }
}
