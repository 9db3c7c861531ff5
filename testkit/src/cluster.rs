//! A PostgreSQL cluster the test owns, to kill: its own data folder and
//! port, the postmaster a child of the test (so SIGKILL reaches it and
//! nothing is left a zombie), started again on the same port and data
//! after a crash. Never the shared `TEST_POSTGRES_URL` server, which other
//! tests are using.
//!
//! As root, PostgreSQL runs as the `postgres` user (it refuses root), the
//! way `scripts/postgres.sh` starts it. On drop (a panic included) the
//! cluster is stopped with `pg_ctl stop -m immediate` and its folder
//! removed. Needs PostgreSQL installed (`/usr/lib/postgresql/*/bin`, which
//! `scripts/postgres.sh` installs).

use crate::process::tail;
use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tempfile::TempDir;

mod backup;
mod faults;
mod replication;

/// How long a start (crash recovery included) may take on a loaded
/// 2-core machine.
const STARTUP: Duration = Duration::from_secs(30);

/// The user PostgreSQL runs as when the test runs as root.
#[derive(Debug, Clone, Copy)]
struct Owner {
    uid: u32,
    gid: u32,
}

/// A PostgreSQL cluster: `initdb` in a temporary folder, the postmaster on
/// a port of 127.0.0.1 chosen at start and kept across restarts.
#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    dir: TempDir,
    data: PathBuf,
    port: u16,
    owner: Option<Owner>,
    /// `-c` settings after the kit's own.
    settings: Vec<String>,
    postmaster: Mutex<Option<Child>>,
}

impl Postgres {
    /// `initdb` (trust authentication, user `postgres`) and a start on a
    /// free port; returns once it accepts connections.
    pub fn start() -> Result<Self> {
        Self::start_with(&[])
    }

    /// [`Postgres::start`] with more settings (`name=value`, each passed
    /// as `-c`, after the kit's own, so they win: `fsync=on`,
    /// `synchronous_standby_names=*`).
    pub fn start_with(settings: &[&str]) -> Result<Self> {
        let cluster = Self::new(None, settings)?;
        cluster.initdb(false)?;
        cluster.restart()?;
        Ok(cluster)
    }

    /// [`Postgres::start_with`], the data folder in a new folder under
    /// `parent` (a [`LazyFs`](crate::LazyFs) mount, say); the log and the
    /// socket stay in a temporary folder elsewhere. `initdb` syncs what it
    /// wrote there before it returns (a power cut can come next).
    pub fn start_in(parent: &Path, settings: &[&str]) -> Result<Self> {
        let cluster = Self::new(Some(parent), settings)?;
        cluster.initdb(true)?;
        cluster.restart()?;
        Ok(cluster)
    }

