//! Type errors of the configuration in its own words: the key, its value as written (never the
//! value of a secret key), and what the key accepts — not serde's wording for Rust types
//! (`expected usize`, `struct SseConfig`, `unknown variant`).

use toml::{Table, Value};

/// Keys whose values are secrets (`auth.*.secret`, `nats.password`, `nats.token`, the Mercure
/// keys): an error about one names the key, never the value.
const SECRET_KEYS: [&str; 5] = [
    "secret",
    "password",
    "token",
    "publisher_jwt_key",
    "subscriber_jwt_key",
];

/// The longest value quoted in a message; longer ones are cut.
const MAX_SHOWN: usize = 120;

/// Whether the last part of a dotted key path (`auth.subscribe.keys[0].secret`) is a secret.
pub fn holds_secret(key_path: &str) -> bool {
    key_path
        .rsplit('.')
        .next()
        .map(|last| last.split('[').next().unwrap_or(last))
        .is_some_and(|last| SECRET_KEYS.contains(&last))
}

/// The dotted path of the first secret key of `table` whose value is a TOML date or time:
/// serde would read one as text, so it is refused here, and, like every secret, never shown.
pub fn datetime_secret(table: &Table) -> Option<String> {
    fn walk(value: &Value, path: String) -> Option<String> {
        match value {
            Value::Datetime(_) if holds_secret(&path) => Some(path),
            Value::Table(table) => table.iter().find_map(|(key, value)| {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(value, path)
            }),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, value)| walk(value, format!("{path}[{i}]"))),
            _ => None,
        }
    }
    table
        .iter()
        .find_map(|(key, value)| walk(value, key.clone()))
}

/// The message for a secret at `key` given as something other than a string.
pub fn secret_not_a_string(key: &str) -> String {
    format!(
        "invalid `{key}`: expected the secret as a string (the value of a secret key is never shown)"
    )
}

/// The message for serde's `message` about the value at `key_path` of `table`.
pub fn type_error(table: &Table, key_path: &str, message: &str) -> String {
    let key = &inside(table, key_path.trim_start_matches('.'), message);
    if key.is_empty() {
        return allowed_in(message);
    }
    if holds_secret(key) {
        return secret_not_a_string(key);
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        // Inside an entry chosen by its `type` the path stops at the entry: name the key too.
        let key = match rest.split_once('`') {
            Some((field, _)) if !key.ends_with(&format!(".{field}")) => format!("{key}.{field}"),
            _ => key.to_owned(),
        };
        let known = rest
            .split_once("`, expected ")
            .map(|(_, known)| known.trim_start_matches("one of "));
        return match known {
            Some(known) => format!("unknown key `{key}`; the keys here are {known}"),
            None => format!("unknown key `{key}`"),
        };
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.trim_end_matches('`');
        return format!("`{key}` is missing its key `{field}`");
    }
    let reason = allowed_in(message);
    match value_at(table, key).and_then(shown) {
        Some(value) => format!("invalid `{key}` = {value}: {reason}"),
        None => format!("invalid `{key}`: {reason}"),
    }
}

/// What serde's message says is allowed, in the configuration's words; a message of sluice's
/// own (a duration, an address) is kept as it is.
fn allowed_in(message: &str) -> String {
    let expected = ["invalid type: ", "invalid value: ", "invalid length "]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split_once(", expected "))
        .map(|(_, expected)| expected);
    if let Some(expected) = expected {
        return format!("expected {}", allowed(expected));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `")
        && let Some((_, choices)) = rest.split_once("`, ")
    {
        return choices.to_owned();
    }
    if message.starts_with("duplicate field") {
        return "the key is given twice".to_owned();
    }
    message.to_owned()
}

/// serde's description of an expected Rust type in user words; anything else (sluice's own
/// visitors already speak them) unchanged.
fn allowed(expected: &str) -> String {
    let words = match expected {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a string" | "string only" | "a borrowed string" => "a string",
        "path string" => "a file path (a string)",
        "a sequence" => "a list such as [\"a\", \"b\"]",
        "a character" => "a single character",
        "a map" | "map" => "a table of keys",
        _ if expected.starts_with("struct ") => "a table of keys",
        _ if expected.starts_with("internally tagged enum ") => "a table of keys with its `type`",
        _ if expected.starts_with("enum ") || expected == "variant identifier" => {
            "one of the names listed in docs/CONFIGURATION.md"
        }
        other => return other.to_owned(),
    };
    words.to_owned()
}

/// The key path of the value a type error is about. serde reports an error inside an entry of
/// a tagged list (`[[auth.subscribe.keys]]`) at the entry itself; when exactly one of the
/// entry's keys has a value of another type than the one expected, the error is about that key.
fn inside(table: &Table, key: &str, message: &str) -> String {
    let expected = message
        .split_once(", expected ")
        .map_or(message, |(_, expected)| expected);
    let fits: fn(&Value) -> bool = match expected.trim_start_matches("expected ") {
        "a string" | "path string" => Value::is_str,
        e if e.starts_with("the secret as a string") => Value::is_str,
        "a boolean" => Value::is_bool,
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" => Value::is_integer,
        _ => return key.to_owned(),
    };
    let Some(Value::Table(entry)) = value_at(table, key) else {
        return key.to_owned();
    };
    let mut misfits = entry.iter().filter(|(_, value)| !fits(value));
    match (misfits.next(), misfits.next()) {
        (Some((name, _)), None) => format!("{key}.{name}"),
        _ => key.to_owned(),
    }
}

/// The value at a key path such as `embedded.streams[0].max_msgs`.
fn value_at<'a>(table: &'a Table, key_path: &str) -> Option<&'a Value> {
    let mut parts = key_path.split('.');
    let first = parts.next()?;
    let mut value = indexed(table.get(name(first))?, first)?;
    for part in parts {
        value = indexed(value.as_table()?.get(name(part))?, part)?;
    }
    Some(value)
}

/// The name of a path part without its `[n]` indices.
fn name(part: &str) -> &str {
    part.split('[').next().unwrap_or(part)
}

/// Applies the `[n]` indices of a path part.
fn indexed<'a>(mut value: &'a Value, part: &str) -> Option<&'a Value> {
    for index in part.split('[').skip(1) {
        let index: usize = index.trim_end_matches(']').parse().ok()?;
        value = value.as_array()?.get(index)?;
    }
    Some(value)
}

/// A value as written, for a message: only scalars and lists of scalars — a table may hold a
/// secret under another key.
fn shown(value: &Value) -> Option<String> {
    let scalar = |v: &Value| !matches!(v, Value::Table(_) | Value::Array(_));
    let printable = match value {
        Value::Array(items) => items.iter().all(scalar),
        other => scalar(other),
    };
    if !printable {
        return None;
    }
    let text = value.to_string();
    Some(match text.char_indices().nth(MAX_SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_recognised_with_or_without_an_index() {
        assert!(holds_secret("auth.subscribe.keys[0].secret"));
        assert!(holds_secret("jetstream.password"));
        assert!(holds_secret("jetstream.token[0]"));
        assert!(!holds_secret("auth.subscribe.keys[0].secret_file"));
        assert!(!holds_secret("jetstream.tokens"));
    }

    #[test]
    fn long_values_are_cut() {
        let long = Value::String("x".repeat(500));
        let text = shown(&long).unwrap();
        assert!(
            text.chars().count() == MAX_SHOWN + 1 && text.ends_with('…'),
            "{text}"
        );
    }
}
