use std::path::PathBuf;

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn load_text(text: &str) -> Result<Config, ConfigError> {
    load_str(text, "test.toml", env(&[]), &Overrides::default()).map(|(config, _)| config)
}

fn error_text(text: &str) -> String {
    load_text(text).expect_err("must be rejected").to_string()
}

#[test]
fn defaults_are_the_documented_ones_and_valid() {
    let config = load_text("").expect("defaults load");
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.backend, BackendKind::Embedded);
    assert_eq!(config.embedded.data_dir, PathBuf::from("./sluice-data"));
    assert_eq!(config.embedded.stream, "sluice");
    assert_eq!(
        config.served_stream().expect("declared").subjects,
        vec![">"]
    );
    assert_eq!(config.limits.max_topics_per_subscription, 32);
    assert_eq!(config.embedded.snapshot_interval, Duration::from_secs(30));
    assert_eq!(config, Config::default());
}

#[test]
fn the_snapshot_interval_is_bounded_and_named_when_refused() {
    let config = load_text("[embedded]\nsnapshot_interval = \"250ms\"\n").expect("loads");
    assert_eq!(
        config.embedded.snapshot_interval,
        Duration::from_millis(250)
    );
    for bad in ["1ms", "2h"] {
        let message = error_text(&format!("[embedded]\nsnapshot_interval = \"{bad}\"\n"));
        assert!(
            message.contains("embedded.snapshot_interval") && message.contains("10ms to 1h"),
            "{message}"
        );
    }
}

#[test]
fn flags_win_over_env_which_wins_over_the_file() {
    let file = "listen = \"127.0.0.1:1000\"\ntopic_prefix = \"file\"\n[sse]\nheartbeat = \"5s\"\n";
    let vars = env(&[
        ("SLUICE_LISTEN", "127.0.0.1:2000"),
        ("SLUICE_TOPIC_PREFIX", "env"),
        ("SLUICE_SSE_HEARTBEAT", "7s"),
        ("SLUICE_LIMITS_MAX_CONNECTIONS", "9"),
    ]);
    let flags = Overrides {
        listen: Some("127.0.0.1:3000".into()),
        ..Overrides::default()
    };
    let (config, warnings) = load_str(file, "f", vars, &flags).expect("loads");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.listen.port(), 3000, "flag wins");
    assert_eq!(config.topic_prefix, "env", "env wins over file");
    assert_eq!(config.sse.heartbeat, Duration::from_secs(7));
    assert_eq!(config.limits.max_connections, 9);
}

#[test]
fn flag_aliases_reach_nested_keys() {
    let vars = env(&[
        ("SLUICE_DATA_DIR", "/tmp/env-data"),
        ("SLUICE_STREAM", "other"),
    ]);
    let file = "[embedded]\nstreams = [{ name = \"other\", subjects = [\"x.>\"] }]\n";
    let (config, _) = load_str(file, "f", vars, &Overrides::default()).expect("loads");
    assert_eq!(config.embedded.data_dir, PathBuf::from("/tmp/env-data"));
    assert_eq!(config.embedded.stream, "other");
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let message = error_text("[sse]\nheartbeet = \"5s\"\n");
    assert!(message.contains("heartbeet"), "{message}");
}

#[test]
fn unknown_environment_variables_are_reported() {
    let (_, warnings) =
        load_str("", "f", env(&[("SLUICE_NOPE", "1")]), &Overrides::default()).expect("loads");
    assert_eq!(
        warnings,
        vec!["ignoring unknown environment variable SLUICE_NOPE"]
    );
}

#[test]
fn bad_environment_values_name_the_variable_and_value() {
    let err = load_str(
        "",
        "f",
        env(&[("SLUICE_LIMITS_MAX_CONNECTIONS", "many")]),
        &Overrides::default(),
    )
    .expect_err("rejected")
    .to_string();
    assert!(
        err.contains("SLUICE_LIMITS_MAX_CONNECTIONS") && err.contains("many"),
        "{err}"
    );
}

#[test]
fn bad_durations_name_key_and_value() {
    let message = error_text("[sse]\nheartbeat = \"-3s\"\n");
    assert!(
        message.contains("sse.heartbeat") && message.contains("-3s"),
        "{message}"
    );
    let message = error_text("[sse]\nwrite_timeout = \"0s\"\n");
    assert!(message.contains("sse.write_timeout"), "{message}");
    let message = error_text("[replay]\nwindow = \"0s\"\n");
    assert!(message.contains("replay.window"), "{message}");
}

