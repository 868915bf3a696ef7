//! A small bounded cache of verified tokens, so that a client sending the same token thousands
//! of times has its signature verified once.
//!
//! - Keyed by the whole token text: a lookup compares every byte (the hash only picks the
//!   bucket), so a forged token that differs from a cached one in one byte is never a hit.
//! - Bounded: at most [`MAX_ENTRIES`] tokens of at most [`MAX_CACHED_TOKEN_BYTES`] each; a
//!   longer token is verified every time. When full, the cache is emptied (a client whose token
//!   was dropped pays one verification again).
//! - Time still applies: every hit re-checks the token's `exp` and `nbf` as the verifier does
//!   (with its leeway). An entry outside its window is removed and the token verified again,
//!   so an expired token is refused exactly as it would be without the cache.
//! - Only successes are stored; a refused token is verified again on every use.
//!
//! The cache belongs to one set of keys: whoever replaces the keys replaces the cache with
//! them, so a token signed by a removed key stops working at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::error::AuthError;
use sluice_core::metrics::{Counters, Metrics};

/// The most tokens one cache holds.
pub(crate) const MAX_ENTRIES: usize = 1024;

/// Tokens longer than this are verified on every use, never stored.
pub(crate) const MAX_CACHED_TOKEN_BYTES: usize = 4096;

/// When a verified token may be used: its `exp` and `nbf`, and the verifier's leeway.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TimeWindow {
    /// Not after this second (`exp` rounded down, so the cache never outlasts the verifier).
    not_after: Option<u64>,
    /// Not before this second (`nbf` rounded up).
    not_before: Option<u64>,
    leeway: u64,
}

impl TimeWindow {
    /// The window of a token with these `exp` and `nbf` claims (seconds since the epoch),
    /// checked with `leeway` as the verifier checks them.
    pub fn new(exp: Option<f64>, nbf: Option<f64>, leeway: Duration) -> Self {
        Self {
            not_after: exp.map(|exp| exp.floor() as u64),
            not_before: nbf.map(|nbf| nbf.ceil() as u64),
            leeway: leeway.as_secs(),
        }
    }

    /// Whether the verifier would still accept the token at `now` (`exp` not past and `nbf`
    /// reached, each within the leeway).
    fn contains(&self, now: SystemTime) -> bool {
        let now = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let expired = self
            .not_after
            .is_some_and(|exp| exp < now.saturating_sub(self.leeway));
        let early = self
            .not_before
            .is_some_and(|nbf| nbf > now.saturating_add(self.leeway));
        !expired && !early
    }
}

/// Verified tokens and what they granted (`V`), for one set of keys.
pub(crate) struct TokenCache<V> {
    entries: Mutex<HashMap<Box<str>, Cached<V>>>,
    /// `sluice_token_cache_lookups_total`, by result (`hit`, `miss`).
    lookups: Counters,
}

struct Cached<V> {
    value: V,
    window: TimeWindow,
}

