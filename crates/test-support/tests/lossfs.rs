//! The power-loss file system through real system calls on a real mount: what survives a loss,
//! torn and reordered writes, injected errors, locks, and reads after a loss. Each test is
//! skipped, saying so, where FUSE cannot be mounted (not root, no `/dev/fuse`).

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use sluice_test_support::lossfs::{FaultOp, Loss, LossFs};

const EIO: i32 = 5;

/// Fsyncs a directory: makes its entries durable.
fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

/// Creates `path` with `data`, fsynced (its name is not durable until its directory is).
fn write_synced(path: &Path, data: &[u8]) {
    let mut file = File::create(path).unwrap();
    file.write_all(data).unwrap();
    file.sync_all().unwrap();
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn is_eio(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(EIO)
}

#[test]
fn data_written_without_fsync_is_gone_after_drop_all() {
    let Some(fs) = LossFs::mount("data_written_without_fsync_is_gone_after_drop_all") else {
        return;
    };
    let path = fs.path().join("log");
    let mut file = File::create(&path).unwrap();
    sync_dir(fs.path());
    file.write_all(b"not fsynced").unwrap();
    drop(file);
    assert_eq!(fs::read(&path).unwrap(), b"not fsynced");
    assert_eq!(fs.unsynced().bytes, 11);

    let report = fs.power_loss(Loss::DropAll);

    assert_eq!(report.bytes_dropped, 11);
    assert_eq!(report.writes_dropped, 1);
    assert_eq!(
        fs::read(&path).unwrap(),
        b"",
        "the name was durable, the data not"
    );
    assert_eq!(fs.unsynced(), Default::default());
}

#[test]
fn settled_writes_and_names_survive_without_fsync() {
    let Some(fs) = LossFs::mount("settled_writes_and_names_survive_without_fsync") else {
        return;
    };
    fs::create_dir_all(fs.path().join("a/b")).unwrap();
    fs::write(fs.path().join("a/b/log"), b"written, never fsynced").unwrap();
    assert!(fs.unsynced().bytes > 0 && fs.unsynced().dir_changes > 0);

    fs.settle();

    assert_eq!(fs.unsynced(), Default::default());
    let report = fs.power_loss(Loss::DropAll);
    assert_eq!(report, Default::default(), "nothing was pending");
    assert_eq!(
        fs::read(fs.path().join("a/b/log")).unwrap(),
        b"written, never fsynced"
    );
}

#[test]
fn fsynced_data_survives() {
    let Some(fs) = LossFs::mount("fsynced_data_survives") else {
        return;
    };
    let path = fs.path().join("log");
    write_synced(&path, b"acknowledged");
    sync_dir(fs.path());

    let report = fs.power_loss(Loss::DropAll);

    assert_eq!(report, Default::default(), "nothing was pending");
    assert_eq!(fs::read(&path).unwrap(), b"acknowledged");
    assert_eq!(fs::metadata(&path).unwrap().len(), 12);
}

#[test]
fn a_file_fsynced_in_a_directory_never_fsynced_is_gone() {
    let Some(fs) = LossFs::mount("a_file_fsynced_in_a_directory_never_fsynced_is_gone") else {
        return;
    };
    let dir = fs.path().join("msgs");
    fs::create_dir(&dir).unwrap();
    sync_dir(fs.path());
    write_synced(&dir.join("0001"), b"block");

    let report = fs.power_loss(Loss::DropAll);

    assert!(dir.is_dir(), "the directory's own name was durable");
    assert_eq!(names(&dir), Vec::<String>::new());
    assert_eq!(
        fs::read(dir.join("0001")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(report.inodes_lost, 1);
}

#[test]
fn a_file_survives_once_its_directory_is_fsynced() {
    let Some(fs) = LossFs::mount("a_file_survives_once_its_directory_is_fsynced") else {
        return;
    };
    let dir = fs.path().join("msgs");
    fs::create_dir(&dir).unwrap();
    sync_dir(fs.path());
    write_synced(&dir.join("0001"), b"block");
    sync_dir(&dir);

    fs.power_loss(Loss::DropAll);

    assert_eq!(fs::read(dir.join("0001")).unwrap(), b"block");
}

#[test]
fn mkdir_without_parent_fsync_is_gone_with_everything_inside() {
    let Some(fs) = LossFs::mount("mkdir_without_parent_fsync_is_gone_with_everything_inside")
    else {
        return;
    };
    // The bug this is for: `streams/<name>/msgs/` made without fsyncing the parents.
    let msgs = fs.path().join("streams/orders/msgs");
    fs::create_dir_all(&msgs).unwrap();
    write_synced(&msgs.join("0001"), b"block");
    sync_dir(&msgs);
    sync_dir(&fs.path().join("streams/orders"));
    sync_dir(&fs.path().join("streams"));
    // Not the root: `streams` itself is not durable.

    let report = fs.power_loss(Loss::DropAll);

    assert_eq!(names(fs.path()), Vec::<String>::new());
    assert_eq!(report.inodes_lost, 4, "streams, orders, msgs and the block");

    // With every parent fsynced, all of it survives.
    fs::create_dir_all(&msgs).unwrap();
    write_synced(&msgs.join("0001"), b"block");
    for dir in ["streams/orders/msgs", "streams/orders", "streams", ""] {
        sync_dir(&fs.path().join(dir));
    }
    fs.power_loss(Loss::DropAll);
    assert_eq!(fs::read(msgs.join("0001")).unwrap(), b"block");
}

#[test]
fn rename_over_a_file_without_directory_fsync_keeps_the_old_content() {
    let Some(fs) =
        LossFs::mount("rename_over_a_file_without_directory_fsync_keeps_the_old_content")
    else {
        return;
    };
    let meta = fs.path().join("meta");
    let tmp = fs.path().join("meta.tmp");
    write_synced(&meta, b"old");
    sync_dir(fs.path());
    write_synced(&tmp, b"new");
    fs::rename(&tmp, &meta).unwrap();
    assert_eq!(fs::read(&meta).unwrap(), b"new");

    fs.power_loss(Loss::DropAll);

    assert_eq!(fs::read(&meta).unwrap(), b"old");
    assert_eq!(names(fs.path()), ["meta"]);

    // With the directory fsynced after the rename, the new content is what survives.
    write_synced(&tmp, b"new");
    fs::rename(&tmp, &meta).unwrap();
    sync_dir(fs.path());
    fs.power_loss(Loss::DropAll);
    assert_eq!(fs::read(&meta).unwrap(), b"new");
    assert_eq!(names(fs.path()), ["meta"]);
}

#[test]
fn rename_noreplace_refuses_an_existing_name() {
    let Some(fs) = LossFs::mount("rename_noreplace_refuses_an_existing_name") else {
        return;
    };
    let (a, b) = (fs.path().join("a"), fs.path().join("b"));
    fs::write(&a, b"a").unwrap();
    fs::write(&b, b"b").unwrap();
    let cwd = rustix::fs::CWD;
    let err = rustix::fs::renameat_with(cwd, &a, cwd, &b, rustix::fs::RenameFlags::NOREPLACE)
        .unwrap_err();
    assert_eq!(err, rustix::io::Errno::EXIST);
    assert_eq!(fs::read(&b).unwrap(), b"b");
    fs::remove_file(&b).unwrap();
    rustix::fs::renameat_with(cwd, &a, cwd, &b, rustix::fs::RenameFlags::NOREPLACE).unwrap();
    assert_eq!(fs::read(&b).unwrap(), b"a");
}

/// Bytes that differ from their neighbours and from zero, so a misplaced or invented byte shows.
fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ salt | 1)
        .collect::<Vec<u8>>()
}

#[test]
fn torn_keeps_a_prefix_ending_on_a_boundary() {
    let Some(fs) = LossFs::mount("torn_keeps_a_prefix_ending_on_a_boundary") else {
        return;
    };
    let path = fs.path().join("log");
    File::create(&path).unwrap();
    sync_dir(fs.path());
    let data = pattern(8192, 0x40);
    let mut torn = 0;
    for seed in 0..32 {
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(0).unwrap();
        file.sync_all().unwrap();
        file.write_all_at(&data, 0).unwrap();
        drop(file);

        let report = fs.power_loss(Loss::Torn {
            boundary: 512,
            seed,
        });

        let kept = fs::read(&path).unwrap();
        assert!(data.starts_with(&kept), "seed {seed}: not a prefix");
        assert_eq!(
            kept.len() % 512,
            0,
            "seed {seed}: {} bytes kept",
            kept.len()
        );
        if !kept.is_empty() && kept.len() < data.len() {
            torn += 1;
            assert_eq!(report.writes_torn, 1);
            assert_eq!(report.bytes_dropped, (data.len() - kept.len()) as u64);
        }
    }
    assert!(torn > 0, "no seed tore the write");
}

#[test]
fn reorder_can_keep_a_later_write_while_dropping_an_earlier_one() {
    let Some(fs) = LossFs::mount("reorder_can_keep_a_later_write_while_dropping_an_earlier_one")
    else {
        return;
    };
    let path = fs.path().join("log");
    File::create(&path).unwrap();
    sync_dir(fs.path());
    let (first, second) = (pattern(512, 0x10), pattern(512, 0x20));
    let zeros = vec![0u8; 512];
    let mut later_only = None;
    for seed in 0..32 {
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(0).unwrap();
        file.sync_all().unwrap();
        file.write_all_at(&first, 0).unwrap();
        file.write_all_at(&second, 512).unwrap();
        drop(file);

        fs.power_loss(Loss::Reorder {
            boundary: 512,
            seed,
        });

        let kept = fs::read(&path).unwrap();
        let blocks: Vec<&[u8]> = kept.chunks(512).collect();
        match blocks.as_slice() {
            [] => {}
            [a] => assert_eq!(*a, &first[..], "seed {seed}"),
            [a, b] => {
                assert!(*a == &first[..] || *a == &zeros[..], "seed {seed}");
                assert_eq!(*b, &second[..], "seed {seed}");
                if *a == &zeros[..] {
                    later_only.get_or_insert(seed);
                }
            }
            _ => panic!("seed {seed}: {} bytes", kept.len()),
        }
    }
    assert!(
        later_only.is_some(),
        "no seed kept the later write without the earlier one"
    );
}

#[test]
fn injected_write_errors_answer_eio_and_change_nothing() {
    let Some(fs) = LossFs::mount("injected_write_errors_answer_eio_and_change_nothing") else {
        return;
    };
    let path = fs.path().join("victim");
    let file = File::create(&path).unwrap();
    fs.fail(FaultOp::Write, "other", 1);
    fs.fail(FaultOp::Write, "vict", 1);
    assert!(is_eio(&file.write_at(b"lost", 0).unwrap_err()));
    assert_eq!(fs::read(&path).unwrap(), b"");
    file.write_all_at(b"kept", 0).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"kept");
    // The fault on "other" is still armed, and only there.
    let other = File::create(fs.path().join("other")).unwrap();
    assert!(is_eio(&other.write_at(b"x", 0).unwrap_err()));
}

