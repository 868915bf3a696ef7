//! The FUSE side: every request from the kernel answered from the [`Model`] behind one lock,
//! with faults checked first. Nothing here panics on what the kernel sends; anything the model
//! refuses is answered with its errno.
//!
//! Entry and attribute timeouts are zero and every file is opened with `FOPEN_DIRECT_IO`, so the
//! kernel keeps neither names, attributes nor file pages: after a power loss the next lookup,
//! `stat` or read sees what survived. Locks (`flock`, `fcntl`) are left to the kernel, which
//! keeps them locally since this file system does not announce lock support.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::faults::{FaultOp, Faults};
use super::model::{Attr, Kind, Model, SetAttr};

/// How long the kernel may keep a name or attributes: not at all, so nothing from before a
/// power loss is served after it.
const TTL: Duration = Duration::ZERO;

/// File type bits of a mode, and a regular file's.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;

/// Block size reported by `stat` and `statfs`.
const BLOCK: u32 = 4096;

/// Capacity reported by `statfs`: plenty, though everything lives in memory.
const CAPACITY_BLOCKS: u64 = 1 << 22;
const CAPACITY_INODES: u64 = 1 << 20;

/// The file system and its armed faults.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) model: Model,
    pub(crate) faults: Faults,
}

/// The state the FUSE thread and the test share.
pub(crate) type Shared = Arc<Mutex<State>>;

/// Locks the state. Nothing panics while holding it, but a poisoned lock is still usable.
pub(crate) fn lock(state: &Shared) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `fuser` file system over the shared state.
pub(crate) struct LossFuse {
    state: Shared,
}

impl LossFuse {
    pub(crate) fn new(state: Shared) -> Self {
        LossFuse { state }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: attr.atime,
        mtime: attr.mtime,
        ctime: attr.ctime,
        crtime: attr.crtime,
        kind: match attr.kind {
            Kind::File => FileType::RegularFile,
            Kind::Dir => FileType::Directory,
        },
        perm: attr.perm,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: 0,
        blksize: BLOCK,
        flags: 0,
    }
}

fn time(time: TimeOrNow) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => SystemTime::now(),
    }
}

fn perm(mode: u32) -> u16 {
    (mode & 0o7777) as u16
}

fn entry(reply: ReplyEntry, result: Result<Attr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &file_attr(&attr), Generation(0)),
        Err(err) => reply.error(err),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(err) => reply.error(err),
    }
}

/// Whether `uid`/`gid` may access an inode of `attr` as `mask` asks.
fn allowed(attr: &Attr, uid: u32, gid: u32, mask: AccessFlags) -> bool {
    let want = mask & (AccessFlags::R_OK | AccessFlags::W_OK | AccessFlags::X_OK);
    if uid == 0 {
        // Root reads and writes anything, and executes what anyone may execute.
        return !want.contains(AccessFlags::X_OK)
            || attr.kind == Kind::Dir
            || attr.perm & 0o111 != 0;
    }
    let bits = if uid == attr.uid {
        attr.perm >> 6
    } else if gid == attr.gid {
        attr.perm >> 3
    } else {
        attr.perm
    } & 0o7;
    (!want.contains(AccessFlags::R_OK) || bits & 0o4 != 0)
        && (!want.contains(AccessFlags::W_OK) || bits & 0o2 != 0)
        && (!want.contains(AccessFlags::X_OK) || bits & 0o1 != 0)
}

