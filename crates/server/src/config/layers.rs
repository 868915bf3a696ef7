//! Layering: TOML file < `SLUICE_…` environment < flags, merged as TOML values and then
//! deserialized once, so every layer gets the same type checks and unknown-key errors.
//!
//! Every key has an environment variable: `SLUICE_` followed by the dotted key with dots
//! replaced by underscores, upper-cased (`sse.heartbeat` → `SLUICE_SSE_HEARTBEAT`). Three
//! short aliases match the command-line flags: `SLUICE_DATA_DIR` (`embedded.data_dir`),
//! `SLUICE_STREAM` (the served stream of the selected backend) and `SLUICE_NATS_URL`
//! (`jetstream.urls`). Mercure's own `MERCURE_PUBLISHER_JWT_KEY`, `MERCURE_SUBSCRIBER_JWT_KEY`
//! and their `_ALG` twins set the `[mercure]` keys, below the `SLUICE_MERCURE_…` variables.

use std::path::Path;

use toml::{Table, Value};

use super::{Config, ConfigError, explain};
use crate::http::mercure::config::{MERCURE_VARIABLES, OPTIONAL_KEYS as MERCURE_OPTIONAL_KEYS};

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
const OPTIONAL_KEYS: &[&str] = &[
    "hub_url",
    "replay.window",
    "tls.cert_file",
    "tls.key_file",
    "tls.listen",
];

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
    let table: Table = toml::from_str(text).map_err(|err| ConfigError::Syntax {
        origin: origin.to_owned(),
        message: syntax_message(text, &err),
    })?;
    let mut layers = Layers {
        table,
        given: Vec::new(),
    };
    let known = known_keys();
    let mut warnings = Vec::new();
    let mut aliases = Overrides::default();
    let env: Vec<(String, String)> = env.into_iter().collect();
    // Mercure's variables first, so that a `SLUICE_MERCURE_…` one for the same key wins.
    for (name, value) in &env {
        let key = MERCURE_VARIABLES.iter().find(|(var, _)| var == name);
        if let Some((_, key)) = key
            && !value.is_empty()
        {
            layers.set(
                key,
                Value::String(value.clone()),
                format!("environment variable {name}"),
            );
        }
    }
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
                Some((key, kind)) => {
                    layers.set(
                        &key,
                        kind.value(&value),
                        format!("environment variable {name}"),
                    );
                }
                None => warnings.push(format!("ignoring unknown environment variable {name}")),
            },
        }
    }
    layers.apply(&aliases, &|flag| {
        format!(
            "environment variable SLUICE_{}",
            flag.to_ascii_uppercase().replace('-', "_")
        )
    });
    layers.apply(overrides, &|flag| format!("flag --{flag}"));
    if let Some(path) = explain::datetime_secret(&layers.table) {
        return Err(ConfigError::Syntax {
            origin: layers.given_by(&path).unwrap_or(origin).to_owned(),
            message: explain::secret_not_a_string(&path),
        });
    }
    let config: Config = serde_path_to_error::deserialize(Value::Table(layers.table.clone()))
        .map_err(|err| {
            let path = err.path().to_string();
            ConfigError::Syntax {
                origin: layers.given_by(&path).unwrap_or(origin).to_owned(),
                message: explain::type_error(&layers.table, &path, err.inner().message()),
            }
        })?;
    config
        .validate()
        .map_err(|err| layers.attribute(err, origin))?;
    Ok((config, warnings))
}

/// The merged table and which keys an environment variable or a flag set, so that an error
/// about one of them names the variable or the flag.
struct Layers {
    table: Table,
    /// Dotted keys and what set them (`environment variable SLUICE_SSE_HEARTBEAT`).
    given: Vec<(String, String)>,
}

impl Layers {
    fn set(&mut self, key: &str, value: Value, by: String) {
        set(&mut self.table, key, value);
        self.given.retain(|(given, _)| given != key);
        self.given.push((key.to_owned(), by));
    }

    /// What set the key at `key_path` (`jetstream.urls[1]` is `jetstream.urls`'s), if not the
    /// file.
    fn given_by(&self, key_path: &str) -> Option<&str> {
        let path: Vec<&str> = key_path
            .trim_start_matches('.')
            .split('.')
            .map(|part| part.split('[').next().unwrap_or(part))
            .collect();
        let path = path.join(".");
        self.given
            .iter()
            .filter(|(key, _)| {
                path == *key
                    || path
                        .strip_prefix(key.as_str())
                        .is_some_and(|r| r.starts_with('.'))
            })
            .max_by_key(|(key, _)| key.len())
            .map(|(_, by)| by.as_str())
    }

    /// A validation error prefixed with where its value came from: the variable or the flag
    /// that set its key, else `origin` (the file).
    fn attribute(&self, err: ConfigError, origin: &str) -> ConfigError {
        let key = match &err {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::JetStream(err) => Some(&err.key),
            _ => None,
        };
        let by = key.and_then(|key| self.given_by(key)).unwrap_or(origin);
        ConfigError::Given {
            by: by.to_owned(),
            error: Box::new(err),
        }
    }

    /// Applies command-line style overrides; `by` names what set a value from its flag's name.
    fn apply(&mut self, overrides: &Overrides, by: &dyn Fn(&str) -> String) {
        let string = |value: &String| Value::String(value.clone());
        if let Some(backend) = &overrides.backend {
            self.set("backend", string(backend), by("backend"));
        }
        if let Some(listen) = &overrides.listen {
            self.set("listen", string(listen), by("listen"));
        }
        if let Some(dir) = &overrides.data_dir {
            self.set("embedded.data_dir", string(dir), by("data-dir"));
        }
        if let Some(prefix) = &overrides.topic_prefix {
            self.set("topic_prefix", string(prefix), by("topic-prefix"));
        }
        if let Some(urls) = &overrides.nats_url {
            self.set("jetstream.urls", list(urls), by("nats-url"));
        }
        if let Some(stream) = &overrides.stream {
            let jetstream = self.table.get("backend").and_then(Value::as_str) == Some("jetstream");
            let key = if jetstream {
                "jetstream.stream"
            } else {
                "embedded.stream"
            };
            self.set(key, string(stream), by("stream"));
        }
    }
}

/// A TOML syntax error as line, column and the parser's message — never the source line, which
/// may hold a secret (`secret = "…` left unterminated).
fn syntax_message(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim();
    // The parser quotes an integer it cannot hold; the key is not known yet, so it may be a
    // secret's.
    let message = if message.starts_with("invalid type: integer") {
        "an integer wider than 64 bits (the value is not shown)"
    } else {
        message
    };
    let Some(span) = err.span() else {
        return message.to_owned();
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}: {message}")
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

    /// The TOML value of an environment variable. A value that is not of the key's kind is
    /// kept as text, so that the type check names the key and says what it takes.
    fn value(self, raw: &str) -> Value {
        let text = || Value::String(raw.to_owned());
        match self {
            Self::Text => text(),
            Self::Integer => raw.trim().parse().map_or_else(|_| text(), Value::Integer),
            Self::Boolean => match raw.trim() {
                "true" | "1" => Value::Boolean(true),
                "false" | "0" => Value::Boolean(false),
                _ => text(),
            },
            Self::List => list(raw),
        }
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
    keys.extend(
        OPTIONAL_KEYS
            .iter()
            .chain(MERCURE_OPTIONAL_KEYS)
            .map(|k| ((*k).to_owned(), Kind::Text)),
    );
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
