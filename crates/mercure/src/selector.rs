//! Topic selectors: what a subscriber asks for, compiled once and matched against many topics.
//!
//! Query parameters, both protocol versions:
//!
//! | parameter | version | selector |
//! | --- | --- | --- |
//! | `topic=` | 0.x | `*` (every topic), else a URI Template when the value contains `{` and is one (see the template module), which also matches the topic equal to it; else exact |
//! | `match=`, `match_exact=` | 1.0 draft | `*`, else exact (byte for byte) |
//! | `match_urlpattern=` | 1.0 draft | `*`, else a WHATWG URL Pattern, relative ones resolved against the hub's base URL |
//!
//! Any other parameter whose name starts with `match` (in any case) is refused, as is an invalid
//! URL pattern; other parameters are not selectors ([`Selector::from_query`] answers `None`). An
//! invalid URI Template in `topic=` is not an error: Mercure compares such a selector exactly.
//!
//! Limits: a selector is at most [`MAX_SELECTOR_LEN`] bytes (Mercure's limit) and a URI Template
//! has at most [`MAX_TEMPLATE_VARIABLES`] variables; URL patterns and URI Templates are compiled
//! into DFAs of bounded size ([`crate::pattern`]), so matching is one pass over the topic, and
//! one whose automaton would be larger is refused. Values must be protocol strings: no control
//! or Unicode format characters.

use std::fmt;

use urlpattern::UrlPatternMatchInput;
use urlpattern::quirks::{self, StringOrInit};

use crate::pattern::{self, BoundedPattern};
use crate::template::{self, Template};
use crate::text::{NOT_PROTOCOL_STRING, is_protocol_string, shown};

/// The longest selector accepted, in bytes.
pub const MAX_SELECTOR_LEN: usize = 4096;

/// The most variables a URI Template selector may have (all expressions together).
pub const MAX_TEMPLATE_VARIABLES: usize = 32;

/// The base URL relative URL patterns resolve against when the hub configures none (Mercure's).
pub const DEFAULT_BASE_URL: &str = "http://mercure.invalid";

/// The 0.x selector parameter.
pub(crate) const PARAM_TOPIC: &str = "topic";
/// The 1.0 draft's exact selector parameter.
pub(crate) const PARAM_MATCH: &str = "match";
/// The 1.0 draft's exact selector parameter, with its type spelled out.
pub(crate) const PARAM_MATCH_EXACT: &str = "match_exact";
/// The 1.0 draft's URL Pattern selector parameter.
pub(crate) const PARAM_MATCH_URLPATTERN: &str = "match_urlpattern";

/// What kind of selector a [`Selector`] is; part of a selector set's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorKind {
    /// `*`: every topic.
    Any,
    /// One topic, byte for byte.
    Exact,
    /// An RFC 6570 URI Template (0.x `topic=`).
    Template,
    /// A WHATWG URL Pattern (`match_urlpattern=`).
    UrlPattern,
}

/// A matcher type of the 1.0 draft: what its `match…` parameters, and the `match_type` of its
/// subscription documents, name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatchType {
    /// `exact` (`match=`, `match_exact=`).
    Exact,
    /// `urlpattern` (`match_urlpattern=`).
    UrlPattern,
}

impl MatchType {
    /// The type's canonical (case-sensitive) name.
    pub fn name(self) -> &'static str {
        match self {
            MatchType::Exact => "exact",
            MatchType::UrlPattern => "urlpattern",
        }
    }

    /// The type named `name`, exactly as [`MatchType::name`] spells it.
    pub fn from_name(name: &str) -> Option<MatchType> {
        [MatchType::Exact, MatchType::UrlPattern]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// Why a query parameter is not a usable selector. Every variant names the parameter, and the
/// value where one was given (cut when long).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A parameter that starts with `match` but is none of the known ones.
    #[error(
        "unknown selector parameter {param:?} (known: topic, match, match_exact, match_urlpattern)"
    )]
    UnknownParameter {
        /// The parameter's name (cut when long).
        param: String,
    },
    /// A value that cannot be a selector of its parameter.
    #[error("invalid {param}={value:?}: {reason}")]
    Invalid {
        /// The parameter's name.
        param: &'static str,
        /// The value (cut when long).
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A compiled selector.
pub struct Selector {
    text: String,
    matcher: Matcher,
    /// The 1.0 draft matcher type of the parameter it came from; `None` for 0.x `topic=`.
    match_type: Option<MatchType>,
}

enum Matcher {
    Any,
    Exact,
    Template(Box<Template>),
    UrlPattern(Box<CompiledPattern>),
}

/// A URL pattern and the base its relative topics resolve against.
struct CompiledPattern {
    pattern: BoundedPattern,
    base: String,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("kind", &self.kind())
            .field("text", &self.text)
            .finish()
    }
}

