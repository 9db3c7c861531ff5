//! The `server` binary: parse flags, start, serve until SIGTERM or Ctrl-C
//! (the shape both of the workspace's binaries share: `serve::main`); or
//! an operator's `server operations …`; or, as `server migrate`, a
//! deploy's migration job: migrate and exit.

use clap::Parser;
use server::config::Command;
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `server` with no subcommand logs by default (`RUST_LOG` wins).
const LOGS: &str = "info,tower_http=warn";

fn main() -> ExitCode {
    serve::install_crypto_provider();
    if let Some(ran) = server::operations::main() {
        return ran;
    }
    // Flags `serve::main` would refuse are left to it, which reports them.
    match server::Config::try_parse() {
        Ok(config) if matches!(config.command, Some(Command::Migrate)) => migrate(&config),
        _ => serve::main::<server::Application>(LOGS),
    }
}

/// `server migrate`: 0 once the database is migrated and this release
/// serves on it; 1 with one `error:` line otherwise.
fn migrate(config: &server::Config) -> ExitCode {
    serve::logs::init(LOGS);
    let migrated = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| {
            runtime
                .block_on(server::startup::migrate(config))
                .map_err(|e| format!("cannot migrate the database: {}", serve::Chain(&e)))
        });
    match migrated {
        Ok(()) => {
            println!("migrated: the database serves this release");
            ExitCode::SUCCESS
        }
        Err(line) => {
            eprintln!("error: {}", exactly_once::secrets::redact(&line));
            ExitCode::FAILURE
        }
    }
}
