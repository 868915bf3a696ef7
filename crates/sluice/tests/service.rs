//! The systemd unit (packaging/systemd/sluice.service) and what it relies on in the binary:
//! `systemd-analyze verify` accepts the unit, its exposure stays "OK" by
//! `systemd-analyze security`, `sluice serve` tells a `Type=notify` manager it is ready once
//! its listeners accept (and that it stops on SIGTERM), and `sluice health` — the container
//! image's health check — answers for the hub on this machine.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_test_support::{SluiceProcess, TestCa, http, repo_root, tempfile};

const BINARY: &str = env!("CARGO_BIN_EXE_sluice");

/// The repository's unit with `ExecStart` pointing at the binary under test (`verify` checks
/// that the program exists), written into `dir`.
fn unit_in(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(repo_root().join("packaging/systemd/sluice.service"))
        .expect("the unit");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/sluice serve"),
        "{unit}"
    );
    let path = dir.join("sluice.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/local/bin/sluice",
            &format!("ExecStart={BINARY}"),
        ),
    )
    .expect("write the unit");
    path
}

fn systemd_analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .output()
        .expect("systemd-analyze runs (Debian: apt-get install systemd; scripts/test installs it)")
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = unit_in(dir.path());
    let out = systemd_analyze(&["verify", unit.to_str().expect("a UTF-8 path")]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.trim().is_empty(), "verify has remarks: {said}");
    let text = std::fs::read_to_string(&unit).expect("the unit");
    for line in [
        "Type=notify",
        "DynamicUser=yes",
        "StateDirectory=sluice",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "LimitNOFILE=1048576",
    ] {
        assert!(text.lines().any(|l| l == line), "the unit lacks {line}");
    }
}

/// `systemd-analyze security` rates what the service may do from 0 (locked down) to 10; the
/// unit stays at 2 or below ("OK").
#[test]
fn the_units_exposure_stays_ok() {
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = unit_in(dir.path());
    let out = systemd_analyze(&[
        "security",
        "--offline=true",
        "--no-pager",
        unit.to_str().expect("a UTF-8 path"),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    let level: f64 = said
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for sluice.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {said}"));
    assert!(level <= 2.0, "exposure {level}: {said}");
}

/// Receives one notification from the hub on `socket`, within a generous bound.
fn notification(socket: &UnixDatagram) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("a notification from the hub");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `READY=1` comes once the listener accepts: a request sent the moment it arrives is
/// answered. SIGTERM brings `STOPPING=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_tells_systemd_it_is_ready_once_it_accepts_and_when_it_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("the manager's socket");
    let notify = socket_path.clone();
    let mut hub = SluiceProcess::start_configured(
        BINARY,
        [
            "serve".into(),
            "--data-dir".into(),
            dir.path().join("data").into_os_string(),
        ],
        move |command| {
            command.env("NOTIFY_SOCKET", &notify);
        },
    )
    .await
    .expect("sluice serve starts");
    let ready = tokio::task::spawn_blocking({
        let socket = socket.try_clone().expect("socket");
        move || notification(&socket)
    })
    .await
    .expect("received");
    assert_eq!(ready, "READY=1\n");
    let answer = http::get(&hub.url("/readyz")).await.expect("GET /readyz");
    assert_eq!(answer.status, 200);

    let exit = hub
        .terminate(Duration::from_secs(30))
        .await
        .expect("stopped");
    assert!(exit.is_some_and(|status| status.success()), "{exit:?}");
    let stopping = tokio::task::spawn_blocking(move || notification(&socket))
        .await
        .expect("received");
    assert_eq!(stopping, "STOPPING=1\n");
}

/// Runs `sluice health` with `env`; its exit status and what it printed.
fn health(env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let out = Command::new(BINARY)
        .arg("health")
        .args(args)
        .env_remove("SLUICE_CONFIG")
        .envs(env.iter().copied())
        .output()
        .expect("sluice health runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// `sluice health` finds the hub where the configuration says it listens (every interface
/// means loopback) and exits 0 when it is ready; 1 with the reason when nothing answers or
/// the answer is not 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_zero_when_the_hub_is_ready_and_one_with_the_reason_otherwise() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hub = SluiceProcess::serve(BINARY, dir.path(), None)
        .await
        .expect("sluice serve starts");
    let port = hub.addr().port().to_string();
    let everywhere = format!("0.0.0.0:{port}");

    let (ok, said) =
        tokio::task::spawn_blocking(move || health(&[("SLUICE_LISTEN", everywhere.as_str())], &[]))
            .await
            .expect("ran");
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("http://127.0.0.1:{port}/readyz answered 200")),
        "{said}"
    );

    let url = hub.url("/no-such-probe");
    let (ok, said) = tokio::task::spawn_blocking(move || health(&[], &["--url", &url]))
        .await
        .expect("ran");
    assert!(!ok, "{said}");
    assert!(said.contains("not ready") && said.contains("404"), "{said}");

    let nothing = free_port();
    let (ok, said) =
        tokio::task::spawn_blocking(move || health(&[("SLUICE_LISTEN", nothing.as_str())], &[]))
            .await
            .expect("ran");
    assert!(!ok, "{said}");
    assert!(said.contains("cannot connect"), "{said}");
}

/// With TLS on the main listener the probe speaks TLS to it, whoever issued the certificate
/// (here a CA the system does not know).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_a_tls_listener_with_a_certificate_of_any_issuer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = TestCa::new().issue("hub").write(dir.path(), "hub");
    let settings = format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let hub = SluiceProcess::serve(BINARY, dir.path(), Some(&settings))
        .await
        .expect("sluice serve starts");
    let config = dir.path().join("sluice.toml");
    assert!(hub.base_url().starts_with("https://"));
    let listen = hub.addr().to_string();
    let config = config.display().to_string();
    let (ok, said) = tokio::task::spawn_blocking(move || {
        health(
            &[
                ("SLUICE_LISTEN", listen.as_str()),
                ("SLUICE_CONFIG", config.as_str()),
            ],
            &[],
        )
    })
    .await
    .expect("ran");
    assert!(ok, "{said}");
    assert!(said.contains("https://127.0.0.1:"), "{said}");
}

/// A port nothing listens on (bound, then released).
fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").to_string()
}