#[test]
fn connection_limits_name_key_and_value() {
    let config = load_text("").expect("defaults load");
    assert_eq!(config.limits.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.limits.max_header_bytes, 16 * 1024);
    assert_eq!(config.limits.max_connections_per_address, 0);
    let message = error_text("[limits]\nheader_read_timeout = \"0s\"\n");
    assert!(
        message.contains("limits.header_read_timeout") && message.contains("0s"),
        "{message}"
    );
    let message = error_text("[limits]\nmax_header_bytes = 100\n");
    assert!(
        message.contains("limits.max_header_bytes") && message.contains("100"),
        "{message}"
    );
    let config = load_text("[limits]\nmax_connections_per_address = 4\n").expect("loads");
    assert_eq!(config.limits.max_connections_per_address, 4);
}

#[test]
fn the_publish_batch_limit_is_bounded_and_named_when_refused() {
    let config = load_text("").expect("defaults load");
    assert_eq!(config.limits.max_publish_batch, 1000);
    for bad in ["0", "100001"] {
        let message = error_text(&format!("[limits]\nmax_publish_batch = {bad}\n"));
        assert!(
            message.contains("limits.max_publish_batch") && message.contains(bad),
            "{message}"
        );
    }
    let config = load_text("[limits]\nmax_publish_batch = 10\n").expect("loads");
    assert_eq!(config.limits.max_publish_batch, 10);
}

#[test]
fn origins_that_can_never_match_are_rejected() {
    for origin in [
        "https://app.example.com/",
        "app.example.com",
        "https://App.example.com",
        "https://*.example.com",
        "ftp://example.com",
        "https://example.com:99999",
        "https://app.example.com:443",
        "http://app.example.com:80",
    ] {
        let message = error_text(&format!("[cors]\nallowed_origins = [{origin:?}]\n"));
        assert!(message.contains(origin), "{origin}: {message}");
    }
    let message = error_text("[cors]\nallowed_origins = [\"https://app.example.com:443\"]\n");
    assert!(
        message.contains("cors.allowed_origins[0]")
            && message.contains("default port: write \"https://app.example.com\""),
        "{message}"
    );
    for origin in [
        "*",
        "https://app.example.com",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
        "https://app.example.com:8443",
        "http://app.example.com:443",
    ] {
        load_text(&format!("[cors]\nallowed_origins = [{origin:?}]\n")).expect(origin);
    }
}

#[test]
fn event_types_probe_paths_and_cors_lists_are_checked() {
    for (text, key, value) in [
        ("[sse]\nevent_type = \"gap\"", "sse.event_type", "gap"),
        ("[sse]\nevent_type = \"error\"", "sse.event_type", "error"),
        (
            "[sse]\nevent_type = \"deleted\"",
            "sse.event_type",
            "deleted",
        ),
        ("[sse]\nevent_type = \"a b\"", "sse.event_type", "a b"),
        ("[sse]\nevent_type = \"\"", "sse.event_type", "\"\""),
        (
            "[probes]\nlive_path = \"livez\"",
            "probes.live_path",
            "livez",
        ),
        (
            "[probes]\nlive_path = \"/livez/\"",
            "probes.live_path",
            "/livez/",
        ),
        (
            "[probes]\nlive_path = \"/a/../b\"",
            "probes.live_path",
            "/a/../b",
        ),
        ("[probes]\nlive_path = \"/{x}\"", "probes.live_path", "/{x}"),
        (
            "[probes]\nready_path = \"/publish\"",
            "probes.ready_path",
            "/publish",
        ),
        (
            "[probes]\nlive_path = \"/stream\"",
            "probes.live_path",
            "/stream",
        ),
        (
            "[probes]\nhealth_path = \"/admin/streams/x\"",
            "probes.health_path",
            "/admin/streams/x",
        ),
        (
            "[probes]\nready_path = \"/events/x\"",
            "probes.ready_path",
            "/events/x",
        ),
        (
            "[probes]\nhealth_path = \"/livez\"",
            "probes.health_path",
            "/livez",
        ),
        (
            "[cors]\nallowed_headers = [\"a b\"]",
            "cors.allowed_headers[0]",
            "a b",
        ),
        (
            "[cors]\nallowed_methods = [\"G(T\"]",
            "cors.allowed_methods[0]",
            "G(T",
        ),
        ("[cors]\nallowed_methods = []", "cors.allowed_methods", "[]"),
    ] {
        let message = error_text(text);
        assert!(
            message.contains(key) && message.contains(value),
            "{text}: {message}"
        );
    }
    let config = load_text(
        "[sse]\nevent_type = \"update\"\n[probes]\nlive_path = \"/health/live\"\n\
         [cors]\nallowed_headers = [\"x-app\"]\nallowed_methods = [\"GET\"]\n",
    )
    .expect("valid");
    assert_eq!(config.sse.event_type, "update");
    assert_eq!(config.probes.live_path, "/health/live");
    assert_eq!(
        config.probes.ready_path, "/readyz",
        "the others keep their defaults"
    );
}

