//! Where a workspace binary is: the path in its environment variable
//! (`SERVER_BIN` for `server`), else the binary of that name in the target
//! folder of the running test (`target/debug/deps/api-…` →
//! `target/debug/server`), which is where `cargo test -p server` and
//! `cargo build -p server` put it.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A binary of this workspace, by name.
#[derive(Debug, Clone, Copy)]
pub struct Binary {
    name: &'static str,
    package: &'static str,
    env: &'static str,
}

impl Binary {
    /// The binary `name` of package `package`, overridden by the path in
    /// the environment variable `env`.
    pub const fn new(name: &'static str, package: &'static str, env: &'static str) -> Self {
        Self { name, package, env }
    }

    /// The `server` binary (`SERVER_BIN` overrides).
    pub const fn server() -> Self {
        Self::new("server", "server", "SERVER_BIN")
    }

    /// The binary's name, for messages.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The binary's path; an error that names the build command when it is
    /// not there.
    pub fn path(&self) -> Result<PathBuf> {
        if let Some(path) = std::env::var_os(self.env).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            if !path.is_file() {
                bail!("{}={} is not a file", self.env, path.display());
            }
            return Ok(path);
        }
        let path = profile_dir()?.join(self.name);
        if !path.is_file() {
            bail!(
                "the {} binary {} is missing: build it with `cargo build -p {}` \
                 (or point {} at one)",
                self.name,
                path.display(),
                self.package,
                self.env
            );
        }
        Ok(path)
    }
}

/// The target folder's profile folder of the running test
/// (`target/debug`), where cargo puts the workspace's binaries.
pub fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the running test binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    // Tests run from `target/<profile>/deps/`; examples and binaries from
    // `target/<profile>/` itself.
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    Ok(dir.to_path_buf())
}

/// The target folder of the running test (`target/`).
pub fn target_dir() -> Result<PathBuf> {
    let profile = profile_dir()?;
    Ok(profile.parent().unwrap_or(&profile).to_path_buf())
}
