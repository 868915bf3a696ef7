//! What the hub process costs: resident memory and CPU time, read from `/proc/<pid>` when its
//! pid is known, otherwise resident memory from its `/metrics` when it exports
//! `process_resident_memory_bytes`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use crate::http::{Target, fetch};

/// How long a `/metrics` read may take.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads the hub's resource use.
#[derive(Debug, Clone)]
pub struct ServerProbe {
    pid: Option<u32>,
    target: Target,
}

impl ServerProbe {
    /// A probe of process `pid` if given, else of the hub's `/metrics`.
    pub fn new(pid: Option<u32>, target: Target) -> Self {
        Self { pid, target }
    }

    /// The hub's pid, when given.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Resident memory in bytes, if it can be read.
    pub async fn rss(&self) -> Option<u64> {
        match self.pid {
            Some(pid) => rss_of(pid),
            None => self.rss_from_metrics().await,
        }
    }

    /// CPU time (user + system, all threads) in seconds; only with a pid.
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds_of(self.pid?)
    }

    async fn rss_from_metrics(&self) -> Option<u64> {
        let request = self
            .target
            .request(hyper::Method::GET, "/metrics")
            .body(Full::<Bytes>::default())
            .ok()?;
        let (status, body) = fetch(&self.target, request, METRICS_TIMEOUT).await.ok()?;
        if !status.is_success() {
            return None;
        }
        metric_value(
            &String::from_utf8_lossy(&body),
            "process_resident_memory_bytes",
        )
        .map(|bytes| bytes as u64)
    }
}

/// `VmRSS` of process `pid` in bytes.
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

/// User + system CPU time of process `pid` (all its threads) in seconds.
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_cpu_ticks(&stat)?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    (parts.next()? == "kB").then_some(value * 1024)
}

/// `utime + stime` from `/proc/<pid>/stat`; the fields are counted after the command name,
/// which is in parentheses and may itself contain spaces and parentheses.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The value of an unlabelled sample `name` in Prometheus text.
fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|value| value.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vm_rss_in_bytes() {
        let status = "Name:\tsluice\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn reads_cpu_ticks_after_a_command_name_with_spaces() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(320));
    }

    #[test]
    fn own_process_has_rss_and_cpu_time() {
        let pid = std::process::id();
        assert!(rss_of(pid).is_some_and(|rss| rss > 0));
        assert!(cpu_seconds_of(pid).is_some());
    }

    #[test]
    fn finds_unlabelled_metric_samples() {
        let text = "# HELP process_resident_memory_bytes x\nprocess_resident_memory_bytes_extra 1\n\
                    process_resident_memory_bytes 4.5e7\n";
        assert_eq!(
            metric_value(text, "process_resident_memory_bytes"),
            Some(4.5e7)
        );
        assert_eq!(metric_value(text, "absent"), None);
    }
}