#[test]
fn hub_url_needs_an_http_scheme() {
    let message = error_text("hub_url = \"ftp://hub\"\n");
    assert!(
        message.contains("hub_url") && message.contains("ftp://hub"),
        "{message}"
    );
}

#[test]
fn bad_listen_address_is_named() {
    let message = error_text("listen = \"localhost\"\n");
    assert!(
        message.contains("listen") && message.contains("localhost"),
        "{message}"
    );
}

#[test]
fn declared_streams_are_checked() {
    let message = error_text("[embedded]\nstream = \"missing\"\n");
    assert!(
        message.contains("embedded.stream") && message.contains("missing"),
        "{message}"
    );
    let message = error_text(
        "[embedded]\nstreams = [{ name = \"a/b\", subjects = [\">\"] }]\nstream = \"a/b\"\n",
    );
    assert!(message.contains("embedded.streams[0].name"), "{message}");
    let message = error_text(
        "[embedded]\nstreams = [{ name = \"s\", subjects = [\"a..b\"] }]\nstream = \"s\"\n",
    );
    assert!(
        message.contains("embedded.streams[0].subjects[0]"),
        "{message}"
    );
}

const AGGREGATE: &str = r#"
[embedded]
stream = "ALL"

[[embedded.streams]]
name = "ORDERS"
subjects = ["orders.>"]

[[embedded.streams]]
name = "ALL"
subjects = []

[[embedded.streams.sources]]
name = "ORDERS"
filter_subject = "orders.eu.>"
"#;

#[test]
fn declared_sources_are_read_and_checked() {
    let config = load_text(AGGREGATE).expect("a sourcing stream is valid");
    let all = config.served_stream().unwrap();
    assert_eq!(all.sources[0].name, "ORDERS");
    assert_eq!(
        all.sources[0].filter_subject.as_deref(),
        Some("orders.eu.>")
    );

    let message =
        error_text(&AGGREGATE.replace("name = \"ORDERS\"\nfilter", "name = \"SHOP\"\nfilter"));
    assert!(
        message.contains("embedded.streams[1].sources[0].name") && message.contains("SHOP"),
        "{message}"
    );
    let message = error_text(&AGGREGATE.replace("orders.eu.>", "orders..eu"));
    assert!(
        message.contains("embedded.streams[1].sources[0]") && message.contains("orders..eu"),
        "{message}"
    );
    let message = error_text(&AGGREGATE.replace("filter_subject", "filter"));
    assert!(message.contains("filter"), "{message}");
}

#[test]
fn topic_prefix_must_be_a_subject() {
    let message = error_text("topic_prefix = \"app.>\"\n");
    assert!(message.contains("topic_prefix"), "{message}");
    let config = load_text("topic_prefix = \"app\"\n").expect("valid");
    assert_eq!(config.subject_for("a.b"), "app.a.b");
}

