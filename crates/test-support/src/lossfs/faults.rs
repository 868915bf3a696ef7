//! I/O errors on demand: the next few operations of a kind on a matching path answer `EIO`.

/// The kind of operation a fault is injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    /// `write` (and `pwrite`): answers `EIO`, nothing written.
    Write,
    /// `fsync` and `fdatasync` of a file, and `fsync` of a directory: answers `EIO`, and what
    /// was pending on it is dropped from the durable future (it stays readable until a power
    /// loss; a later successful fsync does not make it durable).
    Fsync,
    /// `read`: answers `EIO`.
    Read,
    /// `rename`, matching the old or the new path: answers `EIO`, nothing renamed.
    Rename,
}

/// One armed fault.
#[derive(Clone, Debug)]
struct Fault {
    op: FaultOp,
    path_contains: String,
    times: u32,
}

/// The armed faults, in the order armed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    armed: Vec<Fault>,
}

impl Faults {
    /// Arms a fault for the next `times` operations of kind `op` on a path containing
    /// `path_contains` (a path is relative to the mount, `dir/file`).
    pub(crate) fn arm(&mut self, op: FaultOp, path_contains: &str, times: u32) {
        if times > 0 {
            self.armed.push(Fault {
                op,
                path_contains: path_contains.to_owned(),
                times,
            });
        }
    }

    /// Disarms every fault.
    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    /// Whether this operation fails: the first armed fault matching it is used once. `paths`
    /// are the operation's paths (a rename has two), computed only where a fault of this kind
    /// is armed.
    pub(crate) fn trips(&mut self, op: FaultOp, paths: impl FnOnce() -> Vec<String>) -> bool {
        if !self.armed.iter().any(|fault| fault.op == op) {
            return false;
        }
        let paths = paths();
        let Some(at) = self.armed.iter().position(|fault| {
            fault.op == op
                && paths
                    .iter()
                    .any(|path| path.contains(fault.path_contains.as_str()))
        }) else {
            return false;
        };
        if let Some(fault) = self.armed.get_mut(at) {
            fault.times -= 1;
            if fault.times == 0 {
                self.armed.remove(at);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_trips_the_given_number_of_times_on_matching_paths_only() {
        let mut faults = Faults::default();
        faults.arm(FaultOp::Fsync, "msgs/", 2);
        let path = |p: &str| {
            let p = p.to_owned();
            move || vec![p]
        };
        assert!(!faults.trips(FaultOp::Write, path("s/msgs/1")));
        assert!(!faults.trips(FaultOp::Fsync, path("s/meta")));
        assert!(faults.trips(FaultOp::Fsync, path("s/msgs/1")));
        assert!(faults.trips(FaultOp::Fsync, path("s/msgs/2")));
        assert!(!faults.trips(FaultOp::Fsync, path("s/msgs/3")));
    }

    #[test]
    fn zero_times_arms_nothing() {
        let mut faults = Faults::default();
        faults.arm(FaultOp::Read, "", 0);
        assert!(!faults.trips(FaultOp::Read, || vec!["f".to_owned()]));
    }
}
