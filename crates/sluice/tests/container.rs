//! The container image (packaging/container/Containerfile), built and run with a real podman:
//! publish and subscribe through a published port, as a non-root user, on a read-only root
//! file system, with the image's own health check; `podman kill -s KILL` and a new container
//! on the same volume lose and repeat nothing; `podman stop` drains the hub before its
//! timeout.
//!
//! No registry is reachable here, so the image is built by `packaging/container/build-offline`:
//! the Containerfile's `prebuilt` variant on a local base of the shared libraries the binary
//! links and the system's CA certificates (what the documented distroless base provides), with
//! the binary under test (`SLUICE_CONTAINER_BINARY`, else this build's `sluice`).
//!
//! podman runs as root with the vfs storage driver, runc and cgroupfs, and a containers.conf
//! without default rlimits (what these machines allow), each test in storage of its own.
//! Where podman cannot run the tests say so on stderr and pass, unless
//! `SLUICE_REQUIRE_PODMAN=1` (scripts/test sets it once it has checked that podman runs).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use sluice_test_support::serde_json::json;
use sluice_test_support::{SseClient, eventually_async, http, repo_root, tempfile};

const IMAGE: &str = "localhost/sluice-test:latest";

/// podman with storage of its own under a temporary directory; everything it ran is removed
/// when dropped.
struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    /// podman ready to run containers here, or why not.
    fn new() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|err| format!("no temp dir: {err}"))?;
        let root = dir.path();
        let settings = [
            (
                "containers.conf",
                "[containers]\ndefault_ulimits = []\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n"
                    .to_owned(),
            ),
            (
                "storage.conf",
                format!(
                    "[storage]\ndriver = \"vfs\"\ngraphroot = {:?}\nrunroot = {:?}\n",
                    root.join("storage").display().to_string(),
                    root.join("run").display().to_string()
                ),
            ),
        ];
        for (name, text) in settings {
            std::fs::write(root.join(name), text)
                .map_err(|err| format!("cannot write {name}: {err}"))?;
        }
        let podman = Self { dir };
        match podman.command(&["info"]).output() {
            Err(err) => Err(format!("podman cannot be run: {err}")),
            Ok(out) if !out.status.success() => Err(format!(
                "`podman info` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(_) => Ok(podman),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("podman");
        self.configure(&mut command).args(args);
        command
    }

    /// Points podman run by `command` at this test's settings and storage.
    fn configure<'a>(&self, command: &'a mut Command) -> &'a mut Command {
        let root = self.dir.path();
        command
            .env("CONTAINERS_CONF", root.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", root.join("storage.conf"))
    }

    /// Runs podman with `args`; its output, whatever the exit status.
    fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("podman runs")
    }

    /// Runs podman with `args`, which must succeed; its stdout, trimmed.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "podman {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Builds the image from the repository's Containerfile with
    /// `packaging/container/build-offline` (a local base, no registry).
    fn build_image(&self) {
        let binary = std::env::var_os("SLUICE_CONTAINER_BINARY").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_sluice")),
            PathBuf::from,
        );
        let mut command = Command::new(repo_root().join("packaging/container/build-offline"));
        self.configure(&mut command).arg(&binary).arg(IMAGE);
        run(&mut command);
    }

    /// Starts a container `name` of the image with `volume` at /data and its port published on
    /// loopback, with `extra` options; the hub's base URL once it is ready.
    async fn start(&self, name: &str, volume: &str, extra: &[&str]) -> String {
        let mount = format!("{volume}:/data");
        let mut args = vec![
            "run",
            "-d",
            "--name",
            name,
            "-p",
            "127.0.0.1::8080",
            "-v",
            &mount,
        ];
        args.extend_from_slice(extra);
        args.push(IMAGE);
        self.ok(&args);
        let port = self.ok(&["port", name, "8080"]);
        let url = format!("http://{port}");
        let readyz = format!("{url}/readyz");
        eventually_async(&format!("container {name} ready at {readyz}"), async || {
            http::get(&readyz)
                .await
                .is_ok_and(|answer| answer.status == 200)
        })
        .await;
        url
    }

    /// The container's exit code, once it has stopped.
    fn exit_code(&self, name: &str) -> String {
        self.ok(&["inspect", "--format", "{{.State.ExitCode}}", name])
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Nothing to remove where podman never ran: errors are ignored.
        let _ = self
            .command(&["rm", "--all", "--force", "--time", "0"])
            .output();
        let _ = self.command(&["volume", "prune", "--force"]).output();
    }
}

