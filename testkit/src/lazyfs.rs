//! A file system that forgets what was never fsynced: the power cut of
//! the durability tests (what Jepsen's LazyFS does; LazyFS itself does not
//! build here, its build downloads its dependencies).
//!
//! [`LazyFs::mount`] mounts a FUSE file system (the `fuser` crate, its
//! pure-Rust mount, as root) on a folder of its own and passes every
//! operation through to a backing folder, except file data: a write goes
//! to an in-memory copy of the pages it touches (what the kernel's page
//! cache holds on a real disk), reads see those pages, and only `fsync`
//! or `fdatasync` of the file copies them into the backing file.
//! Everything else (create, rename, unlink, mkdir, chmod, chown, a
//! truncate's new size) reaches the backing folder at once: metadata may
//! be persisted at once, data may not. A file grown by writes keeps its
//! old length until it is synced, as ext4's `data=ordered` does.
//!
//! [`LazyFs::cut`] is the power cut: every page not synced is dropped and
//! every operation from then on fails with `EIO` (the disk is gone: a
//! process still running can make nothing more durable). Kill the
//! processes that used it, then [`LazyFs::remount`]: the old mount goes
//! (and with it the kernel's caches of it) and a fresh one serves what
//! the backing folder holds, which is exactly what was synced.
//!
//! Pages are per file (per inode), not per descriptor: `fsync` of one
//! descriptor syncs what any wrote, and data written and closed without
//! a sync stays unsynced, as in a page cache. SQLite's `-shm` file (a
//! shared mapping) works: the kernel writes its dirty pages back through
//! `write`, and after a cut SQLite rebuilds it from the WAL anyway. File
//! locks are the kernel's own (the file system does not take them over).
//! Mounted with `allow_other` and `default_permissions`, and created
//! files and folders belong to the caller, so PostgreSQL (running as its
//! own user) works on it. Needs root and `/dev/fuse`.

use anyhow::{bail, Context, Result};
use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    SessionACL, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tempfile::TempDir;

/// The unit of unsynced data.
const PAGE: u64 = 4096;
/// How long the kernel may cache an entry or attributes. Every change
/// goes through the kernel, so its caches stay right while mounted.
const TTL: Duration = Duration::from_secs(1);
/// How long [`LazyFs::remount`] waits for the last user of the old mount
/// to let go of it.
const UNMOUNT: Duration = Duration::from_secs(20);

/// What was synced and dropped so far (every mount added up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `fsync` and `fdatasync` calls.
    pub syncs: u64,
    /// Pages copied into backing files by them.
    pub pages_synced: u64,
    /// Power cuts.
    pub cuts: u64,
    /// Pages dropped by cuts (written, never synced).
    pub pages_dropped: u64,
    /// Files that lost pages in a cut.
    pub files_dropped: u64,
}

/// A mounted forgetting file system over a backing folder.
pub struct LazyFs {
    mountpoint: PathBuf,
    backing: PathBuf,
    session: Option<BackgroundSession>,
    state: Arc<Mutex<State>>,
    stats: Arc<Mutex<Stats>>,
    _dirs: TempDir,
}

impl std::fmt::Debug for LazyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFs")
            .field("mountpoint", &self.mountpoint)
            .field("backing", &self.backing)
            .finish_non_exhaustive()
    }
}

impl LazyFs {
    /// Mounts a fresh one (empty backing folder) in a temporary folder.
    pub fn mount() -> Result<Self> {
        let dirs = tempfile::Builder::new()
            .prefix("testkit-lazyfs-")
            .tempdir()?;
        // PostgreSQL, as its own user, must reach the mount point.
        std::fs::set_permissions(dirs.path(), std::fs::Permissions::from_mode(0o755))?;
        let mountpoint = dirs.path().join("mnt");
        let backing = dirs.path().join("backing");
        std::fs::create_dir(&mountpoint)?;
        std::fs::create_dir(&backing)?;
        std::fs::set_permissions(&backing, std::fs::Permissions::from_mode(0o777))?;
        let stats = Arc::new(Mutex::new(Stats::default()));
        let state = Arc::new(Mutex::new(State::new(backing.clone())?));
        let session = mount(&mountpoint, state.clone(), stats.clone())?;
        Ok(Self {
            mountpoint,
            backing,
            session: Some(session),
            state,
            stats,
            _dirs: dirs,
        })
    }