fn invalid(param: &'static str, value: &str, reason: impl Into<String>) -> SelectorError {
    SelectorError::Invalid {
        param,
        value: shown(value),
        reason: reason.into(),
    }
}

/// Whether some `]` of `value` comes with no `[` open before it.
fn closes_an_unopened_bracket(value: &str) -> bool {
    let mut open = 0usize;
    for byte in value.bytes() {
        match byte {
            b'[' => open += 1,
            b']' if open == 0 => return true,
            b']' => open -= 1,
            _ => {}
        }
    }
    false
}

/// Checks what every selector value must satisfy.
fn check_value(param: &'static str, value: &str) -> Result<(), SelectorError> {
    if value.len() > MAX_SELECTOR_LEN {
        return Err(invalid(
            param,
            value,
            format!(
                "{} bytes, more than the {MAX_SELECTOR_LEN} allowed",
                value.len()
            ),
        ));
    }
    if !is_protocol_string(value) {
        return Err(invalid(param, value, NOT_PROTOCOL_STRING));
    }
    Ok(())
}

impl Selector {
    /// A 0.x `topic=` selector: `*`, a URI Template, or exact.
    pub fn topic(value: &str) -> Result<Selector, SelectorError> {
        check_value(PARAM_TOPIC, value)?;
        let matcher = if value == "*" {
            Matcher::Any
        } else if value.contains('{') {
            match template::compile(value, MAX_TEMPLATE_VARIABLES) {
                Ok(template) => Matcher::Template(Box::new(template)),
                Err(template::TemplateError::TooManyVariables { max }) => {
                    return Err(invalid(
                        PARAM_TOPIC,
                        value,
                        format!("a URI Template with more than {max} variables"),
                    ));
                }
                Err(template::TemplateError::TooComplex) => {
                    return Err(invalid(
                        PARAM_TOPIC,
                        value,
                        crate::pattern::PatternError::TooComplex.to_string(),
                    ));
                }
                Err(_) => Matcher::Exact,
            }
        } else {
            Matcher::Exact
        };
        Ok(Selector {
            text: value.to_owned(),
            matcher,
            match_type: None,
        })
    }

    /// A 1.0 draft exact selector (`match=`, `match_exact=`): `*` or one topic.
    pub fn exact(value: &str) -> Result<Selector, SelectorError> {
        Self::exact_for(PARAM_MATCH, value)
    }

    fn exact_for(param: &'static str, value: &str) -> Result<Selector, SelectorError> {
        check_value(param, value)?;
        let matcher = if value == "*" {
            Matcher::Any
        } else {
            Matcher::Exact
        };
        Ok(Selector {
            text: value.to_owned(),
            matcher,
            match_type: Some(MatchType::Exact),
        })
    }

