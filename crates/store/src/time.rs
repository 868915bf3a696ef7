//! Time as the store keeps it: nanoseconds since the Unix epoch in an `i64` (record and index
//! timestamps, TTL expiries, schedule fire times), converted to `jiff::Timestamp` at the API.
//! A leaf: it imports nothing of the crate, so any module may use it.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Milliseconds on a clock that never goes back (since the process first asked).
pub fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A duration in ns, saturating at `i64::MAX`.
pub fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A timestamp from ns since the epoch.
pub fn timestamp(ns: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_nanosecond(ns as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}
