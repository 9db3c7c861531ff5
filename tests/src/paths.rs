//! Where things are: the workspace, the page, the outputs. (The server
//! binary is the test kit's to find.)

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The workspace root (the parent of this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the workspace")
        .to_path_buf()
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

/// Where the stories leave screenshots and logs: `target/e2e/` (the
/// target folder of the running test).
pub fn output_dir() -> Result<PathBuf> {
    let dir = testkit::binary::target_dir()?.join("e2e");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
