//! RFC 6570 URI Templates, matched the way the Mercure hub matches topics against them.
//!
//! Mercure (0.x `topic=` selectors) parses a template with yosida95/uritemplate and matches a topic
//! with the regular expression that library derives from it (`Template.Regexp()`), not with its
//! slower `Match`. That expression is what this module reproduces, compiled once per template
//! into a DFA of bounded size (the one URL patterns use, `crate::pattern`), so matching a topic
//! is one pass over it whatever the template; a template whose automaton would be larger than
//! the bound is refused ([`TemplateError::TooComplex`]):
//!
//! - a literal matches itself exactly (a `%XX` triplet in the template is a literal too);
//! - an expression as a whole is optional; when present it starts with its operator's prefix
//!   (`#`, `.`, `/`, `;`, `?`, `&`; none for `{var}` and `{+var}`), then any run of *value*
//!   characters, then (for several variables or an explode modifier) up to `variables - 1`
//!   (unbounded with an explode) repetitions of the operator's separator followed by a run;
//! - a value character is an unreserved character (`A-Z a-z 0-9 - . _ ~`) or a `%XX` triplet;
//!   `{+var}` and `{#var}` also allow the reserved characters (`:/?#[]@!$&'()*+,;=`), the other
//!   operators allow `,`, and named ones (`;`, `?`, `&`) or exploded variables also `=`.
//!   Prefix lengths (`{var:3}`) are validated but do not limit the match, as in Mercure.
//!
//! A template the library would refuse (a character outside the RFC's literals, an unterminated
//! expression, a reserved operator such as `{=x}`, a bad variable name or prefix length) is not a
//! template: [`compile`] says why, and Mercure then compares the selector as an exact topic.

use std::iter::Peekable;
use std::str::CharIndices;

use crate::pattern::Dfa;

/// Why a selector is not a URI Template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    /// A character that may not appear where it stands.
    #[error("unexpected {found:?} at byte {at}")]
    Unexpected {
        /// The character.
        found: char,
        /// Its byte offset in the template.
        at: usize,
    },
    /// The template ends inside an expression.
    #[error("unterminated expression")]
    Unterminated,
    /// A `%` not followed by two hexadecimal digits.
    #[error("incomplete percent-encoded triplet at byte {0}")]
    BadTriplet(usize),
    /// A variable name that is empty, or starts, ends or doubles a `.`.
    #[error("invalid variable name at byte {0}")]
    BadName(usize),
    /// A prefix length outside 1..=9999 or with a leading zero (the offset is the variable's).
    #[error("prefix length must be 1 to 9999 for the variable at byte {0}")]
    BadPrefix(usize),
    /// More variables than [`crate::selector::MAX_TEMPLATE_VARIABLES`].
    #[error("more than {max} variables")]
    TooManyVariables {
        /// The limit.
        max: usize,
    },
    /// Its automaton would be larger than [`crate::pattern::MAX_PATTERN_BYTES`].
    #[error("too complex to match: its compiled form is over the limit")]
    TooComplex,
}

/// A compiled template: the DFA of the expression Mercure's library derives from it.
pub(crate) struct Template {
    dfa: Dfa,
}

/// The characters a value may contain besides `%XX` triplets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Class {
    /// Reserved characters too (`+` and `#` operators).
    reserved: bool,
    /// `=` too (named operators, exploded variables).
    equals: bool,
}

/// The unreserved characters (`A-Z a-z 0-9 - . _ ~`), as a regular expression class body.
const UNRESERVED: &str = r"A-Za-z0-9\-._~";

/// The reserved characters (`:/?#[]@!$&'()*+,;=`), as a regular expression class body.
const RESERVED: &str = r":/?#\[\]@!$&'()*+,;=";

impl Class {
    /// The class as a regular expression class body.
    fn body(self) -> String {
        let mut body = String::from(UNRESERVED);
        if self.reserved {
            body.push_str(RESERVED);
        } else {
            body.push(',');
            if self.equals {
                body.push('=');
            }
        }
        body
    }
}

/// Characters a template may hold outside expressions (RFC 6570 `literals`, with `'` as its
/// errata and the library allow it); `%` starts a triplet and is handled apart.
fn is_literal(c: char) -> bool {
    matches!(c,
        '!' | '#' | '$' | '&'..=';' | '=' | '?'..='[' | ']' | '_' | 'a'..='z' | '~'
        | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{F8FF}' | '\u{F900}'..='\u{FDCF}'
        | '\u{FDF0}'..='\u{FFEF}' | '\u{10000}'..='\u{DFFFD}' | '\u{E1000}'..='\u{10FFFD}')
        && !is_noncharacter_tail(c)
}