    /// A 1.0 draft URL Pattern selector (`match_urlpattern=`): `*`, or a pattern such as
    /// `https://example.com/books/:id`, relative ones resolved against `base` (an absolute URL,
    /// [`DEFAULT_BASE_URL`] unless the hub has its own).
    pub fn url_pattern(value: &str, base: &str) -> Result<Selector, SelectorError> {
        let param = PARAM_MATCH_URLPATTERN;
        check_value(param, value)?;
        if value == "*" {
            return Ok(Selector {
                text: value.to_owned(),
                matcher: Matcher::Any,
                match_type: Some(MatchType::UrlPattern),
            });
        }
        // IMPORTANT: the `urlpattern` crate's constructor-string parser overflows a counter on
        // a `]` with no `[` before it (e.g. `https://]`), which panics where overflow checks
        // are on. A subscriber's query must never panic the hub: such a pattern is refused
        // before it is parsed, and any other panic of the parser is contained and answered as
        // an invalid pattern.
        if closes_an_unopened_bracket(value) {
            return Err(invalid(param, value, "a `]` closes no `[`"));
        }
        let compiled = std::panic::catch_unwind(|| pattern::compile(value, base));
        let pattern = match compiled {
            Ok(Ok(pattern)) => pattern,
            Ok(Err(e)) => return Err(invalid(param, value, e.to_string())),
            Err(_) => return Err(invalid(param, value, "not a URL pattern".to_owned())),
        };
        Ok(Selector {
            text: value.to_owned(),
            matcher: Matcher::UrlPattern(Box::new(CompiledPattern {
                pattern,
                base: base.to_owned(),
            })),
            match_type: Some(MatchType::UrlPattern),
        })
    }

    /// The selector a query parameter `key=value` gives: `Ok(None)` when `key` is not a selector
    /// parameter, an error when it looks like one but is unknown (`match…`) or the value is
    /// invalid. `base` is as for [`Selector::url_pattern`].
    pub fn from_query(
        key: &str,
        value: &str,
        base: &str,
    ) -> Result<Option<Selector>, SelectorError> {
        match key {
            PARAM_TOPIC => Self::topic(value).map(Some),
            PARAM_MATCH => Self::exact_for(PARAM_MATCH, value).map(Some),
            PARAM_MATCH_EXACT => Self::exact_for(PARAM_MATCH_EXACT, value).map(Some),
            PARAM_MATCH_URLPATTERN => Self::url_pattern(value, base).map(Some),
            _ if key
                .get(..PARAM_MATCH.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(PARAM_MATCH)) =>
            {
                Err(SelectorError::UnknownParameter { param: shown(key) })
            }
            _ => Ok(None),
        }
    }

    /// The selector as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The 1.0 draft matcher type of the parameter the selector came from (`match=`,
    /// `match_exact=`: exact; `match_urlpattern=`: urlpattern), or `None` for a 0.x `topic=`
    /// selector. Selectors of either protocol match alike; this says which protocol's
    /// subscription documents describe it.
    pub fn match_type(&self) -> Option<MatchType> {
        self.match_type
    }

    /// The bytes of compiled automata the selector holds (URL patterns and URI Templates; 0
    /// for the others, which keep only their text).
    pub fn compiled_bytes(&self) -> usize {
        match &self.matcher {
            Matcher::UrlPattern(compiled) => compiled.pattern.bytes,
            Matcher::Template(template) => template.memory_usage(),
            _ => 0,
        }
    }

    /// What kind of selector it is.
    pub fn kind(&self) -> SelectorKind {
        match self.matcher {
            Matcher::Any => SelectorKind::Any,
            Matcher::Exact => SelectorKind::Exact,
            Matcher::Template(_) => SelectorKind::Template,
            Matcher::UrlPattern(_) => SelectorKind::UrlPattern,
        }
    }

    /// Whether `topic` is selected.
    pub fn matches(&self, topic: &str) -> bool {
        match &self.matcher {
            Matcher::Any => true,
            Matcher::Exact => self.text == topic,
            Matcher::Template(template) => self.text == topic || template.matches(topic),
            Matcher::UrlPattern(compiled) => compiled.test(&compiled.input(topic)),
        }
    }

    /// Whether any of `topics` (an update's canonical and alternate topics) is selected.
    pub fn matches_any(&self, topics: &[&str]) -> bool {
        topics.iter().any(|topic| self.matches(topic))
    }

    /// Whether the topic whose URL-pattern input is `input` (made once per topic by
    /// [`TopicInput`]) is selected.
    pub(crate) fn matches_input(&self, topic: &str, input: &mut TopicInput) -> bool {
        match &self.matcher {
            Matcher::UrlPattern(compiled) => compiled.test(input.get(topic, &compiled.base)),
            _ => self.matches(topic),
        }
    }
}

impl CompiledPattern {
    fn input(&self, topic: &str) -> Option<UrlPatternMatchInput> {
        parse_input(topic, &self.base)
    }

