//! Validation of a whole [`Config`]: every rule names the key and the value it rejects.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};
use sluice_protocol::subject::validate_subject;

use super::values::{allowed_origin, http_url};
use super::{BackendKind, Config, ConfigError, MercureContext};
use crate::auth::AuthConfigError;

/// The longest accepted `retry:` hint and heartbeat interval.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Serde `deserialize_with` for the listen address, naming the value on error.
pub fn socket_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(|_| {
        de::Error::custom(format!(
            "{text:?} is not an address like \"127.0.0.1:8080\""
        ))
    })
}

/// Checks the whole configuration.
pub fn config(config: &Config) -> Result<(), ConfigError> {
    if !config.topic_prefix.is_empty() {
        validate_subject(&config.topic_prefix).map_err(|err| {
            ConfigError::invalid("topic_prefix", &config.topic_prefix, err.to_string())
        })?;
    }
    if let Some(url) = &config.hub_url {
        http_url("hub_url", url)?;
    }
    sse(config)?;
    limits(config)?;
    if config.replay.window == Some(Duration::ZERO) {
        return Err(ConfigError::invalid(
            "replay.window",
            "0s",
            "must be positive; leave it out to replay the whole backlog",
        ));
    }
    cors(config)?;
    probes(config)?;
    listeners(config)?;
    config.fanout.validate()?;
    embedded(config)?;
    config.auth.validate().map_err(|err| match err {
        AuthConfigError::Invalid { key, value, reason } => {
            ConfigError::Invalid { key, value, reason }
        }
        other => ConfigError::invalid("auth", "", other.to_string()),
    })?;
    let served_subjects = (config.backend == BackendKind::Embedded).then(|| {
        config
            .served_stream()
            .map_or_else(|| vec![">".to_owned()], |stream| stream.subjects.clone())
    });
    config.mercure.validate(&MercureContext {
        topic_prefix: &config.topic_prefix,
        served_stream: &config.embedded.stream,
        served_subjects,
    })?;
    jetstream(config)
}

/// `[tls]` and `[http2]`; the certificate files themselves are read by
/// [`crate::tls::Certificates::load`] before any socket opens.
fn listeners(config: &Config) -> Result<(), ConfigError> {
    if let Some(tls) = &config.tls {
        for (key, path) in [
            ("tls.cert_file", &tls.cert_file),
            ("tls.key_file", &tls.key_file),
        ] {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::invalid(key, "", "must name a PEM file"));
            }
        }
        if tls.listen == Some(config.listen) && config.listen.port() != 0 {
            return Err(ConfigError::invalid(
                "tls.listen",
                config.listen.to_string(),
                "is also `listen`; leave it out to serve TLS on `listen` alone",
            ));
        }
    }
    let streams = config.http2.max_concurrent_streams;
    if !(1..=10_000).contains(&streams) {
        return Err(ConfigError::invalid(
            "http2.max_concurrent_streams",
            streams,
            "must be between 1 and 10000",
        ));
    }
    Ok(())
}

fn sse(config: &Config) -> Result<(), ConfigError> {
    let sse = &config.sse;
    for (key, value) in [
        ("sse.heartbeat", sse.heartbeat),
        ("sse.retry", sse.retry),
        ("sse.write_timeout", sse.write_timeout),
    ] {
        if value.is_zero() || value > MAX_INTERVAL {
            return Err(ConfigError::invalid(
                key,
                sluice_protocol::config_duration::format(value),
                "must be more than 0s and at most 1h",
            ));
        }
    }
    event_type(&sse.event_type)?;
    if sse.max_event_size < 256 {
        return Err(ConfigError::invalid(
            "sse.max_event_size",
            sse.max_event_size,
            "must be at least 256 bytes",
        ));
    }
    Ok(())
}

/// Event types the hub writes itself, and those an `EventSource` dispatches of its own.
const RESERVED_EVENT_TYPES: &[&str] = &[
    "connected",
    "gap",
    "deleted",
    "token_expired",
    "open",
    "error",
];

fn event_type(value: &str) -> Result<(), ConfigError> {
    let key = "sse.event_type";
    let word = |b: u8| b.is_ascii_alphanumeric() || b"._-".contains(&b);
    if !(1..=64).contains(&value.len()) || !value.bytes().all(word) {
        return Err(ConfigError::invalid(
            key,
            value,
            "must be 1 to 64 letters, digits, `.`, `_` or `-`",
        ));
    }
    if RESERVED_EVENT_TYPES.contains(&value) {
        return Err(ConfigError::invalid(
            key,
            value,
            "is an event type the hub or EventSource uses itself (connected, gap, \
             token_expired, open, error)",
        ));
    }
    Ok(())
}

