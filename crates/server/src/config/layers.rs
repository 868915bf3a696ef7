//! Layering: TOML file < `SLUICE_…` environment < flags, merged as TOML values and then
//! deserialized once, so every layer gets the same type checks and unknown-key errors.
//!
//! Every key has an environment variable: `SLUICE_` followed by the dotted key with dots
//! replaced by underscores, upper-cased (`sse.heartbeat` → `SLUICE_SSE_HEARTBEAT`). Three
//! short aliases match the command-line flags: `SLUICE_DATA_DIR` (`embedded.data_dir`),
//! `SLUICE_STREAM` (the served stream of the selected backend) and `SLUICE_NATS_URL`
//! (`jetstream.urls`).

use std::path::Path;

use toml::{Table, Value};

use super::{Config, ConfigError};

/// Values given on the command line; each wins over the file and the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--listen`: the address to bind (`listen`).
    pub listen: Option<String>,
    /// `--backend`: `embedded` or `jetstream` (`backend`).
    pub backend: Option<String>,
    /// `--data-dir`: the embedded store's directory (`embedded.data_dir`).
    pub data_dir: Option<String>,
    /// `--stream`: the served stream of the selected backend.
    pub stream: Option<String>,
    /// `--nats-url`: one JetStream server URL, or several separated by commas.
    pub nats_url: Option<String>,
    /// `--topic-prefix`: tokens prepended to every topic (`topic_prefix`).
    pub topic_prefix: Option<String>,
}

/// Environment variable names that belong to the `sluice` command, not to the configuration.
const COMMAND_VARIABLES: &[&str] = &["SLUICE_CONFIG", "SLUICE_LOG", "SLUICE_LOG_FORMAT"];

/// Keys with no default value, which the default configuration cannot list.
const OPTIONAL_KEYS: &[&str] = &["hub_url", "replay.window"];

/// The loaded configuration and the warnings met on the way (unknown `SLUICE_` variables).
pub type Loaded = (Config, Vec<String>);

/// Reads `file` (if any), applies `env` and `overrides`, and validates the result.
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &Overrides,
) -> Result<Loaded, ConfigError> {
    let (text, origin) = match file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
                path: path.to_owned(),
                reason: err.to_string(),
            })?,
            path.display().to_string(),
        ),
        None => (String::new(), "defaults".to_owned()),
    };
    load_str(&text, &origin, env, overrides)
}

/// Like [`load`] with the file's text already read; `origin` names it in errors.
pub fn load_str(
    text: &str,
    origin: &str,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: &Overrides,
) -> Result<Loaded, ConfigError> {
    let mut table: Table = toml::from_str(text).map_err(|err| ConfigError::Syntax {
        origin: origin.to_owned(),
        message: syntax_message(text, &err),
    })?;
    let known = known_keys();
    let mut warnings = Vec::new();
    let mut aliases = Overrides::default();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("SLUICE_") else {
            continue;
        };
        match rest {
            "DATA_DIR" => aliases.data_dir = Some(value),
            "STREAM" => aliases.stream = Some(value),
            "NATS_URL" => aliases.nats_url = Some(value),
            _ if COMMAND_VARIABLES.contains(&name.as_str()) => {}
            _ => match env_key(rest, &known) {
                Some((key, kind)) => set(&mut table, &key, kind.value(&name, &value)?),
                None => warnings.push(format!("ignoring unknown environment variable {name}")),
            },
        }
    }
    apply(&mut table, &aliases);
    apply(&mut table, overrides);
    let config: Config = serde_path_to_error::deserialize(Value::Table(table)).map_err(|err| {
        let key = err.path().to_string();
        let message = if holds_secret(&key) {
            format!("`{key}`: expected a string (the value of a secret key is never shown)")
        } else {
            format!("`{key}`: {}", err.into_inner())
        };
        ConfigError::Syntax {
            origin: origin.to_owned(),
            message,
        }
    })?;
    config.validate()?;
    Ok((config, warnings))
}

/// Keys whose values are secrets (`auth.*.secret`, `nats.password`, `nats.token`): an error
/// about one names the key, never the value.
const SECRET_KEYS: [&str; 3] = ["secret", "password", "token"];

fn holds_secret(key_path: &str) -> bool {
    key_path
        .rsplit('.')
        .next()
        .is_some_and(|last| SECRET_KEYS.contains(&last))
}

