//! Opening damaged stream directories never panics: a few thousand deterministic mutations
//! of a real stream directory (flipped and zeroed bytes, cuts, deleted files, random bytes,
//! and files that verify but say what the store never wrote) each open cleanly or fail with
//! an error, and every message a reader is given is the one published at its sequence. The
//! body is the `store_open` fuzz target's (`sluice_store::fuzzing`).

use std::path::{Path, PathBuf};

use sluice_store::fuzzing::{
    FILES, Op, Template, open_mutated, ops_from_bytes, ops_to_bytes, seeds,
};

/// xorshift64*: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Scratch directories on tmpfs where there is one: recovery fsyncs what it writes.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// One to four mutations of the kinds damage takes on disk.
fn mutation(rng: &mut Rng, template: &Template) -> Vec<Op> {
    let blocks: Vec<usize> = (0..FILES.len())
        .filter(|f| FILES[*f].ends_with(".blk"))
        .collect();
    (0..1 + rng.below(4))
        .map(|_| {
            // Half the mutations hit a block: that is where most of the bytes are.
            let file = if rng.below(2) == 0 {
                blocks[rng.below(blocks.len())]
            } else {
                rng.below(FILES.len())
            };
            let len = template.files[file].as_ref().map_or(0, Vec::len);
            let at = rng.below(len);
            match rng.below(10) {
                0 => Op::Delete(file),
                1 => Op::Truncate(file, rng.below(len + 1)),
                2 => Op::Zero(file, at, 1 + rng.below(64)),
                3 => {
                    let n = rng.below(64);
                    Op::Replace(file, rng.bytes(n))
                }
                4 => {
                    let n = 1 + rng.below(16);
                    Op::Append(file, rng.bytes(n))
                }
                5 => {
                    let n = 1 + rng.below(8);
                    Op::Xor(file, at, rng.bytes(n))
                }
                _ => Op::Xor(file, at, vec![1 << rng.below(8)]),
            }
        })
        .collect()
}

#[test]
fn mutated_stream_directories_open_cleanly_and_give_only_what_was_published() {
    let built = scratch();
    let template = Template::build(built.path());
    assert!(
        FILES
            .iter()
            .zip(&template.files)
            .all(|(name, f)| f.is_some() || *name == "sources.db"),
        "the template has every file but sources.db"
    );
    let root = scratch();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut loaded, mut refused, mut published) = (0, 0, 0);
    let runs = 3000;
    for i in 0..runs {
        let ops = if i % 4 == 3 {
            // Raw op bytes, as the fuzz target reads them: forged records and signed files.
            let n = 1 + rng.below(200);
            ops_from_bytes(&rng.bytes(n))
        } else {
            mutation(&mut rng, &template)
        };
        let dir: PathBuf = root.path().join(i.to_string());
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open_mutated(&dir, &template, &ops)
        }))
        .unwrap_or_else(|_| panic!("run {i} panicked on {ops:?}"));
        std::fs::remove_dir_all(&dir).unwrap();
        if opened.loaded {
            loaded += 1;
        } else {
            assert!(
                opened.error.is_none(),
                "run {i}: {:?} on {ops:?}",
                opened.error
            );
            refused += 1;
        }
        published += usize::from(opened.published.is_some());
    }
    eprintln!("{runs} runs: {loaded} loaded, {refused} refused, {published} published after open");
    assert!(
        loaded > runs / 2,
        "most mutations leave a stream that loads"
    );
}

/// The `store_open` seeds (sluice_store::fuzzing::seeds): damage an operator meets, and files
/// that verify but name what the store never wrote (sequences at the top of the range in a
/// record, a marker, the lease or lost.db; a marker claiming a billion sequences). Each opens
/// or is refused, never hands out a sequence past `u64::MAX`, and costs what its files hold.
/// The committed corpus is these seeds (`SLUICE_BLESS=1` rewrites it).
#[test]
fn the_seeds_open_cleanly_and_match_the_corpus() {
    let built = scratch();
    let template = Template::build(built.path());
    let root = scratch();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/store_open");
    let bless = std::env::var_os("SLUICE_BLESS").is_some();
    for (name, ops) in seeds(&template) {
        let dir = root.path().join(&name);
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open_mutated(&dir, &template, &ops)
        }))
        .unwrap_or_else(|_| panic!("seed {name} panicked on {ops:?}"));
        assert!(opened.error.is_none(), "seed {name}: {:?}", opened.error);
        assert_eq!(
            ops_from_bytes(&ops_to_bytes(&ops)),
            ops,
            "seed {name} round-trips"
        );
        let path = corpus.join(&name);
        if bless {
            std::fs::create_dir_all(&corpus).unwrap();
            std::fs::write(&path, ops_to_bytes(&ops)).unwrap();
        } else {
            let committed = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (SLUICE_BLESS=1 writes it)", path.display()));
            assert_eq!(
                committed,
                ops_to_bytes(&ops),
                "seed {name} changed: SLUICE_BLESS=1"
            );
        }
    }
}
