//! The words of `server operations …`: its subcommands and their flags.

use super::confirm;
use crate::domain::{caller_of, SessionToken};
use clap::{Args, Subcommand};
use exactly_once::operator::{Intervention, OperationRef, OperationState};
use exactly_once::IdempotencyKey;
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
        #[command(flatten)]
        acting: Acting,
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
        #[command(flatten)]
        acting: Acting,
    },
}

/// What the operator said of asking: `--force`, `--yes`, `--json`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asked {
    pub(super) force: bool,
    pub(super) yes: bool,
    pub(super) json: bool,
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
pub struct Acting {
    /// Go ahead without asking (needed when stdin is not a terminal; a
    /// settlement asks only with --unverified).
    #[arg(long)]
    yes: bool,
    /// Who you are, for the audit table (default: $USER); the
    /// operating-system user running the command is recorded beside it.
    #[arg(long, env = "USER", default_value = "operator", value_name = "NAME")]
    operator: String,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Acting {
    /// What the operator said of asking, with `force` (`--force`).
    pub(super) fn asked(&self, force: bool) -> Asked {
        Asked {
            force,
            yes: self.yes,
            json: self.json,
        }
    }

    /// The audit table's who and why.
    pub(super) fn intervention(self, reason: Option<String>) -> Intervention {
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
    pub(super) fn resolve(&self) -> Result<OperationRef, String> {
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