/// The last two code points of each supplementary plane (`U+1FFFE`, `U+1FFFF`, …) are outside
/// the RFC's `ucschar` and `iprivate` ranges.
fn is_noncharacter_tail(c: char) -> bool {
    let c = u32::from(c);
    c >= 0x10000 && (c & 0xFFFF) >= 0xFFFE
}

/// One parsed expression: its operator and its variables' explode flags.
struct Expression {
    operator: Option<char>,
    explodes: Vec<bool>,
}

impl Expression {
    fn first(&self) -> &'static str {
        match self.operator {
            Some('#') => "#",
            Some('.') => ".",
            Some('/') => "/",
            Some(';') => ";",
            Some('?') => "?",
            Some('&') => "&",
            _ => "",
        }
    }

    fn separator(&self) -> char {
        match self.operator {
            Some('.') => '.',
            Some('/') => '/',
            Some(';') => ';',
            Some('?' | '&') => '&',
            _ => ',',
        }
    }

    fn named(&self) -> bool {
        matches!(self.operator, Some(';' | '?' | '&'))
    }

    fn reserved(&self) -> bool {
        matches!(self.operator, Some('+' | '#'))
    }
}

/// Compiles `text` as a URI Template with at most `max_variables` variables.
pub(crate) fn compile(text: &str, max_variables: usize) -> Result<Template, TemplateError> {
    let mut builder = Builder {
        expression: String::from("^"),
    };
    let mut chars = text.char_indices().peekable();
    let mut variables = 0;
    while let Some((at, c)) = chars.next() {
        match c {
            '{' => {
                let expression = parse_expression(&mut chars)?;
                variables += expression.explodes.len();
                if variables > max_variables {
                    return Err(TemplateError::TooManyVariables { max: max_variables });
                }
                builder.expression(&expression);
            }
            '%' => {
                builder.literal('%');
                for digit in triplet_digits(&mut chars, at)? {
                    builder.literal(digit);
                }
            }
            c if is_literal(c) => builder.literal(c),
            found => return Err(TemplateError::Unexpected { found, at }),
        }
    }
    builder.expression.push('$');
    let dfa = Dfa::build(&builder.expression, false).map_err(|over_a_limit| {
        // The expression is built from checked pieces: it always parses.
        debug_assert!(over_a_limit, "{}", builder.expression);
        TemplateError::TooComplex
    })?;
    Ok(Template { dfa })
}

/// The two hexadecimal digits after the `%` at `at`.
fn triplet_digits(
    chars: &mut Peekable<CharIndices<'_>>,
    at: usize,
) -> Result<[char; 2], TemplateError> {
    let mut digit = || match chars.next() {
        Some((_, d)) if d.is_ascii_hexdigit() => Ok(d),
        _ => Err(TemplateError::BadTriplet(at)),
    };
    Ok([digit()?, digit()?])
}

/// Parses an expression after its `{`, up to and including its `}`.
fn parse_expression(chars: &mut Peekable<CharIndices<'_>>) -> Result<Expression, TemplateError> {
    let operator = match chars.peek() {
        None => return Err(TemplateError::Unterminated),
        Some(&(_, c @ ('+' | '#' | '.' | '/' | ';' | '?' | '&'))) => {
            chars.next();
            Some(c)
        }
        Some(&(at, found @ ('=' | ',' | '!' | '@' | '|'))) => {
            return Err(TemplateError::Unexpected { found, at });
        }
        Some(_) => None,
    };
    let mut explodes = Vec::new();
    loop {
        let (terminator, at) = parse_name(chars)?;
        let mut explode = false;
        let mut next = terminator;
        match terminator {
            '*' => {
                explode = true;
                next = chars.next().ok_or(TemplateError::Unterminated)?.1;
            }
            ':' => next = parse_prefix(chars, at)?,
            _ => {}
        }
        explodes.push(explode);
        match next {
            ',' => continue,
            '}' => return Ok(Expression { operator, explodes }),
            found => return Err(TemplateError::Unexpected { found, at }),
        }
    }
}