    /// Where it is mounted: the folder to run a database in.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The power cut: drops every page not synced; every operation fails
    /// with `EIO` until [`LazyFs::remount`]. What it dropped: (pages, files).
    pub fn cut(&self) -> (u64, u64) {
        let mut state = lock(&self.state);
        state.dead = true;
        let mut pages = 0;
        let mut files = 0;
        for node in state.nodes.values_mut() {
            if !node.dirty.is_empty() || node.written_end > 0 {
                pages += node.dirty.len() as u64;
                files += 1;
            }
            node.dirty.clear();
            node.written_end = 0;
            node.file = None;
        }
        let mut stats = lock(&self.stats);
        stats.cuts += 1;
        stats.pages_dropped += pages;
        stats.files_dropped += files;
        (pages, files)
    }

    /// Unmounts (waiting up to 20 s for its last user to go: kill the
    /// processes first) and mounts again on the same backing folder, with
    /// nothing cached: what it serves is what was synced.
    pub fn remount(&mut self) -> Result<()> {
        if let Some(session) = self.session.take() {
            unmount(&self.mountpoint, session)?;
        }
        self.state = Arc::new(Mutex::new(State::new(self.backing.clone())?));
        self.session = Some(mount(
            &self.mountpoint,
            self.state.clone(),
            self.stats.clone(),
        )?);
        Ok(())
    }

    /// What it synced and dropped so far.
    pub fn stats(&self) -> Stats {
        *lock(&self.stats)
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        lock(&self.state).dead = true;
        if let Some(session) = self.session.take() {
            if unmount(&self.mountpoint, session).is_err() {
                // Still in use: detach it, so the folder can go.
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(&self.mountpoint)
                    .status();
            }
        }
    }
}

fn mount(
    mountpoint: &Path,
    state: Arc<Mutex<State>>,
    stats: Arc<Mutex<Stats>>,
) -> Result<BackgroundSession> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("lazyfs".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(2);
    fuser::spawn_mount(Lazy { state, stats }, mountpoint, &config)
        .with_context(|| format!("mounting the lazy file system on {}", mountpoint.display()))
}

/// Unmounts, retrying while a process still has a file open there.
fn unmount(mountpoint: &Path, session: BackgroundSession) -> Result<()> {
    let deadline = Instant::now() + UNMOUNT;
    loop {
        let status = std::process::Command::new("umount")
            .arg(mountpoint)
            .stderr(std::process::Stdio::null())
            .status()
            .context("running umount")?;
        if status.success() {
            break;
        }
        if Instant::now() >= deadline {
            bail!(
                "{} still busy after {UNMOUNT:?} (a process still uses it)",
                mountpoint.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The session's thread ends once the kernel closes the connection.
    session
        .join()
        .context("the lazy file system's thread failed")?;
    Ok(())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What one mount knows.
struct State {
    nodes: HashMap<u64, Node>,
    /// Backing inode number → ours (a backing number freed by an unlink
    /// and reused gets a new one of ours, so pages never mix).
    by_backing: HashMap<u64, u64>,
    next_ino: u64,
    /// Cut: the disk is gone.
    dead: bool,
}

/// A file or folder, by our inode number.
struct Node {
    path: PathBuf,
    /// The backing file, open while the file is open or has unsynced pages.
    file: Option<File>,
    opens: u32,
    /// Unsynced pages by index.
    dirty: BTreeMap<u64, Box<[u8]>>,
    /// How far unsynced writes reach (the file's length is at least this).
    written_end: u64,
}

impl Node {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            opens: 0,
            dirty: BTreeMap::new(),
            written_end: 0,
        }
    }

    fn backing(&mut self) -> std::io::Result<&File> {
        if self.file.is_none() {
            let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
            self.file = Some(file);
        }
        Ok(self.file.as_ref().expect("just opened"))
    }

    fn metadata(&self) -> std::io::Result<Metadata> {
        match &self.file {
            Some(file) => file.metadata(),
            None => std::fs::symlink_metadata(&self.path),
        }
    }

    /// The length readers see: the synced one, or further by unsynced writes.
    fn length(&self, metadata: &Metadata) -> u64 {
        metadata.len().max(self.written_end)
    }

    fn read(&mut self, offset: u64, size: u64) -> std::io::Result<Vec<u8>> {
        let length = self.length(&self.metadata()?);
        let end = (offset + size).min(length);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = ((index + 1) * PAGE).min(end) - at;
            match self.dirty.get(&index) {
                Some(page) => out.extend_from_slice(&page[within..within + take as usize]),
                None => {
                    let mut buf = vec![0; take as usize];
                    read_fully(self.backing()?, &mut buf, at)?;
                    out.extend_from_slice(&buf);
                }
            }
            at += take;
        }
        Ok(out)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut at = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = rest.len().min(PAGE as usize - within);
            if !self.dirty.contains_key(&index) {
                let mut page = vec![0; PAGE as usize].into_boxed_slice();
                read_fully(self.backing()?, &mut page, index * PAGE)?;
                self.dirty.insert(index, page);
            }
            let page = self.dirty.get_mut(&index).expect("just inserted");
            page[within..within + take].copy_from_slice(&rest[..take]);
            at += take as u64;
            rest = &rest[take..];
        }
        self.written_end = self.written_end.max(offset + data.len() as u64);
        Ok(())
    }

    /// A new length, at once (metadata): pages past it go.
    fn truncate(&mut self, size: u64) -> std::io::Result<()> {
        self.backing()?.set_len(size)?;
        let first_gone = size.div_ceil(PAGE);
        self.dirty.retain(|index, _| *index < first_gone);
        if !size.is_multiple_of(PAGE) {
            if let Some(page) = self.dirty.get_mut(&(size / PAGE)) {
                page[(size % PAGE) as usize..].fill(0);
            }
        }
        self.written_end = self.written_end.min(size);
        Ok(())
    }

    /// `fsync`: every unsynced page into the backing file. Pages copied.
    fn sync(&mut self) -> std::io::Result<u64> {
        if self.dirty.is_empty() {
            return Ok(0);
        }
        let length = self.length(&self.metadata()?);
        let dirty = std::mem::take(&mut self.dirty);
        let file = self.backing()?;
        for (index, page) in &dirty {
            let start = index * PAGE;
            let end = (start + PAGE).min(length);
            if end > start {
                file.write_all_at(&page[..(end - start) as usize], start)?;
            }
        }
        self.written_end = 0;
        Ok(dirty.len() as u64)
    }
}

