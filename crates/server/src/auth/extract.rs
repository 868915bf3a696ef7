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
    /// The configured cookie.
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
