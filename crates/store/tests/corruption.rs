//! Damaged files on open: flip, truncate or append random bytes in block, index and sidecar
//! files, reopen, and check that nothing is panicking, nothing before the damage is lost and
//! every loss is reported.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use sluice_store::{Headers, RecoveryPath, Store, StoreError, StoreOptions, StreamConfig};

const MSGS: u64 = 150;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn payload(seq: u64) -> String {
    format!("payload-{seq:06}-{}", "x".repeat((seq % 40) as usize))
}

fn opts() -> StoreOptions {
    StoreOptions {
        block_size: 2048,
        ..StoreOptions::default()
    }
}

/// A stream of MSGS messages over many small blocks, closed cleanly.
fn pristine() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (store, _) = Store::open(dir.path(), opts()).unwrap();
    let cfg = StreamConfig {
        allow_msg_ttl: true,
        allow_msg_schedules: true,
        ..StreamConfig::new("C", ["c.*"])
    };
    let s = store.create_stream(cfg).unwrap();
    rt.block_on(async {
        for seq in 1..=MSGS {
            let mut h = Headers::new();
            if seq % 7 == 0 {
                h.insert("Nats-TTL", "1h");
            }
            if seq == 50 {
                h.insert("Nats-Stream-Source", "ORIGIN 9 > > c.x ident");
                s.publish_internal("c.1", h, payload(seq)).await.unwrap();
            } else if seq == 60 {
                h.insert("Nats-Schedule", "@at 2099-01-01T00:00:00Z");
                h.insert("Nats-Schedule-Target", "c.0");
                s.publish("c.2", h, payload(seq)).await.unwrap();
            } else {
                s.publish(format!("c.{}", seq % 3), h, payload(seq))
                    .await
                    .unwrap();
            }
        }
    });
    store.close();
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// For each block file: seq → (start, end) of its payload bytes.
fn locate(msgs: &Path) -> BTreeMap<PathBuf, BTreeMap<u64, (usize, usize)>> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(msgs).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "blk") {
            let data = fs::read(&path).unwrap();
            let mut found = BTreeMap::new();
            for seq in 1..=MSGS {
                let p = payload(seq);
                if let Some(i) = data.windows(p.len()).position(|w| w == p.as_bytes()) {
                    found.insert(seq, (i, i + p.len()));
                }
            }
            out.insert(path, found);
        }
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip,
    Truncate,
    Append,
}

fn damage(path: &Path, how: Damage, rng: &mut Rng) -> usize {
    let mut data = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let at = rng.below(data.len() as u64) as usize;
    match how {
        Damage::Flip => data[at] ^= 1 << rng.below(8),
        Damage::Truncate => data.truncate(at),
        Damage::Append => {
            let n = 1 + rng.below(300);
            data.extend((0..n).map(|_| rng.next() as u8));
        }
    }
    fs::write(path, &data).unwrap();
    match how {
        Damage::Append => data.len(),
        _ => at,
    }
}

#[test]
fn random_damage_never_loses_what_came_before_and_reports_losses() {
    let base = pristine();
    let msgs_dir = base.path().join("streams/C/msgs");
    let layout = locate(&msgs_dir);
    let last_block = layout.keys().max_by_key(|p| {
        p.file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u32>().ok())
    });
    assert!(layout.len() > 4, "the test needs several blocks");
    // A fixed seed keeps failures reproducible; SLUICE_CORRUPTION_SEED explores others.
    let seed = std::env::var("SLUICE_CORRUPTION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_0001);
    let mut rng = Rng(seed);
    let (mut truncations, mut losses, mut warnings) = (0, 0, 0);
    for round in 0..60u64 {
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let msgs = work.path().join("streams/C/msgs");
        if round % 2 == 0 {
            // Half the rounds without index.db: recovery must rebuild from the blocks.
            fs::remove_file(msgs.join("index.db")).unwrap();
        }
        let how = [Damage::Flip, Damage::Truncate, Damage::Append][rng.below(3) as usize];
        let target = match rng.below(6) {
            0 if round % 2 == 1 => msgs.join("index.db"),
            1 => msgs.join("thw.db"),
            2 => msgs.join("sched.db"),
            3 => work.path().join("streams/C/sources.db"),
            _ => {
                let blocks: Vec<&PathBuf> = layout.keys().collect();
                msgs.join(
                    blocks[rng.below(blocks.len() as u64) as usize]
                        .file_name()
                        .unwrap(),
                )
            }
        };
        let at = damage(&target, how, &mut rng);
        let (store, reports) = Store::open(work.path(), opts())
            .unwrap_or_else(|e| panic!("round {round}: open failed: {e}"));
        let report = &reports[0];
        let s = store.stream("C").unwrap();
        let damaged_block = layout.keys().find(|p| p.file_name() == target.file_name());
        for (block, seqs) in &layout {
            for (&seq, &(start, end)) in seqs {
                let got = s.get(seq);
                let before_damage = Some(block) != damaged_block || end + 8 <= at;
                match got {
                    Ok(Some(m)) => {
                        assert_eq!(m.payload, payload(seq), "round {round}: seq {seq} changed")
                    }
                    Ok(None) => {
                        assert!(
                            !before_damage,
                            "round {round} {how:?} {target:?}@{at}: seq {seq} (payload {start}..{end}) lost before the damage"
                        );
                        // Cutting the end off the last block with no index.db leaves no trace of
                        // what was there (like a crash before the write): nothing can report it.
                        let traceless = round % 2 == 0
                            && matches!(how, Damage::Truncate)
                            && Some(block) == last_block;
                        assert!(
                            traceless || report.lost.iter().any(|r| r.contains(&seq)),
                            "round {round}: seq {seq} lost but not reported: {report:?}"
                        );
                    }
                    Err(StoreError::Corrupt { .. }) => {
                        assert!(
                            !before_damage && report.path == RecoveryPath::Index,
                            "round {round}: seq {seq} unreadable"
                        );
                    }
                    Err(e) => panic!("round {round}: seq {seq}: {e}"),
                }
            }
        }
        let name = target.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".db") && name != "index.db" {
            assert!(
                report.warnings.iter().any(|w| w.contains(&name)),
                "round {round}: damaged {name} not reported: {report:?}"
            );
        }
        if damaged_block.is_none() || !report.lost.iter().any(|r| r.contains(&50)) {
            // The source position survives any sidecar damage: the scan rebuilds it.
            assert_eq!(
                s.source_positions().get("ORIGIN > >").map(|p| p.seq),
                Some(9),
                "round {round}: {report:?}"
            );
        }
        if target.file_name().is_some_and(|n| n == "index.db") {
            assert_eq!(
                report.path,
                RecoveryPath::Rebuild,
                "round {round}: a damaged index.db must not be trusted"
            );
            assert!(!report.warnings.is_empty());
        }
        truncations += report.truncated.len();
        losses += report.lost.len();
        warnings += report.warnings.len();
        store.close();
    }
    // The rounds really exercised the damage paths.
    assert!(
        truncations > 5 && losses > 3 && warnings > 10,
        "{truncations} {losses} {warnings}"
    );
}