/// Reads what the backing file has at `offset`; zeros past its end.
fn read_fully(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    buf[done..].fill(0);
    Ok(())
}

impl State {
    fn new(backing: PathBuf) -> Result<Self> {
        let root = std::fs::metadata(&backing)?;
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, Node::new(backing));
        Ok(Self {
            nodes,
            by_backing: HashMap::from([(root.ino(), INodeNo::ROOT.0)]),
            next_ino: INodeNo::ROOT.0 + 1,
            dead: false,
        })
    }

    fn node(&mut self, ino: INodeNo) -> Result<&mut Node, Errno> {
        if self.dead {
            return Err(Errno::EIO);
        }
        self.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)
    }

    fn child(&mut self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.node(parent)?.path.join(name))
    }

    /// Our inode for the backing file `backing_ino` at `path`.
    fn intern(&mut self, backing_ino: u64, path: PathBuf) -> u64 {
        if let Some(ino) = self.by_backing.get(&backing_ino) {
            if let Some(node) = self.nodes.get_mut(ino) {
                node.path = path;
            }
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_backing.insert(backing_ino, ino);
        self.nodes.insert(ino, Node::new(path));
        ino
    }

    /// The entry at `path`, known from now on.
    fn entry(&mut self, path: PathBuf) -> Result<FileAttr, Errno> {
        let metadata = std::fs::symlink_metadata(&path)?;
        let ino = self.intern(metadata.ino(), path);
        self.attr(INodeNo(ino))
    }

    fn attr(&mut self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let node = self.node(ino)?;
        let metadata = node.metadata()?;
        let size = node.length(&metadata);
        Ok(attr(ino, &metadata, size))
    }

    /// `path` is about to be unlinked or replaced: if that removes its
    /// last name, its backing inode number may be reused for another file.
    fn forget_backing(&mut self, path: &Path) {
        if let Ok(metadata) = std::fs::symlink_metadata(path) {
            if metadata.nlink() <= 1 || metadata.is_dir() {
                if let Some(ino) = self.by_backing.remove(&metadata.ino()) {
                    if let Some(node) = self.nodes.get_mut(&ino) {
                        if node.opens == 0 {
                            self.nodes.remove(&ino);
                        }
                    }
                }
            }
        }
    }
}

