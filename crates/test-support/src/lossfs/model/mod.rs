//! The file system itself, in memory and without FUSE: inodes with a volatile part (what is
//! served) and a durable part (what a power loss keeps), and every operation a storage engine
//! uses, each answering an errno rather than panicking on any input.
//!
//! A file holds its visible bytes, its durable bytes and the writes and truncations made since
//! they last became durable (`pending`); `fsync` applies the pending ones to the durable bytes. A
//! directory holds its visible entries and its durable entries; every change of an entry (a link
//! of a name to an inode, or the removal of a name) is also queued in one list for the whole file
//! system, in the order made, and `fsyncdir` applies that directory's queued changes to its
//! durable entries. What a power loss keeps of the queues is decided in [`super::loss`].

use std::collections::BTreeMap;
use std::time::SystemTime;

use fuser::Errno;

mod durability;
mod files;

/// An inode number. Never reused, so a number the kernel still holds from before a power loss
/// names the same file or nothing.
pub(crate) type Ino = u64;

/// The root directory's inode number (FUSE's).
pub(crate) const ROOT: Ino = 1;

/// The largest file: writes and truncations past it answer `EFBIG` (everything is in memory).
pub(crate) const MAX_FILE_SIZE: u64 = 1 << 30;

/// The longest name, as on Linux file systems.
const NAME_MAX: usize = 255;

/// A file's or directory's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
}

/// What `stat` shows of an inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attr {
    pub(crate) ino: Ino,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) nlink: u32,
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) crtime: SystemTime,
}

/// A change of a file's bytes not yet durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FileOp {
    /// `data` written at `offset` (extending the file with zeros up to it if shorter).
    Write { offset: u64, data: Vec<u8> },
    /// The file cut or extended with zeros to `size`.
    Truncate { size: u64 },
}

impl FileOp {
    /// Applies the change to `bytes`. Offsets are checked against [`MAX_FILE_SIZE`] before an
    /// op is made; the clamp only keeps this total.
    pub(crate) fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, data } => write_at(bytes, *offset, data),
            FileOp::Truncate { size } => bytes.resize(index(*size), 0),
        }
    }

    /// Bytes of data this op carries.
    pub(crate) fn len(&self) -> u64 {
        match self {
            FileOp::Write { data, .. } => data.len() as u64,
            FileOp::Truncate { .. } => 0,
        }
    }
}

/// Writes `data` into `bytes` at `offset`, extending with zeros up to it where shorter.
pub(crate) fn write_at(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = index(offset);
    let end = start.saturating_add(data.len());
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    if let Some(target) = bytes.get_mut(start..end) {
        target.copy_from_slice(data);
    }
}

/// A file offset as an index into its bytes, never past [`MAX_FILE_SIZE`].
fn index(offset: u64) -> usize {
    usize::try_from(offset.min(MAX_FILE_SIZE)).unwrap_or(0)
}

/// A change of one directory entry, queued until its directory is fsynced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirChange {
    /// The operation (one system call) it is part of: a rename makes two changes of one group,
    /// which a loss keeps or drops together.
    pub(crate) group: u64,
    /// The directory whose entry changes.
    pub(crate) dir: Ino,
    pub(crate) name: Vec<u8>,
    pub(crate) change: Change,
}

/// What happens to the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The name now names this inode (replacing what it named).
    Link(Ino),
    /// The name, which named this inode, is removed.
    Unlink(Ino),
}

impl DirChange {
    /// The inode the change names.
    pub(crate) fn ino(&self) -> Ino {
        match self.change {
            Change::Link(ino) | Change::Unlink(ino) => ino,
        }
    }

    /// Applies the change to a directory's entries; false where it no longer applies (an unlink
    /// of a name that names another inode, or nothing, there).
    pub(crate) fn apply(&self, entries: &mut BTreeMap<Vec<u8>, Ino>) -> bool {
        match self.change {
            Change::Link(ino) => {
                entries.insert(self.name.clone(), ino);
                true
            }
            Change::Unlink(ino) => {
                if entries.get(&self.name) == Some(&ino) {
                    entries.remove(&self.name);
                    true
                } else {
                    false
                }
            }
        }
    }
}

