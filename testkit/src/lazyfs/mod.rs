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

//!
//! - `state`: what one mount knows: the inodes, their backing paths and
//!   their unsynced pages (read, write, truncate, sync).
//! - `fuse`: the FUSE operations (the `fuser` crate's `Filesystem`) on it.

mod fuse;
mod state;
mod stats;
#[cfg(test)]
mod tests;

use anyhow::{bail, Context, Result};
use fuser::{BackgroundSession, Config, MountOption, SessionACL};
use state::State;
use stats::lock;
pub use stats::Stats;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long [`LazyFs::remount`] waits for the last user of the old mount
/// to let go of it.
const UNMOUNT: Duration = Duration::from_secs(20);

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

    /// The next `fsync` or `fdatasync` of a file whose path ends with
    /// `suffix` (`"-wal"`) fails with `EIO` and syncs nothing: a disk error
    /// at write-back. Its pages stay in memory, as a page cache keeps them,
    /// so every process that reads the file sees them until a
    /// [`LazyFs::cut`] drops them.
    pub fn fail_next_fsync(&self, suffix: &str) {
        lock(&self.state).failing_fsync = Some(suffix.to_owned());
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
    fuser::spawn_mount(fuse::Lazy { state, stats }, mountpoint, &config)
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
