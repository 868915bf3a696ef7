//! Where a browser request comes from, for tokens sent in a cookie: a browser attaches the
//! cookie to a request that any other site makes (a form POST needs no CORS preflight), so a
//! state change authorised by a cookie is accepted only from an origin the hub trusts.

use axum::http::{HeaderMap, header};

/// The origin of the page that sent the request: its `Origin` header, else the origin of its
/// `Referer` (`scheme://host[:port]`); `None` when it has neither (or `Origin: null`).
pub fn request_origin(headers: &HeaderMap) -> Option<String> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().ok()?;
        return (origin != "null").then(|| origin.to_owned());
    }
    let referer = headers.get(header::REFERER)?.to_str().ok()?;
    let (scheme, rest) = referer.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// Whether a request authorised by a cookie may change state: it comes from the hub's own
/// origin (the `Host` it was sent to, e.g. the built-in console) or from one of `allowed`
/// (exact origins; `*` allows every origin). A request that names no origin is refused, as
/// Mercure's hub does: browsers name it on every cross-site `POST`.
pub fn cookie_origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = request_origin(headers) else {
        return false;
    };
    let own = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .is_some_and(|host| {
            origin
                .split_once("://")
                .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
        });
    own || allowed
        .iter()
        .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(&origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    header::HeaderName::from_static(name),
                    value.parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn the_origin_comes_from_origin_else_referer() {
        let origin = headers(&[
            ("origin", "https://a.example"),
            ("referer", "https://b.example/x"),
        ]);
        assert_eq!(
            request_origin(&origin).as_deref(),
            Some("https://a.example")
        );
        let referer = headers(&[("referer", "https://b.example:8443/page?q#f")]);
        assert_eq!(
            request_origin(&referer).as_deref(),
            Some("https://b.example:8443")
        );
        assert_eq!(request_origin(&headers(&[("origin", "null")])), None);
        assert_eq!(request_origin(&headers(&[])), None);
    }

    #[test]
    fn a_cookie_changes_state_only_from_the_hubs_own_or_an_allowed_origin() {
        let allowed = ["https://app.example".to_owned()];
        let from = |origin: &str| headers(&[("origin", origin), ("host", "hub.example:8080")]);
        assert!(cookie_origin_allowed(
            &from("http://hub.example:8080"),
            &allowed
        ));
        assert!(cookie_origin_allowed(
            &from("https://app.example"),
            &allowed
        ));
        assert!(!cookie_origin_allowed(
            &from("https://evil.example"),
            &allowed
        ));
        assert!(!cookie_origin_allowed(&from("null"), &allowed));
        assert!(!cookie_origin_allowed(
            &headers(&[("host", "hub.example:8080")]),
            &allowed
        ));
        assert!(cookie_origin_allowed(
            &from("https://evil.example"),
            &["*".to_owned()]
        ));
    }
}
