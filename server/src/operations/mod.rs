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
mod confirm;
mod render;

pub use render::{record_json, table};

use crate::config::Config;
use crate::domain::{caller_of, SessionToken};
use crate::startup::{open_database, provider, state};
use act::Asked;
use clap::{Args, Parser, Subcommand};
use exactly_once::operator::{Intervention, ListFilter, OperationRef, OperationState, Settlement};
use exactly_once::{Any, Engine, IdempotencyKey};
use render::{print_json, said};
use serde_json::Value;
use std::process::ExitCode;
use std::time::Duration;

/// `server operations`: see the module's documentation.
#[derive(Debug, Clone, Args)]
pub struct Operations {
    /// What to do.
    #[command(subcommand)]
    pub command: OperationsCommand,
}

/// The subcommands of `server operations`.
#[derive(Debug, Clone, Subcommand)]
pub enum OperationsCommand {
    /// Unfinished operations, oldest first: running (a lease is held),
    /// stalled (the lease ran out: a retry or the completer goes on),
    /// needs-attention (set aside for an operator).
    List {
        /// Only this state (repeat for several): running, stalled, needs-attention.
        #[arg(long, value_name = "STATE", value_parser = parse_state)]
        state: Vec<OperationState>,
        /// Only operations started at least this long ago (`30s`, `5m`, `2h`).
        #[arg(long, value_name = "DUR", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// At most this many.
        #[arg(long, default_value_t = 100, value_name = "N")]
        limit: u32,
        /// JSON (an array) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One operation, in any state: its request, where it stands, its
    /// lease, failures, downstream key, recorded answer, times and the
    /// operators' actions on it.
    Show {
        #[command(flatten)]
        which: Which,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Runs one now, as the completer would: a stalled operation, or (with
    /// --force) one set aside, which is no longer set aside; recorded in
    /// the audit table.
    Retry {
        #[command(flatten)]
        which: Which,
        /// Why, for the audit table.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Retry one set aside for an operator, or started longer ago than
        /// --attention-after (the provider may have forgotten its key, and
        /// a retry could charge the card twice): only once the ledger is
        /// checked.
        #[arg(long)]
        force: bool,
        /// Go ahead without asking (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        by: By,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Records the final answer of an operation set aside: what the
    /// provider's ledger holds under its downstream key is shown first and
    /// must agree; the answer, the charge and an audit row commit together,
    /// and every retry of its key gets that answer from then on.
    Settle {
        #[command(flatten)]
        which: Which,
        /// What happened: `charged` (the provider's charge is recorded and
        /// answered 201) or `not-charged` (recorded as failed, answered 402).
        #[arg(long, value_name = "OUTCOME")]
        outcome: String,
        /// Why, for the audit table (required).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// The provider's charge id (`pch_…`), for `charged` when the ledger
        /// cannot be read (with `--unverified`).
        #[arg(long, value_name = "ID")]
        provider_charge: Option<String>,
        /// Settle on your word alone, without the provider's ledger (it
        /// cannot be reached, or has forgotten the key): `charged` needs
        /// --provider-charge, a ledger that can be read must not contradict
        /// it, and it is confirmed on a terminal or by --yes.
        #[arg(long)]
        unverified: bool,
        /// Show the provider's ledger and what settling would record, and
        /// change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Go ahead without asking (needed for --unverified when stdin is
        /// not a terminal).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        by: By,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Which operation: its `op`, or a caller's token and a key.
#[derive(Debug, Clone, Args)]
pub struct Which {
    /// The operation: the `op` of the logs and of `list` (12 to 64 hex digits).
    #[arg(value_name = "OP")]
    op: Option<String>,
    /// Or the caller's bearer token (or `sid` cookie), best given as
    /// OPERATIONS_TOKEN so that it stays out of the shell's history …
    #[arg(
        long,
        env = "OPERATIONS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// … and the Idempotency-Key it sent.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
}

/// Who acts.
#[derive(Debug, Clone, Args)]
pub struct By {
    /// Who you are, for the audit table (default: $USER); the
    /// operating-system user running the command is recorded beside it.
    #[arg(long, env = "USER", default_value = "operator", value_name = "NAME")]
    operator: String,
}

impl By {
    /// The audit table's who and why.
    fn intervention(self, reason: Option<String>) -> Intervention {
        Intervention {
            operator: self.operator,
            reason,
            os_user: Some(confirm::os_user()),
        }
    }
}

fn parse_state(raw: &str) -> Result<OperationState, String> {
    OperationState::parse(raw)
        .filter(OperationState::is_unfinished)
        .ok_or_else(|| format!("{raw:?}: a state is running, stalled or needs-attention"))
}

impl Which {
    /// The operation named: `OP`, or `--key` with the token (`--token`
    /// or `OPERATIONS_TOKEN`, which `OP` overrides).
    fn resolve(&self) -> Result<OperationRef, String> {
        match (&self.op, &self.key) {
            (Some(_), Some(_)) => Err("give the operation's `op` or --key, not both".into()),
            (Some(op), None) => OperationRef::parse(op).map_err(|e| e.to_string()),
            (None, Some(key)) => {
                let token = self.token.as_deref().ok_or(
                    "--key needs the caller's token: --token TOKEN, or OPERATIONS_TOKEN in the \
                     environment",
                )?;
                let token = SessionToken::parse(token).map_err(|e| e.to_string())?;
                let key = IdempotencyKey::parse(key.as_bytes()).map_err(|e| e.to_string())?;
                Ok(OperationRef::Key(caller_of(&token), key))
            }
            (None, None) => Err(
                "give the operation's `op`, or --key with the caller's token (--token or \
                 OPERATIONS_TOKEN)"
                    .into(),
            ),
        }
    }
}

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
            yes,
            by,
            json,
        } => {
            let asked = Asked { force, yes, json };
            let which = which.resolve()?;
            act::retry(config, &app, &which, by.intervention(reason), asked).await
        }
        OperationsCommand::Settle {
            which,
            outcome,
            reason,
            provider_charge,
            unverified,
            dry_run,
            yes,
            by,
            json,
        } => {
            let settlement = Settlement {
                outcome,
                by: by.intervention(Some(reason)),
                reference: provider_charge,
                unverified,
            };
            let asked = Asked {
                force: false,
                yes,
                json,
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