#[test]
fn injected_read_errors_answer_eio() {
    let Some(fs) = LossFs::mount("injected_read_errors_answer_eio") else {
        return;
    };
    let path = fs.path().join("victim");
    fs::write(&path, b"data").unwrap();
    fs.fail(FaultOp::Read, "victim", 2);
    assert!(is_eio(&fs::read(&path).unwrap_err()));
    assert!(is_eio(&fs::read(&path).unwrap_err()));
    assert_eq!(fs::read(&path).unwrap(), b"data");
}

#[test]
fn injected_rename_errors_answer_eio_and_rename_nothing() {
    let Some(fs) = LossFs::mount("injected_rename_errors_answer_eio_and_rename_nothing") else {
        return;
    };
    let (from, to) = (fs.path().join("meta.tmp"), fs.path().join("meta"));
    fs::write(&from, b"new").unwrap();
    fs.fail(FaultOp::Rename, "meta", 1);
    assert!(is_eio(&fs::rename(&from, &to).unwrap_err()));
    assert_eq!(names(fs.path()), ["meta.tmp"]);
    fs::rename(&from, &to).unwrap();
    assert_eq!(names(fs.path()), ["meta"]);
}

#[test]
fn injected_fsync_errors_answer_eio() {
    let Some(fs) = LossFs::mount("injected_fsync_errors_answer_eio") else {
        return;
    };
    let dir = fs.path().join("msgs");
    fs::create_dir(&dir).unwrap();
    let mut file = File::create(dir.join("0001")).unwrap();
    file.write_all(b"block").unwrap();
    fs.fail(FaultOp::Fsync, "msgs/", 1);
    assert!(is_eio(&file.sync_data().unwrap_err()));
    file.sync_all().unwrap();
    // A directory's fsync fails too; its path is `msgs`.
    fs.fail(FaultOp::Fsync, "msgs", 1);
    assert!(is_eio(&File::open(&dir).unwrap().sync_all().unwrap_err()));
}

