//! The `sluice` binary end to end: `serve` with defaults, `pub`/`sub` against it, graceful
//! SIGTERM, configuration errors before any socket opens, and `stream ls|info|purge`.

use std::process::Command;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, SseClient, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(args: &[&str], cwd: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run sluice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_defaults_uses_the_embedded_store_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_owned();
    let mut hub = SluiceProcess::start_configured(BIN, ["serve"], move |cmd| {
        cmd.current_dir(&cwd);
    })
    .await
    .expect("serve starts");
    let answer = http::post_json(
        &hub.url("/publish"),
        &json!({ "topic": "any.topic", "payload": "hi" }),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert!(
        dir.path().join("sluice-data/streams/sluice").is_dir(),
        "default stream in ./sluice-data"
    );

    let mut client = SseClient::connect(&hub.url("/events?topic=%3E&last-id=0"))
        .await
        .unwrap();
    assert_eq!(client.next_event().await.unwrap().event_type(), "connected");
    let message = client.next_event().await.unwrap();
    assert_eq!(message.id.as_deref(), answer.json().unwrap()["id"].as_str());

    // SIGTERM drains: the stream ends cleanly, the process exits 0 and logs the reason.
    let status = hub
        .terminate(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("exit status");
    assert!(status.success(), "{status:?}\n{}", hub.log_tail(20));
    assert!(client.frames_until_end().await.is_ok());
    assert!(
        hub.log_tail(50).contains("disconnect_reason"),
        "{}",
        hub.log_tail(50)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_and_sub_talk_to_a_running_hub() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = [
        "serve".as_ref(),
        "--log-format".as_ref(),
        "json".as_ref(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ];
    let mut hub = SluiceProcess::start(BIN, args).await.unwrap();
    let base = hub.base_url();
    for payload in ["{\"n\":1}", "plain"] {
        let out = sluice(&["pub", "--hub", &base, "orders.eu", payload], dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["duplicate"], false);
    }
    let out = sluice(
        &[
            "sub",
            "--hub",
            &base,
            "--last-id",
            "0",
            "--count",
            "2",
            "orders.*",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("connected 0-"), "{text}");
    assert!(
        lines[1].starts_with("message 1-") && lines[1].contains(r#""payload":{"n":1}"#),
        "{text}"
    );
    assert!(
        lines[2].starts_with("message 2-") && lines[2].contains(r#""payload":"plain""#),
        "{text}"
    );
    // --log-format json: structured lines, the stream end carrying its disconnect_reason.
    let line = hub
        .wait_for_log("disconnect_reason", Duration::from_secs(20))
        .await
        .expect("the stream end is logged");
    let log: Value = serde_json::from_str(&line).expect("a JSON log line");
    assert!(log["fields"]["disconnect_reason"].is_string(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configuration_fails_before_listening_naming_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "[sse]\nheartbeat = \"-5s\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(
        stderr.contains("sse.heartbeat") && stderr.contains("-5s"),
        "{stderr}"
    );
    // A key file the configuration names: the error starts with the configuration file too.
    std::fs::write(
        &file,
        "[auth.subscribe]\nalgorithms = [\"RS256\"]\nkeys = [{ type = \"rsa\", pem_file = \"missing.pem\" }]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}: ", file.display())) && stderr.contains("missing.pem"),
        "{stderr}"
    );

    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_LIMITS_MAX_CONNECTIONS", "lots")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SLUICE_LIMITS_MAX_CONNECTIONS") && stderr.contains("lots"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_commands_list_describe_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    for n in 0..3 {
        let answer = http::post_json(&hub.url("/publish"), &json!({ "topic": "t", "payload": n }))
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
    }
    hub.terminate(Duration::from_secs(10)).await.unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let out = sluice(&["stream", "--data-dir", data, "ls"], dir.path());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sluice");
    let out = sluice(
        &["stream", "--data-dir", data, "info", "sluice"],
        dir.path(),
    );
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (info["messages"].clone(), info["last_seq"].clone()),
        (json!(3), json!(3))
    );
    let out = sluice(
        &[
            "stream",
            "--data-dir",
            data,
            "purge",
            "sluice",
            "--keep",
            "1",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["purged"],
        2
    );
    let out = sluice(&["stream", "--data-dir", data, "info", "nope"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

#[test]
fn stream_commands_on_a_missing_data_directory_are_an_error_not_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let out = sluice(
        &["stream", "--data-dir", missing.to_str().unwrap(), "ls"],
        dir.path(),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no data directory") && stderr.contains("no-such-dir"),
        "{stderr}"
    );
    assert!(!missing.exists(), "a store was created");
}

/// How long a `sluice sub` test waits for a line or an exit.
const SUB_WAIT: Duration = Duration::from_secs(30);

/// A running `sluice sub`: its stdout and stderr read line by line; killed when dropped.
struct Sub {
    child: tokio::process::Child,
    stdout: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// Every stderr line read so far, for failure messages.
    errors: Vec<String>,
}

impl Sub {
    fn start(args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(BIN)
            .arg("sub")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start sluice sub");
        let stdout = lines(child.stdout.take().expect("piped stdout"));
        let stderr = lines(child.stderr.take().expect("piped stderr"));
        Self {
            child,
            stdout,
            stderr,
            errors: Vec::new(),
        }
    }

    /// The next line on stdout.
    async fn line(&mut self) -> String {
        match tokio::time::timeout(SUB_WAIT, self.stdout.recv()).await {
            Ok(Some(line)) => line,
            other => panic!(
                "no stdout line ({other:?}); stderr: {:#?}",
                self.drain_errors()
            ),
        }
    }

    /// Waits for a stderr line containing `needle` and returns it.
    async fn stderr_line(&mut self, needle: &str) -> String {
        loop {
            match tokio::time::timeout(SUB_WAIT, self.stderr.recv()).await {
                Ok(Some(line)) => {
                    self.errors.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                other => panic!(
                    "no stderr line with {needle:?} ({other:?}): {:#?}",
                    self.errors
                ),
            }
        }
    }

    /// Waits for the process to exit; its status and everything it wrote on stderr.
    async fn exit(&mut self) -> (std::process::ExitStatus, String) {
        let status = tokio::time::timeout(SUB_WAIT, self.child.wait())
            .await
            .expect("sluice sub exits")
            .expect("wait for sluice sub");
        // The process is gone, so its stderr ends: read it to the end, not only the lines
        // the reader has passed on so far.
        let errors = &mut self.errors;
        let stderr = &mut self.stderr;
        tokio::time::timeout(SUB_WAIT, async {
            while let Some(line) = stderr.recv().await {
                errors.push(line);
            }
        })
        .await
        .expect("sluice sub's stderr ends");
        (status, self.errors.join("\n"))
    }

    fn drain_errors(&mut self) -> Vec<String> {
        while let Ok(line) = self.stderr.try_recv() {
            self.errors.push(line);
        }
        self.errors.clone()
    }
}

fn lines(
    pipe: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use tokio::io::AsyncBufReadExt;
    let (send, receive) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

async fn publish(hub: &SluiceProcess, payload: &str) {
    publish_on(hub, "t", payload).await;
}

async fn publish_on(hub: &SluiceProcess, topic: &str, payload: &str) {
    let answer = http::post_json(
        &hub.url("/publish"),
        &json!({ "topic": topic, "payload": payload }),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
}

/// The `<seq>` of a `message <seq>-<incarnation> <data>` line and its payload.
fn message(line: &str) -> (u64, String) {
    let mut parts = line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("message"), "{line}");
    let id = parts.next().expect("an id");
    let seq = id.split('-').next().unwrap().parse().expect("a sequence");
    let data: Value = serde_json::from_str(parts.next().expect("data")).expect("JSON data");
    (
        seq,
        data["payload"].as_str().expect("a text payload").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_survives_a_killed_hub_and_prints_every_message_exactly_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    publish(&hub, "before-1").await;
    publish(&hub, "before-2").await;
    let base = hub.base_url();
    let mut sub = Sub::start(&["--hub", &base, "--last-id", "0", "t"]);
    assert!(sub.line().await.starts_with("connected 0-"));
    let mut printed = vec![message(&sub.line().await), message(&sub.line().await)];

    hub.kill().unwrap();
    let report = sub.stderr_line("reconnecting").await;
    assert!(report.contains("reason="), "{report}");
    hub.restart()
        .await
        .expect("the hub restarts on its port and data");
    // Published after the restart, while `sub` is still waiting to reconnect (the hub's
    // `retry:` hint of 2 s is the shortest delay) or just after: printed once either way.
    publish(&hub, "outage-3").await;
    publish(&hub, "outage-4").await;
    let resumed = sub.line().await;
    assert!(
        resumed.starts_with("connected 2-"),
        "resumes after the last printed id: {resumed}"
    );
    publish(&hub, "after-5").await;
    publish(&hub, "after-6").await;
    for _ in 0..4 {
        printed.push(message(&sub.line().await));
    }
    let payloads: Vec<&str> = printed.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        payloads,
        [
            "before-1", "before-2", "outage-3", "outage-4", "after-5", "after-6"
        ]
    );
    // In stream order (a restarted store may skip sequences it had leased, never reuse one).
    assert!(printed.windows(2).all(|w| w[0].0 < w[1].0), "{printed:?}");
    // Nothing else: the next line is the one for a seventh message.
    publish(&hub, "last-7").await;
    assert_eq!(message(&sub.line().await).1, "last-7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_started_before_the_hub_waits_for_it_and_receives() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    // A port nobody listens on, which the hub will take again.
    hub.kill().unwrap();
    let base = hub.base_url();
    let mut sub = Sub::start(&["--hub", &base, "t"]);
    let report = sub.stderr_line("reconnecting").await;
    assert!(report.contains("Connection refused"), "{report}");
    hub.restart().await.expect("the hub starts on the port");
    assert!(sub.line().await.starts_with("connected "));
    publish(&hub, "hello").await;
    assert_eq!(message(&sub.line().await), (1, "hello".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_gives_up_after_max_wait_without_a_connection() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut sub = Sub::start(&["--hub", &base, "--max-wait", "1s", "t"]);
    let (status, stderr) = sub.exit().await;
    assert!(!status.success(), "{status:?}");
    assert!(
        stderr.contains("--max-wait")
            && stderr.contains("giving up")
            && stderr.contains("Connection refused"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_rejects_a_malformed_last_id_naming_it_and_the_accepted_form() {
    let mut sub = Sub::start(&["--hub", "http://127.0.0.1:9", "--last-id", "garbage", "t"]);
    let (status, stderr) = sub.exit().await;
    assert!(!status.success(), "{status:?}");
    assert!(
        stderr.contains("garbage") && stderr.contains("<seq>-<incarnation>"),
        "{stderr}"
    );
    assert!(!stderr.contains("reconnecting"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_refused_by_the_hub_exits_at_once_with_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, dir.path(), Some("[auth.subscribe]\nalgorithms = [\"HS256\"]\n[[auth.subscribe.keys]]\ntype = \"hmac\"\nsecret = \"a-long-enough-test-secret-of-32-bytes\"\n"))
        .await
        .unwrap();
    let base = hub.base_url();
    let mut sub = Sub::start(&["--hub", &base, "t"]);
    let (status, stderr) = sub.exit().await;
    assert!(!status.success(), "{status:?}");
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("reconnecting"), "{stderr}");
}

/// `sub --from` starts where the hub's `from=` says: `latest` prints the latest message of
/// each subject, `last:2` the two most recent, each then live; `--last-id` wins over it; a bad
/// value ends the command at once with the hub's 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_from_latest_or_last_n_prints_exactly_those_then_live() {
    let dir = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    for (topic, payload) in [
        ("kv.a", "a-1"),
        ("kv.b", "b-2"),
        ("kv.a", "a-3"),
        ("other", "x-4"),
        ("kv.c", "c-5"),
        ("kv.b", "b-6"),
    ] {
        publish_on(&hub, topic, payload).await;
    }
    let base = hub.base_url();
    for (from, replayed, live) in [
        ("latest", &["a-3", "c-5", "b-6"][..], ("kv.a", "a-7")),
        ("last:2", &["b-6", "a-7"][..], ("kv.c", "c-8")),
    ] {
        let mut sub = Sub::start(&["--hub", &base, "--from", from, "kv.>"]);
        let connected = sub.line().await;
        assert!(connected.starts_with("connected "), "{connected}");
        let mut printed = Vec::new();
        for _ in replayed {
            printed.push(message(&sub.line().await).1);
        }
        assert_eq!(printed, replayed, "--from {from}");
        // Nothing else: the next line is the message published now.
        publish_on(&hub, live.0, live.1).await;
        assert_eq!(message(&sub.line().await).1, live.1, "--from {from}");
    }

    // A resume position wins: from the start of the stream, not the latest state.
    let mut sub = Sub::start(&["--hub", &base, "--last-id", "0", "--from", "latest", "kv.>"]);
    assert!(sub.line().await.starts_with("connected 0-"));
    let mut printed = Vec::new();
    for _ in 0..4 {
        printed.push(message(&sub.line().await).1);
    }
    assert_eq!(printed, ["a-1", "b-2", "a-3", "c-5"]);

    for bad in ["last:x", "since:yesterday"] {
        let mut sub = Sub::start(&["--hub", &base, "--from", bad, "kv.>"]);
        let (status, stderr) = sub.exit().await;
        assert!(!status.success(), "{bad}: {status:?}");
        assert!(
            stderr.contains("400")
                && stderr.contains("from: invalid value")
                && stderr.contains(bad)
                && stderr.contains("expected live, earliest, latest, last:<N>"),
            "{bad}: {stderr}"
        );
        assert!(!stderr.contains("reconnecting"), "{stderr}");
    }
}

/// `sluice serve` with `args` and `env`, expected to refuse its configuration: its stderr.
fn refused_serve(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> String {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening"),
        "{stderr}"
    );
    stderr
}

#[test]
fn a_missing_file_is_reported_once_naming_the_key_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("sluice.toml");
    let cases = [
        (
            "[auth.subscribe]\nalgorithms = [\"HS256\"]\n[[auth.subscribe.keys]]\ntype = \"hmac\"\nsecret_file = \"/no/such/secret\"\n",
            "auth.subscribe.keys[0]",
            "/no/such/secret",
        ),
        (
            "backend = \"jetstream\"\n[jetstream]\nstream = \"EVENTS\"\nnkey_seed_file = \"/no/such/seed\"\n",
            "jetstream.nkey_seed_file",
            "/no/such/seed",
        ),
    ];
    for (text, key, path) in cases {
        std::fs::write(&config, text).unwrap();
        let stderr = refused_serve(
            &[
                "--config".as_ref(),
                config.as_os_str(),
                "--data-dir".as_ref(),
                data.as_os_str(),
            ],
            &[],
        );
        assert!(stderr.contains(key) && stderr.contains(path), "{stderr}");
        assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");
    }
    let missing = dir.path().join("missing.toml");
    let stderr = refused_serve(&["--config".as_ref(), missing.as_os_str()], &[]);
    assert!(stderr.contains("missing.toml"), "{stderr}");
    assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");
}

#[test]
fn configuration_errors_from_variables_and_flags_name_them() {
    let stderr = refused_serve(&[], &[("SLUICE_SSE_HEARTBEAT", "soon")]);
    assert!(
        stderr.contains("environment variable SLUICE_SSE_HEARTBEAT")
            && stderr.contains("sse.heartbeat")
            && stderr.contains("\"soon\"")
            && stderr.contains("a duration such as"),
        "{stderr}"
    );
    assert!(!stderr.contains("defaults"), "{stderr}");
    let stderr = refused_serve(&["--backend".as_ref(), "nope".as_ref()], &[]);
    assert!(
        stderr.contains("flag --backend") && stderr.contains("`embedded`, `jetstream`"),
        "{stderr}"
    );
    for word in ["untagged", "enum", "variant"] {
        assert!(!stderr.contains(word), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_with_a_ttl_of_the_wrong_type_says_what_a_ttl_is() {
    let dir = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    for ttl in [json!(true), json!(-5), json!(1.5), json!(["30s"])] {
        let answer = http::post_json(
            &hub.url("/publish"),
            &json!({ "topic": "t", "payload": 1, "ttl": ttl }),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, 400, "{}", answer.text());
        let text = answer.text();
        assert!(
            text.contains("a whole number of seconds") && !text.contains("untagged"),
            "{ttl}: {text}"
        );
    }
}

/// `sluice pub` and `sluice sub` show a hub with authorization the token of `SLUICE_TOKEN` (or
/// `--token`): the publish is taken and the subscription prints it; without a token the same
/// publish is a 401, and `--help` never shows the variable's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_and_sub_send_their_token() {
    const SECRET: &str = "a-long-enough-test-secret-of-32-bytes";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    let keys = format!(
        "algorithms = [\"HS256\"]\n[[auth.DIR.keys]]\ntype = \"hmac\"\nsecret = \"{SECRET}\"\n"
    );
    let text = ["subscribe", "publish"]
        .map(|dir| format!("[auth.{dir}]\n{}", keys.replace("DIR", dir)))
        .join("");
    std::fs::write(&config, text).unwrap();
    let data = dir.path().join("data");
    let serve = [
        "serve".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
    ];
    let hub = SluiceProcess::start(BIN, serve).await.unwrap();
    let base = hub.base_url();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims =
        json!({ "sub": "cli", "exp": exp, "sluice": { "subscribe": ["t"], "publish": ["t"] } });
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap();
    let run = |args: &[&str], token: Option<&str>| {
        let mut command = Command::new(BIN);
        command.args(args).env_remove("SLUICE_TOKEN");
        if let Some(token) = token {
            command.env("SLUICE_TOKEN", token);
        }
        command.output().unwrap()
    };
    let publish = ["pub", "--hub", &base, "t", "hello"];
    let refused = run(&publish, None);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    let out = run(&publish, Some(&token));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let subscribe = [
        "sub",
        "--hub",
        &base,
        "--token",
        &token,
        "--last-id",
        "0",
        "--count",
        "1",
        "t",
    ];
    let out = run(&subscribe, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.contains(r#""payload":"hello""#), "{printed}");
    let help = run(&["sub", "--help"], Some(&token));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("SLUICE_TOKEN") && !help.contains(&token),
        "{help}"
    );
}
