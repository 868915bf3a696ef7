//! The server configuration, TOML text → validated `Config`: loading never panics; what loads
//! satisfies the rules restated in `src/lib.rs` (accepted ⇒ valid: stream names are safe path
//! components, subjects and filters follow the grammar, the served stream is declared) and
//! written back as TOML loads again to the same configuration (valid ⇒ accepted). The stream
//! name and topic prefix validators are also checked both ways on values built from the input.
//!
//! Input: byte 0 picks the mode — 0: the rest is a TOML file; 1: the rest is a stream name,
//! declared and served; 2: the rest is a `topic_prefix`. The rest must be UTF-8.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{stream_name_grammar, subject_grammar};
use sluice_server::config::{BackendKind, Config, ConfigError, Overrides, load_str};

fn load(text: &str) -> Result<Config, ConfigError> {
    load_str(text, "fuzz", std::iter::empty(), &Overrides::default()).map(|(config, _)| config)
}

/// A TOML string literal holding `value`, however it is spelled.
fn quoted(value: &str) -> String {
    toml::Value::String(value.to_owned()).to_string()
}

/// What every accepted configuration satisfies, checked without the validator.
fn assert_valid(config: &Config) {
    let prefix = &config.topic_prefix;
    assert!(
        prefix.is_empty() || subject_grammar(prefix, false),
        "prefix {prefix:?}"
    );
    let mut names = std::collections::HashSet::new();
    for stream in &config.embedded.streams {
        assert!(
            stream_name_grammar(&stream.name),
            "stream {:?}",
            stream.name
        );
        assert!(names.insert(&stream.name), "stream {:?} twice", stream.name);
        assert!(!stream.subjects.is_empty());
        for subject in &stream.subjects {
            assert!(subject_grammar(subject, true), "subject {subject:?}");
        }
    }
    if config.backend == BackendKind::Embedded {
        assert!(
            names.contains(&config.embedded.stream),
            "served stream undeclared"
        );
    }
    let auth = &config.auth;
    for direction in [&auth.subscribe, &auth.publish].into_iter().flatten() {
        assert!(!direction.keys.is_empty() || !direction.anonymous.is_empty());
        for filter in &direction.anonymous {
            assert!(subject_grammar(filter, true), "anonymous {filter:?}");
        }
    }
    assert!((16..=1 << 20).contains(&config.fanout.ring_size));
    assert!(!config.sse.heartbeat.is_zero() && !config.sse.retry.is_zero());
    assert!(config.replay.window.is_none_or(|window| !window.is_zero()));
}

/// An accepted configuration written back as TOML loads to the same configuration (except what
/// is never written: the `[jetstream]` section and inline secrets).
fn assert_round_trips(config: &Config) {
    if config.jetstream.is_some() {
        return;
    }
    let text = toml::to_string(config).expect("an accepted configuration serializes");
    if text.contains("(redacted)") {
        return;
    }
    match load(&text) {
        Ok(again) => assert_eq!(&again, config, "written back as\n{text}"),
        Err(err) => panic!("written back, refused: {err}\n{text}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Ok(config) = load(text) {
                assert_valid(&config);
                assert_round_trips(&config);
            }
        }
        1 => {
            let name = quoted(text);
            let toml = format!(
                "[embedded]\nstream = {name}\n[[embedded.streams]]\nname = {name}\nsubjects = [\">\"]\n"
            );
            let loaded = load(&toml);
            assert_eq!(
                loaded.is_ok(),
                stream_name_grammar(text),
                "stream {text:?}: {loaded:?}"
            );
        }
        _ => {
            let loaded = load(&format!("topic_prefix = {}\n", quoted(text)));
            let valid = text.is_empty() || subject_grammar(text, false);
            assert_eq!(loaded.is_ok(), valid, "prefix {text:?}: {loaded:?}");
        }
    }
});
