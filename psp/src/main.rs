//! The `psp` binary: parse flags, start, serve until SIGTERM or Ctrl-C.

use clap::Parser;
use psp::{telemetry, Application, Config};
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
            // clap's first line names the problem; the usage lines add noise.
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad arguments"));
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
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("listening on http://{}", app.local_addr());
        app.run_until_stopped(psp::serve::shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