fn cors(config: &Config) -> Result<(), ConfigError> {
    let cors = &config.cors;
    for (index, origin) in cors.allowed_origins.iter().enumerate() {
        allowed_origin(&format!("cors.allowed_origins[{index}]"), origin)?;
    }
    for (index, name) in cors.allowed_headers.iter().enumerate() {
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            let key = format!("cors.allowed_headers[{index}]");
            return Err(ConfigError::invalid(key, name, "is not a header name"));
        }
    }
    if cors.allowed_methods.is_empty() {
        return Err(ConfigError::invalid(
            "cors.allowed_methods",
            "[]",
            "must list at least one method, e.g. \"GET\"",
        ));
    }
    for (index, method) in cors.allowed_methods.iter().enumerate() {
        if axum::http::Method::from_bytes(method.as_bytes()).is_err() {
            let key = format!("cors.allowed_methods[{index}]");
            return Err(ConfigError::invalid(key, method, "is not an HTTP method"));
        }
    }
    Ok(())
}

/// Paths the hub serves itself (and those below `/events/` and `/admin/streams/`).
const HUB_PATHS: &[&str] = &[
    "/",
    "/events",
    "/publish",
    "/metrics",
    "/stream",
    "/admin/streams",
];

fn probes(config: &Config) -> Result<(), ConfigError> {
    let probes = &config.probes;
    let mut taken = HashSet::new();
    for (key, path) in [
        ("probes.live_path", &probes.live_path),
        ("probes.ready_path", &probes.ready_path),
        ("probes.health_path", &probes.health_path),
    ] {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || b"/-._~".contains(&b);
        let segments_ok = path
            .split('/')
            .skip(1)
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..");
        if path.len() > 256 || !path.starts_with('/') || !path.bytes().all(allowed) || !segments_ok
        {
            return Err(ConfigError::invalid(
                key,
                path,
                "must be a path such as \"/livez\": `/` and then letters, digits, `-`, `.`, \
                 `_` and `~` in `/`-separated segments, at most 256 bytes, no trailing `/` (the \
                 probe also answers with one)",
            ));
        }
        if HUB_PATHS.contains(&path.as_str())
            || path.starts_with("/events/")
            || path.starts_with("/admin/streams/")
        {
            return Err(ConfigError::invalid(
                key,
                path,
                "is a path the hub serves itself",
            ));
        }
        if !taken.insert(path.as_str()) {
            return Err(ConfigError::invalid(
                key,
                path,
                "is already the path of another probe",
            ));
        }
    }
    Ok(())
}

fn limits(config: &Config) -> Result<(), ConfigError> {
    let limits = &config.limits;
    if !(1..=1024).contains(&limits.max_topics_per_subscription) {
        return Err(ConfigError::invalid(
            "limits.max_topics_per_subscription",
            limits.max_topics_per_subscription,
            "must be between 1 and 1024",
        ));
    }
    if limits.max_publish_body < 64 {
        return Err(ConfigError::invalid(
            "limits.max_publish_body",
            limits.max_publish_body,
            "must be at least 64 bytes",
        ));
    }
    if !(1..=100_000).contains(&limits.max_publish_batch) {
        return Err(ConfigError::invalid(
            "limits.max_publish_batch",
            limits.max_publish_batch,
            "must be between 1 and 100000",
        ));
    }
    if limits.header_read_timeout.is_zero() || limits.header_read_timeout > MAX_INTERVAL {
        return Err(ConfigError::invalid(
            "limits.header_read_timeout",
            sluice_protocol::config_duration::format(limits.header_read_timeout),
            "must be more than 0s and at most 1h",
        ));
    }
    if !(1024..=1 << 20).contains(&limits.max_header_bytes) {
        return Err(ConfigError::invalid(
            "limits.max_header_bytes",
            limits.max_header_bytes,
            "must be between 1024 and 1048576",
        ));
    }
    if limits.body_read_timeout.is_zero() || limits.body_read_timeout > MAX_INTERVAL {
        return Err(ConfigError::invalid(
            "limits.body_read_timeout",
            sluice_protocol::config_duration::format(limits.body_read_timeout),
            "must be more than 0s and at most 1h",
        ));
    }
    Ok(())
}

fn embedded(config: &Config) -> Result<(), ConfigError> {
    config.embedded.validate()?;
    if config.backend == BackendKind::Embedded && config.served_stream().is_none() {
        return Err(ConfigError::invalid(
            "embedded.stream",
            &config.embedded.stream,
            "is not one of the streams declared in `embedded.streams`",
        ));
    }
    Ok(())
}

fn jetstream(config: &Config) -> Result<(), ConfigError> {
    match &config.jetstream {
        Some(section) => Ok(section.validate()?),
        None if config.backend == BackendKind::Jetstream => Err(ConfigError::invalid(
            "backend",
            "jetstream",
            "needs a [jetstream] section (at least `stream`, or the --nats-url and --stream flags)",
        )),
        None => Ok(()),
    }
}