#[test]
fn a_failed_fsync_never_makes_its_data_durable() {
    let Some(fs) = LossFs::mount("a_failed_fsync_never_makes_its_data_durable") else {
        return;
    };
    let path = fs.path().join("log");
    let file = File::create(&path).unwrap();
    sync_dir(fs.path());
    file.write_all_at(b"AAAA", 0).unwrap();
    fs.fail(FaultOp::Fsync, "log", 1);
    assert!(is_eio(&file.sync_all().unwrap_err()));
    assert_eq!(
        fs::read(&path).unwrap(),
        b"AAAA",
        "still readable until the loss"
    );
    file.write_all_at(b"BB", 4).unwrap();
    file.sync_all().unwrap();
    assert_eq!(fs.unsynced().bytes, 4, "the discarded writes");
    drop(file);

    let report = fs.power_loss(Loss::DropAll);

    // The later fsync made the later write durable, not the one the failed fsync dropped.
    assert_eq!(fs::read(&path).unwrap(), b"\0\0\0\0BB");
    assert_eq!(report.bytes_dropped, 4);
}

#[test]
fn try_lock_works_on_the_mount() {
    let Some(fs) = LossFs::mount("try_lock_works_on_the_mount") else {
        return;
    };
    let path = fs.path().join("LOCK");
    let first = File::create(&path).unwrap();
    first.try_lock().unwrap();
    let second = File::open(&path).unwrap();
    assert!(matches!(
        second.try_lock(),
        Err(fs::TryLockError::WouldBlock)
    ));
    drop(first);
    second.try_lock().unwrap();
}

