//! `limits.max_connections_per_address`: open connections counted per client IP.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections per client IP address.
#[derive(Debug)]
pub struct AddressCounts {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One counted connection; dropping it frees the place.
#[derive(Debug)]
pub struct AddressSlot {
    counts: Arc<AddressCounts>,
    ip: IpAddr,
}

impl AddressCounts {
    /// At most `max` connections per address (0: unlimited, nothing is counted).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: Mutex::default(),
        })
    }

    /// Counts a connection from `ip`: `Ok(None)` when unlimited, `Err(())` when `ip` already
    /// has `max` connections open.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<Option<AddressSlot>, ()> {
        if self.max == 0 {
            return Ok(None);
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= self.max {
            return Err(());
        }
        *count += 1;
        Ok(Some(AddressSlot {
            counts: self.clone(),
            ip,
        }))
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_frees_on_drop() {
        let counts = AddressCounts::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = counts.acquire(a).unwrap();
        let _second = counts.acquire(a).unwrap();
        assert!(counts.acquire(a).is_err(), "third from the same address");
        assert!(counts.acquire(b).unwrap().is_some(), "another address");
        drop(first);
        assert!(counts.acquire(a).is_ok(), "a place was freed");
    }

    #[test]
    fn zero_means_unlimited_and_uncounted() {
        let counts = AddressCounts::new(0);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..100 {
            assert!(counts.acquire(a).unwrap().is_none());
        }
        assert!(counts.open.lock().unwrap().is_empty());
    }
}
