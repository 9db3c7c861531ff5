//! `server operations …` (docs/CONTRACT.md section 7): the operator's view
//! of unfinished and dead-lettered operations, against `--database` with no
//! server running (or beside running ones), on SQLite and PostgreSQL. Each
//! subcommand is a call of the engine's [`exactly_once::operator`]; the
//! shop adds only how a charge is settled and reconciled with the provider
//! ([`crate::steps`]).
//!
//! - `list [--state S]… [--older-than DUR] [--limit N] [--json]`;
//! - `show OP` (or `--token TOKEN --key KEY`) `[--json]`;
//! - `retry OP [--reason TEXT]`: runs it now, as the completer would, also
//!   one set aside;
//! - `settle OP --outcome charged|not-charged --reason TEXT
//!   [--provider-charge ID] [--unverified]`: shows what the provider's ledger
//!   holds under the operation's downstream key, then records the final
//!   answer (refused when the ledger contradicts it) and an audit row.
//!
//! The flags and environment are the server's (`--database`, `--psp-url`,
//! `--key-ttl`, `--smtp-url`, …), given before or after `operations`. Exit
//! 0 when the command did what it says, 1 when it could not (and one line
//! on stderr says why).

mod render;

pub use render::{record_json, table};

use crate::config::Config;
use crate::domain::{caller_of, SessionToken};
use crate::startup::{open_database, provider, state};
use clap::{Args, Parser, Subcommand};
use exactly_once::operator::{
    Intervention, ListFilter, OperationRef, OperationState, OperatorError, Retried, Settlement,
};
use exactly_once::{Any, Engine, IdempotencyKey};
use serde_json::{json, Value};
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
    /// Runs one now, as the completer would: a stalled operation, or one
    /// set aside (which is no longer set aside); recorded in the audit table.
    Retry {
        #[command(flatten)]
        which: Which,
        /// Why, for the audit table.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
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
        /// cannot be reached, or has forgotten the key).
        #[arg(long)]
        unverified: bool,
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
    #[arg(value_name = "OP", required_unless_present = "token")]
    op: Option<String>,
    /// Or the caller's bearer token (or `sid` cookie) …
    #[arg(long, value_name = "TOKEN", requires = "key", conflicts_with = "op")]
    token: Option<String>,
    /// … and the Idempotency-Key it sent.
    #[arg(long, value_name = "KEY", requires = "token")]
    key: Option<String>,
}

/// Who acts.
#[derive(Debug, Clone, Args)]
pub struct By {
    /// Who you are, for the audit table (default: $USER).
    #[arg(long, env = "USER", default_value = "operator", value_name = "NAME")]
    operator: String,
}

fn parse_state(raw: &str) -> Result<OperationState, String> {
    OperationState::parse(raw)
        .filter(OperationState::is_unfinished)
        .ok_or_else(|| format!("{raw:?}: a state is running, stalled or needs-attention"))
}

impl Which {
    fn resolve(&self) -> Result<OperationRef, String> {
        match (&self.op, &self.token, &self.key) {
            (Some(op), _, _) => OperationRef::parse(op).map_err(|e| e.to_string()),
            (None, Some(token), Some(key)) => {
                let token = SessionToken::parse(token).map_err(|e| e.to_string())?;
                let key = IdempotencyKey::parse(key.as_bytes()).map_err(|e| e.to_string())?;
                Ok(OperationRef::Key(caller_of(&token), key))
            }
            _ => Err("give the operation's `op`, or --token and --key".into()),
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
                eprintln!("error: {e}");
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
            exactly_once::error::Chain(&e)
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
                .map_err(|e| exactly_once::error::Chain(&e).to_string())?;
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
                .map_err(|e| exactly_once::error::Chain(&e).to_string())?;
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
            by,
            json,
        } => {
            let which = which.resolve()?;
            let by = Intervention {
                operator: by.operator,
                reason,
            };
            if let Ok(record) = engine.find_operation(&which).await {
                if record.age >= config.attention_after {
                    eprintln!(
                        "warning: operation {} started {} ago, past --attention-after: the \
                         provider may have forgotten its key; `show` and the ledger first",
                        record.operation(),
                        humantime::format_duration(Duration::from_secs(record.age.as_secs()))
                    );
                }
            }
            let retried = engine.retry_operation(&which, &by).await.map_err(said)?;
            let after = engine.find_operation(&which).await.map_err(said)?;
            let (finished, outcome) = match &retried {
                Retried::Finished(response) => (true, render::response_json(response)),
                Retried::Failed(e) => (
                    false,
                    json!({ "error": exactly_once::error::Chain(e).to_string() }),
                ),
            };
            let report = json!({
                "op": after.operation().to_string(),
                "finished": finished,
                "state": after.state.as_str(),
                "outcome": outcome,
            });
            if json {
                print_json(&report);
            } else if finished {
                println!(
                    "operation {} finished; its key now answers {}",
                    after.operation(),
                    render::answer_line(&report["outcome"])
                );
            } else {
                println!(
                    "operation {} did not finish ({}): {}",
                    after.operation(),
                    after.state,
                    report["outcome"]["error"].as_str().unwrap_or_default()
                );
            }
            Ok(if finished {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        OperationsCommand::Settle {
            which,
            outcome,
            reason,
            provider_charge,
            unverified,
            by,
            json,
        } => {
            let which = which.resolve()?;
            let record = engine.find_operation(&which).await.map_err(said)?;
            // What the provider holds, shown before anything is recorded.
            let ledger = match engine.reconcile(&record).await {
                Ok(found) => found.unwrap_or(Value::Null),
                Err(refusal) => json!({ "error": refusal.to_string() }),
            };
            if !json {
                print!("{}", render::ledger_lines(&record, &ledger));
            }
            let settlement = Settlement {
                outcome,
                by: Intervention {
                    operator: by.operator,
                    reason: Some(reason),
                },
                reference: provider_charge,
                unverified,
            };
            let answer = engine
                .settle_operation(&which, &settlement)
                .await
                .map_err(said)?;
            let report = json!({
                "op": record.operation().to_string(),
                "outcome": settlement.outcome,
                "ledger": ledger,
                "answer": render::response_json(&answer),
            });
            if json {
                print_json(&report);
            } else {
                println!(
                    "settled operation {} as {}: its key now answers {}",
                    record.operation(),
                    settlement.outcome,
                    render::answer_line(&report["answer"])
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// An operator error as the one line it prints.
fn said(e: OperatorError) -> String {
    exactly_once::error::Chain(&e).to_string()
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialise")
    );
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
        .map_err(|e| exactly_once::error::Chain(&e).to_string())?;
    Ok(Value::Array(
        records.iter().map(|r| record_json(r, ttl)).collect(),
    ))
}