#[test]
fn jetstream_section_is_part_of_the_tree() {
    let message = error_text("backend = \"jetstream\"\n");
    assert!(message.contains("[jetstream]"), "{message}");
    let file = "backend = \"jetstream\"\n[jetstream]\nstream = \"EVENTS\"\nurls = [\"http://x\"]\n";
    let message = error_text(file);
    assert!(message.contains("jetstream.urls[0]"), "{message}");
    let flags = Overrides {
        backend: Some("jetstream".into()),
        nats_url: Some("nats://127.0.0.1:4222,nats://127.0.0.1:4223".into()),
        stream: Some("EVENTS".into()),
        ..Overrides::default()
    };
    let (config, _) = load_str("", "f", env(&[]), &flags).expect("flags are enough");
    let jetstream = config.jetstream.expect("section");
    assert_eq!(jetstream.stream, "EVENTS");
    assert_eq!(jetstream.urls.len(), 2);
    let message = error_text("[jetstream]\nstream = \"S\"\nbogus = 1\n");
    assert!(message.contains("bogus"), "{message}");
}

/// Errors about the configuration point at line, column and key, and never print the value of
/// a secret key, whatever is wrong with the file.
#[test]
fn configuration_errors_never_print_a_secret() {
    const SECRET: &str = "hunter2-very-secret";
    let auth = |secret_line: &str| {
        format!(
            "[auth.subscribe]\nalgorithms = [\"HS256\"]\n[[auth.subscribe.keys]]\ntype = \"hmac\"\n{secret_line}\n"
        )
    };
    let cases = [
        // An unterminated string: the parser's excerpt would quote the whole line.
        auth(&format!("secret = \"{SECRET}")),
        // A duplicated key.
        auth(&format!("secret = \"{SECRET}\"\nsecret = \"{SECRET}\"")),
        // Junk after the value.
        auth(&format!("secret = \"{SECRET}\" junk")),
        format!("backend = \"jetstream\"\n[jetstream]\npassword = \"{SECRET}\nuser = \"u\"\n"),
        format!("backend = \"jetstream\"\n[jetstream]\ntoken = \"{SECRET}\" ]\n"),
    ];
    for text in &cases {
        let message = error_text(text);
        assert!(!message.contains(SECRET), "{message}");
        assert!(message.contains("line "), "{message}");
    }
    // A secret of the wrong type: the key is named, the value is not shown.
    for (text, key) in [
        (auth("secret = 1234567"), "auth.subscribe.keys"),
        (
            "backend = \"jetstream\"\n[jetstream]\ntoken = 1234567\n".to_owned(),
            "jetstream.token",
        ),
    ] {
        let message = error_text(&text);
        assert!(!message.contains("1234567"), "{message}");
        assert!(message.contains(key), "{message}");
    }
}

/// Words of Rust's and serde's that no configuration error may show.
const INTERNAL_WORDS: [&str; 7] = [
    "untagged", "enum", "usize", "u64", "i64", "struct", "variant",
];

/// `message` names each of `names`, says what is allowed, and speaks no Rust.
fn assert_user_words(message: &str, names: &[&str], allowed: &str) {
    for name in names {
        assert!(message.contains(name), "{name:?} not named: {message}");
    }
    assert!(message.contains(allowed), "{allowed:?} not said: {message}");
    let lower = message.to_lowercase();
    for word in INTERNAL_WORDS {
        assert!(!lower.contains(word), "{word:?} shown: {message}");
    }
}

const JETSTREAM: &str = "backend = \"jetstream\"\n[jetstream]\nstream = \"EVENTS\"\n";
const HMAC_KEY: &str =
    "[auth.subscribe]\nalgorithms = [\"HS256\"]\n[[auth.subscribe.keys]]\ntype = \"hmac\"\n";
const STREAM: &str = "[[embedded.streams]]\nname = \"sluice\"\nsubjects = [\">\"]\n";

