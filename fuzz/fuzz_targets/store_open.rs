//! A whole stream directory: `Store::open` never panics and never allocates from what a file
//! claims; a stream that loads gives every message from sequence 1 to its last through
//! `next_matching` and a subscription alike (stepping over lost positions), each one the
//! message published at its sequence unless the input forged records; `info` works; a message
//! published after open takes a sequence past every one read (and past every one the
//! template used while its lease survives) and reads back; close works.
//!
//! Input: ops on a real stream directory the store writes first (`Template`: three blocks,
//! index.db, lost.db, lease.db, thw.db, sched.db, meta.inf/meta.sum/meta.bak), read by
//! `sluice_store::fuzzing::ops_from_bytes` (capped at 64 KiB): per op a byte (`op = b >> 5`:
//! delete, replace, replace with a valid xxh3 trailer, validly checksummed records from a
//! description, XOR at an offset, truncate, zero a range, append; file = `b & 31`) and its
//! arguments. The body is `sluice_store::fuzzing::open_mutated`, which
//! `crates/store/tests/open_fuzzed_dirs.rs` also runs over deterministic mutations.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_store::fuzzing::{Template, open_mutated, ops_from_bytes};

/// Scratch directories on tmpfs where there is one: recovery fsyncs what it writes.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    match shm.is_dir() {
        true => tempfile::tempdir_in(shm),
        false => tempfile::tempdir(),
    }
    .expect("scratch directory")
}

fn template() -> &'static Template {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    TEMPLATE.get_or_init(|| Template::build(scratch().path()))
}

fuzz_target!(|data: &[u8]| {
    let ops = ops_from_bytes(data);
    let dir = scratch();
    open_mutated(dir.path(), template(), &ops);
});