/// Reads a variable name up to its terminator (`,`, `}`, `:` or `*`), which it returns with the
/// byte offset where the name started.
fn parse_name(chars: &mut Peekable<CharIndices<'_>>) -> Result<(char, usize), TemplateError> {
    let start = chars.peek().map_or(0, |&(at, _)| at);
    let mut previous: Option<char> = None;
    loop {
        let (at, c) = chars.next().ok_or(TemplateError::Unterminated)?;
        match c {
            ',' | '}' | ':' | '*' => {
                return match previous {
                    None | Some('.') => Err(TemplateError::BadName(start)),
                    Some(_) => Ok((c, start)),
                };
            }
            '.' if matches!(previous, None | Some('.')) => {
                return Err(TemplateError::BadName(start));
            }
            '%' => {
                triplet_digits(chars, at)?;
            }
            '.' => {}
            c if c.is_ascii_alphanumeric() || c == '_' => {}
            found => return Err(TemplateError::Unexpected { found, at }),
        }
        previous = Some(c);
    }
}

/// Reads a prefix length (`1`..=`9999`, no leading zero) after `:` and returns the character
/// that follows it.
fn parse_prefix(chars: &mut Peekable<CharIndices<'_>>, at: usize) -> Result<char, TemplateError> {
    let mut length: u32 = 0;
    loop {
        let (_, c) = chars.next().ok_or(TemplateError::Unterminated)?;
        match c.to_digit(10) {
            Some(digit) => {
                length = length * 10 + digit;
                if length == 0 || length > 9999 {
                    return Err(TemplateError::BadPrefix(at));
                }
            }
            None if length == 0 => return Err(TemplateError::BadPrefix(at)),
            None => return Ok(c),
        }
    }
}

/// Writes the regular expression of a template, piece by piece.
struct Builder {
    expression: String,
}

impl Builder {
    fn literal(&mut self, c: char) {
        self.expression
            .push_str(&regex_syntax::escape(c.encode_utf8(&mut [0; 4])));
    }

    /// Any run (possibly empty) of characters of `class` and `%XX` triplets.
    fn run(&mut self, class: Class) {
        self.expression
            .push_str(&format!("(?:[{}]|%[0-9A-Fa-f]{{2}})*", class.body()));
    }

    fn expression(&mut self, expression: &Expression) {
        self.expression.push_str("(?:");
        for c in expression.first().chars() {
            self.literal(c);
        }
        let any_explode = expression.explodes.iter().any(|&e| e);
        let first = Class {
            reserved: expression.reserved(),
            equals: expression.named() || expression.explodes[0],
        };
        self.run(first);
        if expression.explodes.len() > 1 || any_explode {
            let rest = Class {
                reserved: expression.reserved(),
                equals: expression.named() || any_explode,
            };
            self.expression.push_str("(?:");
            self.literal(expression.separator());
            self.run(rest);
            self.expression.push(')');
            if any_explode {
                self.expression.push('*');
            } else {
                let most = expression.explodes.len() - 1;
                self.expression.push_str(&format!("{{0,{most}}}"));
            }
        }
        self.expression.push_str(")?");
    }
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template")
            .field("bytes", &self.memory_usage())
            .finish()
    }
}

impl Template {
    /// Whether `topic` matches the whole template.
    pub(crate) fn matches(&self, topic: &str) -> bool {
        self.dfa.matches_whole(topic)
    }

