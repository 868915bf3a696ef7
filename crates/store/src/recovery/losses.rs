//! Phase 3 of recovery: what is lost, and the last sequence past everything handed out.
//!
//! The sequences the scan's evidence shows existed but are gone are added to lost.db's
//! damaged runs; the sequence lease ([`crate::lease`]) raises the last sequence past
//! anything that may have been handed out, the positions above the last intact record
//! becoming an unconfirmed run; so do the positions lost.db already names. lost.db is written
//! before anything else happens when either grew: the evidence of a cut tail is gone once it
//! is set aside. A lease that does not cover the last sequence is written again at once.

use std::fs;
use std::path::Path;

use super::Settings;
use super::scan::Evidence;
use crate::error::{Result, StoreError};
use crate::lease;
use crate::losses::{self, LossCause, Losses};
use crate::table::Table;
use crate::types::RecoveryReport;

/// Works out the lost sequences into `table.losses` and `report`; returns the lease on disk.
pub fn settle(
    msgs_dir: &Path,
    settings: &Settings,
    evidence: &Evidence,
    damaged_bytes: u64,
    table: &mut Table,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let mut found = read_losses(msgs_dir, report);
    report.lost = evidence.lost(table, &found);
    for r in &report.lost {
        tracing::warn!(
            stream = report.stream,
            first = r.start(),
            last = r.end(),
            "sequences lost to damage"
        );
        found.add(LossCause::Damaged, *r.start(), *r.end());
    }
    found.add_bytes(damaged_bytes);
    let bound = read_lease(msgs_dir, report);
    if settings.raise_to_lease && bound > table.last_seq + 1 {
        let (first, last) = (table.last_seq + 1, bound - 1);
        report.warn(format!(
            "sequences {first}..={last} are above the last intact record but within the sequence lease: reported as unconfirmed, never handed out again"
        ));
        found.add(LossCause::Unconfirmed, first, last);
        report.unconfirmed = Some(first..=last);
        table.raise_last(last);
    }
    // IMPORTANT: the positions lost.db names are never handed out again, even when index.db and
    // lease.db, which also cover them, are gone. Raised only after the lease is judged against
    // the last intact record, so that what was cut above it is still told as unconfirmed.
    let recorded = found
        .damaged()
        .chain(found.unconfirmed())
        .map(|(_, last)| last);
    if let Some(last) = recorded.max() {
        table.raise_last(last);
    }
    // A lost.db that cannot be written now (a full disk) stays unsaved: the next snapshot
    // writes it.
    if found.is_unsaved()
        && let Err(e) = found.write(&msgs_dir.join(losses::FILE), table.last_seq + 1)
    {
        report.warn(format!("lost positions not written yet: {e}"));
    }
    table.losses = found;
    // IMPORTANT: a lease that does not cover the last sequence (set aside or deleted) is written
    // again now: until the first batch would, a second crash and a cut tail would leave nothing
    // to say which sequences were handed out.
    if table.last_seq > 0 && bound <= table.last_seq {
        let exact = table.last_seq + 1;
        match lease::write(msgs_dir, exact) {
            Ok(()) => return Ok(exact),
            // The first batch writes it before any of its records (`State::flush`).
            Err(e) => report.warn(format!("sequence lease not written yet: {e}")),
        }
    }
    Ok(bound)
}

/// lost.db, or nothing; one that does not verify is set aside with a warning.
fn read_losses(msgs_dir: &Path, report: &mut RecoveryReport) -> Losses {
    let path = msgs_dir.join(losses::FILE);
    match fs::read(&path) {
        Ok(bytes) => Losses::decode(&bytes).unwrap_or_else(|why| {
            set_aside(&path, &why.to_string(), report);
            Losses::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Losses::default(),
        Err(e) => {
            report.warn(format!(
                "{}: {e}; lost positions recorded there are not known",
                path.display()
            ));
            Losses::default()
        }
    }
}

/// The lease's bound, or 0; one that does not verify is set aside with a warning.
fn read_lease(msgs_dir: &Path, report: &mut RecoveryReport) -> u64 {
    let path = msgs_dir.join(lease::FILE);
    match fs::read(&path) {
        Ok(bytes) => lease::decode(&bytes).unwrap_or_else(|why| {
            set_aside(&path, &why.to_string(), report);
            0
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => {
            report.warn(format!(
                "{}: {e}; the sequence lease is not known",
                path.display()
            ));
            0
        }
    }
}

/// Renames a file that does not verify to `<name>.damaged-<ns>`, never deleting it.
fn set_aside(path: &Path, why: &str, report: &mut RecoveryReport) {
    let aside = crate::fsutil::damaged_name(path);
    let kept = match fs::rename(path, &aside).map_err(StoreError::io(path)) {
        Ok(()) => format!("kept as {}", aside.display()),
        Err(e) => format!("could not be set aside: {e}"),
    };
    report.warn(format!("{}: {why}; {kept}", path.display()));
}
