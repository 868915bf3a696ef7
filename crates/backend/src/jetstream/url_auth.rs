//! Credentials written into a server URL: `nats://user:password@host` or `nats://token@host`.
//!
//! async-nats ignores them (it authenticates with what its options say), so the backend takes
//! them out of the URLs, percent-decoded, and authenticates with them itself; the URLs handed
//! to async-nats carry none, so nothing it logs about a server can show them.

use async_nats::ServerAddr;
use percent_encoding::percent_decode_str;

/// The credentials of one URL.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum UrlCredentials {
    /// `user:password@`.
    UserPassword {
        /// The user, percent-decoded.
        user: String,
        /// The password, percent-decoded.
        password: String,
    },
    /// A lone `token@`.
    Token(String),
}

impl UrlCredentials {
    /// The secret part (password or token), for scrubbing messages.
    pub fn secret(&self) -> &str {
        match self {
            Self::UserPassword { password, .. } => password,
            Self::Token(token) => token,
        }
    }
}

/// The credentials `addr` carries, if any; `Err` says why they cannot be used (never quoting
/// them).
pub(super) fn credentials(addr: &ServerAddr) -> Result<Option<UrlCredentials>, &'static str> {
    let url = addr.clone().into_inner();
    let decode = |part: &str| {
        percent_decode_str(part)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| "its credentials are not UTF-8 once percent-decoded")
    };
    let user = decode(url.username())?;
    let password = url.password().map(decode).transpose()?;
    match (user.is_empty(), password) {
        (true, None) => Ok(None),
        (true, Some(_)) => Err("has a password but no user"),
        (false, None) => Ok(Some(UrlCredentials::Token(user))),
        (false, Some(password)) => Ok(Some(UrlCredentials::UserPassword { user, password })),
    }
}

/// `addr` without any credentials.
pub(super) fn without_credentials(addr: ServerAddr) -> ServerAddr {
    let mut url = addr.clone().into_inner();
    // Both only fail for URLs that cannot have a host, which a `ServerAddr` always has.
    if url.set_password(None).is_err() || url.set_username("").is_err() {
        return addr;
    }
    ServerAddr::from_url(url).unwrap_or(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Option<UrlCredentials>, &'static str> {
        credentials(&url.parse().unwrap())
    }

    #[test]
    fn user_password_and_token_are_percent_decoded() {
        assert!(matches!(
            parse("nats://al%69ce:p%40ss%3Aw0rd@h:4222"),
            Ok(Some(UrlCredentials::UserPassword { user, password }))
                if user == "alice" && password == "p@ss:w0rd"
        ));
        assert!(matches!(
            parse("tls://t%2Fk@h"),
            Ok(Some(UrlCredentials::Token(token))) if token == "t/k"
        ));
        assert!(matches!(parse("nats://h:4222"), Ok(None)));
        assert!(parse("nats://:pw@h").is_err());
        assert!(parse("nats://u:%FF@h").is_err());
    }

    #[test]
    fn stripping_keeps_everything_but_the_credentials() {
        let addr: ServerAddr = "wss://alice:secret@h:4443/path".parse().unwrap();
        let stripped = without_credentials(addr).into_inner().to_string();
        assert_eq!(stripped, "wss://h:4443/path");
    }
}