/// A TOML syntax error as line, column and the parser's message — never the source line, which
/// may hold a secret (`secret = "…` left unterminated).
fn syntax_message(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim();
    let Some(span) = err.span() else {
        return message.to_owned();
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}: {message}")
}

/// Applies command-line style overrides to the merged table.
fn apply(table: &mut Table, overrides: &Overrides) {
    let string = |value: &String| Value::String(value.clone());
    if let Some(backend) = &overrides.backend {
        set(table, "backend", string(backend));
    }
    if let Some(listen) = &overrides.listen {
        set(table, "listen", string(listen));
    }
    if let Some(dir) = &overrides.data_dir {
        set(table, "embedded.data_dir", string(dir));
    }
    if let Some(prefix) = &overrides.topic_prefix {
        set(table, "topic_prefix", string(prefix));
    }
    if let Some(urls) = &overrides.nats_url {
        set(table, "jetstream.urls", list(urls));
    }
    if let Some(stream) = &overrides.stream {
        let jetstream = table.get("backend").and_then(Value::as_str) == Some("jetstream");
        let key = if jetstream {
            "jetstream.stream"
        } else {
            "embedded.stream"
        };
        set(table, key, string(stream));
    }
}

/// The type a key's environment value is converted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    Boolean,
    List,
}

impl Kind {
    fn of(value: &Value) -> Self {
        match value {
            Value::Integer(_) => Self::Integer,
            Value::Boolean(_) => Self::Boolean,
            Value::Array(_) => Self::List,
            _ => Self::Text,
        }
    }

    fn value(self, name: &str, raw: &str) -> Result<Value, ConfigError> {
        let bad = |reason: &str| ConfigError::invalid(name, raw, reason);
        Ok(match self {
            Self::Text => Value::String(raw.to_owned()),
            Self::Integer => Value::Integer(raw.trim().parse().map_err(|_| bad("not an integer"))?),
            Self::Boolean => Value::Boolean(match raw.trim() {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => return Err(bad("not true or false")),
            }),
            Self::List => list(raw),
        })
    }
}

/// A comma-separated list (empty items dropped) as a TOML array of strings.
fn list(raw: &str) -> Value {
    Value::Array(
        raw.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| Value::String(item.to_owned()))
            .collect(),
    )
}

/// Every settable dotted key and its kind, from the defaults plus the keys without one.
fn known_keys() -> Vec<(String, Kind)> {
    let defaults = Value::try_from(Config::default()).expect("the default config serializes");
    let mut keys = Vec::new();
    if let Value::Table(table) = defaults {
        collect(&table, "", &mut keys);
    }
    keys.extend(OPTIONAL_KEYS.iter().map(|k| ((*k).to_owned(), Kind::Text)));
    keys
}

fn collect(table: &Table, prefix: &str, out: &mut Vec<(String, Kind)>) {
    for (name, value) in table {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        match value {
            Value::Table(inner) => collect(inner, &key, out),
            // Arrays of tables (declared streams) can only come from the file.
            Value::Array(items) if items.iter().any(Value::is_table) => {}
            _ => out.push((key, Kind::of(value))),
        }
    }
}

/// The dotted key an environment variable name (without `SLUICE_`) stands for.
fn env_key(rest: &str, known: &[(String, Kind)]) -> Option<(String, Kind)> {
    let wanted = rest.to_ascii_lowercase();
    if let Some((key, kind)) = known
        .iter()
        .find(|(key, _)| key.replace('.', "_") == wanted)
    {
        return Some((key.clone(), *kind));
    }
    // The JetStream section is validated by its own type; these are its non-text keys.
    let jetstream = wanted.strip_prefix("jetstream_")?;
    let kind = match jetstream {
        "urls" => Kind::List,
        "max_reconnects" => Kind::Integer,
        "tls_insecure_skip_verify" => Kind::Boolean,
        _ => Kind::Text,
    };
    Some((format!("jetstream.{jetstream}"), kind))
}

/// Sets a dotted key, creating intermediate tables.
fn set(table: &mut Table, key: &str, value: Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or(key);
    let mut current = table;
    for part in parts {
        let entry = current
            .entry(part.to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(inner) = entry else {
            unreachable!("just made a table")
        };
        current = inner;
    }
    current.insert(last.to_owned(), value);
}
