//! A start killed on purpose: a process spawned and sent SIGKILL at a
//! chosen moment, a while after its spawn or as soon as its log shows some
//! text, whether it printed `listening on` yet or not; and what it had got
//! to when the signal came. The crash harness kills servers this way while
//! they open or migrate their database. See [`crate::Launch::start_and_kill`],
//! [`crate::Process::restart_and_kill`] and
//! [`crate::ServerBuilder::start_and_kill`].

use crate::first_line::{FirstLine, LISTENING, STARTUP};
use anyhow::Result;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

/// The signal number of SIGKILL.
const SIGKILL: i32 = 9;
/// How often the log is read while waiting for a text in it.
const POLL: Duration = Duration::from_micros(200);

/// When a start gets its SIGKILL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillAt {
    /// This long after its spawn.
    After(Duration),
    /// As soon as its log shows this text (read every 200 µs), or once it
    /// printed `listening on` or exited, or after 30 s, whichever comes
    /// first. With `TEST_LOG` set the log stays empty: it then dies as it
    /// listens.
    Logged(String),
}

/// What a start killed on purpose had got to when SIGKILL came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KilledStart {
    /// It had not printed `listening on` yet: it was still starting
    /// (opening or migrating its database, say).
    Starting,
    /// It had printed `listening on`: it was serving.
    Listening,
    /// It had exited on its own before the kill (a start that failed, or
    /// an address not free yet), with this status.
    Exited(ExitStatus),
}

/// How long `log` is now (0 when missing): where a new process's lines
/// begin.
pub(crate) fn log_length(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// SIGKILL `at` the moment given to `child`, just spawned, whose first line
/// of stdout `line` hands over and whose lines start at byte `from` of
/// `log`; then reaps it. What it had got to: its first line is read once
/// it is dead (the pipe then ends), so a line printed before the kill is
/// never missed.
pub(crate) fn kill(
    child: &mut Child,
    line: &FirstLine,
    log: &Path,
    from: u64,
    at: &KillAt,
) -> Result<KilledStart> {
    let mut first = None;
    match at {
        KillAt::After(after) => std::thread::sleep(*after),
        KillAt::Logged(text) => {
            let deadline = Instant::now() + STARTUP;
            while Instant::now() < deadline
                && child.try_wait()?.is_none()
                && !logged_since(log, from).contains(text.as_str())
            {
                match line.try_recv() {
                    Ok(printed) => {
                        first = Some(printed);
                        break;
                    }
                    Err(TryRecvError::Empty) => std::thread::sleep(POLL),
                    Err(TryRecvError::Disconnected) => break,
                }
            }
        }
    }
    let _ = child.kill();
    let status = child.wait()?;
    if status.signal() != Some(SIGKILL) {
        return Ok(KilledStart::Exited(status));
    }
    let first = first.or_else(|| line.recv_timeout(STARTUP).ok());
    Ok(match first {
        Some(Some(Ok(line))) if line.starts_with(LISTENING) => KilledStart::Listening,
        _ => KilledStart::Starting,
    })
}

/// What `log` holds from byte `from` on.
fn logged_since(log: &Path, from: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(log) {
        let _ = file.seek(SeekFrom::Start(from));
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