impl<V: Clone> TokenCache<V> {
    /// An empty cache counting its lookups in `lookups`.
    pub fn new(lookups: Counters) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            lookups,
        }
    }

    /// What `token` grants: the cached value when the token was verified before and is still
    /// within its time window at `now`, else `verify`'s answer (stored when it is a success).
    pub fn get_or_verify(
        &self,
        token: &str,
        now: SystemTime,
        verify: impl FnOnce() -> Result<(V, TimeWindow), AuthError>,
    ) -> Result<V, AuthError> {
        if let Some(value) = self.fresh(token, now) {
            Metrics::count(&self.lookups, "result", "hit");
            return Ok(value);
        }
        // Not cached, no longer in its window, or too long to cache: verified.
        Metrics::count(&self.lookups, "result", "miss");
        let (value, window) = verify()?;
        self.store(token, &value, window);
        Ok(value)
    }

    /// The cached value of `token` if it is still in its window; an entry out of it is removed.
    fn fresh(&self, token: &str, now: SystemTime) -> Option<V> {
        if token.len() > MAX_CACHED_TOKEN_BYTES {
            return None;
        }
        let mut entries = self.lock();
        let cached = entries.get(token)?;
        if cached.window.contains(now) {
            return Some(cached.value.clone());
        }
        entries.remove(token);
        None
    }

    fn store(&self, token: &str, value: &V, window: TimeWindow) {
        if token.len() > MAX_CACHED_TOKEN_BYTES {
            return;
        }
        let mut entries = self.lock();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(token) {
            // Clear-on-full: no bookkeeping per hit, and tokens in use come back at once.
            entries.clear();
        }
        entries.insert(
            token.into(),
            Cached {
                value: value.clone(),
                window,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Cached<V>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const T0: u64 = 1_800_000_000;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn cache() -> TokenCache<u32> {
        TokenCache::new(Counters::default())
    }

    fn window(exp: Option<u64>, nbf: Option<u64>, leeway: u64) -> TimeWindow {
        TimeWindow::new(
            exp.map(|e| e as f64),
            nbf.map(|n| n as f64),
            Duration::from_secs(leeway),
        )
    }

    /// Looks `token` up at `now`, verifying to `value` valid in `window`; whether it verified.
    fn lookup(
        cache: &TokenCache<u32>,
        token: &str,
        now: u64,
        result: Result<(u32, TimeWindow), AuthError>,
    ) -> (Result<u32, AuthError>, bool) {
        let verified = Cell::new(false);
        let answer = cache.get_or_verify(token, at(now), || {
            verified.set(true);
            result
        });
        (answer, verified.get())
    }

    /// Stores `token`, valid in `window`, through a first lookup at `now`.
    fn warm(cache: &TokenCache<u32>, token: &str, now: u64, window: TimeWindow) {
        assert_eq!(lookup(cache, token, now, Ok((7, window))), (Ok(7), true));
    }

    fn hits(cache: &TokenCache<u32>) -> u64 {
        cache.lookups.get_or_create(&[("result", "hit")]).get()
    }

    #[test]
    fn a_token_is_verified_once_then_served_from_the_cache() {
        let cache = cache();
        let ok = || Ok((7, window(Some(T0 + 60), None, 0)));
        assert_eq!(lookup(&cache, "a.b.c", T0, ok()), (Ok(7), true));
        assert_eq!(lookup(&cache, "a.b.c", T0 + 1, ok()), (Ok(7), false));
        assert_eq!(hits(&cache), 1);
    }

    #[test]
    fn the_whole_token_is_compared() {
        let cache = cache();
        let ok = || Ok((7, window(None, None, 0)));
        assert_eq!(lookup(&cache, "a.b.c", T0, ok()), (Ok(7), true));
        for other in ["a.b.d", "a.b.c.", "a.b", "b.b.c"] {
            let refused = Err(AuthError::BadSignature);
            assert_eq!(
                lookup(&cache, other, T0, refused),
                (Err(AuthError::BadSignature), true),
                "{other}"
            );
        }
    }

    #[test]
    fn failures_are_not_cached() {
        let cache = cache();
        let refused = || Err(AuthError::BadSignature);
        let verified_and_refused = (Err(AuthError::BadSignature), true);
        assert_eq!(lookup(&cache, "x", T0, refused()), verified_and_refused);
        assert_eq!(lookup(&cache, "x", T0, refused()), verified_and_refused);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn an_entry_past_its_exp_is_verified_again() {
        let cache = cache();
        let exp = T0 + 10;
        let ok = || Ok((7, window(Some(exp), None, 2)));
        warm(&cache, "t", T0, window(Some(exp), None, 2));
        // Within the leeway the cached entry still serves, as the verifier would accept it.
        assert_eq!(lookup(&cache, "t", exp + 2, ok()), (Ok(7), false));
        let expired = Err(AuthError::Expired);
        assert_eq!(
            lookup(&cache, "t", exp + 3, expired),
            (Err(AuthError::Expired), true)
        );
        assert_eq!(cache.len(), 0, "the stale entry is gone");
    }

    #[test]
    fn an_entry_before_its_nbf_is_verified_again() {
        let cache = cache();
        let nbf = T0 + 10;
        warm(&cache, "t", nbf, window(None, Some(nbf), 1));
        assert_eq!(
            lookup(&cache, "t", nbf - 1, Ok((0, window(None, None, 0)))),
            (Ok(7), false)
        );
        let early = Err(AuthError::NotYetValid);
        assert_eq!(
            lookup(&cache, "t", nbf - 2, early),
            (Err(AuthError::NotYetValid), true),
            "a clock set back"
        );
    }

    #[test]
    fn fractional_times_never_stretch_the_window() {
        let w = TimeWindow::new(Some(100.9), Some(50.1), Duration::ZERO);
        assert!(w.contains(at(100)) && !w.contains(at(101)));
        assert!(w.contains(at(51)) && !w.contains(at(50)));
    }

    #[test]
    fn the_cache_is_bounded_in_entries_and_token_length() {
        let cache = cache();
        let ok = || Ok((7, window(None, None, 0)));
        for i in 0..MAX_ENTRIES {
            warm(&cache, &format!("token-{i}"), T0, window(None, None, 0));
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        warm(&cache, "one-more", T0, window(None, None, 0));
        assert_eq!(cache.len(), 1, "cleared when full, then the new one stored");
        assert_eq!(lookup(&cache, "one-more", T0, ok()), (Ok(7), false));

        let long = "x".repeat(MAX_CACHED_TOKEN_BYTES + 1);
        warm(&cache, &long, T0, window(None, None, 0));
        assert_eq!(
            lookup(&cache, &long, T0, ok()),
            (Ok(7), true),
            "verified every time"
        );
        let limit = "y".repeat(MAX_CACHED_TOKEN_BYTES);
        warm(&cache, &limit, T0, window(None, None, 0));
        assert_eq!(lookup(&cache, &limit, T0, ok()), (Ok(7), false));
    }
}
