//! What a kill -9 leaves of a data directory, for the tests that damage it afterwards.

use std::fs;
use std::path::Path;

/// Copies a data directory's files (without the lock): with the store open, what a kill -9
/// at this moment leaves, as the page cache holds every write.
pub fn copy_files(from: &Path, to: &Path) {
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            fs::create_dir_all(&target).unwrap();
            copy_files(&e.path(), &target);
        } else if e.file_name() != "LOCK" {
            fs::copy(e.path(), target).unwrap();
        }
    }
}
