//! The `psp` binary: parse flags, start, serve until SIGTERM or Ctrl-C
//! (the shape both of the workspace's binaries share: `serve::main`).

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    serve::install_crypto_provider();
    serve::main::<psp::Application>("info")
}
