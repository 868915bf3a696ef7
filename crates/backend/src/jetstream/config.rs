//! Configuration of the NATS JetStream backend: where the servers are, which stream to use,
//! how to authenticate, TLS, and connection timing.
//!
//! Secrets (token, password, credentials embedded in URLs) never appear in `Debug` output or
//! in error messages.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::url_auth::{self, UrlCredentials};
use sluice_protocol::config_duration;

/// A `[jetstream]` value that cannot be used; the message names the key and the value, never a
/// secret. The hub's configuration wraps it as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{key}` = {value}: {reason}")]
pub struct JetStreamConfigError {
    /// The dotted key, e.g. `jetstream.urls[1]`.
    pub key: String,
    /// The offending value, quoted, secrets redacted.
    pub value: String,
    /// Why it is rejected.
    pub reason: String,
}

/// Builds the error for `key` (relative to the `[jetstream]` section) and `value`.
fn invalid(
    key: impl AsRef<str>,
    value: impl fmt::Display,
    reason: impl Into<String>,
) -> JetStreamConfigError {
    JetStreamConfigError {
        key: format!("jetstream.{}", key.as_ref()),
        value: format!("{:?}", value.to_string()),
        reason: reason.into(),
    }
}

/// Shown instead of a secret.
const REDACTED: &str = "<redacted>";
/// Shown instead of a secret inside a URL (where `<` and `>` would be percent-encoded).
const URL_REDACTED: &str = "redacted";

/// How the JetStream backend connects and which stream it serves.
///
/// Every key has a default except `stream`, whose absence [`JetStreamConfig::validate`]
/// reports. Serialising shows secrets as `<redacted>`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JetStreamConfig {
    /// Server URLs (`nats://`, `tls://`, `ws://`, `wss://`); tried in turn. A URL may carry
    /// credentials (`nats://user:password@host`, `nats://token@host`, percent-encoded), used
    /// for every server.
    pub urls: Vec<String>,
    /// The JetStream stream that holds the messages; it must already exist.
    pub stream: String,
    /// The client connection name shown by the server's monitoring.
    pub name: String,
    /// A NATS credentials file (user JWT + nkey seed).
    pub creds_file: Option<PathBuf>,
    /// A token for token authentication.
    pub token: Option<String>,
    /// User name for user/password authentication (requires `password`).
    pub user: Option<String>,
    /// Password for user/password authentication (requires `user`).
    pub password: Option<String>,
    /// A file holding an nkey seed (`SU…`).
    pub nkey_seed_file: Option<PathBuf>,
    /// PEM file of CA certificates that sign the server's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (requires `client_key`).
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Accept any server certificate. For tests only; rejected together with `ca_file`.
    pub tls_insecure_skip_verify: bool,
    /// How long one connection attempt may take.
    #[serde(with = "config_duration")]
    pub connect_timeout: Duration,
    /// Pause between reconnection attempts.
    #[serde(with = "config_duration")]
    pub reconnect_wait: Duration,
    /// Reconnection attempts before giving up; -1 (the default) retries forever.
    pub max_reconnects: i64,
    /// Upper bound on every JetStream API request (stream info, consumer create, publish).
    #[serde(with = "config_duration")]
    pub request_timeout: Duration,
    /// Idle heartbeat asked of consumers; two missed heartbeats mean the consumer is lost
    /// and is recreated.
    #[serde(with = "config_duration")]
    pub idle_heartbeat: Duration,
}

impl Default for JetStreamConfig {
    fn default() -> Self {
        Self {
            urls: vec!["nats://127.0.0.1:4222".to_owned()],
            stream: String::new(),
            name: "sluice".to_owned(),
            creds_file: None,
            token: None,
            user: None,
            password: None,
            nkey_seed_file: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
            tls_insecure_skip_verify: false,
            connect_timeout: Duration::from_secs(5),
            reconnect_wait: Duration::from_secs(2),
            max_reconnects: -1,
            request_timeout: Duration::from_secs(2),
            idle_heartbeat: Duration::from_secs(5),
        }
    }
}

/// The longest accepted heartbeat, so a lost consumer is noticed within two minutes.
const MAX_IDLE_HEARTBEAT: Duration = Duration::from_secs(60);
/// The longest accepted request or connect timeout.
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