    /// The bytes its automaton takes.
    pub(crate) fn memory_usage(&self) -> usize {
        self.dfa.memory_usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(template: &str, topic: &str) -> bool {
        compile(template, 32).unwrap().matches(topic)
    }

    #[test]
    fn simple_variables_match_unreserved_characters_commas_and_triplets() {
        let t = "https://example.com/books/{id}";
        assert!(matches(t, "https://example.com/books/1"));
        assert!(matches(t, "https://example.com/books/"));
        assert!(matches(t, "https://example.com/books/a,b"));
        assert!(matches(t, "https://example.com/books/a%2Fb"));
        assert!(!matches(t, "https://example.com/books/1/reviews"));
        assert!(!matches(t, "https://example.com/books/a=b"));
        assert!(!matches(t, "https://example.com/books/%2"));
        assert!(!matches(t, "https://example.com/books/é"));
        assert!(!matches(t, "https://example.com/book/1"));
    }

    #[test]
    fn reserved_expansion_matches_slashes() {
        assert!(matches("/a/{+rest}", "/a/b/c?d=e#f"));
        assert!(!matches("/a/{rest}", "/a/b/c"));
        assert!(matches("/a{#frag}", "/a#x/y"));
        assert!(matches("/a{#frag}", "/a"));
        assert!(!matches("/a{#frag}", "/ax"));
    }

    #[test]
    fn operators_add_their_prefix_and_separator() {
        assert!(matches("/users{/id}", "/users/42"));
        assert!(matches("/users{/id}", "/users"));
        assert!(!matches("/users{/id}", "/users42"));
        assert!(matches("/p{/a,b}", "/p/1/2"));
        assert!(
            !matches("/p{/a,b}", "/p/1/2/3"),
            "two variables: one separator at most"
        );
        assert!(matches("/p{/a*}", "/p/1/2/3"), "an explode repeats");
        assert!(matches("/s{?q,page}", "/s?q=rust&page=2"));
        assert!(!matches("/s{?q}", "/s?q=a&page=2"));
        assert!(matches("/m{;x}", "/m;x=1"));
        assert!(matches("host{.domain*}", "host.example.com"));
        assert!(matches("/x{&a}", "/x&a=1"));
        assert!(matches("{a}{b}", "ab"));
    }

    #[test]
    fn literals_match_exactly_and_prefixes_do_not_limit() {
        assert!(matches("/a%20b/{x}", "/a%20b/1"));
        assert!(!matches("/a%20b/{x}", "/a b/1"));
        assert!(matches("/t/{x:2}", "/t/abcdef"));
        assert!(matches("/ünï/{x}", "/ünï/1"));
    }

    #[test]
    fn invalid_templates_are_refused_with_a_reason() {
        for (template, error) in [
            ("/a/{", TemplateError::Unterminated),
            ("/a/{x", TemplateError::Unterminated),
            ("/a/{}", TemplateError::BadName(4)),
            ("/a/{..x}", TemplateError::BadName(5)),
            ("/a/{x.}", TemplateError::BadName(4)),
            ("/a/{x..y}", TemplateError::BadName(4)),
            ("/a/{=x}", TemplateError::Unexpected { found: '=', at: 4 }),
            ("/a/{x:0}", TemplateError::BadPrefix(4)),
            ("/a/{x:10000}", TemplateError::BadPrefix(4)),
            ("/a/{x:}", TemplateError::BadPrefix(4)),
            ("/a/{x*:3}", TemplateError::Unexpected { found: ':', at: 4 }),
            ("/a b/{x}", TemplateError::Unexpected { found: ' ', at: 2 }),
            ("/a/}", TemplateError::Unexpected { found: '}', at: 3 }),
            ("/a%2/{x}", TemplateError::BadTriplet(2)),
            (
                "/\u{FFFD}/{x}",
                TemplateError::Unexpected {
                    found: '\u{FFFD}',
                    at: 1,
                },
            ),
        ] {
            assert_eq!(compile(template, 32).unwrap_err(), error, "{template:?}");
        }
        assert_eq!(
            compile("{a,b,c}", 2).unwrap_err(),
            TemplateError::TooManyVariables { max: 2 }
        );
        assert!(compile("{a%20b,c_d.e}", 32).is_ok());
        // Outside expressions, only the RFC's literals (with `'`, as the library allows it).
        assert!(compile("/a'b()*+,;=!$&@[]~_é/{x}", 32).is_ok());
        for bad in [
            '"',
            '<',
            '>',
            '\\',
            '^',
            '`',
            '|',
            ' ',
            '\u{7F}',
            '\u{FFFE}',
            '\u{1FFFF}',
        ] {
            let template = format!("/a{bad}b/{{x}}");
            assert_eq!(
                compile(&template, 32).unwrap_err(),
                TemplateError::Unexpected { found: bad, at: 2 },
                "{template:?}"
            );
        }
    }

    /// One piece of a generated template: a literal, or an expression (operator, explode flags).
    #[derive(Debug, Clone)]
    enum Piece {
        Literal(String),
        Expression(Option<char>, Vec<bool>),
    }

    fn render(pieces: &[Piece]) -> String {
        let mut text = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            match piece {
                Piece::Literal(literal) => text.push_str(literal),
                Piece::Expression(operator, explodes) => {
                    text.push('{');
                    text.extend(*operator);
                    let vars: Vec<String> = explodes
                        .iter()
                        .enumerate()
                        .map(|(j, &e)| format!("v{i}_{j}{}", if e { "*" } else { "" }))
                        .collect();
                    text.push_str(&vars.join(","));
                    text.push('}');
                }
            }
        }
        text
    }

