//! `server operations …` (docs/CONTRACT.md section 7): the operator's view
//! of unfinished and dead-lettered operations, against `--database` with no
//! server running (or beside running ones), on SQLite and PostgreSQL. Each
//! subcommand is a call of the engine's [`exactly_once::operator`]; the
//! shop adds only how a charge is settled and reconciled with the provider
//! ([`crate::steps`]).
//!
//! - `list [--state S]… [--older-than DUR] [--limit N] [--json]`;
//! - `show OP` (or `--token TOKEN --key KEY`) `[--json]`;
//! - `retry OP [--reason TEXT] [--force] [--yes]`: runs it now, as the
//!   completer would; one set aside, or started longer ago than
//!   `--attention-after`, only with `--force`; one that needs the provider
//!   only with `--psp-url`; confirmed on a terminal, or by `--yes`;
//! - `settle OP --outcome charged|not-charged --reason TEXT
//!   [--provider-charge ID] [--unverified] [--dry-run] [--yes]`: shows what
//!   the provider's ledger holds under the operation's downstream key, then
//!   records the final answer (refused when the ledger contradicts it, or
//!   its charge's amount or currency is not the operation's) and an audit
//!   row; `--dry-run` stops before recording; `--unverified` needs
//!   confirmation.
//!
//! Each audit row names `--operator` (free text, `$USER` by default) and
//! the operating-system user who ran the command. `--token` is also read
//! from `OPERATIONS_TOKEN`.
//!
//! The flags and environment are the server's (`--database`, `--psp-url`,
//! `--key-ttl`, `--smtp-url`, …), given before or after `operations`. Exit
//! 0 when the command did what it says, 1 when it could not (and one line
//! on stderr says why).

mod act;
mod command;
mod confirm;
mod render;

pub use command::{Acting, Operations, OperationsCommand, Which};
pub use render::{record_json, table};

use crate::config::Config;
use crate::startup::{open_database, provider, state};
use clap::Parser;
use exactly_once::operator::{ListFilter, Settlement};
use exactly_once::{Any, Engine};
use render::{print_json, said};
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;

/// The `server` binary's `main` when its flags name `operations`: runs the
/// subcommand and says how it ended; `None` for anything else (serving,
/// or flags the server's own `main` reports).
pub fn main() -> Option<ExitCode> {
    let mut config = Config::try_parse().ok()?;
    let command = match config.command.take()? {
        crate::config::Command::Operations(operations) => operations.command,
        crate::config::Command::Migrate => return None,
    };
    serve::logs::init("warn");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Some(ExitCode::FAILURE);
        }
    };
    Some(runtime.block_on(async {
        match run(&config, command).await {
            Ok(code) => code,
            Err(e) => {
                // A database URL's password, or a token, never reaches the screen.
                eprintln!("error: {}", exactly_once::secrets::redact(&e.to_string()));
                ExitCode::FAILURE
            }
        }
    }))
}

/// Runs one subcommand against the configured database; what it printed
/// on stdout is its answer.
pub async fn run(config: &Config, command: OperationsCommand) -> Result<ExitCode, String> {
    let db = open_database(config, false).await.map_err(|e| {
        format!(
            "cannot open the database: {}",
            exactly_once::workspace::Chain(&e)
        )
    })?;
    let provider = provider(config).map_err(|e| e.to_string())?;
    let app = state(db, config, provider);
    let engine = &app.engine;
    let ttl = config.key_ttl;
    match command {
        OperationsCommand::List {
            state,
            older_than,
            limit,
            json,
        } => {
            let filter = ListFilter {
                states: state,
                older_than: older_than.unwrap_or_default(),
                limit,
            };
            let records = engine
                .list_operations(&filter)
                .await
                .map_err(|e| exactly_once::workspace::Chain(&e).to_string())?;
            if json {
                let rows: Vec<Value> = records.iter().map(|r| record_json(r, ttl)).collect();
                print_json(&Value::Array(rows));
            } else {
                print!("{}", table(&records));
            }
            Ok(ExitCode::SUCCESS)
        }
        OperationsCommand::Show { which, json } => {
            let which = which.resolve()?;
            let record = engine.find_operation(&which).await.map_err(said)?;
            let actions = engine
                .operator_actions(&record)
                .await
                .map_err(|e| exactly_once::workspace::Chain(&e).to_string())?;
            let mut shown = record_json(&record, ttl);
            shown["actions"] = render::actions_json(&actions);
            if json {
                print_json(&shown);
            } else {
                print!("{}", render::details(&shown));
            }
            Ok(ExitCode::SUCCESS)
        }
        OperationsCommand::Retry {
            which,
            reason,
            force,
            acting,
        } => {
            let asked = acting.asked(force);
            let which = which.resolve()?;
            act::retry(config, &app, &which, acting.intervention(reason), asked).await
        }
        OperationsCommand::Settle {
            which,
            outcome,
            reason,
            provider_charge,
            unverified,
            dry_run,
            acting,
        } => {
            let asked = acting.asked(false);
            let settlement = Settlement {
                outcome,
                by: acting.intervention(Some(reason)),
                reference: provider_charge,
                unverified,
            };
            let which = which.resolve()?;
            act::settle(&app, &which, &settlement, dry_run, asked).await
        }
    }
}

/// `GET /operations` (only with `--chaos`, for the demo page's operator
/// panel): the unfinished operations as `list --json` shows them.
pub async fn unfinished_json(engine: &Engine<Any>, ttl: Duration) -> Result<Value, String> {
    let records = engine
        .list_operations(&ListFilter {
            limit: 50,
            ..ListFilter::default()
        })
        .await
        .map_err(|e| exactly_once::workspace::Chain(&e).to_string())?;
    Ok(Value::Array(
        records.iter().map(|r| record_json(r, ttl)).collect(),
    ))
}