/// Every kind of key (durations, sizes, integers, booleans, choices, lists, addresses, strings,
/// paths, tables) given a value of the wrong type in the file: the key and the value are named
/// and what the key takes is said in words.
#[test]
fn wrongly_typed_file_values_are_named_and_explained() {
    let duration = "a duration such as \"10s\"";
    let whole = "a whole number";
    let cases: Vec<(String, &str, &str, &str)> = vec![
        (
            "[sse]\nheartbeat = true".into(),
            "sse.heartbeat",
            "true",
            duration,
        ),
        ("[sse]\nretry = 1.5".into(), "sse.retry", "1.5", duration),
        (
            "[sse]\nwrite_timeout = \"soon\"".into(),
            "sse.write_timeout",
            "\"soon\"",
            duration,
        ),
        (
            "[replay]\nwindow = [1]".into(),
            "replay.window",
            "[1]",
            duration,
        ),
        (
            format!("{JETSTREAM}connect_timeout = false"),
            "jetstream.connect_timeout",
            "false",
            duration,
        ),
        (
            format!("{STREAM}max_age = \"forever\""),
            "embedded.streams[0].max_age",
            "\"forever\"",
            duration,
        ),
        (
            "[sse]\nmax_event_size = \"1MB\"".into(),
            "sse.max_event_size",
            "\"1MB\"",
            whole,
        ),
        (
            "[limits]\nmax_publish_body = -1".into(),
            "limits.max_publish_body",
            "-1",
            whole,
        ),
        (
            "[limits]\nmax_connections = 1.5".into(),
            "limits.max_connections",
            "1.5",
            whole,
        ),
        (
            "[fanout]\nring_size = \"many\"".into(),
            "fanout.ring_size",
            "\"many\"",
            whole,
        ),
        (
            "[replay]\nmax_messages = true".into(),
            "replay.max_messages",
            "true",
            whole,
        ),
        (
            format!("{JETSTREAM}max_reconnects = \"forever\""),
            "jetstream.max_reconnects",
            "\"forever\"",
            whole,
        ),
        (
            format!("{STREAM}max_msgs = \"lots\""),
            "embedded.streams[0].max_msgs",
            "\"lots\"",
            whole,
        ),
        (
            format!("{HMAC_KEY}secret = \"s\"\n[auth.subscribe.x]"),
            "auth.subscribe.x",
            "",
            "unknown key",
        ),
        (
            format!("{JETSTREAM}tls_insecure_skip_verify = \"yes\""),
            "jetstream.tls_insecure_skip_verify",
            "\"yes\"",
            "true or false",
        ),
        (
            format!("{STREAM}allow_msg_ttl = 1"),
            "embedded.streams[0].allow_msg_ttl",
            "1",
            "true or false",
        ),
        (
            "backend = \"nope\"".into(),
            "backend",
            "\"nope\"",
            "`embedded`, `jetstream`",
        ),
        (
            "backend = 3".into(),
            "backend",
            "3",
            "`embedded`, `jetstream`",
        ),
        (
            "[replay]\non_loss = true".into(),
            "replay.on_loss",
            "true",
            "`earliest`, `live`",
        ),
        (
            "[auth.subscribe]\nalgorithms = [\"XX\"]".into(),
            "auth.subscribe.algorithms[0]",
            "\"XX\"",
            "`HS256`",
        ),
        (
            "[[auth.subscribe.keys]]\ntype = \"foo\"".into(),
            "auth.subscribe.keys[0].type",
            "\"foo\"",
            "`hmac`",
        ),
        (
            "[auth.subscribe]\nkeys = [5]".into(),
            "auth.subscribe.keys[0]",
            "5",
            "a table",
        ),
        (
            "[cors]\nallowed_origins = \"x\"".into(),
            "cors.allowed_origins",
            "\"x\"",
            "a list",
        ),
        (
            "[cors]\nallowed_origins = [1]".into(),
            "cors.allowed_origins[0]",
            "1",
            "a string",
        ),
        (
            format!("{JETSTREAM}urls = 5"),
            "jetstream.urls",
            "5",
            "a list",
        ),
        ("listen = 5".into(), "listen", "5", "a string"),
        (
            "listen = \"here\"".into(),
            "listen",
            "\"here\"",
            "an address like",
        ),
        ("hub_url = 5".into(), "hub_url", "5", "a string"),
        (
            "topic_prefix = [1]".into(),
            "topic_prefix",
            "[1]",
            "a string",
        ),
        (
            "[embedded]\ndata_dir = 5".into(),
            "embedded.data_dir",
            "5",
            "a file path",
        ),
        (
            format!("{HMAC_KEY}secret_file = 5"),
            "auth.subscribe.keys[0].secret_file",
            "5",
            "a file path",
        ),
        (
            format!("{JETSTREAM}creds_file = true"),
            "jetstream.creds_file",
            "true",
            "a file path",
        ),
        ("sse = 5".into(), "sse", "5", "a table"),
        (
            "[embedded]\nstreams = [5]".into(),
            "embedded.streams[0]",
            "5",
            "a table",
        ),
        (
            "[[embedded.streams]]\nname = \"s\"".into(),
            "embedded.streams[0]",
            "",
            "missing its key `subjects`",
        ),
        (
            "[sse]\nheartbeet = \"5s\"".into(),
            "sse.heartbeet",
            "",
            "`heartbeat`",
        ),
    ];
    for (text, key, value, allowed) in &cases {
        let message = error_text(text);
        assert_user_words(&message, &["test.toml", key, value], allowed);
    }
}

