//! A process whose wall clock is wrong on purpose: the environment that
//! makes it so, for [`Launch::env`](crate::Launch::env) or
//! [`ServerBuilder::env`](crate::ServerBuilder::env).
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
}
