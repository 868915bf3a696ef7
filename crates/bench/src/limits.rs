//! The kernel's limits on clients: one socket per client, so N clients need more than N
//! descriptors, and one local port each.

use anyhow::bail;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors beyond one per client: publishers, probes, the runtime, stdio.
pub const SPARE_FILES: u64 = 64;

/// Raises this process's soft open-file limit to its hard limit when `needed` descriptors do
/// not fit under the soft one, and returns the limit now in force.
///
/// # Errors
/// When even the hard limit is below `needed`, with what to do about it.
pub fn raise_open_files(needed: u64) -> anyhow::Result<u64> {
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= needed {
        return Ok(soft);
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    if hard < needed {
        bail!(
            "this many clients need {needed} open files but this process may open at most {hard} \
             (hard limit); raise it as root (`ulimit -Hn {needed}` or /etc/security/limits.conf) \
             or run fewer --clients"
        );
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
    .map_err(|err| anyhow::anyhow!("raising the open-file limit from {soft} to {hard}: {err}"))?;
    Ok(hard)
}

/// The soft open-file limit of process `pid`, from `/proc/<pid>/limits` (`None`: unlimited
/// or unreadable).
pub fn open_files_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_open_files(&text)
}

/// How many local ports the kernel hands out to connections (`net.ipv4.ip_local_port_range`,
/// which IPv6 shares); `None` when unreadable.
pub fn local_ports() -> Option<u64> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    parse_port_range(&range)
}

fn parse_port_range(range: &str) -> Option<u64> {
    let mut bounds = range.split_whitespace().map(str::parse::<u64>);
    let (low, high) = (bounds.next()?.ok()?, bounds.next()?.ok()?);
    (high >= low).then(|| high - low + 1)
}

fn parse_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_soft_limit_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             95162                95162                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_files(text), Some(1024));
        assert_eq!(
            parse_open_files("Max open files  unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn counts_the_local_port_range() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some(28232));
        assert_eq!(parse_port_range("1024 1024"), Some(1));
        assert_eq!(parse_port_range("2000 1000"), None);
        assert_eq!(parse_port_range("any"), None);
        assert!(local_ports().is_some_and(|ports| ports > 0));
    }

    #[test]
    fn own_limit_covers_a_small_need() {
        let limit = raise_open_files(SPARE_FILES).unwrap();
        assert!(limit >= SPARE_FILES);
        assert!(open_files_of(std::process::id()).is_some_and(|soft| soft >= SPARE_FILES));
    }
}
