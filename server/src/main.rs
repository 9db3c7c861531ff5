//! The `server` binary: parse flags, start, serve until SIGTERM or Ctrl-C.

use clap::Parser;
use server::error::Chain;
use server::{telemetry, Application, Config};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config = match Config::try_parse() {
        Ok(config) => config,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let message = e.kind().to_string();
            let first_line = e.to_string();
            let first_line = first_line.lines().next().unwrap_or(&message);
            eprintln!("{first_line}");
            return ExitCode::from(2);
        }
    };
    telemetry::init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let app = match Application::build(config).await {
            Ok(app) => app,
            Err(e) => {
                eprintln!("error: {}", Chain(&e));
                return ExitCode::FAILURE;
            }
        };
        println!("listening on http://{}", app.local_addr());
        app.run_until_stopped(server::serve::shutdown_signal())
            .await;
        ExitCode::SUCCESS
    })
}
