//! A file's bytes and attributes, and open handles: reads, writes, truncations and directory
//! listings.

use std::time::SystemTime;

use fuser::Errno;

use super::{Attr, FileOp, Handle, Ino, Kind, Listed, MAX_FILE_SIZE, Model, Node, SetAttr, index};

impl Model {
    /// Changes attributes; a size change is a truncation, durable on fsync like a write.
    pub(crate) fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Result<Attr, Errno> {
        let now = SystemTime::now();
        if let Some(size) = set.size {
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            let file = self.file_mut(ino)?;
            if size != file.data.len() as u64 {
                let op = FileOp::Truncate { size };
                op.apply(&mut file.data);
                file.pending.push(op);
            }
            let inode = self.inode_mut(ino)?;
            inode.mtime = now;
        }
        let inode = self.inode_mut(ino)?;
        if let Some(mode) = set.mode {
            inode.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = set.uid {
            inode.uid = uid;
        }
        if let Some(gid) = set.gid {
            inode.gid = gid;
        }
        if let Some(atime) = set.atime {
            inode.atime = atime;
        }
        if let Some(mtime) = set.mtime {
            inode.mtime = mtime;
        }
        inode.ctime = now;
        Ok(inode.attr(ino))
    }

    /// Reads up to `size` bytes at `offset`; past the end, nothing.
    pub(crate) fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], Errno> {
        let file = match &self.inode(ino)?.node {
            Node::File(file) => file,
            Node::Dir(_) => return Err(Errno::EISDIR),
        };
        let start = index(offset).min(file.data.len());
        let end = start.saturating_add(size as usize).min(file.data.len());
        Ok(file.data.get(start..end).unwrap_or_default())
    }

    /// Writes `data` at `offset` (a hole before it reads as zeros); returns the bytes written.
    pub(crate) fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let written = u32::try_from(data.len()).map_err(|_| Errno::EINVAL)?;
        let end = offset.checked_add(u64::from(written)).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let file = self.file_mut(ino)?;
        if data.is_empty() {
            return Ok(0);
        }
        let op = FileOp::Write {
            offset,
            data: data.to_vec(),
        };
        op.apply(&mut file.data);
        file.pending.push(op);
        let now = SystemTime::now();
        let inode = self.inode_mut(ino)?;
        inode.mtime = now;
        inode.ctime = now;
        Ok(written)
    }

    /// Opens a file or directory; a directory's handle lists its entries now.
    pub(crate) fn open(&mut self, ino: Ino) -> Result<u64, Errno> {
        let listing = match self.inode(ino)?.node {
            Node::Dir(_) => Some(self.listing(ino)?),
            Node::File(_) => None,
        };
        let fh = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(fh, Handle { ino, listing });
        Ok(fh)
    }

    /// The inode a handle is open on, where it is one of this file system's since the last
    /// power loss.
    pub(crate) fn handle(&self, fh: u64, ino: Ino) -> Result<(), Errno> {
        match self.handles.get(&fh) {
            Some(handle) if handle.ino == ino => Ok(()),
            Some(_) => Err(Errno::EBADF),
            // From before a power loss: the device it was open on is gone.
            None => Err(Errno::EIO),
        }
    }

    /// Closes a handle (one from before a power loss is already gone).
    pub(crate) fn release(&mut self, fh: u64) {
        if let Some(handle) = self.handles.remove(&fh) {
            self.try_free(handle.ino);
        }
    }

    fn listing(&self, ino: Ino) -> Result<Vec<Listed>, Errno> {
        let inode = self.inode(ino)?;
        let Node::Dir(dir) = &inode.node else {
            return Err(Errno::ENOTDIR);
        };
        let mut listed = vec![
            Listed {
                ino,
                kind: Kind::Dir,
                name: b".".to_vec(),
            },
            Listed {
                ino: inode.parent,
                kind: Kind::Dir,
                name: b"..".to_vec(),
            },
        ];
        for (name, child) in &dir.entries {
            if let Some(inode) = self.inodes.get(child) {
                listed.push(Listed {
                    ino: *child,
                    kind: inode.kind(),
                    name: name.clone(),
                });
            }
        }
        Ok(listed)
    }

    /// The entries of an open directory from `offset` on (the offset of entry `i` is `i + 1`);
    /// offset 0 lists the directory afresh, as `rewinddir` expects.
    pub(crate) fn readdir(&mut self, fh: u64, ino: Ino, offset: u64) -> Result<&[Listed], Errno> {
        self.handle(fh, ino)?;
        if offset == 0 {
            let listing = self.listing(ino)?;
            if let Some(handle) = self.handles.get_mut(&fh) {
                handle.listing = Some(listing);
            }
        }
        let listing = self
            .handles
            .get(&fh)
            .and_then(|handle| handle.listing.as_deref())
            .ok_or(Errno::ENOTDIR)?;
        Ok(listing
            .get(index(offset).min(listing.len())..)
            .unwrap_or_default())
    }
}