impl JetStreamConfig {
    /// A configuration with every default for `stream` on `url`.
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            urls: vec![url.into()],
            stream: stream.into(),
            ..Self::default()
        }
    }

    /// Checks every value; the error names the key and the value (secrets redacted).
    pub fn validate(&self) -> Result<(), JetStreamConfigError> {
        self.validate_urls()?;
        validate_stream_name(&self.stream)?;
        if self.name.is_empty() || self.name.chars().any(char::is_control) {
            return Err(invalid(
                "name",
                &self.name,
                "must be non-empty without control characters",
            ));
        }
        self.validate_auth()?;
        self.validate_tls()?;
        self.validate_timing()
    }

    /// The server URLs with any embedded password replaced, for logs and errors.
    pub(crate) fn redacted_urls(&self) -> String {
        self.urls
            .iter()
            .map(|url| redact_url(url))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `text` with every secret of this configuration (token, password, credentials embedded
    /// in URLs, as written and percent-decoded) replaced, for messages that quote what a
    /// library reported.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let url_secrets = self.urls.iter().filter_map(|url| {
            let addr: async_nats::ServerAddr = url.parse().ok()?;
            let decoded = url_auth::credentials(&addr)
                .ok()
                .flatten()
                .map(|credentials| credentials.secret().to_owned());
            let url = addr.into_inner();
            let written = url.password().unwrap_or(url.username()).to_owned();
            Some([Some(written), decoded])
        });
        let mut secrets: Vec<String> = url_secrets
            .flatten()
            .flatten()
            .chain(self.token.iter().cloned())
            .chain(self.password.iter().cloned())
            .filter(|secret| !secret.is_empty())
            .collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), REDACTED)
        })
    }

    /// The server addresses as async-nats gets them: without the credentials they may carry
    /// (see [`JetStreamConfig::url_credentials`]). Call after [`JetStreamConfig::validate`].
    pub(super) fn server_addrs(&self) -> Vec<async_nats::ServerAddr> {
        self.urls
            .iter()
            .filter_map(|url| url.parse().ok())
            .map(url_auth::without_credentials)
            .collect()
    }

    /// The credentials written into the server URLs, if any (validation makes sure that every
    /// URL carrying some carries the same, and that no other authentication key is set).
    pub(super) fn url_credentials(&self) -> Option<UrlCredentials> {
        self.urls_with_credentials()
            .next()
            .map(|(_, credentials)| credentials)
    }

    /// (index, credentials) of every URL that parses and carries usable credentials.
    fn urls_with_credentials(&self) -> impl Iterator<Item = (usize, UrlCredentials)> + '_ {
        self.urls.iter().enumerate().filter_map(|(index, url)| {
            let addr = url.parse().ok()?;
            Some((index, url_auth::credentials(&addr).ok()??))
        })
    }

    fn validate_urls(&self) -> Result<(), JetStreamConfigError> {
        if self.urls.is_empty() {
            return Err(invalid("urls", "[]", "at least one server URL is required"));
        }
        let mut websocket = None;
        for (index, url) in self.urls.iter().enumerate() {
            let key = format!("urls[{index}]");
            let shown = redact_url(url);
            let addr: async_nats::ServerAddr = url.parse().map_err(|err: std::io::Error| {
                invalid(
                    &key,
                    &shown,
                    format!("{err}; schemes are nats, tls, ws, wss"),
                )
            })?;
            if addr.host().is_empty() {
                return Err(invalid(&key, &shown, "has no host"));
            }
            url_auth::credentials(&addr).map_err(|reason| invalid(&key, &shown, reason))?;
            let is_websocket = addr.is_websocket();
            if *websocket.get_or_insert(is_websocket) != is_websocket {
                return Err(invalid(
                    &key,
                    &shown,
                    "cannot mix WebSocket (ws, wss) and plain (nats, tls) URLs",
                ));
            }
        }
        let mut carrying = self.urls_with_credentials();
        if let Some((first, credentials)) = carrying.next()
            && let Some((other, _)) = carrying.find(|(_, other)| *other != credentials)
        {
            return Err(invalid(
                format!("urls[{other}]"),
                redact_url(&self.urls[other]),
                format!(
                    "carries other credentials than urls[{first}]; one connection uses one set \
                     of credentials for every server"
                ),
            ));
        }
        Ok(())
    }

    fn validate_auth(&self) -> Result<(), JetStreamConfigError> {
        match (&self.user, &self.password) {
            (Some(user), None) => {
                return Err(invalid("user", user, "`password` is required with `user`"));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "password",
                    REDACTED,
                    "`user` is required with `password`",
                ));
            }
            (Some(user), Some(_)) if user.is_empty() => {
                return Err(invalid("user", user, "must not be empty"));
            }
            _ => {}
        }
        if self.token.as_deref() == Some("") {
            return Err(invalid("token", "", "must not be empty"));
        }
        let methods: Vec<&str> = [
            ("creds_file", self.creds_file.is_some()),
            ("token", self.token.is_some()),
            ("user", self.user.is_some()),
            ("nkey_seed_file", self.nkey_seed_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        if let (Some((index, _)), Some(key)) =
            (self.urls_with_credentials().next(), methods.first())
        {
            return Err(invalid(
                key,
                format!("urls[{index}], {key}"),
                format!(
                    "credentials are given both in urls[{index}] and in `{key}`; give them in \
                     one place"
                ),
            ));
        }
        if methods.len() > 1 {
            return Err(invalid(
                methods[1],
                methods.join(", "),
                "choose at most one of creds_file, token, user+password, nkey_seed_file",
            ));
        }
        check_file("creds_file", self.creds_file.as_deref())?;
        check_file("nkey_seed_file", self.nkey_seed_file.as_deref())
    }

    fn validate_tls(&self) -> Result<(), JetStreamConfigError> {
        if self.tls_insecure_skip_verify
            && let Some(ca) = &self.ca_file
        {
            return Err(invalid(
                "tls_insecure_skip_verify",
                "true",
                format!(
                    "contradicts ca_file = \"{}\"; use one or the other",
                    ca.display()
                ),
            ));
        }
        match (&self.client_cert, &self.client_key) {
            (Some(cert), None) => {
                return Err(invalid(
                    "client_cert",
                    cert.display(),
                    "`client_key` is required with `client_cert`",
                ));
            }
            (None, Some(key)) => {
                return Err(invalid(
                    "client_key",
                    key.display(),
                    "`client_cert` is required with `client_key`",
                ));
            }
            _ => {}
        }
        check_file("ca_file", self.ca_file.as_deref())?;
        check_file("client_cert", self.client_cert.as_deref())?;
        check_file("client_key", self.client_key.as_deref())
    }

    fn validate_timing(&self) -> Result<(), JetStreamConfigError> {
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                return Err(invalid(
                    key,
                    config_duration::format(value),
                    format!(
                        "must be above 0 and at most {}",
                        config_duration::format(MAX_TIMEOUT)
                    ),
                ));
            }
        }
        if self.idle_heartbeat < Duration::from_millis(100)
            || self.idle_heartbeat > MAX_IDLE_HEARTBEAT
        {
            return Err(invalid(
                "idle_heartbeat",
                config_duration::format(self.idle_heartbeat),
                format!(
                    "must be between 100ms and {}",
                    config_duration::format(MAX_IDLE_HEARTBEAT)
                ),
            ));
        }
        if self.reconnect_wait > MAX_TIMEOUT {
            return Err(invalid(
                "reconnect_wait",
                config_duration::format(self.reconnect_wait),
                format!("must be at most {}", config_duration::format(MAX_TIMEOUT)),
            ));
        }
        if self.max_reconnects == 0 || self.max_reconnects < -1 {
            return Err(invalid(
                "max_reconnects",
                self.max_reconnects,
                "must be -1 (retry forever) or a positive count",
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for JetStreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = |value: &Option<String>| value.as_ref().map(|_| REDACTED);
        f.debug_struct("JetStreamConfig")
            .field("urls", &self.redacted_urls())
            .field("stream", &self.stream)
            .field("name", &self.name)
            .field("creds_file", &self.creds_file)
            .field("token", &secret(&self.token))
            .field("user", &self.user)
            .field("password", &secret(&self.password))
            .field("nkey_seed_file", &self.nkey_seed_file)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("tls_insecure_skip_verify", &self.tls_insecure_skip_verify)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_wait", &self.reconnect_wait)
            .field("max_reconnects", &self.max_reconnects)
            .field("request_timeout", &self.request_timeout)
            .field("idle_heartbeat", &self.idle_heartbeat)
            .finish()
    }
}

/// Serialises the configuration for display, secrets redacted.
impl Serialize for JetStreamConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            urls: Vec<String>,
            stream: &'a str,
            name: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            creds_file: Option<&'a Path>,
            #[serde(skip_serializing_if = "Option::is_none")]
            token: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            user: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            password: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            nkey_seed_file: Option<&'a Path>,
            #[serde(skip_serializing_if = "Option::is_none")]
            ca_file: Option<&'a Path>,
            #[serde(skip_serializing_if = "Option::is_none")]
            client_cert: Option<&'a Path>,
            #[serde(skip_serializing_if = "Option::is_none")]
            client_key: Option<&'a Path>,
            tls_insecure_skip_verify: bool,
            #[serde(with = "config_duration")]
            connect_timeout: Duration,
            #[serde(with = "config_duration")]
            reconnect_wait: Duration,
            max_reconnects: i64,
            #[serde(with = "config_duration")]
            request_timeout: Duration,
            #[serde(with = "config_duration")]
            idle_heartbeat: Duration,
        }
        Shown {
            urls: self.urls.iter().map(|url| redact_url(url)).collect(),
            stream: &self.stream,
            name: &self.name,
            creds_file: self.creds_file.as_deref(),
            token: self.token.as_ref().map(|_| REDACTED),
            user: self.user.as_deref(),
            password: self.password.as_ref().map(|_| REDACTED),
            nkey_seed_file: self.nkey_seed_file.as_deref(),
            ca_file: self.ca_file.as_deref(),
            client_cert: self.client_cert.as_deref(),
            client_key: self.client_key.as_deref(),
            tls_insecure_skip_verify: self.tls_insecure_skip_verify,
            connect_timeout: self.connect_timeout,
            reconnect_wait: self.reconnect_wait,
            max_reconnects: self.max_reconnects,
            request_timeout: self.request_timeout,
            idle_heartbeat: self.idle_heartbeat,
        }
        .serialize(serializer)
    }
}

