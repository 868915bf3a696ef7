//! Files the configuration names (keys, certificates) read with a bound, so that a path to
//! something endless (`/dev/zero`, a FIFO fed forever) cannot make the hub allocate without
//! limit, at start or on reload.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// All of `path`, or `None` when it holds more than `limit` bytes (read no further than one
/// byte past the limit).
pub(crate) fn read_at_most(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_cut_at_the_limit_and_refused() {
        assert_eq!(read_at_most(Path::new("/dev/zero"), 4096).unwrap(), None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abcd").unwrap();
        assert_eq!(
            read_at_most(&path, 4).unwrap().as_deref(),
            Some(&b"abcd"[..])
        );
        assert_eq!(read_at_most(&path, 3).unwrap(), None);
        assert!(read_at_most(&dir.path().join("missing"), 4).is_err());
    }
}