/// A regular file's bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct FileNode {
    /// What reads see.
    pub(crate) data: Vec<u8>,
    /// What a power loss keeps for sure.
    pub(crate) durable: Vec<u8>,
    /// Changes since the last fsync, in order; applied to `durable` they give `data`, unless a
    /// failed fsync discarded some.
    pub(crate) pending: Vec<FileOp>,
    /// Bytes of writes a failed fsync dropped from the durable future: still read, never kept.
    pub(crate) discarded: u64,
}

/// A directory's entries.
#[derive(Clone, Debug, Default)]
pub(crate) struct DirNode {
    /// What lookups and listings see.
    pub(crate) entries: BTreeMap<Vec<u8>, Ino>,
    /// What a power loss keeps for sure.
    pub(crate) durable: BTreeMap<Vec<u8>, Ino>,
}

/// A file's or directory's contents.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    File(FileNode),
    Dir(DirNode),
}

/// One inode.
#[derive(Clone, Debug)]
pub(crate) struct Inode {
    pub(crate) node: Node,
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) crtime: SystemTime,
    /// Visible names of a file; 2 plus subdirectories for a named directory; 0 once removed.
    pub(crate) nlink: u32,
    /// The directory of its latest visible name (a directory's `..`) and that name: what fault
    /// paths are matched against.
    pub(crate) parent: Ino,
    pub(crate) name: Vec<u8>,
}

impl Inode {
    fn new(node: Node, perm: u16, uid: u32, gid: u32, parent: Ino, name: Vec<u8>) -> Self {
        let now = SystemTime::now();
        let nlink = match node {
            Node::File(_) => 1,
            Node::Dir(_) => 2,
        };
        Inode {
            node,
            perm: perm & 0o7777,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            nlink,
            parent,
            name,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self.node {
            Node::File(_) => Kind::File,
            Node::Dir(_) => Kind::Dir,
        }
    }

    fn attr(&self, ino: Ino) -> Attr {
        let size = match &self.node {
            Node::File(file) => file.data.len() as u64,
            Node::Dir(_) => 4096,
        };
        Attr {
            ino,
            kind: self.kind(),
            size,
            nlink: self.nlink,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
        }
    }
}

/// An open file or directory. A directory's handle keeps the listing it is read from, so that
/// offsets stay meaningful while entries change.
#[derive(Clone, Debug)]
pub(crate) struct Handle {
    pub(crate) ino: Ino,
    listing: Option<Vec<Listed>>,
}

/// One entry of a directory listing, `.` and `..` included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) ino: Ino,
    pub(crate) kind: Kind,
    pub(crate) name: Vec<u8>,
}

/// Attribute changes `setattr` asks for.
#[derive(Clone, Debug, Default)]
pub(crate) struct SetAttr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<SystemTime>,
    pub(crate) mtime: Option<SystemTime>,
}

/// What is not durable yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsynced {
    /// Bytes written and not fsynced, with those a failed fsync will never make durable.
    pub bytes: u64,
    /// Files with a write or a truncation not durable, or whose visible bytes a failed fsync
    /// left different from their durable ones.
    pub files: u64,
    /// Directory changes (a name linked or removed; a rename is two) not fsynced, with those a
    /// failed fsync of their directory will never make durable.
    pub dir_changes: u64,
}

impl std::fmt::Display for Unsynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bytes={} files={} dir_changes={}",
            self.bytes, self.files, self.dir_changes
        )
    }
}

/// Totals for `statfs`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Usage {
    pub(crate) bytes: u64,
    pub(crate) inodes: u64,
}

/// The whole file system.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
    /// Directory changes not yet durable, in the order made.
    pub(crate) changes: Vec<DirChange>,
    /// Directory changes a failed `fsyncdir` dropped from the durable future: still seen, never
    /// kept.
    pub(crate) discarded_changes: u64,
    next_group: u64,
    pub(crate) handles: BTreeMap<u64, Handle>,
    next_handle: u64,
}

impl Default for Model {
    fn default() -> Self {
        Self::new(0, 0)
    }
}

