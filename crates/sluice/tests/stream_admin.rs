//! `sluice stream` against a running hub: through its admin API with `--hub`, printing what
//! the command prints on the data directory itself; and, without `--hub`, a clear refusal of a
//! directory the hub holds, leaving it untouched.

use std::process::{Command, Output};
use std::time::Duration;

use sluice_test_support::serde_json::{self, Value, json};
use sluice_test_support::{SluiceProcess, http, tempfile};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const SECRET: &str = "stream-admin-secret-0123456789abcdef";

/// The admin API on, with HMAC tokens signed by [`SECRET`].
const ADMIN_CONFIG: &str = "[auth.admin]\nalgorithms = [\"HS256\"]\n\
    keys = [{ type = \"hmac\", secret = \"stream-admin-secret-0123456789abcdef\" }]\n";

fn token(sluice: Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({ "sub": "ops", "exp": now + 600, "sluice": sluice }),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// `sluice stream <args>`, with `token` in `SLUICE_TOKEN` when given.
fn stream(args: &[&str], token: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command.arg("stream").args(args).env_remove("SLUICE_TOKEN");
    if let Some(token) = token {
        command.env("SLUICE_TOKEN", token);
    }
    command.output().expect("run sluice stream")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "sluice stream failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn publish_three(hub: &SluiceProcess) {
    for (n, topic) in ["a", "b", "a"].into_iter().enumerate() {
        let answer = http::post_json(
            &hub.url("/publish"),
            &json!({ "topic": topic, "payload": n }),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_commands_through_the_hub_print_what_they_print_on_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = SluiceProcess::serve(BIN, dir.path(), Some(ADMIN_CONFIG))
        .await
        .unwrap();
    publish_three(&hub).await;
    let url = hub.base_url();
    let admin = token(json!({ "admin": true }));
    let remote = |args: &[&str]| {
        let mut all = vec!["--hub", url.as_str()];
        all.extend_from_slice(args);
        stdout(&stream(&all, Some(&admin)))
    };
    assert_eq!(remote(&["ls"]).trim(), "sluice");
    let purged: Value =
        serde_json::from_str(&remote(&["purge", "sluice", "--subject", "b"])).unwrap();
    assert_eq!(purged, json!({ "purged": 1 }));
    let deleted: Value = serde_json::from_str(&remote(&["delete", "sluice", "1"])).unwrap();
    assert_eq!(deleted, json!({ "deleted": 1 }));
    let through_hub: Value = serde_json::from_str(&remote(&["info", "sluice"])).unwrap();
    assert_eq!(
        (
            &through_hub["messages"],
            &through_hub["first_seq"],
            &through_hub["last_seq"]
        ),
        (&json!(1), &json!(3), &json!(3)),
        "{through_hub}"
    );
    assert_eq!(through_hub["subjects"], json!({ "a": 1 }));

    hub.terminate(Duration::from_secs(10)).await.unwrap();
    let data = dir.path().join("data");
    let local = stdout(&stream(
        &["--data-dir", data.to_str().unwrap(), "info", "sluice"],
        None,
    ));
    let local: Value = serde_json::from_str(&local).unwrap();
    assert_eq!(local, through_hub, "the same report both ways");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_commands_through_the_hub_need_an_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, dir.path(), Some(ADMIN_CONFIG))
        .await
        .unwrap();
    let url = hub.base_url();
    let publisher = token(json!({ "publish": ">" }));
    for (token, status) in [(None, "401"), (Some(publisher.as_str()), "403")] {
        let out = stream(&["--hub", &url, "ls"], token);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(status) && stderr.contains("/admin/streams"),
            "{stderr}"
        );
    }
    let out = stream(&["--hub", &url, "repair", "sluice"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leave out --hub"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_commands_refuse_a_directory_a_running_hub_holds() {
    let dir = tempfile::tempdir().unwrap();
    let hub = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    publish_three(&hub).await;
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let before = sluice_test_support::files_under(dir.path().join("data").as_path());
    for args in [
        vec!["ls"],
        vec!["purge", "sluice"],
        vec!["delete", "sluice", "1"],
    ] {
        let mut all = vec!["--data-dir", data];
        all.extend(args.iter().copied());
        let out = stream(&all, None);
        assert!(!out.status.success(), "{args:?} ran on a held directory");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("held by a running hub") && stderr.contains("--hub"),
            "{stderr}"
        );
    }
    assert_eq!(
        sluice_test_support::files_under(dir.path().join("data").as_path()),
        before,
        "nothing in the directory changed"
    );
    // The hub still has every message.
    let answer = http::post_json(&hub.url("/publish"), &json!({ "topic": "a", "payload": 3 }))
        .await
        .unwrap();
    assert_eq!(answer.json().unwrap()["seq"], 4);
}

/// The quick start's hub with `SLUICE_ADMIN_LOOPBACK=true`: `sluice stream ls|info` on the same
/// machine work through `--hub` without a token, with `--hub` before or after the subcommand as
/// for `pub` and `sub`; without the setting the admin API stays off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_operator_administers_a_quick_start_hub_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap().to_owned();
    let mut hub = SluiceProcess::start_configured(BIN, ["serve", "--data-dir", &data], |command| {
        command.env("SLUICE_ADMIN_LOOPBACK", "true");
    })
    .await
    .unwrap();
    publish_three(&hub).await;
    let url = hub.base_url();
    assert_eq!(
        stdout(&stream(&["--hub", &url, "ls"], None)).trim(),
        "sluice"
    );
    let info: Value =
        serde_json::from_str(&stdout(&stream(&["info", "sluice", "--hub", &url], None))).unwrap();
    assert_eq!(info["messages"], 3, "{info}");
    hub.terminate(Duration::from_secs(10)).await.unwrap();

    let plain = SluiceProcess::serve(BIN, dir.path(), None).await.unwrap();
    let out = stream(&["ls", "--hub", &plain.base_url()], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("404") && stderr.contains("admin.loopback"),
        "{stderr}"
    );
}