/// `url` with any password replaced by `redacted`; unparsable input is redacted after any
/// `user:pass@` part it seems to carry.
fn redact_url(url: &str) -> String {
    match url.parse::<async_nats::ServerAddr>() {
        Ok(addr) => {
            let mut parsed = addr.into_inner();
            if parsed.password().is_some() {
                // Setting a password only fails for URLs without a host, which parsing rejected.
                let _ = parsed.set_password(Some(URL_REDACTED));
            } else if !parsed.username().is_empty() {
                // A lone user part may be a token (`nats://token@host`).
                let _ = parsed.set_username(URL_REDACTED);
            }
            parsed.to_string()
        }
        Err(_) => match url.rfind('@') {
            Some(at) => {
                let scheme_end = url.find("://").map_or(0, |i| i + 3);
                format!("{}{URL_REDACTED}{}", &url[..scheme_end.min(at)], &url[at..])
            }
            None => url.to_owned(),
        },
    }
}

fn validate_stream_name(stream: &str) -> Result<(), JetStreamConfigError> {
    if stream.is_empty() {
        return Err(invalid(
            "stream",
            stream,
            "is required: the name of an existing JetStream stream",
        ));
    }
    let bad = stream.len() > 255
        || stream.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        });
    if bad {
        return Err(invalid(
            "stream",
            stream,
            "must be 1-255 characters without whitespace, '.', '*', '>', '/' or '\\'",
        ));
    }
    Ok(())
}

