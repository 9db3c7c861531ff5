//! What one mount knows: our inode numbers and the backing paths they
//! stand for, and each file's unsynced pages over its backing file.

use fuser::{Errno, FileAttr, FileType, INodeNo, Request};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// The unit of unsynced data.
pub(super) const PAGE: u64 = 4096;

/// What one mount knows.
pub(super) struct State {
    pub(super) nodes: HashMap<u64, Node>,
    /// Backing inode number → ours (a backing number freed by an unlink
    /// and reused gets a new one of ours, so pages never mix).
    pub(super) by_backing: HashMap<u64, u64>,
    pub(super) next_ino: u64,
    /// Cut: the disk is gone.
    pub(super) dead: bool,
    /// The next `fsync` of a file whose path ends so fails with `EIO`,
    /// syncing nothing ([`super::LazyFs::fail_next_fsync`]).
    pub(super) failing_fsync: Option<String>,
}

/// A file or folder, by our inode number.
pub(super) struct Node {
    pub(super) path: PathBuf,
    /// The backing file, open while the file is open or has unsynced pages.
    pub(super) file: Option<File>,
    pub(super) opens: u32,
    /// Unsynced pages by index.
    pub(super) dirty: BTreeMap<u64, Box<[u8]>>,
    /// How far unsynced writes reach (the file's length is at least this).
    pub(super) written_end: u64,
}

impl Node {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            file: None,
            opens: 0,
            dirty: BTreeMap::new(),
            written_end: 0,
        }
    }

    pub(super) fn backing(&mut self) -> std::io::Result<&File> {
        if self.file.is_none() {
            let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
            self.file = Some(file);
        }
        Ok(self.file.as_ref().expect("just opened"))
    }

    pub(super) fn metadata(&self) -> std::io::Result<Metadata> {
        match &self.file {
            Some(file) => file.metadata(),
            None => std::fs::symlink_metadata(&self.path),
        }
    }

    /// The length readers see: the synced one, or further by unsynced writes.
    pub(super) fn length(&self, metadata: &Metadata) -> u64 {
        metadata.len().max(self.written_end)
    }

    pub(super) fn read(&mut self, offset: u64, size: u64) -> std::io::Result<Vec<u8>> {
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

    pub(super) fn write(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
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
    pub(super) fn truncate(&mut self, size: u64) -> std::io::Result<()> {
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
    pub(super) fn sync(&mut self) -> std::io::Result<u64> {
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
    pub(super) fn new(backing: PathBuf) -> anyhow::Result<Self> {
        let root = std::fs::metadata(&backing)?;
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, Node::new(backing));
        Ok(Self {
            nodes,
            by_backing: HashMap::from([(root.ino(), INodeNo::ROOT.0)]),
            next_ino: INodeNo::ROOT.0 + 1,
            dead: false,
            failing_fsync: None,
        })
    }

    pub(super) fn node(&mut self, ino: INodeNo) -> Result<&mut Node, Errno> {
        if self.dead {
            return Err(Errno::EIO);
        }
        self.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)
    }

    pub(super) fn child(&mut self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.node(parent)?.path.join(name))
    }

    /// Our inode for the backing file `backing_ino` at `path`.
    pub(super) fn intern(&mut self, backing_ino: u64, path: PathBuf) -> u64 {
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
    pub(super) fn entry(&mut self, path: PathBuf) -> Result<FileAttr, Errno> {
        let metadata = std::fs::symlink_metadata(&path)?;
        let ino = self.intern(metadata.ino(), path);
        self.attr(INodeNo(ino))
    }

    pub(super) fn attr(&mut self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let node = self.node(ino)?;
        let metadata = node.metadata()?;
        let size = node.length(&metadata);
        Ok(attr(ino, &metadata, size))
    }

    /// `path` is about to be unlinked or replaced: if that removes its
    /// last name, its backing inode number may be reused for another file.
    pub(super) fn forget_backing(&mut self, path: &Path) {
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
pub(super) fn own(path: &Path, req: &Request, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
    std::os::unix::fs::chown(path, Some(req.uid()), Some(req.gid()))
}