#[test]
fn reads_after_a_loss_see_what_survived_not_cached_pages() {
    let Some(fs) = LossFs::mount("reads_after_a_loss_see_what_survived_not_cached_pages") else {
        return;
    };
    // Overwritten in place, same size: only cached pages could still show the lost bytes.
    let same = fs.path().join("same-size");
    // Overwritten longer: the size must go back too.
    let longer = fs.path().join("longer");
    write_synced(&same, b"durable");
    write_synced(&longer, b"durable");
    sync_dir(fs.path());
    let mut before = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&same)
        .unwrap();
    before.write_all_at(b"VOLATIL", 0).unwrap();
    let mut seen = String::new();
    before.read_to_string(&mut seen).unwrap();
    assert_eq!(seen, "VOLATIL");
    assert_eq!(fs::read(&same).unwrap(), b"VOLATIL");
    fs::write(&longer, b"volatile, and longer").unwrap();
    assert_eq!(fs::metadata(&longer).unwrap().len(), 20);

    fs.power_loss(Loss::DropAll);

    assert_eq!(fs::read(&same).unwrap(), b"durable");
    assert_eq!(fs::read(&longer).unwrap(), b"durable");
    assert_eq!(fs::metadata(&longer).unwrap().len(), 7);
    let mut buf = [0u8; 32];
    assert!(
        is_eio(&before.read_at(&mut buf, 0).unwrap_err()),
        "a handle from before the loss is gone"
    );
    assert!(is_eio(&before.sync_all().unwrap_err()));
}

#[test]
fn appends_after_a_loss_go_to_the_surviving_end() {
    let Some(fs) = LossFs::mount("appends_after_a_loss_go_to_the_surviving_end") else {
        return;
    };
    let path = fs.path().join("log");
    let append = || OpenOptions::new().append(true).open(&path).unwrap();
    write_synced(&path, b"12");
    sync_dir(fs.path());
    append().write_all(b"345").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"12345");

    fs.power_loss(Loss::DropAll);

    // The kernel's idea of the size must not outlive the loss.
    append().write_all(b"X").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"12X");
}

#[test]
fn a_write_past_the_end_leaves_a_hole_of_zeros() {
    let Some(fs) = LossFs::mount("a_write_past_the_end_leaves_a_hole_of_zeros") else {
        return;
    };
    let path = fs.path().join("sparse");
    let file = File::create(&path).unwrap();
    file.write_all_at(b"end", 10_000).unwrap();
    let data = fs::read(&path).unwrap();
    assert_eq!(data.len(), 10_003);
    assert!(data[..10_000].iter().all(|&b| b == 0));
    assert_eq!(&data[10_000..], b"end");
    file.set_len(5).unwrap();
    assert_eq!(fs::read(&path).unwrap(), [0; 5]);
}

