//! The FUSE operations on a mount's [`State`]: metadata straight to the
//! backing folder, file data through the unsynced pages.

use super::state::{own, State};
use super::stats::{lock, Stats};
use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// How long the kernel may cache an entry or attributes. Every change
/// goes through the kernel, so its caches stay right while mounted.
const TTL: Duration = Duration::from_secs(1);

/// The file system one mount serves.
pub(super) struct Lazy {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) stats: Arc<Mutex<Stats>>,
}

impl Lazy {
    /// Runs `f` on the state, with the path of `parent`'s child `name`.
    fn in_child<T>(
        &self,
        parent: INodeNo,
        name: &OsStr,
        f: impl FnOnce(&mut State, PathBuf) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let mut state = self.state();
        let path = state.child(parent, name)?;
        f(&mut state, path)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Filesystem for Lazy {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut state = self.state();
        match state.child(parent, name).and_then(|path| state.entry(path)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.state().attr(ino) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
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
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state();
        let result = (|| {
            let node = state.node(ino)?;
            if let Some(mode) = mode {
                std::fs::set_permissions(&node.path, std::fs::Permissions::from_mode(mode))?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&node.path, uid, gid)?;
            }
            if let Some(size) = size {
                node.truncate(size)?;
            }
            state.attr(ino)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.in_child(parent, name, |state, path| {
            std::fs::create_dir(&path)?;
            own(&path, req, mode & !umask)?;
            state.entry(path)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.in_child(parent, name, |state, path| {
            state.forget_backing(&path);
            std::fs::remove_file(&path)?;
            Ok::<_, Errno>(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.in_child(parent, name, |state, path| {
            std::fs::remove_dir(&path)?;
            state.forget_backing(&path);
            Ok::<_, Errno>(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let mut state = self.state();
        let result = (|| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let from = state.child(parent, name)?;
            let to = state.child(newparent, newname)?;
            let moved = std::fs::symlink_metadata(&from)?;
            if std::fs::symlink_metadata(&to).is_ok_and(|m| m.ino() != moved.ino()) {
                state.forget_backing(&to);
            }
            std::fs::rename(&from, &to)?;
            // Every known path under the old name moves with it.
            for node in state.nodes.values_mut() {
                if let Ok(rest) = node.path.strip_prefix(&from) {
                    node.path = if rest.as_os_str().is_empty() {
                        to.clone()
                    } else {
                        to.join(rest)
                    };
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut state = self.state();
        let result = (|| {
            let node = state.node(ino)?;
            node.backing()?;
            if flags.0 & libc_o_trunc() != 0 {
                node.truncate(0)?;
            }
            node.opens += 1;
            Ok::<_, Errno>(())
        })();
        match result {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.in_child(parent, name, |state, path| {
            let created = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(mode & !umask & 0o7777)
                .open(&path);
            let file = match created {
                Ok(file) => {
                    own(&path, req, mode & !umask)?;
                    file
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && flags & libc_o_excl() == 0 =>
                {
                    OpenOptions::new().read(true).write(true).open(&path)?
                }
                Err(e) => return Err(e.into()),
            };
            let ino = state.intern(file.metadata()?.ino(), path);
            let node = state.node(INodeNo(ino))?;
            if node.file.is_none() {
                node.file = Some(file);
            }
            if flags & libc_o_trunc() != 0 {
                node.truncate(0)?;
            }
            node.opens += 1;
            state.attr(INodeNo(ino))
        });
        match result {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut state = self.state();
        match state
            .node(ino)
            .and_then(|node| Ok(node.read(offset, size.into())?))
        {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state();
        match state
            .node(ino)
            .and_then(|node| Ok(node.write(offset, data)?))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
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
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        if let Some(node) = state.nodes.get_mut(&ino.0) {
            node.opens = node.opens.saturating_sub(1);
            if node.opens == 0 && node.dirty.is_empty() {
                node.file = None;
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        if let Some(suffix) = state.failing_fsync.clone() {
            let failing = state
                .node(ino)
                .is_ok_and(|node| node.path.to_string_lossy().ends_with(&suffix));
            if failing {
                // The disk refused the write-back: nothing reaches it, and
                // the pages stay in the "page cache", where every process
                // reading the file until a power cut or a remount sees them.
                state.failing_fsync = None;
                lock(&self.stats).failed_syncs += 1;
                return reply.error(Errno::EIO);
            }
        }
        match state.node(ino).and_then(|node| Ok(node.sync()?)) {
            Ok(pages) => {
                let mut stats = lock(&self.stats);
                stats.syncs += 1;
                stats.pages_synced += pages;
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.state().node(ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut state = self.state();
        let result = (|| {
            let path = state.node(ino)?.path.clone();
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for entry in std::fs::read_dir(&path)? {
                let entry = entry?;
                let kind = FileType::from_std(entry.file_type()?).unwrap_or(FileType::RegularFile);
                let ours = state.intern(entry.ino(), entry.path());
                entries.push((ours, kind, entry.file_name()));
            }
            Ok::<_, Errno>(entries)
        })();
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Folders are metadata: already on the backing folder.
        match self.state().node(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // `default_permissions`: the kernel checks.
        reply.ok();
    }
}

/// `O_TRUNC` and `O_EXCL` on Linux (the flags the kernel passes along).
const fn libc_o_trunc() -> i32 {
    0o1000
}

const fn libc_o_excl() -> i32 {
    0o200
}
