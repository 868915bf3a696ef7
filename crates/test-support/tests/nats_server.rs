//! `NatsServer` against the real nats-server binaries.

use async_nats::jetstream;
use sluice_test_support::{NatsOptions, NatsServer, debian_nats_server_binary};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;

/// Reads the INFO line a NATS server sends first and returns it as JSON.
async fn server_info(port: u16) -> serde_json::Value {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .await
        .expect("INFO line");
    let json = line.strip_prefix("INFO ").expect("starts with INFO");
    serde_json::from_str(json).expect("INFO is JSON")
}

#[tokio::test]
async fn starts_ready_with_jetstream_on_loopback() {
    let server = NatsServer::start().await.expect("nats-server starts");
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
    let info = server_info(server.port()).await;
    assert_eq!(info["jetstream"], true, "{info}");
    assert!(server.store_dir().join("jetstream").is_dir());
}

#[tokio::test]
async fn restart_keeps_port_and_streams() {
    let mut server = NatsServer::start().await.expect("nats-server starts");
    let port = server.port();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: "KEEP".into(),
        subjects: vec!["keep.>".into()],
        ..Default::default()
    })
    .await
    .expect("create stream");
    js.publish("keep.a", "one".into())
        .await
        .expect("publish")
        .await
        .expect("ack");

    server.restart().await.expect("restart");
    assert_eq!(server.port(), port);
    let client = async_nats::connect(server.url()).await.expect("reconnect");
    let mut stream = jetstream::new(client)
        .get_stream("KEEP")
        .await
        .expect("stream survives");
    assert_eq!(stream.info().await.expect("info").state.messages, 1);
}

#[tokio::test]
async fn stop_then_restart_brings_server_back() {
    let mut server = NatsServer::start().await.expect("nats-server starts");
    server.stop().await.expect("stop");
    assert_eq!(server.pid(), None);
    assert!(
        TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .is_err()
    );
    server.restart().await.expect("restart");
    assert_eq!(server_info(server.port()).await["jetstream"], true);
}

#[test]
fn dropping_during_a_panic_kills_the_server() {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let server = NatsServer::start().await.expect("nats-server starts");
            pid_tx.send(server.pid().expect("running")).unwrap();
            panic!("a failing test");
        })
    })
    .join();
    assert!(outcome.is_err(), "the thread panicked");
    let pid = pid_rx.recv().expect("pid");
    // Killed and reaped: the process is gone, not even a zombie.
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still exists"
    );
}

#[tokio::test]
async fn failed_start_names_binary_address_and_log_tail() {
    let options = NatsOptions::default().with_config("unclosed_block {\n");
    let err = NatsServer::start_with(options.clone())
        .await
        .err()
        .expect("start fails");
    let message = err.to_string();
    assert!(
        message.contains(&options.binary.display().to_string()),
        "{message}"
    );
    assert!(message.contains("127.0.0.1:"), "{message}");
    assert!(
        message.contains("Unexpected EOF"),
        "log tail missing: {message}"
    );
}

#[tokio::test]
async fn missing_binary_is_named() {
    let err = NatsServer::start_with(NatsOptions::binary("/nonexistent/nats-server"))
        .await
        .err()
        .expect("start fails");
    assert!(
        err.to_string().contains("/nonexistent/nats-server"),
        "{err}"
    );
}

#[tokio::test]
async fn config_file_is_applied() {
    let options = NatsOptions::default().with_config("authorization { token: \"s3cret\" }\n");
    let server = NatsServer::start_with(options)
        .await
        .expect("starts with config");
    assert_eq!(server_info(server.port()).await["auth_required"], true);
    let client = async_nats::ConnectOptions::with_token("s3cret".into())
        .connect(server.url())
        .await
        .expect("token accepted");
    client.flush().await.expect("flush");
}

/// The old-server case: Debian's nats-server 2.9, installed by `scripts/test`.
#[tokio::test]
async fn debian_nats_server_starts() {
    let binary = debian_nats_server_binary().expect(
        "Debian's nats-server is installed (scripts/test installs the `nats-server` package)",
    );
    let server = NatsServer::start_with(NatsOptions::binary(binary))
        .await
        .expect("starts");
    let info = server_info(server.port()).await;
    assert!(
        info["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("2.")),
        "{info}"
    );
    assert_eq!(info["jetstream"], true, "{info}");
}