/// A secret of the wrong type is named by its key and said to be a string; its value is not
/// shown, nor is a secret beside an unknown key.
#[test]
fn wrongly_typed_secrets_are_named_but_never_shown() {
    for (text, key) in [
        (
            format!("{HMAC_KEY}secret = 987654321"),
            "auth.subscribe.keys[0].secret",
        ),
        (format!("{JETSTREAM}token = 987654321"), "jetstream.token"),
        (
            format!("{JETSTREAM}user = \"u\"\npassword = [987654321]"),
            "jetstream.password",
        ),
    ] {
        let message = error_text(&text);
        assert_user_words(&message, &[key], "a string");
        assert!(!message.contains("987654321"), "{message}");
    }
    let message = error_text(&format!("{HMAC_KEY}secrett = \"987654321\""));
    assert_user_words(&message, &["auth.subscribe.keys[0].secrett"], "unknown");
    assert!(!message.contains("987654321"), "{message}");
}

/// Every error about the file's values starts with the file's name, those found by the
/// checks after the types too (origins, the auth section's keys).
#[test]
fn errors_about_the_files_values_name_the_file() {
    for text in [
        "[cors]\nallowed_origins = [\"https://a.example/\"]\n",
        "[auth.subscribe]\nalgorithms = [\"HS256\"]\n",
        "[sse]\nheartbeat = \"-5s\"\n",
        "[sse]\nheartbeet = \"5s\"\n",
    ] {
        let message = error_text(text);
        assert!(message.starts_with("test.toml: "), "{message}");
    }
}

/// Integers wider than 64 bits fail in the TOML parser, before any key is known; dates and
/// times are not strings. Neither is shown, nor accepted as a secret.
#[test]
fn secrets_that_are_wide_integers_or_datetimes_are_refused_unseen() {
    const WIDE: &str = "98765432109876543210987654321";
    const MERCURE: &str = "[mercure]\nenabled = true\n";
    for line in [
        format!("{HMAC_KEY}secret = {WIDE}"),
        format!("{JETSTREAM}user = \"u\"\npassword = {WIDE}"),
        format!("{JETSTREAM}token = -{WIDE}"),
        format!("{MERCURE}publisher_jwt_key = {WIDE}"),
        format!("{MERCURE}subscriber_jwt_key = 0x{WIDE}"),
    ] {
        let message = error_text(&line);
        assert!(!message.contains("98765"), "{message}");
        assert!(message.contains("line "), "{message}");
    }
    for (text, key) in [
        (
            format!("{HMAC_KEY}secret = 1979-05-27T07:32:00Z"),
            "auth.subscribe.keys[0].secret",
        ),
        (
            format!("{JETSTREAM}token = 1979-05-27T07:32:00Z"),
            "jetstream.token",
        ),
        (
            format!("{JETSTREAM}user = \"u\"\npassword = 07:32:00"),
            "jetstream.password",
        ),
        (
            format!("{MERCURE}publisher_jwt_key = 1979-05-27"),
            "mercure.publisher_jwt_key",
        ),
    ] {
        let message = error_text(&text);
        assert_user_words(&message, &[key], "a string");
        assert!(
            !message.contains("1979") && !message.contains("07:32"),
            "{message}"
        );
    }
}

