//! Rules for values several sections take (URLs, browser origins), each error naming the key.

use super::error::ConfigError;

/// An absolute `http://` or `https://` URL with a host.
pub(crate) fn http_url(key: &str, url: &str) -> Result<(), ConfigError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| ConfigError::invalid(key, url, "must start with http:// or https://"))?;
    if rest.is_empty()
        || rest.starts_with('/')
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::invalid(
            key,
            url,
            "must be an absolute URL with a host",
        ));
    }
    Ok(())
}

/// An allowed origin is `*` or exactly what a browser sends in `Origin`: a lower-case
/// `http`/`https` scheme and host, an optional port, and nothing else. Anything else could
/// never match a request, so it is rejected rather than silently ignored.
pub(crate) fn allowed_origin(key: &str, origin: &str) -> Result<(), ConfigError> {
    if origin == "*" {
        return Ok(());
    }
    let never = |why: &str| {
        ConfigError::invalid(
            key,
            origin,
            format!("can never match a browser Origin: {why}"),
        )
    };
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or_else(|| never("it must start with http:// or https://"))?;
    if rest.is_empty() {
        return Err(never("it has no host"));
    }
    if rest.contains(['/', '?', '#']) {
        return Err(never("an origin has no path, query or trailing slash"));
    }
    if rest.contains('*') {
        return Err(never("wildcards are only allowed as the whole value `*`"));
    }
    if origin
        .chars()
        .any(|c| c.is_ascii_uppercase() || c.is_whitespace() || c.is_control())
    {
        return Err(never("browsers send it lower-case without whitespace"));
    }
    if rest.contains('@') {
        return Err(never("an origin has no user information"));
    }
    let port = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => None,
            Some((_, after)) => Some(after.strip_prefix(':').unwrap_or(after)),
            None => return Err(never("the IPv6 address has no closing `]`")),
        },
        None => rest.split_once(':').map(|(_, port)| port),
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(never("the port is not a number from 0 to 65535"));
    }
    let default_port = if origin.starts_with("https://") {
        "443"
    } else {
        "80"
    };
    if port == Some(default_port) {
        let without = origin.trim_end_matches(default_port).trim_end_matches(':');
        return Err(never(&format!(
            "browsers leave out the scheme's default port: write {without:?}"
        )));
    }
    Ok(())
}
