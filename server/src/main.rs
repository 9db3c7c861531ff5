//! The `server` binary: parse flags, start, serve until SIGTERM or Ctrl-C
//! (the shape both of the workspace's binaries share: `serve::main`), or
//! run an operator's `server operations …` command.

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(ran) = server::operations::main() {
        return ran;
    }
    serve::main::<server::Application>("info,tower_http=warn")
}