/// The same kinds of mistakes in environment variables: the variable, the key and the value are
/// named, whether the type check or a validation rule refuses it.
#[test]
fn wrong_environment_values_name_the_variable_key_and_value() {
    let cases = [
        (
            "SLUICE_SSE_HEARTBEAT",
            "soon",
            "sse.heartbeat",
            "a duration such as",
        ),
        (
            "SLUICE_SSE_HEARTBEAT",
            "0s",
            "sse.heartbeat",
            "must be more than 0s",
        ),
        (
            "SLUICE_REPLAY_WINDOW",
            "never",
            "replay.window",
            "a duration such as",
        ),
        (
            "SLUICE_JETSTREAM_CONNECT_TIMEOUT",
            "soon",
            "jetstream.connect_timeout",
            "a duration",
        ),
        (
            "SLUICE_SSE_MAX_EVENT_SIZE",
            "1MB",
            "sse.max_event_size",
            "a whole number",
        ),
        (
            "SLUICE_LIMITS_MAX_CONNECTIONS",
            "-1",
            "limits.max_connections",
            "a whole number, 0 or more",
        ),
        (
            "SLUICE_FANOUT_RING_SIZE",
            "lots",
            "fanout.ring_size",
            "a whole number",
        ),
        (
            "SLUICE_FANOUT_RING_SIZE",
            "2",
            "fanout.ring_size",
            "between 16 and",
        ),
        (
            "SLUICE_EMBEDDED_INDEX_MEMORY",
            "4096",
            "embedded.index_memory",
            "at least 1048576",
        ),
        (
            "SLUICE_FANOUT_RING_MEMORY",
            "1048576",
            "fanout.ring_memory",
            "at least 16777216",
        ),
        (
            "SLUICE_FANOUT_MAX_CATCH_UP_READS",
            "0",
            "fanout.max_catch_up_reads",
            "between 1 and 65536",
        ),
        (
            "SLUICE_JETSTREAM_MAX_RECONNECTS",
            "forever",
            "jetstream.max_reconnects",
            "a whole number",
        ),
        (
            "SLUICE_JETSTREAM_TLS_INSECURE_SKIP_VERIFY",
            "yes",
            "jetstream.tls_insecure_skip_verify",
            "true or false",
        ),
        (
            "SLUICE_BACKEND",
            "nope",
            "backend",
            "`embedded`, `jetstream`",
        ),
        ("SLUICE_BACKEND", "jetstream", "backend", "[jetstream]"),
        (
            "SLUICE_REPLAY_ON_LOSS",
            "never",
            "replay.on_loss",
            "`earliest`, `live`",
        ),
        (
            "SLUICE_CORS_ALLOWED_ORIGINS",
            "x",
            "cors.allowed_origins[0]",
            "can never match",
        ),
        ("SLUICE_LISTEN", "here", "listen", "an address like"),
        ("SLUICE_HUB_URL", "ftp://x", "hub_url", "http://"),
        (
            "SLUICE_DATA_DIR",
            "",
            "embedded.data_dir",
            "must not be empty",
        ),
        (
            "SLUICE_STREAM",
            "a/b",
            "embedded.stream",
            "not one of the streams",
        ),
        (
            "SLUICE_NATS_URL",
            "http://x",
            "jetstream.urls[0]",
            "schemes are",
        ),
    ];
    for (variable, value, key, allowed) in cases {
        let err = load_str(
            "",
            "defaults",
            env(&[(variable, value)]),
            &Overrides::default(),
        )
        .expect_err(variable)
        .to_string();
        let named = format!("environment variable {variable}");
        assert_user_words(&err, &[&named, key, value], allowed);
        assert!(!err.contains("defaults"), "{err}");
    }
}

