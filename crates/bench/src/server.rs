//! What the hub costs: resident memory and CPU time of its process and every process under it
//! (nginx's master and workers), read from `/proc` when its pid is known, otherwise resident
//! memory from its `/metrics` when it exports `process_resident_memory_bytes`.
//!
//! The memory of a process is its own resident pages (`RssAnon + RssFile`, which for a process
//! without shared memory is its `VmRSS`) plus its proportional share of the shared memory it
//! has touched (`Pss_Shmem`): summed over the processes, memory they share (nchan's shared
//! zone) counts once.

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

    /// Resident memory in bytes of the hub's processes, if it can be read.
    pub async fn rss(&self) -> Option<u64> {
        match self.pid {
            Some(pid) => {
                let [hub, more @ ..] = &process_tree(pid)[..] else {
                    return None;
                };
                let rest: u64 = more.iter().filter_map(|&pid| memory_of(pid)).sum();
                Some(memory_of(*hub)? + rest)
            }
            None => self.rss_from_metrics().await,
        }
    }

    /// CPU time (user + system, all threads) of the hub's processes in seconds; only with a
    /// pid.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let [hub, more @ ..] = &process_tree(self.pid?)[..] else {
            return None;
        };
        let rest: f64 = more.iter().filter_map(|&pid| cpu_seconds_of(pid)).sum();
        Some(cpu_seconds_of(*hub)? + rest)
    }

    /// How many processes the hub is (its own and those under it); only with a pid.
    pub fn processes(&self) -> Option<u64> {
        let tree = process_tree(self.pid?);
        (!tree.is_empty()).then_some(tree.len() as u64)
    }

    /// What the hub's embedded store has done so far, from its `/metrics`: message batches
    /// written and fsyncs made; `None` for a hub that exports neither (nats-server behind it,
    /// another server).
    pub async fn store_writes(&self) -> Option<StoreWrites> {
        let text = self.metrics().await?;
        Some(StoreWrites {
            batches: metric_value(&text, "sluice_store_write_batches_total")? as u64,
            fsyncs: metric_value(&text, "sluice_store_fsyncs_total")? as u64,
        })
    }

    async fn metrics(&self) -> Option<String> {
        let request = self
            .target
            .request(hyper::Method::GET, "/metrics")
            .body(Full::<Bytes>::default())
            .ok()?;
        let (status, body) = fetch(&self.target, request, METRICS_TIMEOUT).await.ok()?;
        status
            .is_success()
            .then(|| String::from_utf8_lossy(&body).into_owned())
    }

    async fn rss_from_metrics(&self) -> Option<u64> {
        let text = self.metrics().await?;
        metric_value(&text, "process_resident_memory_bytes").map(|bytes| bytes as u64)
    }
}

/// `VmRSS` of process `pid` in bytes.
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

/// Process `pid` and every process under it, `pid` first; empty when `pid` does not run.
fn process_tree(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| {
            let child: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            Some((child, parse_parent(&stat)?))
        })
        .collect();
    descendants(pid, &parents)
}

/// `pid` (when it is among `parents`, as `(process, its parent)`) followed by every process
/// below it.
fn descendants(pid: u32, parents: &[(u32, u32)]) -> Vec<u32> {
    let mut tree = Vec::new();
    if parents.iter().any(|&(process, _)| process == pid) {
        tree.push(pid);
    }
    let mut next = 0;
    while let Some(&parent) = tree.get(next) {
        next += 1;
        tree.extend(
            parents
                .iter()
                .filter(|&&(process, of)| of == parent && process != parent)
                .map(|&(process, _)| process),
        );
    }
    tree
}

/// What process `pid` holds in memory, in bytes: its own resident pages and its share of the
/// shared memory it maps (read from `smaps_rollup` only when it has any).
fn memory_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    memory_in(&status, || {
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()
    })
}

/// [`memory_of`] a process whose `status` is given, reading its `smaps_rollup` if needed.
fn memory_in(status: &str, smaps_rollup: impl FnOnce() -> Option<String>) -> Option<u64> {
    let own = kib_field(status, "RssAnon:")? + kib_field(status, "RssFile:")?;
    let shared = match kib_field(status, "RssShmem:") {
        Some(0) | None => 0,
        Some(_) => kib_field(&smaps_rollup()?, "Pss_Shmem:")?,
    };
    Some((own + shared) * 1024)
}

/// User + system CPU time of process `pid` (all its threads) in seconds.
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_cpu_ticks(&stat)?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    Some(kib_field(status, "VmRSS:")? * 1024)
}

/// The value of the `<name> <n> kB` line of a `/proc` file, in KiB.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    let mut parts = line[name.len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    (parts.next()? == "kB").then_some(value)
}

/// The parent's pid in `/proc/<pid>/stat`: the second field after the command name.
fn parse_parent(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
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

/// Counts of the hub's embedded store at one moment.
#[derive(Debug, Clone, Copy)]
pub struct StoreWrites {
    /// Message batches written.
    pub batches: u64,
    /// fsyncs made.
    pub fsyncs: u64,
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
    fn reads_the_parent_after_a_command_name_with_spaces() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_parent(stat), Some(7));
        assert_eq!(parse_parent("42 (x)"), None);
    }

    #[test]
    fn a_tree_is_its_root_then_everything_below_it() {
        // 10 is nginx's master with workers 11 and 12; 13 is a helper under 12; 20 and 21
        // belong to someone else; 1 is init, its own parent in this table.
        let parents = [
            (1, 1),
            (10, 1),
            (11, 10),
            (12, 10),
            (13, 12),
            (20, 1),
            (21, 20),
        ];
        assert_eq!(descendants(10, &parents), [10, 11, 12, 13]);
        assert_eq!(descendants(11, &parents), [11]);
        assert_eq!(descendants(99, &parents), Vec::<u32>::new());
        assert_eq!(descendants(1, &parents).len(), parents.len());
    }

    #[test]
    fn memory_without_shared_memory_is_the_resident_set() {
        let status = "VmRSS:\t   12345 kB\nRssAnon:\t   10000 kB\nRssFile:\t    2345 kB\n\
                      RssShmem:\t       0 kB\n";
        let unread = || panic!("smaps_rollup is read only for shared memory");
        assert_eq!(memory_in(status, unread), parse_vm_rss(status));
        assert_eq!(memory_in("VmRSS:\t1 kB\n", unread), None);
    }

    #[test]
    fn shared_memory_counts_by_its_proportional_share() {
        // A worker that touched 8000 KiB of a zone it shares with another worker: 4000 KiB each.
        let status = "VmRSS:\t   18000 kB\nRssAnon:\t    9000 kB\nRssFile:\t    1000 kB\n\
                      RssShmem:\t    8000 kB\n";
        let rollup = "Rss:  18000 kB\nPss:  12000 kB\nPss_Shmem:  4000 kB\n";
        assert_eq!(
            memory_in(status, || Some(rollup.to_owned())),
            Some((9000 + 1000 + 4000) * 1024)
        );
        assert_eq!(memory_in(status, || None), None);
        let own = memory_of(std::process::id());
        assert!(own.is_some_and(|bytes| bytes > 0), "{own:?}");
    }

    #[test]
    fn a_probe_of_this_process_counts_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep starts");
        let target = Target::parse("http://127.0.0.1:9", crate::Protocol::Http1, None).unwrap();
        let probe = ServerProbe::new(Some(std::process::id()), target);
        let processes = probe.processes();
        let _ = child.kill();
        let _ = child.wait();
        assert!(processes.is_some_and(|n| n >= 2), "{processes:?}");
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