fn check_file(key: &str, path: Option<&Path>) -> Result<(), JetStreamConfigError> {
    let Some(path) = path else { return Ok(()) };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(invalid(key, path.display(), "is not a regular file")),
        Err(err) => Err(invalid(
            key,
            path.display(),
            format!("cannot be read: {err}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<JetStreamConfig, String> {
        toml::from_str(text).map_err(|err| err.to_string())
    }

    /// The key and value of the validation error, without the section prefix.
    fn rejected(config: &JetStreamConfig) -> (String, String) {
        let JetStreamConfigError { key, value, .. } = config.validate().unwrap_err();
        (key.strip_prefix("jetstream.").unwrap().to_owned(), value)
    }

    fn valid() -> JetStreamConfig {
        JetStreamConfig::new("nats://127.0.0.1:4222", "EVENTS")
    }

    #[test]
    fn defaults_fill_everything_but_the_stream() {
        let config = parse("stream = \"EVENTS\"").unwrap();
        assert_eq!(
            config,
            JetStreamConfig::new("nats://127.0.0.1:4222", "EVENTS")
        );
        assert_eq!(config.request_timeout, Duration::from_secs(2));
        config.validate().unwrap();
    }

    #[test]
    fn durations_parse_from_strings_and_seconds() {
        let config = parse(
            "stream = \"S\"\nrequest_timeout = \"500ms\"\nconnect_timeout = 3\nidle_heartbeat = \"1m\"",
        )
        .unwrap();
        assert_eq!(config.request_timeout, Duration::from_millis(500));
        assert_eq!(config.connect_timeout, Duration::from_secs(3));
        assert_eq!(config.idle_heartbeat, Duration::from_secs(60));
    }

    #[test]
    fn negative_durations_are_rejected_with_the_value() {
        let err = parse("stream = \"S\"\nreconnect_wait = \"-2s\"").unwrap_err();
        assert!(err.contains("-2s") && err.contains("negative"), "{err}");
        let err = parse("stream = \"S\"\nreconnect_wait = -3").unwrap_err();
        assert!(err.contains("-3") && err.contains("negative"), "{err}");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = parse("stream = \"S\"\ntopic_prefix = \"x\"").unwrap_err();
        assert!(err.contains("topic_prefix"), "{err}");
    }

    #[test]
    fn url_schemes_are_limited() {
        let mut config = valid();
        config.urls = vec!["nats://a:4222".into(), "http://user:secret@b:80".into()];
        let err = config.validate().unwrap_err().to_string();
        assert_eq!(rejected(&config).0, "urls[1]");
        assert!(err.contains("http://redacted@b:80"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        for ok in ["nats://h:1", "tls://h:1", "h:4222"] {
            config.urls = vec![ok.into()];
            config.validate().unwrap();
        }
        config.urls = vec!["ws://h:1".into(), "wss://h:2".into()];
        config.validate().unwrap();
        config.urls = vec!["ws://h:1".into(), "nats://h:2".into()];
        assert_eq!(rejected(&config).0, "urls[1]");
        config.urls = vec![];
        assert_eq!(rejected(&config).0, "urls");
    }

    #[test]
    fn stream_names_with_subject_characters_are_rejected() {
        for bad in ["", "a.b", "a b", "a*", "a>", "a/b"] {
            let mut config = valid();
            config.stream = bad.into();
            let (key, value) = rejected(&config);
            assert_eq!(key, "stream");
            assert!(value.contains(bad));
        }
    }

    #[test]
    fn at_most_one_auth_method() {
        let mut config = valid();
        config.token = Some("t0ken".into());
        config.user = Some("u".into());
        config.password = Some("hunter2".into());
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("token, user"), "{err}");
        assert!(!err.to_string().contains("hunter2") && !err.to_string().contains("t0ken"));
        config.token = None;
        config.validate().unwrap();
        config.password = None;
        assert_eq!(rejected(&config).0, "user");
        config.user = None;
        config.password = Some("hunter2".into());
        assert_eq!(rejected(&config).0, "password");
        assert!(
            !config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("hunter2")
        );
    }

    #[test]
    fn url_credentials_conflicting_with_other_credentials_name_both() {
        let mut config = valid();
        config.urls = vec!["nats://h:1".into(), "nats://alice:s3cret@h:2".into()];
        config.validate().unwrap();
        assert!(matches!(
            config.url_credentials(),
            Some(UrlCredentials::UserPassword { user, password })
                if user == "alice" && password == "s3cret"
        ));
        assert_eq!(
            config.server_addrs()[1].clone().into_inner().to_string(),
            "nats://h:2"
        );
        config.token = Some("t0ken".into());
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("urls[1]") && err.contains("`token`"), "{err}");
        assert!(!err.contains("s3cret") && !err.contains("t0ken"), "{err}");

        config.token = None;
        config.urls.push("nats://bob:other@h:3".into());
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("urls[2]") && err.contains("urls[1]"), "{err}");
        assert!(!err.contains("other@") && !err.contains("s3cret"), "{err}");
        config.urls[2] = "nats://al%69ce:s3cr%65t@h:3".into();
        config.validate().unwrap();

        config.urls = vec!["nats://:s3cret@h:1".into()];
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("urls[0]") && !err.contains("s3cret"), "{err}");
    }

    #[test]
    fn missing_files_are_named() {
        let mut config = valid();
        config.creds_file = Some("/nonexistent/user.creds".into());
        let (key, value) = rejected(&config);
        assert_eq!(key, "creds_file");
        assert!(value.contains("/nonexistent/user.creds"));
    }

    #[test]
    fn insecure_skip_verify_contradicts_a_ca() {
        let ca = tempfile::NamedTempFile::new().unwrap();
        let mut config = valid();
        config.ca_file = Some(ca.path().to_owned());
        config.validate().unwrap();
        config.tls_insecure_skip_verify = true;
        assert_eq!(rejected(&config).0, "tls_insecure_skip_verify");
        config.ca_file = None;
        config.validate().unwrap();
        config.client_cert = Some(ca.path().to_owned());
        assert_eq!(rejected(&config).0, "client_cert");
    }

    #[test]
    fn timing_bounds_name_the_key() {
        let mut config = valid();
        config.request_timeout = Duration::ZERO;
        assert_eq!(rejected(&config).0, "request_timeout");
        config = valid();
        config.idle_heartbeat = Duration::from_millis(10);
        let (key, value) = rejected(&config);
        assert_eq!(
            (key.as_str(), value.as_str()),
            ("idle_heartbeat", "\"10ms\"")
        );
        config = valid();
        config.max_reconnects = 0;
        assert_eq!(rejected(&config).0, "max_reconnects");
        config.max_reconnects = 5;
        config.validate().unwrap();
    }

    #[test]
    fn debug_never_shows_secrets() {
        let mut config = valid();
        config.urls = vec![
            "nats://alice:s3cret@h:4222".into(),
            "nats://tok3n@h:4223".into(),
        ];
        config.token = Some("t0ken".into());
        config.password = Some("hunter2".into());
        let shown = format!("{config:?}");
        for secret in ["s3cret", "tok3n", "t0ken", "hunter2"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("alice"), "{shown}");
    }

    #[test]
    fn scrub_removes_every_secret() {
        let mut config = valid();
        config.urls = vec![
            "nats://alice:s3cret@h:4222".into(),
            "nats://tok3n@h:4223".into(),
        ];
        config.token = Some("t0ken".into());
        let text = config.scrub("failed nats://alice:s3cret@h:4222 and tok3n@h with t0ken");
        assert_eq!(
            text,
            "failed nats://alice:<redacted>@h:4222 and <redacted>@h with <redacted>"
        );
        config.urls = vec!["nats://alice:s3cr%65t@h:4222".into()];
        assert_eq!(
            config.scrub("s3cr%65t or s3cret"),
            "<redacted> or <redacted>"
        );
    }

    #[test]
    fn a_missing_stream_is_named() {
        let config = parse("urls = [\"nats://h:4222\"]").unwrap();
        let (key, _) = rejected(&config);
        assert_eq!(key, "stream");
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("required")
        );
    }

    #[test]
    fn serialising_redacts_secrets_and_reads_back() {
        let mut config = valid();
        config.urls = vec!["nats://alice:s3cret@h:4222".into()];
        config.user = Some("bob".into());
        config.password = Some("hunter2".into());
        let text = toml::to_string(&config).unwrap();
        assert!(
            !text.contains("s3cret") && !text.contains("hunter2"),
            "{text}"
        );
        assert!(text.contains("request_timeout = \"2s\""), "{text}");
        let back: JetStreamConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.request_timeout, config.request_timeout);
        assert_eq!(back.password.as_deref(), Some(REDACTED));
    }

    proptest::proptest! {
        /// No password embedded in a server URL survives redaction, whatever the scheme and
        /// whether or not the URL is otherwise valid.
        #[test]
        fn redacted_urls_never_carry_the_password(
            scheme in proptest::sample::select(&["nats", "tls", "ws", "wss", "http", ""][..]),
            user in "[a-z]{0,6}",
            password in "[0-9]{6,12}",
            host in "[a-z]{1,8}(:[0-9]{1,5})?",
        ) {
            let prefix = if scheme.is_empty() { String::new() } else { format!("{scheme}://") };
            let url = format!("{prefix}{user}:{password}@{host}");
            let shown = redact_url(&url);
            proptest::prop_assert!(!shown.contains(&password), "{} shown as {}", url, shown);
        }
    }
}
