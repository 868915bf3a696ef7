//! Waiting for a condition that no event announces (a background expiry, a counter updated
//! after an answer): polled, with a deadline.

use std::time::Duration;

/// How long [`eventually`] waits before failing.
const EVENTUALLY: Duration = Duration::from_secs(20);

/// Polls `ok` until it holds; panics naming `what` after 20 seconds (`EVENTUALLY`).
pub async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    eventually_async(what, async || ok()).await;
}

/// [`eventually`] for a condition that must itself wait (an HTTP probe, a server request).
pub async fn eventually_async(what: &str, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !ok().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Returns once the wall clock reads past `at`. For rules about wall-clock time (a replay
/// window, a schedule's fire time), the one case where a test waits on the clock: stored times
/// come from the wall clock, which tokio's timer does not follow, so it sleeps until that
/// instant, and again only if the clock lagged.
pub async fn wall_clock_passes(at: std::time::SystemTime) {
    loop {
        let now = std::time::SystemTime::now();
        if now > at {
            return;
        }
        let left = at.duration_since(now).unwrap_or_default();
        tokio::time::sleep(left + Duration::from_millis(1)).await;
    }
}