    /// The regular expression yosida95/uritemplate's `Template.Regexp()` builds, restated.
    fn oracle(pieces: &[Piece]) -> regex::Regex {
        const UNRESERVED: &str = r"\x2d\x2e\x30-\x39\x41-\x5a\x5f\x61-\x7a\x7e";
        const RESERVED: &str = r"\x21\x23\x24\x26-\x2c\x2f\x3a\x3b\x3d\x3f\x40\x5b\x5d";
        let class = |reserved: bool, named: bool| {
            let mut c = String::from("(?:(?:[");
            if !reserved {
                c.push_str(r"\x2c");
                if named {
                    c.push_str(r"\x3d");
                }
            }
            c.push_str(UNRESERVED);
            if reserved {
                c.push_str(RESERVED);
            }
            c.push_str("]|%[[:xdigit:]][[:xdigit:]])*)");
            c
        };
        let mut re = String::from("^");
        for piece in pieces {
            match piece {
                Piece::Literal(literal) => {
                    re.push_str(&format!("(?:{})", regex::escape(literal)));
                }
                Piece::Expression(operator, explodes) => {
                    let e = Expression {
                        operator: *operator,
                        explodes: explodes.clone(),
                    };
                    let first = e.first();
                    if !first.is_empty() {
                        re.push_str("(?:");
                        re.push_str(&regex::escape(first));
                    }
                    re.push('(');
                    re.push_str(&class(e.reserved(), e.named() || explodes[0]));
                    let any_explode = explodes.iter().any(|&x| x);
                    if explodes.len() > 1 || any_explode {
                        re.push_str("(?:");
                        re.push_str(&regex::escape(&e.separator().to_string()));
                        re.push_str(&class(e.reserved(), e.named() || any_explode));
                        re.push(')');
                        if any_explode {
                            re.push('*');
                        } else {
                            re.push_str(&format!("{{0,{}}}", explodes.len() - 1));
                        }
                    }
                    re.push(')');
                    if !first.is_empty() {
                        re.push(')');
                    }
                    re.push('?');
                }
            }
        }
        re.push('$');
        regex::Regex::new(&re).unwrap()
    }

    fn piece() -> impl Strategy<Value = Piece> {
        prop_oneof![
            "[a-z/.:;,=?&#!$()*+é~_-]{1,3}".prop_map(Piece::Literal),
            (
                prop::option::of(prop::sample::select(vec![
                    '+', '#', '.', '/', ';', '?', '&'
                ])),
                prop::collection::vec(any::<bool>(), 1..4)
            )
                .prop_map(|(operator, explodes)| Piece::Expression(operator, explodes)),
        ]
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matching_agrees_with_the_regular_expression_mercure_uses(
            pieces in prop::collection::vec(piece(), 1..5),
            topic in "[a-c/.,=;?&#%:+4Fé ]{0,12}",
        ) {
            let text = render(&pieces);
            let template = compile(&text, 32).unwrap();
            let expected = oracle(&pieces).is_match(&topic);
            prop_assert_eq!(template.matches(&topic), expected, "{:?} {:?}", text, topic);
        }

        #[test]
        fn matching_agrees_on_topics_expanded_from_the_template(
            pieces in prop::collection::vec(piece(), 1..5),
            fills in prop::collection::vec(("[a-c4F%,=/.;&]{0,3}", 0..3usize), 5),
        ) {
            let mut topic = String::new();
            for (piece, (fill, repeats)) in pieces.iter().zip(&fills) {
                match piece {
                    Piece::Literal(literal) => topic.push_str(literal),
                    Piece::Expression(operator, explodes) => {
                        let e = Expression { operator: *operator, explodes: explodes.clone() };
                        topic.push_str(e.first());
                        topic.push_str(fill);
                        for _ in 0..*repeats {
                            topic.push(e.separator());
                            topic.push_str(fill);
                        }
                    }
                }
            }
            let text = render(&pieces);
            let template = compile(&text, 32).unwrap();
            let expected = oracle(&pieces).is_match(&topic);
            prop_assert_eq!(template.matches(&topic), expected, "{:?} {:?}", text, topic);
        }
    }
}