impl Model {
    /// An empty file system whose root belongs to `uid`:`gid`.
    pub(crate) fn new(uid: u32, gid: u32) -> Self {
        let root = Inode::new(
            Node::Dir(DirNode::default()),
            0o755,
            uid,
            gid,
            ROOT,
            Vec::new(),
        );
        Model {
            inodes: BTreeMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            changes: Vec::new(),
            next_group: 0,
            handles: BTreeMap::new(),
            next_handle: 1,
            discarded_changes: 0,
        }
    }

    fn inode(&self, ino: Ino) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::ENOENT)
    }

    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&self, ino: Ino) -> Result<&DirNode, Errno> {
        match &self.inode(ino)?.node {
            Node::Dir(dir) => Ok(dir),
            Node::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut DirNode, Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::Dir(dir) => Ok(dir),
            Node::File(_) => Err(Errno::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut FileNode, Errno> {
        match &mut self.inode_mut(ino)?.node {
            Node::File(file) => Ok(file),
            Node::Dir(_) => Err(Errno::EISDIR),
        }
    }

    /// A directory new entries may go in: not one already removed (which only an open handle
    /// or a directory change not yet durable keeps).
    fn live_dir(&self, ino: Ino) -> Result<&DirNode, Errno> {
        let dir = self.dir(ino)?;
        if ino != ROOT && self.inode(ino)?.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(dir)
    }

    /// The inode `name` names in directory `parent`.
    fn child(&self, parent: Ino, name: &[u8]) -> Result<Ino, Errno> {
        check_name(name)?;
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(Errno::ENOENT)
    }

    /// Attributes of an inode.
    pub(crate) fn getattr(&self, ino: Ino) -> Result<Attr, Errno> {
        Ok(self.inode(ino)?.attr(ino))
    }

    /// Attributes of what `name` names in `parent`.
    pub(crate) fn lookup(&self, parent: Ino, name: &[u8]) -> Result<Attr, Errno> {
        let ino = self.child(parent, name)?;
        self.getattr(ino)
    }

    /// Where an inode's latest visible name is, relative to the root (`a/b/c`; the root is
    /// `""`): what fault patterns are matched against.
    pub(crate) fn path(&self, ino: Ino) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        // A bound instead of trusting the parent chain: every step is one directory level.
        for _ in 0..4096 {
            if at == ROOT {
                break;
            }
            let Some(inode) = self.inodes.get(&at) else {
                break;
            };
            parts.push(String::from_utf8_lossy(&inode.name).into_owned());
            at = inode.parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// `path(dir)/name`.
    pub(crate) fn child_path(&self, dir: Ino, name: &[u8]) -> String {
        let dir = self.path(dir);
        let name = String::from_utf8_lossy(name);
        if dir.is_empty() {
            name.into_owned()
        } else {
            format!("{dir}/{name}")
        }
    }

    fn new_group(&mut self) -> u64 {
        self.next_group += 1;
        self.next_group
    }

    /// Names `ino` as `name` in `dir`, queueing the change; returns what the name named.
    fn link(&mut self, group: u64, dir: Ino, name: &[u8], ino: Ino) -> Result<Option<Ino>, Errno> {
        let now = SystemTime::now();
        let parent = self.inode_mut(dir)?;
        parent.mtime = now;
        parent.ctime = now;
        let Node::Dir(entries) = &mut parent.node else {
            return Err(Errno::ENOTDIR);
        };
        let replaced = entries.entries.insert(name.to_vec(), ino);
        self.changes.push(DirChange {
            group,
            dir,
            name: name.to_vec(),
            change: Change::Link(ino),
        });
        Ok(replaced)
    }

    /// Removes `name` from `dir`, queueing the change; returns what it named.
    fn unlink_entry(&mut self, group: u64, dir: Ino, name: &[u8]) -> Result<Ino, Errno> {
        let now = SystemTime::now();
        let parent = self.inode_mut(dir)?;
        parent.mtime = now;
        parent.ctime = now;
        let Node::Dir(entries) = &mut parent.node else {
            return Err(Errno::ENOTDIR);
        };
        let ino = entries.entries.remove(name).ok_or(Errno::ENOENT)?;
        self.changes.push(DirChange {
            group,
            dir,
            name: name.to_vec(),
            change: Change::Unlink(ino),
        });
        Ok(ino)
    }

    fn make(
        &mut self,
        parent: Ino,
        name: &[u8],
        node: Node,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, Errno> {
        check_name(name)?;
        if self.live_dir(parent)?.entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        if self.next_ino == u64::MAX {
            return Err(Errno::ENOSPC);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let is_dir = matches!(node, Node::Dir(_));
        let inode = Inode::new(node, perm, uid, gid, parent, name.to_vec());
        self.inodes.insert(ino, inode);
        let group = self.new_group();
        self.link(group, parent, name, ino)?;
        if is_dir {
            self.inode_mut(parent)?.nlink += 1;
        }
        self.getattr(ino)
    }

    /// Creates an empty regular file.
    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, Errno> {
        let node = Node::File(FileNode::default());
        self.make(parent, name, node, perm, uid, gid)
    }

    /// Creates an empty directory.
    pub(crate) fn mkdir(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Attr, Errno> {
        let node = Node::Dir(DirNode::default());
        self.make(parent, name, node, perm, uid, gid)
    }

    /// Removes a file's name.
    pub(crate) fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<(), Errno> {
        let ino = self.child(parent, name)?;
        if self.inode(ino)?.kind() == Kind::Dir {
            return Err(Errno::EISDIR);
        }
        let group = self.new_group();
        self.unlink_entry(group, parent, name)?;
        let inode = self.inode_mut(ino)?;
        inode.nlink = inode.nlink.saturating_sub(1);
        inode.ctime = SystemTime::now();
        self.try_free(ino);
        Ok(())
    }

    /// Removes an empty directory.
    pub(crate) fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<(), Errno> {
        let ino = self.child(parent, name)?;
        if !self.dir(ino)?.entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let group = self.new_group();
        self.unlink_entry(group, parent, name)?;
        self.inode_mut(ino)?.nlink = 0;
        let parent = self.inode_mut(parent)?;
        parent.nlink = parent.nlink.saturating_sub(1);
        self.try_free(ino);
        Ok(())
    }

    /// Renames `parent/name` to `newparent/newname`, replacing what is there (a file by a file,
    /// an empty directory by a directory) unless `noreplace`.
    pub(crate) fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        noreplace: bool,
    ) -> Result<(), Errno> {
        let ino = self.child(parent, name)?;
        check_name(newname)?;
        let kind = self.inode(ino)?.kind();
        let target = self.live_dir(newparent)?.entries.get(newname).copied();
        if let Some(target) = target {
            if noreplace {
                return Err(Errno::EEXIST);
            }
            if target == ino {
                return Ok(());
            }
            match (kind, &self.inode(target)?.node) {
                (Kind::Dir, Node::Dir(dir)) if !dir.entries.is_empty() => {
                    return Err(Errno::ENOTEMPTY);
                }
                (Kind::Dir, Node::File(_)) => return Err(Errno::ENOTDIR),
                (Kind::File, Node::Dir(_)) => return Err(Errno::EISDIR),
                _ => {}
            }
        }
        if kind == Kind::Dir {
            // Not into itself or its own subtree.
            let mut at = newparent;
            for _ in 0..4096 {
                if at == ino {
                    return Err(Errno::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.inode(at)?.parent;
            }
        }
        let group = self.new_group();
        let replaced = self.link(group, newparent, newname, ino)?;
        self.unlink_entry(group, parent, name)?;
        if let Some(old) = replaced {
            let is_dir = self.inode(old)?.kind() == Kind::Dir;
            let old_inode = self.inode_mut(old)?;
            old_inode.ctime = SystemTime::now();
            if is_dir {
                old_inode.nlink = 0;
                let np = self.inode_mut(newparent)?;
                np.nlink = np.nlink.saturating_sub(1);
            } else {
                old_inode.nlink = old_inode.nlink.saturating_sub(1);
            }
        }
        if kind == Kind::Dir && parent != newparent {
            let p = self.inode_mut(parent)?;
            p.nlink = p.nlink.saturating_sub(1);
            self.inode_mut(newparent)?.nlink += 1;
        }
        let inode = self.inode_mut(ino)?;
        inode.parent = newparent;
        inode.name = newname.to_vec();
        inode.ctime = SystemTime::now();
        if let Some(old) = replaced {
            self.try_free(old);
        }
        Ok(())
    }
}

/// A name a directory entry may have.
fn check_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}