fn attr(ino: INodeNo, m: &Metadata, size: u64) -> FileAttr {
    let time = |secs: i64, nsecs: i64| {
        UNIX_EPOCH + Duration::new(secs.max(0) as u64, nsecs.clamp(0, 999_999_999) as u32)
    };
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: PAGE as u32,
        flags: 0,
    }
}

/// Gives a new file or folder to the caller, with its mode.
fn own(path: &Path, req: &Request, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
    std::os::unix::fs::chown(path, Some(req.uid()), Some(req.gid()))
}

/// The file system one mount serves.
struct Lazy {
    state: Arc<Mutex<State>>,
    stats: Arc<Mutex<Stats>>,
}

impl Lazy {
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
        let mut state = self.state();
        let result = (|| {
            let path = state.child(parent, name)?;
            std::fs::create_dir(&path)?;
            own(&path, req, mode & !umask)?;
            state.entry(path)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let result = (|| {
            let path = state.child(parent, name)?;
            state.forget_backing(&path);
            std::fs::remove_file(&path)?;
            Ok::<_, Errno>(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let result = (|| {
            let path = state.child(parent, name)?;
            std::fs::remove_dir(&path)?;
            state.forget_backing(&path);
            Ok::<_, Errno>(())
        })();
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
        let mut state = self.state();
        let result = (|| {
            let path = state.child(parent, name)?;
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
        })();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn read(path: &Path) -> Vec<u8> {
        let mut bytes = Vec::new();
        File::open(path).unwrap().read_to_end(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_cut_keeps_what_was_fsynced_and_drops_what_was_not() {
        let mut fs = LazyFs::mount().unwrap();
        let synced = fs.path().join("synced");
        let mut file = File::create(&synced).unwrap();
        file.write_all(b"kept").unwrap();
        file.sync_data().unwrap();
        file.write_all(b" and lost").unwrap();
        drop(file);
        let never = fs.path().join("never");
        std::fs::write(&never, vec![7; 100_000]).unwrap();
        // Before the cut, readers see everything written.
        assert_eq!(read(&synced), b"kept and lost");
        assert_eq!(read(&never).len(), 100_000);

        let (pages, files) = fs.cut();
        assert!(pages >= 25 && files == 2, "{pages} pages, {files} files");
        fs.remount().unwrap();
        assert_eq!(read(&synced), b"kept");
        // Created (metadata), never synced (data).
        assert_eq!(read(&never), b"");
        assert_eq!(fs.stats().cuts, 1);
    }

    #[test]
    fn after_a_cut_nothing_reads_or_writes_until_the_remount() {
        let mut fs = LazyFs::mount().unwrap();
        let path = fs.path().join("file");
        std::fs::write(&path, b"x").unwrap();
        fs.cut();
        let error = std::fs::write(&path, b"y").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(5), "EIO: {error}");
        assert!(File::open(&path).is_err());
        fs.remount().unwrap();
        std::fs::write(&path, b"y").unwrap();
        assert_eq!(read(&path), b"y");
    }

    #[test]
    fn a_rename_and_a_truncate_persist_at_once_the_data_only_once_synced() {
        let mut fs = LazyFs::mount().unwrap();
        let (from, to) = (fs.path().join("from"), fs.path().join("to"));
        let mut file = File::create(&from).unwrap();
        file.write_all(b"hello world").unwrap();
        file.sync_all().unwrap();
        file.set_len(5).unwrap();
        file.write_all(b"!").unwrap(); // at offset 11: a hole, then "!"
        drop(file);
        std::fs::rename(&from, &to).unwrap();
        assert_eq!(read(&to), b"hello\0\0\0\0\0\0!");
        fs.cut();
        fs.remount().unwrap();
        assert!(!from.exists());
        assert_eq!(read(&to), b"hello");
    }

    #[test]
    fn a_sync_through_one_descriptor_keeps_what_another_wrote() {
        let mut fs = LazyFs::mount().unwrap();
        let path = fs.path().join("shared");
        std::fs::write(&path, b"").unwrap();
        let mut writer = OpenOptions::new().append(true).open(&path).unwrap();
        writer.write_all(b"written here").unwrap();
        drop(writer);
        File::open(&path).unwrap().sync_all().unwrap();
        fs.cut();
        fs.remount().unwrap();
        assert_eq!(read(&path), b"written here");
    }
}
