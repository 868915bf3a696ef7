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
    assert_eq!(config, Config::default());
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