#[test]
fn a_large_directory_lists_every_entry_once() {
    let Some(fs) = LossFs::mount("a_large_directory_lists_every_entry_once") else {
        return;
    };
    let dir = fs.path().join("big");
    fs::create_dir(&dir).unwrap();
    let mut expected: Vec<String> = (0..300).map(|i| format!("segment-{i:05}")).collect();
    for name in &expected {
        File::create(dir.join(name)).unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    expected.push("sub".to_owned());
    expected.sort();
    assert_eq!(names(&dir), expected);
    assert_eq!(
        fs::metadata(&dir).unwrap().nlink(),
        3,
        "2 and a subdirectory"
    );
    assert_eq!(
        fs::remove_dir(&dir).unwrap_err().kind(),
        ErrorKind::DirectoryNotEmpty
    );
}

#[test]
fn a_killed_writer_loses_what_it_did_not_fsync() {
    let Some(fs) = LossFs::mount("a_killed_writer_loses_what_it_did_not_fsync") else {
        return;
    };
    // Another process, killed with SIGKILL while it holds the file open: what it fsynced
    // (file and directory, with coreutils' sync) survives, what it only wrote does not.
    let status = Command::new("sh")
        .arg("-c")
        .arg(
            r#"exec 3>"$1/log" && printf acked >&3 && sync "$1/log" "$1" &&
               printf ' lost' >&3 && printf x > "$1/never-synced" && kill -9 $$"#,
        )
        .arg("sh")
        .arg(fs.path())
        .status()
        .unwrap();
    assert!(!status.success());
    assert_eq!(fs::read(fs.path().join("log")).unwrap(), b"acked lost");

    let report = fs.power_loss(Loss::DropAll);

    assert_eq!(names(fs.path()), ["log"]);
    assert_eq!(fs::read(fs.path().join("log")).unwrap(), b"acked");
    assert_eq!(report.inodes_lost, 1);
}

#[test]
fn dropping_it_unmounts() {
    let Some(fs) = LossFs::mount("dropping_it_unmounts") else {
        return;
    };
    let path = fs.path().to_owned();
    let mounted = |path: &Path| {
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!(" {} ", path.display()))
    };
    assert!(mounted(&path));
    // A file still open (a process not killed yet) does not keep it mounted.
    let open = File::create(path.join("held")).unwrap();
    drop(fs);
    assert!(!mounted(&path));
    drop(open);
}

/// The `sluice-lossfs` process, killed (and its mount detached) if the test fails first.
struct Tool {
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = rustix::mount::unmount(self.dir.path(), rustix::mount::UnmountFlags::DETACH);
    }
}

#[test]
fn the_command_line_tool_mounts_and_cuts_the_power() {
    let Some(probe) = LossFs::mount("the_command_line_tool_mounts_and_cuts_the_power") else {
        return;
    };
    drop(probe);
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sluice-lossfs"))
        .arg(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut tool = Tool { child, dir };
    let mut stdin = tool.child.stdin.take().unwrap();
    let stdout = tool.child.stdout.take().unwrap();
    let (lines, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            if lines.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let answer = || {
        answers
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("an answer within 30 s")
    };
    let mut ask = |command: &str| {
        writeln!(stdin, "{command}").unwrap();
        answer()
    };
    let root = tool.dir.path().to_owned();
    assert_eq!(answer(), format!("ready {}", root.display()));

    let path = root.join("log");
    File::create(&path).unwrap();
    sync_dir(&root);
    fs::write(&path, b"lost").unwrap();
    assert_eq!(ask("unsynced"), "ok bytes=4 files=1 dir_changes=0");
    assert_eq!(ask("fail read log 1"), "ok");
    assert!(is_eio(&fs::read(&path).unwrap_err()));
    assert_eq!(
        ask("loss dropall"),
        "ok bytes_dropped=4 writes_dropped=1 writes_torn=0 dir_changes_dropped=0 inodes_lost=0"
    );
    assert_eq!(fs::read(&path).unwrap(), b"");
    assert!(ask("reboot").starts_with("error "));
    assert!(ask("loss torn 512 1").starts_with("ok "));
    assert_eq!(ask("quit"), "ok");
    assert!(tool.child.wait().unwrap().success());
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&format!(" {} ", root.display())));
}
