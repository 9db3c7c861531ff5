//! `retry` and `settle`: the two subcommands that change an operation,
//! each refusing, with nothing changed, what could make things worse.

use super::command::Asked;
use super::confirm;
use super::render::{self, print_json, said};
use crate::config::Config;
use crate::operation::charge::{ProviderVerdict, CHARGE_CREATED};
use crate::state::AppState;
use crate::steps::ShopSteps;
use exactly_once::operator::{
    Intervention, OperationRef, OperationState, OperatorError, Retried, Settlement,
};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::Duration;

/// `retry`: refused, with nothing changed, for an operation set aside or
/// past `--attention-after` (without `--force`), for one that needs the
/// provider when no `--psp-url` is configured, and without confirmation;
/// otherwise run to its end as the completer would.
pub(super) async fn retry(
    config: &Config,
    app: &AppState,
    which: &OperationRef,
    by: Intervention,
    asked: Asked,
) -> Result<ExitCode, String> {
    let engine = &app.engine;
    let record = engine.find_operation(which).await.map_err(said)?;
    let op = record.operation();
    let age = humantime::format_duration(Duration::from_secs(record.age.as_secs()));
    if matches!(
        record.state,
        OperationState::Running | OperationState::Finished | OperationState::Expired
    ) {
        return Err(said(OperatorError::WrongState {
            op,
            state: record.state,
            what: "only a stalled operation, or one set aside, is retried",
        }));
    }
    if !asked.force {
        if record.state == OperationState::NeedsAttention {
            return Err(format!(
                "operation {op} is set aside for an operator ({}): not retried; reconcile it \
                 with `show` and the provider's ledger and settle it, or retry it with --force \
                 once its cause is fixed",
                record.attention.as_deref().unwrap_or("no reason recorded")
            ));
        }
        if record.age >= config.attention_after {
            return Err(format!(
                "operation {op} started {age} ago, past --attention-after ({}): the provider may \
                 have forgotten its key, and a retry could charge the card twice; not retried; \
                 reconcile it with `show` and the provider's ledger, or retry it with --force",
                humantime::format_duration(config.attention_after)
            ));
        }
    }
    if record.recovery_point == CHARGE_CREATED && app.provider.is_none() {
        return Err(format!(
            "operation {op} waits to charge the card at the payment provider, and no --psp-url \
             (PSP_URL) is configured here: the provider was not asked and nothing changed; give \
             the server's --psp-url"
        ));
    }
    confirm::confirmed(
        asked.yes,
        &format!(
            "retry operation {op} ({}, at {}, started {age} ago)?",
            record.state, record.recovery_point
        ),
        "retried",
    )?;
    let retried = engine.retry_operation(which, &by).await.map_err(said)?;
    let after = engine.find_operation(which).await.map_err(said)?;
    let (finished, outcome) = match &retried {
        Retried::Finished(response) => (true, render::response_json(response)),
        Retried::Failed(e) => (
            false,
            json!({ "error": exactly_once::workspace::Chain(e).to_string() }),
        ),
    };
    let report = json!({
        "op": after.operation().to_string(),
        "finished": finished,
        "state": after.state.as_str(),
        "outcome": outcome,
    });
    if asked.json {
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

/// `settle`: the provider's ledger shown first; with `--dry-run`, what
/// settling would record, and nothing changed; otherwise (confirmed, when
/// `--unverified`) the answer, the charge and the audit row recorded.
pub(super) async fn settle(
    app: &AppState,
    which: &OperationRef,
    settlement: &Settlement,
    dry_run: bool,
    asked: Asked,
) -> Result<ExitCode, String> {
    let engine = &app.engine;
    let record = engine.find_operation(which).await.map_err(said)?;
    let op = record.operation();
    if record.state != OperationState::NeedsAttention {
        return Err(said(OperatorError::WrongState {
            op,
            state: record.state,
            what: "only an operation set aside for an operator is settled (retry a stalled one)",
        }));
    }
    // What the provider holds, shown before anything is recorded.
    let ledger = match engine.reconcile(&record).await {
        Ok(found) => found.unwrap_or(Value::Null),
        Err(refusal) => json!({ "error": refusal.to_string() }),
    };
    if !asked.json {
        print!("{}", render::ledger_lines(&record, &ledger));
    }
    if dry_run {
        let steps = ShopSteps {
            provider: app.provider.clone(),
            receipts: app.receipts.clone(),
        };
        let verdict = steps
            .settlement_verdict(&record.view(), settlement)
            .await
            .map_err(|refusal| format!("not settled: {refusal} (dry run: nothing changed)"))?;
        let would = would_record(&verdict, settlement);
        if asked.json {
            print_json(&json!({
                "op": op.to_string(),
                "dry_run": true,
                "outcome": settlement.outcome,
                "ledger": ledger,
                "would_record": would,
            }));
        } else {
            println!(
                "dry run: settling operation {op} as {} would record the charge {} ({}), its \
                 key answering {}, and an audit row by {} (os user {}); nothing was changed",
                settlement.outcome,
                would["charge_status"].as_str().unwrap_or_default(),
                would["provider_charge"]
                    .as_str()
                    .unwrap_or("no provider charge"),
                would["answer_status"],
                settlement.by.operator,
                settlement.by.os_user.as_deref().unwrap_or("-"),
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if settlement.unverified {
        confirm::confirmed(
            asked.yes,
            &format!(
                "settle operation {op} as {} on your word alone, without the provider's ledger?",
                settlement.outcome
            ),
            "settled",
        )?;
    }
    let answer = engine
        .settle_operation(which, settlement)
        .await
        .map_err(said)?;
    let report = json!({
        "op": op.to_string(),
        "outcome": settlement.outcome,
        "ledger": ledger,
        "answer": render::response_json(&answer),
    });
    if asked.json {
        print_json(&report);
    } else {
        println!(
            "settled operation {op} as {}: its key now answers {}",
            settlement.outcome,
            render::answer_line(&report["answer"])
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What a settlement to `verdict` records, for `--dry-run`.
fn would_record(verdict: &ProviderVerdict, settlement: &Settlement) -> Value {
    let provider_charge = match verdict {
        ProviderVerdict::Charged(id) => Some(id.to_string()),
        _ => None,
    };
    let (charge_status, answer_status) = match verdict {
        ProviderVerdict::Charged(_) => ("succeeded", 201),
        _ => ("failed", 402),
    };
    json!({
        "charge_status": charge_status,
        "provider_charge": provider_charge,
        "answer_status": answer_status,
        "operator": settlement.by.operator,
        "os_user": settlement.by.os_user,
        "reason": settlement.by.reason,
    })
}
