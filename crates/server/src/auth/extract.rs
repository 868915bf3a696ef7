//! Finding the token in a request: `Authorization: Bearer`, then a cookie, then (when enabled)
//! a query parameter.
//!
//! Extraction only borrows from the request; nothing is allocated or decoded here.

use axum::http::{HeaderMap, header};

use super::error::AuthError;

/// Where a request's token was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// `Authorization: Bearer <token>`.
    Header,
    /// The cookie named by `cookie_name`.
    Cookie,
    /// The configured query parameter.
    Query,
}

/// A token as found in a request, not yet verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundToken<'a> {
    /// The compact JWT text.
    pub token: &'a str,
    /// Where it was found.
    pub source: TokenSource,
}

/// Where tokens may be looked for besides the `Authorization` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenPlaces<'a> {
    /// Cookie name to look in, if any.
    pub cookie_name: Option<&'a str>,
    /// Query parameter to look in, if enabled.
    pub query_param: Option<&'a str>,
}

/// Finds the token of a request.
///
/// An `Authorization` header always wins, and when it is present but not a single well-formed
/// `Bearer <token>` the request is refused with [`AuthError::MalformedHeader`] without looking
/// further: a client that sent a header meant it. Then the cookie, then the query parameter
/// (`query` is the raw query string, without `?`; its value is taken as is, since a JWT never
/// needs percent-encoding). An empty cookie or parameter counts as absent.
pub fn extract_token<'a>(
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    places: TokenPlaces<'_>,
) -> Result<Option<FoundToken<'a>>, AuthError> {
    let found = |token, source| Ok(Some(FoundToken { token, source }));
    let mut authorization = headers.get_all(header::AUTHORIZATION).iter();
    if let Some(value) = authorization.next() {
        if authorization.next().is_some() {
            return Err(AuthError::MalformedHeader);
        }
        return found(bearer_token(value.as_bytes())?, TokenSource::Header);
    }
    if let Some(name) = places.cookie_name
        && let Some(token) = cookie_value(headers, name)?
    {
        return found(token, TokenSource::Cookie);
    }
    if let (Some(name), Some(query)) = (places.query_param, query)
        && let Some(token) = query_value(query, name)
    {
        return found(token, TokenSource::Query);
    }
    Ok(None)
}

/// Parses `Bearer <token68>` (scheme case-insensitive, RFC 7235 / RFC 6750 §2.1).
fn bearer_token(value: &[u8]) -> Result<&str, AuthError> {
    let value = std::str::from_utf8(value).map_err(|_| AuthError::MalformedHeader)?;
    let (scheme, rest) = value.split_once(' ').ok_or(AuthError::MalformedHeader)?;
    let token = rest.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || !is_token68(token) {
        return Err(AuthError::MalformedHeader);
    }
    Ok(token)
}

/// RFC 7235 token68: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_token68(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// The first non-empty value of cookie `name` across all `Cookie` headers.
fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, AuthError> {
    for header in headers.get_all(header::COOKIE) {
        for pair in header.as_bytes().split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            if &pair[..eq] != name.as_bytes() {
                continue;
            }
            let value = strip_quotes(pair[eq + 1..].trim_ascii());
            if value.is_empty() {
                continue;
            }
            return std::str::from_utf8(value)
                .map(Some)
                .map_err(|_| AuthError::InvalidToken("the cookie is not text"));
        }
    }
    Ok(None)
}

/// RFC 6265 allows a cookie value wrapped in double quotes.
fn strip_quotes(value: &[u8]) -> &[u8] {
    match value {
        [b'"', inner @ .., b'"'] => inner,
        other => other,
    }
}

/// The first non-empty value of parameter `name` in a raw query string.
fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, value)| *key == name && !value.is_empty())
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(header::HeaderName, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, HeaderValue::from_bytes(value).expect("header value"));
        }
        map
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_spaces_around_the_token_are_dropped() {
        assert_eq!(bearer_token(b"Bearer abc"), Ok("abc"));
        assert_eq!(bearer_token(b"bEARER   abc  "), Ok("abc"));
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Bearer a b",
            b"Basic abc",
            b"Bearer \xff",
        ] {
            assert_eq!(
                bearer_token(bad),
                Err(AuthError::MalformedHeader),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn token68_allows_its_characters_and_only_trailing_padding() {
        for good in ["a", "aZ09-._~+/", "abc==", "a="] {
            assert!(is_token68(good), "{good:?}");
        }
        for bad in ["", "=", "==", "a=b", "a b", "a,b", "a\"", "é"] {
            assert!(!is_token68(bad), "{bad:?}");
        }
    }

    #[test]
    fn cookie_value_is_the_first_non_empty_one_of_the_exact_name() {
        let cookie = |value: &'static [u8]| headers(&[(header::COOKIE, value)]);
        let find = |map: &HeaderMap| cookie_value(map, "c").map(|v| v.map(str::to_owned));
        assert_eq!(find(&cookie(b"cc=x; c=tok")), Ok(Some("tok".into())));
        assert_eq!(find(&cookie(b"c=; c=\"\"; c=tok")), Ok(Some("tok".into())));
        assert_eq!(
            find(&cookie(b"junk; c = \"tok\" ")),
            Ok(None),
            "the name is exact"
        );
        assert_eq!(find(&cookie(b"junk;c=\"tok\"")), Ok(Some("tok".into())));
        assert_eq!(
            find(&cookie(b"c=\"")),
            Ok(Some("\"".into())),
            "a lone quote stays"
        );
        assert_eq!(find(&cookie(b"x=1; cx=2")), Ok(None));
        let two = headers(&[(header::COOKIE, b"a=1"), (header::COOKIE, b"c=second")]);
        assert_eq!(find(&two), Ok(Some("second".into())));
        assert_eq!(
            find(&cookie(b"c=\xff")),
            Err(AuthError::InvalidToken("the cookie is not text"))
        );
    }

    #[test]
    fn query_value_is_the_first_non_empty_one_of_the_exact_name() {
        assert_eq!(query_value("t=&x&tt=no&t=tok&t=later", "t"), Some("tok"));
        assert_eq!(query_value("t", "t"), None);
        assert_eq!(query_value("t=", "t"), None);
        assert_eq!(query_value("a=b=c", "a"), Some("b=c"));
    }

    #[test]
    fn places_are_tried_in_order_and_only_when_configured() {
        let places = TokenPlaces {
            cookie_name: Some("c"),
            query_param: Some("t"),
        };
        let cookie = headers(&[(header::COOKIE, b"c=from-cookie")]);
        let found = extract_token(&cookie, Some("t=from-query"), places).unwrap();
        assert_eq!(
            found,
            Some(FoundToken {
                token: "from-cookie",
                source: TokenSource::Cookie
            })
        );
        let none = HeaderMap::new();
        let found = extract_token(&none, Some("t=from-query"), places).unwrap();
        assert_eq!(
            found,
            Some(FoundToken {
                token: "from-query",
                source: TokenSource::Query
            })
        );
        let nowhere = TokenPlaces::default();
        assert_eq!(extract_token(&cookie, Some("t=q"), nowhere), Ok(None));
    }
}
