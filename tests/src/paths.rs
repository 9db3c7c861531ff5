//! Where things are: the workspace, the server binary, the page, the outputs.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the workspace")
        .to_path_buf()
}

/// Cargo's target folder: `CARGO_TARGET_DIR` when set (relative to the
/// workspace), else `target/` in the workspace.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace().join(dir),
        _ => workspace().join("target"),
    }
}

/// The debug `server` binary (`SERVER_BIN` overrides), which
/// `scripts/test-e2e.sh` builds first.
pub fn server_binary() -> Result<PathBuf> {
    let path = match std::env::var_os("SERVER_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => target_dir().join("debug").join("server"),
    };
    if !path.is_file() {
        bail!(
            "the server binary {} is missing: build it with `cargo build -p server` \
             (scripts/test-e2e.sh does), or point SERVER_BIN at one",
            path.display()
        );
    }
    Ok(path)
}

/// The page the server serves (`www/`), with the wasm client built into it.
pub fn www_dir() -> Result<PathBuf> {
    let www = workspace().join("www");
    if !www.join("pkg").join("client_wasm.js").is_file() {
        bail!(
            "{} is missing: build the browser client with scripts/build-wasm.sh \
             (scripts/test-e2e.sh does)",
            www.join("pkg/client_wasm.js").display()
        );
    }
    Ok(www)
}

/// Where the stories leave screenshots and logs: `target/e2e/`.
pub fn output_dir() -> Result<PathBuf> {
    let dir = target_dir().join("e2e");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
