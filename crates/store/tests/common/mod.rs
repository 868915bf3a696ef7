//! What the kill -9 tests share: running one test of the same binary as a child process.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the test named `child` of this test binary as a child process, with the environment
/// variable `env` set to `dir`; hands the rest of every stdout line starting with `prefix` to
/// `on_line`, and kills the child (SIGKILL) after `kill_after` such lines. Returns how many it
/// saw (fewer than `kill_after` when the child stopped early).
pub fn run_child_until_killed(
    child: &str,
    env: &str,
    dir: &Path,
    prefix: &str,
    kill_after: u64,
    mut on_line: impl FnMut(&str),
) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut process = Command::new(&exe)
        .args(["--exact", child, "--nocapture", "--test-threads", "1"])
        .env(env, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(process.stdout.take().unwrap());
    let mut seen = 0;
    for line in stdout.lines() {
        if let Some(rest) = line.unwrap().strip_prefix(prefix) {
            on_line(rest);
            seen += 1;
            if seen >= kill_after {
                break;
            }
        }
    }
    process.kill().unwrap();
    process.wait().unwrap();
    seen
}
