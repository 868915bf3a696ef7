//! The `sluice` binary over HTTPS: a plain and a TLS listener side by side, `pub` and `sub`
//! against an `https://` hub with `--ca-file`, and certificates that cannot be used refused at
//! start naming the file.

use std::process::Command;
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, TestCa, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("run sluice")
}

/// Writes a configuration with `[tls]` for `cert` and `key` (and `extra` lines in the
/// section) into `dir`, and returns its path.
fn tls_config(
    dir: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
    extra: &str,
) -> String {
    let path = dir.join("sluice.toml");
    let text = format!(
        "[tls]\ncert_file = {}\nkey_file = {}\n{extra}",
        json!(cert.display().to_string()),
        json!(key.display().to_string())
    );
    std::fs::write(&path, text).expect("write the config");
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_and_sub_speak_https_beside_a_plain_listener() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let (cert, key) = ca.issue("sluice hub").write(dir.path(), "hub");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let config = tls_config(dir.path(), &cert, &key, "listen = \"127.0.0.1:0\"\n");
    let data = dir.path().join("data").display().to_string();
    let mut hub = SluiceProcess::start(BIN, ["serve", "--config", &config, "--data-dir", &data])
        .await
        .expect("sluice serve starts");
    assert!(
        hub.base_url().starts_with("http://"),
        "`listen` stays plain"
    );
    let line = hub
        .wait_for_log("sluice listening on https://", Duration::from_secs(20))
        .await
        .expect("the TLS listener's line");
    let port = line.rsplit(':').next().unwrap().trim();
    let https = format!("https://localhost:{port}");
    let ca_file = ca_file.display().to_string();

    let plain = sluice(&["pub", "--hub", &hub.base_url(), "orders.eu", "1"]);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let secure = sluice(&[
        "pub",
        "--hub",
        &https,
        "--ca-file",
        &ca_file,
        "orders.eu",
        "2",
    ]);
    assert!(
        secure.status.success(),
        "{}",
        String::from_utf8_lossy(&secure.stderr)
    );
    let answer: Value = serde_json::from_slice(&secure.stdout).unwrap();
    assert_eq!(answer["duplicate"], false);

    let out = sluice(&[
        "sub",
        "--hub",
        &https,
        "--ca-file",
        &ca_file,
        "--last-id",
        "0",
        "--count",
        "2",
        "orders.*",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("connected 0-"), "{text}");
    assert!(
        lines[1].starts_with("message 1-") && lines[1].contains(r#""payload":1"#),
        "{text}"
    );
    assert!(
        lines[2].starts_with("message 2-") && lines[2].contains(r#""payload":2"#),
        "{text}"
    );

    // Without the CA the hub's certificate is not trusted: both clients name the cause and
    // the way out, and `sub` stops instead of retrying what no retry changes (`--max-wait`
    // would otherwise end it only after an hour).
    for command in [
        vec!["pub", "--hub", &https, "orders.eu", "3"],
        vec!["sub", "--hub", &https, "--max-wait", "1h", "orders.*"],
    ] {
        let untrusted = sluice(&command);
        assert!(!untrusted.status.success());
        let err = String::from_utf8_lossy(&untrusted.stderr);
        assert!(
            err.contains("certificate is not trusted: no trusted certificate authority issued it")
                && err.contains("--ca-file")
                && err.contains("TLS handshake"),
            "{command:?}: {err}"
        );
    }
}

/// A key that is not the certificate's, a missing file, a file that is not PEM, or one that
/// never ends (read only up to a bound) stops `sluice serve` before it listens, naming the file.
#[test]
fn serve_refuses_unusable_certificates_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new();
    let (cert, _) = ca.issue("one").write(dir.path(), "one");
    let (_, other_key) = ca.issue("two").write(dir.path(), "two");
    let missing = dir.path().join("missing.crt");
    let endless = std::path::PathBuf::from("/dev/zero");
    let data = dir.path().join("data").display().to_string();
    for (cert, key, named) in [
        (&cert, &other_key, "two.key"),
        (&missing, &other_key, "missing.crt"),
        (&endless, &other_key, "/dev/zero: larger than 1048576 bytes"),
        (&cert, &endless, "/dev/zero: larger than 65536 bytes"),
    ] {
        let config = tls_config(dir.path(), cert, key, "");
        let out = Command::new(BIN)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--config",
                &config,
                "--data-dir",
                &data,
            ])
            .output()
            .expect("run sluice serve");
        assert!(!out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("listening"), "{stdout}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{err}");
        assert!(
            err.contains(&format!("{config}: ")),
            "the configuration file first: {err}"
        );
    }
    assert!(
        !dir.path().join("data").exists(),
        "nothing opened before the check"
    );
}
