//! `SluiceProcess` against small stand-in executables (the `sluice` binary itself is tested
//! through this crate from crates/sluice/tests).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_test_support::SluiceProcess;
use tempfile::TempDir;

/// Writes an executable shell script.
fn script(dir: &TempDir, body: &str) -> PathBuf {
    let path = dir.path().join("fake-sluice");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn waits_for_listening_line_and_appends_listen_flag() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "echo \"args: $*\" >&2\necho 'starting'\necho 'sluice listening on http://127.0.0.1:45678'\nexec sleep 600",
    );
    let mut sluice = SluiceProcess::start(&binary, ["serve", "--data-dir", "x"])
        .await
        .unwrap();
    assert_eq!(sluice.base_url(), "http://127.0.0.1:45678");
    assert_eq!(sluice.url("/events"), "http://127.0.0.1:45678/events");
    let args = sluice
        .wait_for_log("args:", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(args, "args: serve --data-dir x --listen 127.0.0.1:0");
    let pid = sluice.pid().unwrap();
    drop(sluice);
    assert!(!exists(pid), "dropping kills the process");
}

#[tokio::test]
async fn failed_start_names_binary_address_and_output() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "echo 'error: unknown key `foo` in sluice.toml' >&2\nexit 2",
    );
    let err = SluiceProcess::start(&binary, ["serve"])
        .await
        .err()
        .expect("start fails");
    let message = err.to_string();
    assert!(message.contains(&binary.display().to_string()), "{message}");
    assert!(message.contains("127.0.0.1:0"), "{message}");
    assert!(message.contains("unknown key `foo`"), "{message}");
}

#[tokio::test]
async fn unparsable_address_is_reported() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "echo 'sluice listening on http://nowhere'\nexec sleep 600",
    );
    let err = SluiceProcess::start(&binary, ["serve"])
        .await
        .err()
        .expect("start fails");
    assert!(
        err.to_string().contains("unparsable listening address"),
        "{err}"
    );
}

#[tokio::test]
async fn terminate_sends_sigterm_and_reports_exit() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "trap 'echo drained; exit 0' TERM\necho 'sluice listening on http://127.0.0.1:1'\nwhile true; do sleep 0.05; done",
    );
    let mut sluice = SluiceProcess::start(&binary, ["serve"]).await.unwrap();
    let status = sluice
        .terminate(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("exit status");
    assert!(status.success(), "{status}");
    assert!(sluice.log_tail(5).contains("drained"));
}

#[tokio::test]
async fn environment_can_be_configured() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "echo \"env: $SLUICE_TEST_VALUE\"\necho 'sluice listening on http://127.0.0.1:2'\nexec sleep 600",
    );
    let sluice = SluiceProcess::start_configured(&binary, ["serve"], |command| {
        command.env("SLUICE_TEST_VALUE", "42");
    })
    .await
    .unwrap();
    assert!(sluice.log_tail(10).contains("env: 42"));
}

#[tokio::test]
async fn restart_listens_on_the_same_address_with_the_same_setup() {
    let dir = TempDir::new().unwrap();
    // Stands in for a server: port 0 becomes 45001, any other address is kept.
    let binary = script(
        &dir,
        "for last; do :; done\n\
         addr=$last; [ \"$addr\" = 127.0.0.1:0 ] && addr=127.0.0.1:45001\n\
         echo \"args: $* env: $SLUICE_TEST_VALUE\"\n\
         echo \"sluice listening on http://$addr\"\n\
         exec sleep 600",
    );
    let mut sluice = SluiceProcess::start_configured(&binary, ["serve"], |command| {
        command.env("SLUICE_TEST_VALUE", "kept");
    })
    .await
    .unwrap();
    let first_pid = sluice.pid().unwrap();
    sluice.kill().unwrap();
    sluice.restart().await.unwrap();
    assert_eq!(sluice.base_url(), "http://127.0.0.1:45001");
    assert_ne!(sluice.pid().unwrap(), first_pid);
    assert!(!exists(first_pid));
    let line = sluice
        .wait_for_log("args:", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(line, "args: serve --listen 127.0.0.1:45001 env: kept");
}

#[tokio::test]
async fn very_long_output_lines_are_kept_in_bounded_pieces() {
    let dir = TempDir::new().unwrap();
    let binary = script(
        &dir,
        "head -c 200000 /dev/zero | tr '\\0' x\necho\n\
         echo 'sluice listening on http://127.0.0.1:3'\nexec sleep 600",
    );
    let sluice = SluiceProcess::start(&binary, ["serve"]).await.unwrap();
    let tail = sluice.log_tail(10);
    let pieces: Vec<&str> = tail.lines().filter(|line| line.starts_with('x')).collect();
    assert_eq!(
        pieces.iter().map(|piece| piece.len()).sum::<usize>(),
        200_000
    );
    assert!(
        pieces.iter().all(|piece| piece.len() <= 64 * 1024),
        "{:?}",
        pieces.len()
    );
}
