//! One workspace binary as a child process. Every binary here takes
//! `--listen ADDR` and prints `listening on http://ADDR` on stdout once it
//! serves; a [`Process`] passes `--listen`, reads that line, keeps stdout
//! drained, sends stderr to a log file (to the test's stderr with
//! `TEST_LOG` set), and sends SIGKILL on drop. It can be signalled, waited
//! for, and restarted on the same address with the same flags; a start can
//! also be killed on purpose, before or while it prints that line (see
//! [`crate::killed_start`]).
//!
//! Process management is synchronous (`std::process`): every call returns
//! within a few seconds, so it is usable from `#[tokio::test]` and from the
//! plain threads of the crash harness alike.
//!
//! One file though over 400 lines: starting, reading the address,
//! logging, restarting on the same address and killing are one life cycle
//! of one child, and they share its state.

use crate::binary::Binary;
use crate::first_line::{FirstLine, LISTENING, STARTUP};
use crate::killed_start::{self, KillAt, KilledStart};
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a restart keeps trying while the old address is not free yet.
const REBIND: Duration = Duration::from_secs(10);
/// Lines of the log shown when a test panics with the process alive.
const LOG_TAIL: usize = 40;

/// `Deref` and `DerefMut` to the [`Process`] in the field `process` of a
/// wrapper (`Server`, `Psp`): the wrapper then has every process
/// operation. Attributes (a doc comment) go on the `Deref` impl.
macro_rules! deref_to_process {
    ($(#[$attr:meta])* $wrapper:ty) => {
        $(#[$attr])*
        impl std::ops::Deref for $wrapper {
            type Target = $crate::process::Process;

            fn deref(&self) -> &Self::Target {
                &self.process
            }
        }

        impl std::ops::DerefMut for $wrapper {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.process
            }
        }
    };
}
pub(crate) use deref_to_process;

/// What to start: a binary, its flags (all but `--listen`), its
/// environment and its log file.
#[derive(Debug, Clone)]
pub struct Launch {
    binary: Binary,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    log: Option<PathBuf>,
}

impl Launch {
    /// `binary` with no flags, in this process's environment.
    pub fn new(binary: Binary) -> Self {
        Self {
            binary,
            args: Vec::new(),
            env: Vec::new(),
            log: None,
        }
    }

    /// Adds one command-line argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds command-line arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable of the process.
    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((name.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Removes an environment variable this process has from the child's.
    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Self {
        self.env.push((name.as_ref().to_owned(), None));
        self
    }

    /// Appends stderr to `path` (created if missing) instead of a file in
    /// a temporary folder.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// The log file: the one [`Launch::log`] names, else one in a
    /// temporary folder (returned too: the file lives as long as it).
    fn log_file(&self) -> Result<(PathBuf, Option<TempDir>)> {
        if let Some(log) = &self.log {
            return Ok((log.clone(), None));
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-log-", self.binary.name()))
            .tempdir()?;
        let log = dir.path().join(format!("{}.log", self.binary.name()));
        Ok((log, Some(dir)))
    }

    /// Starts the process on a free port of 127.0.0.1.
    pub fn start(self) -> Result<Process> {
        Process::start(self, "127.0.0.1:0")
    }

    /// Starts the process on a free port of 127.0.0.1 and sends it SIGKILL
    /// `at` the moment given, whether it printed its address or not: what
    /// it had got to. Its log goes to the file [`Launch::log`] names (else
    /// to a temporary one, gone on return).
    pub fn start_and_kill(self, at: &KillAt) -> Result<KilledStart> {
        let path = self.binary.path()?;
        let (log, _scratch) = self.log_file()?;
        let logged = killed_start::log_length(&log);
        let (mut child, line) = spawn_child(&path, &self, "127.0.0.1:0", &log)?;
        killed_start::kill(&mut child, &line, &log, logged, at)
    }
}

/// A running child process and the address it printed. SIGKILL on drop.
#[derive(Debug)]
pub struct Process {
    launch: Launch,
    path: PathBuf,
    child: Child,
    addr: SocketAddr,
    /// `http`, or `https` for a process that serves TLS.
    scheme: String,
    log: PathBuf,
    _scratch: Option<TempDir>,
}

impl Process {
    /// Starts `launch` with `--listen listen` and waits for its address.
    pub fn start(launch: Launch, listen: &str) -> Result<Self> {
        let path = launch.binary.path()?;
        let (log, scratch) = launch.log_file()?;
        let (child, (scheme, addr)) = spawn(&path, &launch, listen, &log)?;
        Ok(Self {
            launch,
            path,
            child,
            addr,
            scheme,
            log,
            _scratch: scratch,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (`https://` for a process serving TLS), without a
    /// trailing slash.
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// `http://ADDR` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The process id of the current process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file that holds its stderr (empty with `TEST_LOG` set).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Everything it (and the processes it replaced on restart) logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends the signal `name` (`TERM`, `INT`, `KILL`, …).
    pub fn signal(&mut self, name: &str) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("cannot send SIG{name}: the process already exited ({status})");
        }
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -{name} {} failed ({status})", self.child.id());
        }
        Ok(())
    }

    /// SIGKILL, then reaps it: the way an OOM killer or a power cut ends
    /// a process. Its exit status.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        self.child.kill().context("SIGKILL")?;
        Ok(self.child.wait()?)
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Waits up to `timeout` for it to exit on its own.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not exit within {timeout:?}",
                    self.launch.binary.name()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts it again on the same address with the same flags, as an
    /// orchestrator would after a crash; keeps trying for a few seconds
    /// while the address is not free yet. The old process must have exited
    /// (see [`Process::kill`]).
    pub fn restart(&mut self) -> Result<()> {
        self.ensure_exited()?;
        let listen = self.addr.to_string();
        let deadline = Instant::now() + REBIND;
        loop {
            match spawn(&self.path, &self.launch, &listen, &self.log) {
                Ok((child, (scheme, addr))) => {
                    self.child = child;
                    self.addr = addr;
                    self.scheme = scheme;
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("restarting on {listen}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Starts it again on the same address with the same flags, like
    /// [`Process::restart`], but sends SIGKILL `at` the moment given
    /// without waiting for its address: a crash during start-up. What it
    /// had got to. The process stays dead: [`Process::restart`] starts the
    /// next one.
    pub fn restart_and_kill(&mut self, at: &KillAt) -> Result<KilledStart> {
        self.ensure_exited()?;
        let logged = killed_start::log_length(&self.log);
        let (child, line) =
            spawn_child(&self.path, &self.launch, &self.addr.to_string(), &self.log)?;
        self.child = child;
        killed_start::kill(&mut self.child, &line, &self.log, logged, at)
    }

    /// An error unless the process has exited: a restart would start a
    /// second one beside it.
    fn ensure_exited(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            bail!(
                "restart: the old {} process is still running",
                self.launch.binary.name()
            );
        }
        Ok(())
    }

    /// The last lines of the log, for error messages.
    fn log_tail(&self) -> String {
        tail(&self.log)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let alive = matches!(self.child.try_wait(), Ok(None));
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() && std::env::var_os("TEST_LOG").is_none() {
            eprintln!(
                "--- {} log ({}{}), last lines:\n{}",
                self.launch.binary.name(),
                self.log.display(),
                if alive { "" } else { ", had exited" },
                self.log_tail()
            );
        }
    }
}

/// Starts the process and reads its `listening on http://ADDR` line
/// (`https://`); the scheme and the address.
fn spawn(
    path: &Path,
    launch: &Launch,
    listen: &str,
    log: &Path,
) -> Result<(Child, (String, SocketAddr))> {
    let (mut child, line) = spawn_child(path, launch, listen, log)?;
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    let line = match line.recv_timeout(STARTUP) {
        Ok(Some(Ok(line))) => line,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{name} printed nothing within {STARTUP:?}; its log ({}):\n{}",
                log.display(),
                tail(log)
            );
        }
        Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            let status = child.wait()?;
            bail!(
                "{name} --listen {listen} exited ({status}) before listening; its log ({}):\n{}",
                log.display(),
                tail(log)
            );
        }
    };
    let addr = line
        .strip_prefix(LISTENING)
        .and_then(|rest| rest.split_once("://"))
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
        .and_then(|(scheme, addr)| Some((scheme.to_owned(), addr.trim().parse().ok()?)));
    match addr {
        Some(addr) => Ok((child, addr)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name} printed {line:?} instead of `listening on http://ADDR`")
        }
    }
}

/// Spawns the process with its stderr in `log` and a thread that hands
/// over its first line of stdout, then keeps stdout drained so the process
/// never blocks on a full pipe (the thread ends when the process does).
fn spawn_child(
    path: &Path,
    launch: &Launch,
    listen: &str,
    log: &Path,
) -> Result<(Child, FirstLine)> {
    let mut command = Command::new(path);
    command.arg("--listen").arg(listen).args(&launch.args);
    for (name, value) in &launch.env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let stderr = if std::env::var_os("TEST_LOG").is_some() {
        Stdio::inherit()
    } else {
        File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening the log {}", log.display()))?
            .into()
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", path.display()))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let (first_line, line) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = first_line.send(lines.next());
        for _ in lines {}
    });
    Ok((child, line))
}

/// The last lines of a log file.
pub(crate) fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
}
