//! A process whose clock is wrong on purpose: the environment that makes it
//! so, for [`Launch::env`](crate::Launch::env) or
//! [`ServerBuilder::env`](crate::ServerBuilder::env). [`shifted_by`] sets a
//! wall clock off by a fixed amount for the process's life; a
//! [`SteppedClock`] is stepped while the process runs (a wall clock that
//! jumps, a host that was suspended).
//!
//! It is an `LD_PRELOAD` library over `clock_gettime` (`shim/clock_shift.c`,
//! built with the system's C compiler into the target folder the first
//! time it is asked for), so the binary under test is the production one,
//! with no test-only flag.

use crate::binary::target_dir;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The environment variables that shift a process's wall clock by
/// `shift_ms` milliseconds (ahead when positive).
pub fn shifted_by(shift_ms: i64) -> Result<Vec<(String, String)>> {
    Ok(vec![
        (
            "LD_PRELOAD".to_owned(),
            library()?.to_string_lossy().into_owned(),
        ),
        ("TESTKIT_CLOCK_SHIFT_MS".to_owned(), shift_ms.to_string()),
    ])
}

/// A clock a test steps while the processes it was given to run: a file
/// the shim re-reads (at most every 20 ms) with the wall clock's shift and
/// the boot clock's (`CLOCK_BOOTTIME`) shift, in milliseconds. Processes
/// started with its [`env`](Self::env) see every step; a restarted one sees
/// the shift as it stands.
#[derive(Debug)]
pub struct SteppedClock {
    file: PathBuf,
    _dir: tempfile::TempDir,
    shifts: std::sync::Mutex<(i64, i64)>,
}

impl SteppedClock {
    /// A clock that reads right until it is stepped.
    pub fn new() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let clock = Self {
            file: dir.path().join("clock-shift"),
            _dir: dir,
            shifts: std::sync::Mutex::new((0, 0)),
        };
        clock.write(0, 0)?;
        Ok(clock)
    }

    /// The environment of a process on this clock.
    pub fn env(&self) -> Result<Vec<(String, String)>> {
        Ok(vec![
            (
                "LD_PRELOAD".to_owned(),
                library()?.to_string_lossy().into_owned(),
            ),
            (
                "TESTKIT_CLOCK_SHIFT_FILE".to_owned(),
                self.file.to_string_lossy().into_owned(),
            ),
        ])
    }

    /// The wall clock is set `shift_ms` off the true time (ahead when
    /// positive), as NTP or an operator would set it; the boot clock is
    /// left alone, as the kernel leaves it.
    pub fn set_wall(&self, shift_ms: i64) -> Result<()> {
        let boot = self.shifts.lock().unwrap().1;
        self.write(shift_ms, boot)
    }

    /// The host sleeps for `ms`: its wall and boot clocks go on by that
    /// much more than its monotonic clock, which stops during a suspend.
    pub fn suspend(&self, ms: i64) -> Result<()> {
        let (wall, boot) = *self.shifts.lock().unwrap();
        self.write(wall + ms, boot + ms)
    }

    fn write(&self, wall: i64, boot: i64) -> Result<()> {
        // Written aside and renamed, so the shim never reads half a line.
        let aside = self.file.with_extension("new");
        std::fs::write(&aside, format!("{wall} {boot}\n"))?;
        std::fs::rename(&aside, &self.file)?;
        *self.shifts.lock().unwrap() = (wall, boot);
        // The shim re-reads at most every 20 ms.
        std::thread::sleep(std::time::Duration::from_millis(40));
        Ok(())
    }
}

/// The compiled shim, built once per process.
fn library() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build() -> Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("shim/clock_shift.c");
    let out = target_dir()?.join("testkit");
    std::fs::create_dir_all(&out)?;
    // One file per process: concurrent test binaries never overwrite a
    // library another one has loaded.
    let library = out.join(format!("clock_shift-{}.so", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .status()
        .with_context(|| format!("running {cc} to build the clock shim (install gcc)"))?;
    if !status.success() {
        bail!("{cc} could not build {}", source.display());
    }
    Ok(library)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim really moves a child's wall clock (`date` reads it).
    #[test]
    fn a_shifted_process_reads_its_wall_clock_that_far_ahead() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let output = Command::new("date")
            .arg("+%s")
            .envs(shifted_by(3_600_000).unwrap())
            .output()
            .unwrap();
        let seen: i64 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(
            (seen - now - 3600).abs() <= 5,
            "date said {seen}, now is {now}"
        );
    }

    /// A stepped clock moves a running child's wall clock at each step: a
    /// shell reads `date` before and after the test steps it.
    #[test]
    fn a_stepped_clock_moves_a_running_process() {
        let clock = SteppedClock::new().unwrap();
        let child = Command::new("sh")
            .args(["-c", "date +%s; sleep 1; date +%s"])
            .envs(clock.env().unwrap())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        clock.set_wall(-86_400_000).unwrap();
        let output = child.wait_with_output().unwrap();
        let seen: Vec<i64> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect();
        let stepped = seen[1] - seen[0];
        assert!(
            (-86_400 - 2..=-86_400 + 3).contains(&stepped),
            "the second reading moved by {stepped} s"
        );
    }
}