impl Filesystem for LossFuse {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.lock().model.lookup(parent.0, name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.lock().model.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(err) => reply.error(err),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        match self.lock().model.setattr(ino.0, &set) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(err) => reply.error(err),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & S_IFMT != S_IFREG {
            // Only regular files: no devices, pipes or sockets.
            reply.error(Errno::EPERM);
            return;
        }
        let result =
            self.lock()
                .model
                .create(parent.0, name.as_bytes(), perm(mode), req.uid(), req.gid());
        entry(reply, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let result =
            self.lock()
                .model
                .mkdir(parent.0, name.as_bytes(), perm(mode), req.uid(), req.gid());
        entry(reply, result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.lock().model.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.lock().model.rmdir(parent.0, name.as_bytes()));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported.
            reply.error(Errno::EINVAL);
            return;
        }
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        let state = &mut *self.lock();
        let model = &state.model;
        if state.faults.trips(FaultOp::Rename, || {
            vec![
                model.child_path(parent.0, name),
                model.child_path(newparent.0, newname),
            ]
        }) {
            reply.error(Errno::EIO);
            return;
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        empty(
            reply,
            state
                .model
                .rename(parent.0, name, newparent.0, newname, noreplace),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let state = &mut *self.lock();
        match state.model.getattr(ino.0) {
            Ok(attr) if attr.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Ok(_) => match state.model.open(ino.0) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                Err(err) => reply.error(err),
            },
            Err(err) => reply.error(err),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let state = &mut *self.lock();
        if let Err(err) = state.admit(fh.0, ino.0, FaultOp::Read) {
            reply.error(err);
            return;
        }
        match state.model.read(ino.0, offset, size) {
            Ok(data) => reply.data(data),
            Err(err) => reply.error(err),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let state = &mut *self.lock();
        if let Err(err) = state.admit(fh.0, ino.0, FaultOp::Write) {
            reply.error(err);
            return;
        }
        match state.model.write(ino.0, offset, data) {
            Ok(written) => reply.written(written),
            Err(err) => reply.error(err),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Closing makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().model.release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.sync(ino, fh));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let state = &mut *self.lock();
        match state.model.getattr(ino.0) {
            Ok(attr) if attr.kind == Kind::File => reply.error(Errno::ENOTDIR),
            Ok(_) => match state.model.open(ino.0) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(err) => reply.error(err),
            },
            Err(err) => reply.error(err),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let state = &mut *self.lock();
        match state.model.readdir(fh.0, ino.0, offset) {
            Ok(entries) => {
                for (i, listed) in entries.iter().enumerate() {
                    // The offset of the entry after this one, where the next call starts.
                    let next = offset.saturating_add(i as u64).saturating_add(1);
                    let kind = match listed.kind {
                        Kind::File => FileType::RegularFile,
                        Kind::Dir => FileType::Directory,
                    };
                    let name = OsStr::from_bytes(&listed.name);
                    if reply.add(INodeNo(listed.ino), next, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(err) => reply.error(err),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.lock().model.release(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.sync(ino, fh));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let usage = self.lock().model.usage();
        let used = usage.bytes.div_ceil(u64::from(BLOCK));
        let free = CAPACITY_BLOCKS.saturating_sub(used);
        let ffree = CAPACITY_INODES.saturating_sub(usage.inodes);
        reply.statfs(
            CAPACITY_BLOCKS,
            free,
            free,
            CAPACITY_INODES,
            ffree,
            BLOCK,
            255,
            BLOCK,
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.lock().model.getattr(ino.0) {
            Ok(attr) if allowed(&attr, req.uid(), req.gid(), mask) => reply.ok(),
            Ok(_) => reply.error(Errno::EACCES),
            Err(err) => reply.error(err),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & S_IFMT != S_IFREG && mode & S_IFMT != 0 {
            reply.error(Errno::EPERM);
            return;
        }
        let state = &mut *self.lock();
        let created =
            state
                .model
                .create(parent.0, name.as_bytes(), perm(mode), req.uid(), req.gid());
        let opened = created.and_then(|attr| Ok((state.model.open(attr.ino)?, attr)));
        match opened {
            Ok((fh, attr)) => reply.created(
                &TTL,
                &file_attr(&attr),
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(err) => reply.error(err),
        }
    }
}

impl State {
    /// Checks that `fh` is an open handle of `ino`, then whether an armed fault of `op` on its
    /// path trips (`EIO`).
    fn admit(&mut self, fh: u64, ino: u64, op: FaultOp) -> Result<(), Errno> {
        self.model.handle(fh, ino)?;
        let model = &self.model;
        if self.faults.trips(op, || vec![model.path(ino)]) {
            return Err(Errno::EIO);
        }
        Ok(())
    }
}

impl LossFuse {
    /// `fsync` or `fsyncdir`: an armed fault fails it and drops what was pending from the
    /// durable future; otherwise what is there now is durable.
    fn sync(&self, ino: INodeNo, fh: FileHandle) -> Result<(), Errno> {
        let state = &mut *self.lock();
        if let Err(err) = state.admit(fh.0, ino.0, FaultOp::Fsync) {
            if err == Errno::EIO {
                state.model.sync_failed(ino.0)?;
            }
            return Err(err);
        }
        state.model.sync(ino.0)
    }
}
