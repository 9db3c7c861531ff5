//! `bookings`: the seat booking service. Prints `listening on http://ADDR`
//! on stdout once it serves; logs on stderr (`RUST_LOG`). `bookings
//! operations list|show|retry` is the operator's view instead; `bookings
//! migrate` migrates the database and exits (a deploy's migration job).

use bookings::config::Command;
use bookings::{App, Config};
use clap::Parser;
use exactly_once::secrets::{redact, RedactedStderr};
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    // ring, whatever the features Cargo unified with other packages built
    // beside this one (reqwest can be given rustls without a provider);
    // an `Err` only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match Config::try_parse() {
        Ok(config) => config,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // clap repeats a refused value whole.
            eprint!("{}", redact(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(|| RedactedStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if config.command == Some(Command::Migrate) {
        return match runtime.block_on(bookings::app::migrate(&config)) {
            Ok(()) => {
                println!("migrated: the database serves this release");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "error: cannot migrate the database: {}",
                    redact(&exactly_once::workspace::Chain(&e).to_string())
                );
                ExitCode::FAILURE
            }
        };
    }
    runtime.block_on(async {
        if let Some(Command::Operations(command)) = &config.command {
            let ran = match bookings::app::open(&config, false).await {
                Ok((engine, _)) => bookings::operations::run(&engine, command).await,
                Err(e) => Err(exactly_once::workspace::Chain(&e).to_string()),
            };
            return match ran {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}", redact(&e));
                    ExitCode::FAILURE
                }
            };
        }
        let app = match App::build(config).await {
            Ok(app) => app,
            Err(e) => {
                eprintln!(
                    "error: {}",
                    redact(&exactly_once::workspace::Chain(&e).to_string())
                );
                return ExitCode::FAILURE;
            }
        };
        println!("listening on http://{}", app.local_addr());
        app.run_until_stopped(shutdown()).await;
        ExitCode::SUCCESS
    })
}

/// SIGTERM or Ctrl-C.
async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler installs");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
}