    /// A cluster that takes TLS connections only: `ssl = on` with `ca`'s
    /// server certificate (for `127.0.0.1` and `localhost`; PostgreSQL
    /// wants its key owned by its user, mode 0600), and `pg_hba.conf`
    /// with `hostssl` rules only (a plain TCP connection is refused; the
    /// Unix socket, [`Postgres::socket_url`], stays open to the test).
    pub fn start_tls(ca: &crate::TestCa, settings: &[&str]) -> Result<Self> {
        let mut all = vec![
            "ssl=on",
            "ssl_cert_file=server.crt",
            "ssl_key_file=server.key",
        ];
        all.extend_from_slice(settings);
        let cluster = Self::new(None, &all)?;
        cluster.initdb(false)?;
        for (from, to) in [(ca.cert_pem(), "server.crt"), (ca.key_pem(), "server.key")] {
            let path = cluster.data.join(to);
            std::fs::copy(&from, &path)
                .with_context(|| format!("copying {} into the cluster", from.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            if let Some(owner) = cluster.owner {
                std::os::unix::fs::chown(&path, Some(owner.uid), Some(owner.gid))?;
            }
        }
        std::fs::write(
            cluster.data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl replication all 127.0.0.1/32 trust\n\
             hostnossl all all 0.0.0.0/0 reject\n",
        )?;
        cluster.restart()?;
        Ok(cluster)
    }

    /// `postgres://postgres@%2F…:PORT/postgres`: the cluster's Unix socket
    /// (no TLS there, as libpq never uses it on a socket).
    pub fn socket_url(&self) -> String {
        let dir = self.dir.path().display().to_string().replace('/', "%2F");
        format!("postgres://postgres@{dir}:{}/postgres", self.port)
    }

    /// A cluster not started yet: its folders, owner and port.
    fn new(parent: Option<&Path>, settings: &[&str]) -> Result<Self> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new().prefix("testkit-pg-").tempdir()?;
        let owner = postgres_owner()?.map(|(uid, gid)| Owner { uid, gid });
        let data = match parent {
            None => dir.path().join("data"),
            Some(parent) => {
                let data = parent.join(format!("pg-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir(&data)
                    .with_context(|| format!("creating {}", data.display()))?;
                data
            }
        };
        if let Some(owner) = owner {
            for folder in [dir.path(), data.as_path()] {
                if folder.exists() {
                    std::os::unix::fs::chown(folder, Some(owner.uid), Some(owner.gid))
                        .context("handing the cluster folder to postgres")?;
                }
            }
        }
        Ok(Self {
            bin,
            dir,
            data,
            port: steady_port()?,
            owner,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            postmaster: Mutex::new(None),
        })
    }

    fn initdb(&self, sync: bool) -> Result<()> {
        let initdb = self
            .command("initdb")
            .arg("-D")
            .arg(&self.data)
            .args(["-A", "trust", "-U", "postgres"])
            .args((!sync).then_some("--no-sync"))
            .args(["-E", "UTF8", "--locale=C"])
            .output()
            .context("running initdb")?;
        if !initdb.status.success() {
            bail!(
                "initdb failed ({}):\n{}{}",
                initdb.status,
                String::from_utf8_lossy(&initdb.stdout),
                String::from_utf8_lossy(&initdb.stderr)
            );
        }
        Ok(())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        Self::url_at(self.addr())
    }

    /// The same user and database at another address (a proxy in front
    /// of the cluster).
    pub fn url_at(addr: SocketAddr) -> String {
        format!("postgres://postgres@{addr}/postgres")
    }

    /// Everything the postmaster and its processes logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `pg_ctl stop -m fast`, an administrator's restart: every session is
    /// ended at once (its transaction rolled back, its client told
    /// "terminating connection due to administrator command"), then a
    /// checkpoint. Returns once the postmaster has exited.
    pub fn stop_fast(&self) -> Result<()> {
        self.stop("fast")
    }

    fn stop(&self, mode: &str) -> Result<()> {
        let mut postmaster = self.postmaster.lock().unwrap();
        let mut child = postmaster
            .take()
            .ok_or_else(|| anyhow!("pg_ctl stop -m {mode}: PostgreSQL is not running"))?;
        let stop = self.pg_ctl_stop(mode);
        let status = child.wait()?;
        stop.with_context(|| format!("pg_ctl stop -m {mode} (postmaster {status})"))
    }

    /// Starts the postmaster on the same port and data (after a kill, with
    /// crash recovery), retrying while the old processes still hold the
    /// shared memory or the port; returns once it accepts connections,
    /// with the moment the check that found it accepting began (it came
    /// back between that moment and the return).
    pub fn restart(&self) -> Result<Instant> {
        let mut postmaster = self.postmaster.lock().unwrap();
        if postmaster.is_some() {
            bail!("restart: PostgreSQL is still running");
        }
        let deadline = Instant::now() + STARTUP;
        loop {
            let mut child = self.spawn_postmaster()?;
            match self.wait_ready(&mut child, deadline) {
                Ok(ready) => {
                    *postmaster = Some(child);
                    return Ok(ready);
                }
                Err(e) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e.context(format!(
                        "PostgreSQL did not start within {STARTUP:?}; its log:\n{}",
                        tail(&self.log_path())
                    )));
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn data(&self) -> PathBuf {
        self.data.clone()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// A PostgreSQL program, run as its owner, in the cluster folder.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        if let Some(owner) = self.owner {
            // Run as postgres, with a home of its own: libpq inside the
            // server (Citus connecting to its workers) would read root's
            // `~/.postgresql/postgresql.crt`, and be refused.
            command
                .uid(owner.uid)
                .gid(owner.gid)
                .env("HOME", self.dir.path());
        }
        command
    }

    fn spawn_postmaster(&self) -> Result<Child> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        self.command("postgres")
            .arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=300"])
            // A killed process loses nothing the OS has: commits survive
            // kills, and the shared machine is spared the fsyncs.
            .args(["-c", "fsync=off"])
            // Checkpoints often enough that a cluster's WAL stays small:
            // a run starts dozens of clusters on one disk.
            .args(["-c", "max_wal_size=128MB", "-c", "min_wal_size=32MB"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            // A group of its own: a signal to the test's group (a
            // terminal's Ctrl-C) does not reach it; each backend makes a
            // group of its own anyway (see `Postgres::freeze`).
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(log.try_clone()?)
            .spawn()
            .context("starting postgres")
    }

    /// Waits until `pg_isready` says the cluster accepts connections;
    /// when that check began.
    fn wait_ready(&self, child: &mut Child, deadline: Instant) -> Result<Instant> {
        loop {
            let checked = Instant::now();
            if let Some(status) = child.try_wait()? {
                bail!("postgres exited ({status}) before accepting connections");
            }
            let ready = self
                .command("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-t", "2"])
                .arg("-p")
                .arg(self.port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .context("running pg_isready")?;
            if ready.success() {
                return Ok(checked);
            }
            if Instant::now() >= deadline {
                bail!("PostgreSQL does not accept connections");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let output = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "-t", "30", "stop"])
            .output()
            .context("running pg_ctl")?;
        if !output.status.success() {
            bail!(
                "pg_ctl stop -m {mode} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let postmaster = self.postmaster.get_mut().map(Option::take);
        if let Ok(Some(mut child)) = postmaster {
            if self.pg_ctl_stop("immediate").is_err() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "--- PostgreSQL log ({}), last lines:\n{}",
                self.log_path().display(),
                tail(&self.log_path())
            );
        }
    }
}

/// The processes whose working folder is `data` (a cluster's: the
/// postmaster and every child, orphaned ones included).
pub(crate) fn processes_in(data: &Path) -> Vec<u32> {
    let data = std::fs::canonicalize(data).unwrap_or_else(|_| data.to_owned());
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            (cwd == data).then_some(pid)
        })
        .collect()
}

/// As root: the uid and gid of the `postgres` user, which PostgreSQL (and
/// Patroni) must run as; else `None`.
pub(crate) fn postgres_owner() -> Result<Option<(u32, u32)>> {
    if run_stdout(Command::new("id").arg("-u"))? != "0" {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32> {
        run_stdout(Command::new("id").args([flag, "postgres"]))?
            .parse()
            .context("`id postgres` printed no number")
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

/// The newest `/usr/lib/postgresql/VERSION/bin`.
pub(crate) fn bin_dir() -> Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .with_context(|| {
            format!(
                "PostgreSQL is not installed ({} is missing; scripts/postgres.sh installs it)",
                root.display()
            )
        })?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("postgres").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| anyhow!("no PostgreSQL server binaries under {}", root.display()))
}

/// A free port of 127.0.0.1 below the ephemeral range, so that while the
/// cluster is down no outgoing connection (of any process) takes it as its
/// local port and blocks the restart.
pub(crate) fn steady_port() -> Result<u16> {
    let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let low = 10_000.min(ephemeral / 2);
    for _ in 0..100 {
        let random = uuid::Uuid::new_v4().as_u128();
        let port = low + (random % u128::from(ephemeral - low)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port between {low} and {ephemeral}")
}

/// The process group of `pid` (`/proc/PID/stat`, field 5).
pub(crate) fn process_group(pid: u32) -> Result<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("/proc/{pid}/stat has no command name"))?;
    after
        .split_whitespace()
        .nth(2)
        .and_then(|g| g.parse().ok())
        .ok_or_else(|| anyhow!("/proc/{pid}/stat has no process group"))
}

/// A command's trimmed stdout; an error unless it succeeds.
fn run_stdout(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
