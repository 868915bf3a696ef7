//! `sluice serve` with the JetStream backend and `SLUICE_LOG=debug`, connecting to a real
//! nats-server that wants credentials: whether they come in the URL (percent-encoded) or in
//! `[jetstream]` keys, they authenticate, and no secret appears in anything the hub prints.

use std::process::Stdio;
use std::time::Duration;

use sluice_test_support::{NatsOptions, NatsServer};
use tokio::process::Command;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
/// How long the hub may take to connect, find no stream and exit.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

async fn nats(config: &str) -> NatsServer {
    NatsServer::start_with(NatsOptions::default().with_config(config))
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Runs `sluice serve` on `url` with debug logs and `env` until it exits: the server holds no
/// stream, so the hub stops right after connecting and looking for it. Returns what it printed.
async fn serve_until_exit(url: &str, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(SLUICE);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--backend", "jetstream"])
        .args(["--nats-url", url, "--stream", "EVENTS"])
        .env("SLUICE_LOG", "debug")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_TIMEOUT, command.output())
        .await
        .expect("sluice serve exits without a stream")
        .expect("sluice serve runs");
    assert!(!output.status.success(), "no stream to serve, yet it ran");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Asserts the hub got in (it looked for the stream, which needs an authenticated
/// connection) and printed none of `secrets`.
fn assert_connected_without_secrets(output: &str, secrets: &[&str]) {
    assert!(
        output.contains("\"EVENTS\" does not exist"),
        "the hub did not get as far as the stream:\n{output}"
    );
    assert!(output.contains("DEBUG"), "debug logging is on:\n{output}");
    for secret in secrets {
        assert!(!output.contains(secret), "{secret:?} printed:\n{output}");
    }
}

#[tokio::test]
async fn user_and_password_never_appear_in_debug_logs() {
    let server = nats("authorization { user: alice, password: \"pa@ss-9Xq\" }").await;
    let port = server.port();
    let in_url = serve_until_exit(&format!("nats://alice:pa%40ss-9Xq@127.0.0.1:{port}"), &[]).await;
    assert_connected_without_secrets(&in_url, &["pa@ss-9Xq", "pa%40ss-9Xq"]);

    let in_keys = serve_until_exit(
        &server.url(),
        &[
            ("SLUICE_JETSTREAM_USER", "alice"),
            ("SLUICE_JETSTREAM_PASSWORD", "pa@ss-9Xq"),
        ],
    )
    .await;
    assert_connected_without_secrets(&in_keys, &["pa@ss-9Xq"]);
}

#[tokio::test]
async fn tokens_never_appear_in_debug_logs() {
    let server = nats("authorization { token: \"t0k/3n-7Wz\" }").await;
    let port = server.port();
    let in_url = serve_until_exit(&format!("nats://t0k%2F3n-7Wz@127.0.0.1:{port}"), &[]).await;
    assert_connected_without_secrets(&in_url, &["t0k/3n-7Wz", "t0k%2F3n-7Wz"]);

    let in_keys =
        serve_until_exit(&server.url(), &[("SLUICE_JETSTREAM_TOKEN", "t0k/3n-7Wz")]).await;
    assert_connected_without_secrets(&in_keys, &["t0k/3n-7Wz"]);
}