/// podman for a test, or `None` when it cannot run here (said on stderr), unless it must.
fn podman() -> Option<Podman> {
    match Podman::new() {
        Ok(podman) => {
            podman.build_image();
            Some(podman)
        }
        Err(why) if std::env::var("SLUICE_REQUIRE_PODMAN").as_deref() == Ok("1") => {
            panic!("SLUICE_REQUIRE_PODMAN=1 but {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED: the container image is not tested here: {why}");
            None
        }
    }
}

fn run(command: &mut Command) {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn publish(url: &str, n: u64) -> String {
    let answer = http::post_json(
        &format!("{url}/publish"),
        &json!({ "topic": "box.t", "payload": { "n": n } }),
    )
    .await
    .expect("publish");
    assert!(answer.status.is_success(), "{}", answer.text());
    answer.json().expect("JSON")["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

/// The ids of the next `count` messages of `client`.
async fn message_ids(client: &mut SseClient, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < count {
        let frame = client.next_event().await.expect("an event");
        if frame.event.as_deref() == Some("message") {
            ids.push(frame.id.expect("an id"));
        }
    }
    ids
}

/// Waits for the `connected` frame of a new stream.
async fn connected(url: &str) -> SseClient {
    let mut client = SseClient::connect(url).await.expect("subscribe");
    let frame = client.next_event().await.expect("connected");
    assert_eq!(frame.event.as_deref(), Some("connected"));
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_serves_through_a_published_port_as_non_root_on_a_read_only_root() {
    let Some(podman) = podman() else { return };
    let url = podman.start("hub", "box", &["--read-only"]).await;

    let mut client = connected(&format!("{url}/events?topic=box.t")).await;
    let id = publish(&url, 1).await;
    assert_eq!(message_ids(&mut client, 1).await, [id]);

    assert_eq!(
        podman.ok(&["image", "inspect", "--format", "{{.Config.User}}", IMAGE]),
        "65532:65532"
    );
    let pid = podman.ok(&["inspect", "--format", "{{.State.Pid}}", "hub"]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .expect("a Uid line");
    assert_eq!(uid, "65532", "the hub runs as the image's user, not root");

    // CA certificates for TLS to NATS, where the system's TLS roots are looked for.
    let certificates = podman.dir.path().join("ca-certificates.crt");
    podman.ok(&[
        "cp",
        "hub:/etc/ssl/certs/ca-certificates.crt",
        certificates.to_str().expect("a UTF-8 path"),
    ]);
    let bundle = std::fs::read_to_string(&certificates).expect("the bundle");
    assert!(bundle.contains("BEGIN CERTIFICATE"));

    // The image's own health check: the binary asks itself, no curl in the image.
    let health = podman.output(&["healthcheck", "run", "hub"]);
    assert!(
        health.status.success(),
        "{}",
        String::from_utf8_lossy(&health.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_container_resumes_losslessly_in_a_new_one_on_the_same_volume() {
    let Some(podman) = podman() else { return };
    let url = podman.start("first", "kept", &[]).await;
    let mut sent = Vec::new();
    for n in 0..50 {
        sent.push(publish(&url, n).await);
    }
    podman.ok(&["kill", "--signal", "KILL", "first"]);
    podman.ok(&["wait", "first"]);
    assert_eq!(podman.exit_code("first"), "137", "killed, not stopped");

    let url = podman.start("second", "kept", &[]).await;
    let mut replay = connected(&format!("{url}/events?topic=box.t&last-id=0")).await;
    assert_eq!(message_ids(&mut replay, sent.len()).await, sent);
    let mut resumed = connected(&format!("{url}/events?topic=box.t&last-id={}", sent[24])).await;
    let next = publish(&url, 50).await;
    assert!(!sent.contains(&next), "a new id, not one handed out before");
    sent.push(next);
    assert_eq!(message_ids(&mut resumed, 26).await, sent[25..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_stop_drains_the_hub_before_its_timeout() {
    let Some(podman) = podman() else { return };
    let url = podman.start("hub", "box", &[]).await;
    let mut client = connected(&format!("{url}/events?topic=box.t")).await;
    client.set_timeout(Duration::from_secs(120));

    // A hub that ignored SIGTERM would be killed when the 100 s run out (exit code 137).
    podman.ok(&["stop", "--time", "100", "hub"]);
    assert_eq!(podman.exit_code("hub"), "0", "ended by its own drain");
    // The stream ends between frames, as a drain ends it: the browser reconnects and resumes.
    client
        .frames_until_end()
        .await
        .expect("the stream ends cleanly");
    let logs = podman.output(&["logs", "hub"]);
    let said = String::from_utf8_lossy(&logs.stderr);
    assert!(said.contains("SIGTERM received"), "{said}");
}