/// And in flags: the flag, the key and the value are named.
#[test]
fn wrong_flag_values_name_the_flag_key_and_value() {
    let flags = |set: &dyn Fn(&mut Overrides)| {
        let mut flags = Overrides::default();
        set(&mut flags);
        flags
    };
    let cases: [(Overrides, &str, &str, &str, &str); 6] = [
        (
            flags(&|f| f.listen = Some("here".into())),
            "--listen",
            "listen",
            "\"here\"",
            "an address like",
        ),
        (
            flags(&|f| f.backend = Some("nope".into())),
            "--backend",
            "backend",
            "\"nope\"",
            "`embedded`",
        ),
        (
            flags(&|f| f.data_dir = Some(String::new())),
            "--data-dir",
            "embedded.data_dir",
            "\"\"",
            "must not be empty",
        ),
        (
            flags(&|f| f.stream = Some("a/b".into())),
            "--stream",
            "embedded.stream",
            "\"a/b\"",
            "not one of",
        ),
        (
            flags(&|f| f.topic_prefix = Some("a..b".into())),
            "--topic-prefix",
            "topic_prefix",
            "\"a..b\"",
            "empty token",
        ),
        (
            flags(&|f| {
                f.backend = Some("jetstream".into());
                f.stream = Some("S".into());
                f.nats_url = Some("http://x".into());
            }),
            "--nats-url",
            "jetstream.urls[0]",
            "\"http://x\"",
            "schemes are",
        ),
    ];
    for (overrides, flag, key, value, allowed) in cases {
        let err = load_str("", "defaults", env(&[]), &overrides)
            .expect_err(flag)
            .to_string();
        assert_user_words(&err, &[&format!("flag {flag}"), key, value], allowed);
    }
    // A flag wins over the variable for the same key, and so is the one named.
    let err = load_str(
        "",
        "defaults",
        env(&[("SLUICE_LISTEN", "127.0.0.1:1")]),
        &flags(&|f| f.listen = Some("here".into())),
    )
    .expect_err("bad flag")
    .to_string();
    assert!(err.starts_with("flag --listen: "), "{err}");
}

#[test]
fn delete_markers_need_a_ttl_of_a_second_and_message_ttls() {
    let config =
        load_text(&format!("{STREAM}subject_delete_marker_ttl = \"1m\"\n")).expect("loads");
    assert_eq!(
        config.embedded.streams[0].subject_delete_marker_ttl,
        Duration::from_secs(60)
    );
    for (extra, named) in [
        ("subject_delete_marker_ttl = \"500ms\"\n", "500ms"),
        (
            "subject_delete_marker_ttl = \"1m\"\nallow_msg_ttl = false\n",
            "allow_msg_ttl",
        ),
    ] {
        let message = error_text(&format!("{STREAM}{extra}"));
        assert!(
            message.contains("embedded.streams[0].subject_delete_marker_ttl")
                && message.contains(named),
            "{message}"
        );
    }
}

#[test]
fn the_admin_direction_refuses_anonymous_access() {
    let text = format!(
        "[auth.admin]\nanonymous = [\">\"]\n{}",
        "algorithms = [\"HS256\"]\nkeys = [{ type = \"hmac\", secret = \"s\" }]\n"
    );
    let message = error_text(&text);
    assert!(message.contains("auth.admin.anonymous"), "{message}");
}

#[test]
fn tls_and_http2_keys_load_from_the_file_and_the_environment() {
    let file =
        "[tls]\ncert_file = \"/etc/hub.crt\"\nkey_file = \"/etc/hub.key\"\n[http2]\nh2c = true\n";
    let vars = env(&[
        ("SLUICE_TLS_LISTEN", "0.0.0.0:8443"),
        ("SLUICE_HTTP2_MAX_CONCURRENT_STREAMS", "250"),
    ]);
    let (config, warnings) = load_str(file, "f", vars, &Overrides::default()).expect("loads");
    assert!(warnings.is_empty(), "{warnings:?}");
    let tls = config.tls.expect("tls");
    assert_eq!(tls.cert_file, PathBuf::from("/etc/hub.crt"));
    assert_eq!(tls.key_file, PathBuf::from("/etc/hub.key"));
    assert_eq!(tls.listen, Some("0.0.0.0:8443".parse().unwrap()));
    assert!(config.http2.enabled && config.http2.h2c);
    assert_eq!(config.http2.max_concurrent_streams, 250);
}

#[test]
fn bad_tls_and_http2_values_are_named() {
    let err = error_text("[tls]\ncert_file = \"/a.crt\"\n");
    assert!(err.contains("key_file"), "{err}");
    let err = error_text("[tls]\ncert_file = \"\"\nkey_file = \"/a.key\"\n");
    assert!(err.contains("tls.cert_file"), "{err}");
    let err = error_text(
        "listen = \"127.0.0.1:8080\"\n[tls]\ncert_file = \"/a\"\nkey_file = \"/b\"\nlisten = \"127.0.0.1:8080\"\n",
    );
    assert!(err.contains("tls.listen"), "{err}");
    let err = error_text("[http2]\nmax_concurrent_streams = 0\n");
    assert!(err.contains("http2.max_concurrent_streams"), "{err}");
}
