//! `sluice-lossfs DIR`: mounts a power-loss file system ([`sluice_test_support::lossfs`]) on
//! DIR, an empty directory, for a soak script that runs processes on it and cuts the power.
//!
//! It prints `ready DIR` once mounted, then reads commands on stdin, one a line, and answers
//! each with one line on stdout, `ok ...` or `error ...`:
//!
//! - `loss dropall`, `loss torn BOUNDARY SEED`, `loss reorder BOUNDARY SEED`: a power loss (the
//!   processes writing must be dead first); answers what it dropped, `ok bytes_dropped=N
//!   writes_dropped=N writes_torn=N dir_changes_dropped=N inodes_lost=N`.
//! - `fail write|fsync|read|rename PATH-PART TIMES`: the next TIMES such operations on a path
//!   containing PATH-PART answer `EIO`; answers `ok`.
//! - `unsynced`: what is not durable yet, `ok bytes=N files=N dir_changes=N`.
//! - `quit` (or the end of stdin): answers `ok`, unmounts and exits.
//!
//! Root only: it mounts with the `mount` system call.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use sluice_test_support::lossfs::{FaultOp, Loss, LossFs};

/// One command from stdin.
#[derive(Debug, PartialEq)]
enum Command {
    Loss(Loss),
    Fail(FaultOp, String, u32),
    Unsynced,
    Quit,
}

fn number(word: Option<&str>, what: &str) -> Result<u64, String> {
    let word = word.ok_or_else(|| format!("missing {what}"))?;
    word.parse()
        .map_err(|_| format!("{what} {word:?} is not a number"))
}

fn parse(line: &str) -> Result<Command, String> {
    let mut words = line.split_whitespace();
    let command = match words.next() {
        Some("loss") => {
            let loss = match words.next() {
                Some("dropall") => Loss::DropAll,
                Some("torn") => Loss::Torn {
                    boundary: number(words.next(), "boundary")?,
                    seed: number(words.next(), "seed")?,
                },
                Some("reorder") => Loss::Reorder {
                    boundary: number(words.next(), "boundary")?,
                    seed: number(words.next(), "seed")?,
                },
                _ => return Err("usage: loss dropall|torn B S|reorder B S".to_owned()),
            };
            Command::Loss(loss)
        }
        Some("fail") => {
            let op = match words.next() {
                Some("write") => FaultOp::Write,
                Some("fsync") => FaultOp::Fsync,
                Some("read") => FaultOp::Read,
                Some("rename") => FaultOp::Rename,
                _ => return Err("usage: fail write|fsync|read|rename PATH-PART TIMES".to_owned()),
            };
            let path = words.next().ok_or("missing path part")?.to_owned();
            let times = u32::try_from(number(words.next(), "times")?)
                .map_err(|_| "times is too large".to_owned())?;
            Command::Fail(op, path, times)
        }
        Some("unsynced") => Command::Unsynced,
        Some("quit") => Command::Quit,
        Some(other) => return Err(format!("unknown command {other:?}")),
        None => return Err("empty command".to_owned()),
    };
    match words.next() {
        Some(extra) => Err(format!("unexpected {extra:?}")),
        None => Ok(command),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: sluice-lossfs DIR");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    let fs = match LossFs::mount_on(&dir) {
        Ok(fs) => fs,
        Err(err) => {
            eprintln!("sluice-lossfs: cannot mount on {}: {err}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let mut answer = |line: String| writeln!(out, "{line}").and_then(|()| out.flush()).is_ok();
    if !answer(format!("ready {}", fs.path().display())) {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else {
            break;
        };
        let (reply, quit) = match parse(&line) {
            Ok(Command::Loss(loss)) => (format!("ok {}", fs.power_loss(loss)), false),
            Ok(Command::Fail(op, path, times)) => {
                fs.fail(op, &path, times);
                ("ok".to_owned(), false)
            }
            Ok(Command::Unsynced) => (format!("ok {}", fs.unsynced()), false),
            Ok(Command::Quit) => ("ok".to_owned(), true),
            Err(err) => (format!("error {err}"), false),
        };
        if !answer(reply) || quit {
            break;
        }
    }
    drop(fs);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(parse("loss dropall"), Ok(Command::Loss(Loss::DropAll)));
        assert_eq!(
            parse(" loss  torn 512 7 "),
            Ok(Command::Loss(Loss::Torn {
                boundary: 512,
                seed: 7
            }))
        );
        assert_eq!(
            parse("loss reorder 4096 1"),
            Ok(Command::Loss(Loss::Reorder {
                boundary: 4096,
                seed: 1
            }))
        );
        assert_eq!(
            parse("fail fsync msgs/ 2"),
            Ok(Command::Fail(FaultOp::Fsync, "msgs/".to_owned(), 2))
        );
        assert_eq!(parse("unsynced"), Ok(Command::Unsynced));
        assert_eq!(parse("quit"), Ok(Command::Quit));
    }

    #[test]
    fn bad_commands_are_refused() {
        for line in [
            "",
            "loss",
            "loss torn 512",
            "loss torn x 1",
            "fail chmod a 1",
            "fail write a",
            "fail write a 99999999999",
            "quit now",
            "reboot",
        ] {
            assert!(parse(line).is_err(), "{line:?}");
        }
    }
}