    fn test(&self, input: &Option<UrlPatternMatchInput>) -> bool {
        input
            .as_ref()
            .is_some_and(|input| self.pattern.pattern.test(input.clone()).unwrap_or(false))
    }
}

/// A topic as URL pattern input: the URL it resolves to against `base`, none when it is not one.
fn parse_input(topic: &str, base: &str) -> Option<UrlPatternMatchInput> {
    match quirks::process_match_input(StringOrInit::String(topic.into()), Some(base)) {
        Ok(Some((input, _))) => Some(input),
        _ => None,
    }
}

/// One topic's URL-pattern input, parsed on first use so that several URL patterns matched
/// against the same topic parse it once.
#[derive(Default)]
pub(crate) struct TopicInput {
    parsed: Option<(String, Option<UrlPatternMatchInput>)>,
}

impl TopicInput {
    fn get(&mut self, topic: &str, base: &str) -> &Option<UrlPatternMatchInput> {
        let stale = self.parsed.as_ref().is_none_or(|(b, _)| b != base);
        if stale {
            self.parsed = Some((base.to_owned(), parse_input(topic, base)));
        }
        match &self.parsed {
            Some((_, input)) => input,
            None => &None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = DEFAULT_BASE_URL;

    #[test]
    fn the_wildcard_selects_every_topic() {
        for selector in [
            Selector::topic("*").unwrap(),
            Selector::exact("*").unwrap(),
            Selector::url_pattern("*", BASE).unwrap(),
        ] {
            assert_eq!(selector.kind(), SelectorKind::Any);
            assert!(selector.matches("https://example.com/a"));
            assert!(selector.matches("anything at all"));
        }
    }

    #[test]
    fn topic_selectors_are_exact_or_uri_templates() {
        let exact = Selector::topic("https://example.com/books/1").unwrap();
        assert_eq!(exact.kind(), SelectorKind::Exact);
        assert!(exact.matches("https://example.com/books/1"));
        assert!(!exact.matches("https://example.com/books/10"));

        let template = Selector::topic("https://example.com/books/{id}").unwrap();
        assert_eq!(template.kind(), SelectorKind::Template);
        assert!(template.matches("https://example.com/books/1"));
        assert!(template.matches("https://example.com/books/{id}"), "equal");
        assert!(!template.matches("https://example.com/books/1/reviews"));
    }

    #[test]
    fn an_invalid_uri_template_is_compared_exactly() {
        let selector = Selector::topic("https://example.com/{bad id}").unwrap();
        assert_eq!(selector.kind(), SelectorKind::Exact);
        assert!(selector.matches("https://example.com/{bad id}"));
        assert!(!selector.matches("https://example.com/x"));
    }

    #[test]
    fn match_is_exact_even_for_template_syntax() {
        let selector = Selector::exact("https://example.com/books/{id}").unwrap();
        assert_eq!(selector.kind(), SelectorKind::Exact);
        assert!(!selector.matches("https://example.com/books/1"));
    }

    #[test]
    fn url_patterns_match_absolute_and_relative_topics() {
        let selector = Selector::url_pattern("https://example.com/books/:id", BASE).unwrap();
        assert_eq!(selector.kind(), SelectorKind::UrlPattern);
        assert!(selector.matches("https://example.com/books/1"));
        assert!(!selector.matches("https://example.com/books/1/reviews"));
        assert!(!selector.matches("https://example.net/books/1"));
        assert!(!selector.matches("not a url"));

        let relative = Selector::url_pattern("/books/:id", "https://hub.example").unwrap();
        assert!(relative.matches("/books/7"));
        assert!(relative.matches("https://hub.example/books/7"));
        assert!(!relative.matches("https://other.example/books/7"));
    }

    #[test]
    fn query_parameters_choose_the_selector_kind() {
        let kind = |key, value| {
            Selector::from_query(key, value, BASE)
                .unwrap()
                .map(|s| s.kind())
        };
        assert_eq!(kind("topic", "/a/{x}"), Some(SelectorKind::Template));
        assert_eq!(kind("match", "/a/{x}"), Some(SelectorKind::Exact));
        assert_eq!(kind("match_exact", "/a"), Some(SelectorKind::Exact));
        assert_eq!(
            kind("match_urlpattern", "/a/:x"),
            Some(SelectorKind::UrlPattern)
        );
        assert_eq!(kind("lastEventID", "x"), None);
        assert_eq!(kind("authorization", "x"), None);
    }

    #[test]
    fn unknown_match_parameters_are_refused_by_name() {
        for key in [
            "match_regex",
            "MATCH",
            "Match_exact",
            "matchurlpattern",
            "match_",
        ] {
            let error = Selector::from_query(key, "x", BASE).unwrap_err();
            assert_eq!(
                error,
                SelectorError::UnknownParameter {
                    param: key.to_owned()
                }
            );
            assert!(error.to_string().contains(key), "{error}");
        }
    }

    /// Found by the `mercure_selector` fuzz target: the URL Pattern parser underneath
    /// overflows a counter on an unbalanced `]` in the host (a panic in this test build).
    #[test]
    fn a_pattern_that_trips_the_url_pattern_parser_is_refused_not_a_panic() {
        for value in ["https://]", "https://]),)))eomc./books/:id"] {
            let error = Selector::from_query("match_urlpattern", value, BASE).unwrap_err();
            assert!(
                matches!(
                    error,
                    SelectorError::Invalid {
                        param: "match_urlpattern",
                        ..
                    }
                ),
                "{error}"
            );
        }
    }

    #[test]
    fn invalid_values_are_refused_naming_parameter_and_value() {
        let error =
            Selector::from_query("match_urlpattern", "https://example.com/(", BASE).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("match_urlpattern"), "{text}");
        assert!(text.contains("https://example.com/("), "{text}");

        let error = Selector::from_query("match", "a\nb", BASE).unwrap_err();
        assert!(matches!(
            error,
            SelectorError::Invalid { param: "match", .. }
        ));
        assert!(error.to_string().contains(r#""a\nb""#), "{error}");

        let empty = Selector::from_query("topic", "", BASE).unwrap().unwrap();
        assert_eq!(
            empty.kind(),
            SelectorKind::Exact,
            "as Mercure: selects no publishable topic"
        );

        let long = "a".repeat(MAX_SELECTOR_LEN + 1);
        let error = Selector::from_query("topic", &long, BASE).unwrap_err();
        assert!(error.to_string().contains("4097 bytes"), "{error}");
        assert!(Selector::topic(&"a".repeat(MAX_SELECTOR_LEN)).is_ok());

        let many: String = (0..=MAX_TEMPLATE_VARIABLES)
            .map(|i| format!("{{v{i}}}"))
            .collect();
        let error = Selector::topic(&many).unwrap_err();
        assert!(
            error.to_string().contains("more than 32 variables"),
            "{error}"
        );
    }

    /// The outside audit's selector: a thousand wildcards, whose matching cost grew with
    /// pattern × topic for every update. Refused when compiled, naming the limit.
    #[test]
    fn a_pattern_with_more_groups_than_allowed_is_refused() {
        let value = format!("https://ex.com/{}", "*".repeat(1000));
        let error = Selector::from_query("match_urlpattern", &value, BASE).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("match_urlpattern"), "{text}");
        assert!(text.contains(" groups, more than the 32 allowed"), "{text}");

        // Components the pattern leaves out are wildcards, which count too.
        let many = format!("https://ex.com/{}", "*".repeat(20));
        let selector = Selector::url_pattern(&many, BASE).unwrap();
        assert!(selector.matches(&format!("https://ex.com/{}", "a".repeat(4000))));
        assert!(!selector.matches("https://ex.net/a"));
    }

    /// The outside audit's other selector: counted repetitions that expand to a program of
    /// megabytes. Refused when compiled, before its automaton grows past the limit.
    #[test]
    fn a_pattern_whose_automaton_is_too_large_is_refused() {
        let value = "https://ex.com/:a(a{1,100}{1,100}b)";
        let error = Selector::from_query("match_urlpattern", value, BASE).unwrap_err();
        assert!(
            error.to_string().contains("too complex to match"),
            "{error}"
        );

        let ordinary = Selector::url_pattern("https://example.com/books/:id(\\d+)", BASE).unwrap();
        assert!(ordinary.matches("https://example.com/books/12"));
        assert!(!ordinary.matches("https://example.com/books/x"));
        assert!(
            ordinary.compiled_bytes() < crate::pattern::MAX_PATTERN_BYTES / 4,
            "{} bytes",
            ordinary.compiled_bytes()
        );
    }

    /// A URI Template's automaton is bounded as a URL pattern's is: 32 variables between the
    /// letters of a 4 KiB template (before, matched in time proportional to template × topic:
    /// 0.14 s per 4 KiB topic) is refused, naming the limit; a usual one holds little.
    #[test]
    fn a_uri_template_too_complex_to_match_is_refused() {
        let variables: String = (0..32).map(|i| format!("{{+v{i}}}a")).collect();
        let value = format!(
            "{variables}{}",
            "a".repeat(MAX_SELECTOR_LEN - variables.len())
        );
        let error = Selector::from_query("topic", &value, BASE).unwrap_err();
        assert!(
            error.to_string().contains("too complex to match"),
            "{error}"
        );

        let usual = Selector::topic("https://example.com/books/{id}/reviews{?page,size}").unwrap();
        assert_eq!(usual.kind(), SelectorKind::Template);
        assert!(usual.matches("https://example.com/books/7/reviews?page=2&size=10"));
        assert!(
            usual.compiled_bytes() < 16 * 1024,
            "{}",
            usual.compiled_bytes()
        );
    }

    #[test]
    fn ignore_case_and_optional_groups_match_as_url_patterns_do() {
        let optional = Selector::url_pattern("https://example.com/books/:id?", BASE).unwrap();
        assert!(optional.matches("https://example.com/books"));
        assert!(optional.matches("https://example.com/books/1"));
        assert!(!optional.matches("https://example.com/books/1/2"));
        let many = Selector::url_pattern("https://example.com/*/reviews/:n", BASE).unwrap();
        assert!(many.matches("https://example.com/a/b/reviews/3"));
        assert!(!many.matches("https://example.com/a/b/reviews/3/x"));
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn url_patterns_match_as_the_url_pattern_crates_own_engine_does(
            pattern in "https://ex\\.com/([a-c/]|:[a-c]|\\*|\\([a-c|]{1,3}\\)[?+*]?|\\{[a-c/]{0,2}\\}[?+*]?){0,6}",
            path in "[a-c/]{0,10}",
        ) {
            let topic = format!("https://ex.com/{path}");
            let oracle = quirks::process_construct_pattern_input(
                StringOrInit::String(pattern.as_str().into()),
                Some(BASE),
            )
            .and_then(|init| {
                <urlpattern::UrlPattern>::parse(init, Default::default())
            });
            if let Ok(oracle) = oracle {
                let selector = Selector::url_pattern(&pattern, BASE).unwrap();
                let input = parse_input(&topic, BASE).unwrap();
                prop_assert_eq!(selector.matches(&topic), oracle.test(input).unwrap(), "{}", pattern);
            }
        }

        #[test]
        fn any_parameter_is_a_selector_none_or_an_error_naming_it(
            key in prop::sample::select(vec!["topic", "match", "match_exact", "match_urlpattern", "match_x", "other"]),
            value in "\\PC{0,24}|[/:{}()*+?a-z.%0-9]{0,24}",
            topic in "\\PC{0,16}|[/:a-z.{}]{0,16}",
        ) {
            match Selector::from_query(key, &value, BASE) {
                Ok(Some(selector)) => {
                    prop_assert_eq!(selector.as_str(), value.as_str());
                    // Matching never fails whatever the topic; exact and `*` are what they say.
                    let matched = selector.matches(&topic);
                    match selector.kind() {
                        SelectorKind::Any => prop_assert!(matched),
                        SelectorKind::Exact => prop_assert_eq!(matched, value == topic),
                        SelectorKind::Template => prop_assert!(selector.matches(&value)),
                        SelectorKind::UrlPattern => {}
                    }
                }
                Ok(None) => prop_assert_eq!(key, "other"),
                Err(error) => {
                    let text = error.to_string();
                    prop_assert!(text.contains(key), "{}", text);
                }
            }
        }
    }
}
