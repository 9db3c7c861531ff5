//! How `server operations` shows what it found: JSON for scripts (the
//! fields `list --json` and `show --json` print), a table and plain lines
//! for people.

use exactly_once::operator::{ActionRecord, OperationRecord, OperationState, OperatorError};
use exactly_once::StoredResponse;
use serde_json::{json, Value};
use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One operation as JSON: `op` (the logs' 12 digits) and `operation` (the
/// whole hash), `caller` (its hash, never the token), `key`, `state`,
/// `recovery_point`, `resume_state`, `fingerprint`, `generation`,
/// `downstream_key`, `lease` (`holder`, `left_seconds`, negative once run
/// out), `attempts`, `last_error`, `attention`, `created`, `age_seconds`,
/// `answered` and `expires` (RFC 3339, wall clock; `answered` counted back
/// from the expiry by `key_ttl`), and `answer` (`status`, `headers`,
/// `body`).
pub fn record_json(record: &OperationRecord, key_ttl: Duration) -> Value {
    let now = SystemTime::now();
    let finished = record.state == OperationState::Finished;
    let expires = (!record.state.is_unfinished()).then(|| shifted(now, record.expires_in_ms));
    let answered = finished.then(|| {
        let ttl = i64::try_from(key_ttl.as_millis()).unwrap_or(i64::MAX);
        shifted(now, record.expires_in_ms.saturating_sub(ttl))
    });
    json!({
        "op": record.operation().to_string(),
        "operation": hex::encode(record.operation().as_bytes()),
        "caller": record.caller.to_string(),
        "key": record.key.as_ref(),
        "state": record.state.as_str(),
        "recovery_point": record.recovery_point,
        "resume_state": record.resume_state.as_deref().map(parsed),
        "fingerprint": hex::encode(record.fingerprint.as_bytes()),
        "generation": record.generation,
        "downstream_key": record.downstream_key(),
        "lease": record.holder().map(|holder| json!({
            "holder": holder,
            "left_seconds": record.lease_left_ms.map(|ms| ms as f64 / 1000.0),
        })),
        "attempts": record.attempts,
        "last_error": record.last_error,
        "attention": record.attention,
        "created": rfc3339(now.checked_sub(record.age).unwrap_or(UNIX_EPOCH)),
        "age_seconds": record.age.as_secs_f64(),
        "answered": answered.map(rfc3339),
        "expires": expires.map(rfc3339),
        "answer": record.response.as_ref().map(response_json),
    })
}

/// A recorded answer as JSON: `status`, `headers`, `body` (parsed when it
/// is JSON, else text).
pub(super) fn response_json(response: &StoredResponse) -> Value {
    let headers: serde_json::Map<String, Value> = response
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    json!({
        "status": response.status,
        "headers": headers,
        "body": parsed(&String::from_utf8_lossy(&response.body)),
    })
}

/// The audit rows as JSON.
pub(super) fn actions_json(actions: &[ActionRecord]) -> Value {
    actions
        .iter()
        .map(|action| {
            json!({
                "at": rfc3339(UNIX_EPOCH + Duration::from_millis(action.at_ms.max(0).unsigned_abs())),
                "action": action.action,
                "outcome": action.outcome,
                "status": action.status,
                "reason": action.reason,
                "operator": action.operator,
                "os_user": action.os_user,
            })
        })
        .collect()
}

/// Text that is JSON, parsed; other text as a string.
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// `now` moved by `ms` (later when positive).
fn shifted(now: SystemTime, ms: i64) -> SystemTime {
    let by = Duration::from_millis(ms.unsigned_abs());
    let moved = if ms >= 0 {
        now.checked_add(by)
    } else {
        now.checked_sub(by)
    };
    moved.unwrap_or(now)
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A duration as people read it, to the second (`3m 12s`).
fn ago(duration: Duration) -> String {
    humantime::format_duration(Duration::from_secs(duration.as_secs())).to_string()
}

/// The unfinished operations as a table, one line each, with what an
/// operator does next in the last column.
pub fn table(records: &[OperationRecord]) -> String {
    if records.is_empty() {
        return "no unfinished operations\n".to_owned();
    }
    let mut out = format!(
        "{:<12}  {:<15}  {:<16}  {:>9}  {:<14}  {:>8}  {}\n",
        "OP", "STATE", "POINT", "AGE", "LEASE", "ATTEMPTS", "WHY"
    );
    for record in records {
        let lease = match record.lease_left_ms {
            Some(ms) if ms > 0 => format!("{} left", ago(Duration::from_millis(ms.unsigned_abs()))),
            Some(ms) => format!("out {} ago", ago(Duration::from_millis(ms.unsigned_abs()))),
            None => "-".to_owned(),
        };
        let why = record
            .attention
            .as_deref()
            .or(record.last_error.as_deref())
            .unwrap_or("-");
        let _ = writeln!(
            out,
            "{:<12}  {:<15}  {:<16}  {:>9}  {:<14}  {:>8}  {}",
            record.operation().to_string(),
            record.state.as_str(),
            clipped(&record.recovery_point, 16),
            ago(record.age),
            lease,
            record.attempts,
            clipped(why, 100)
        );
    }
    out
}

fn clipped(text: &str, at: usize) -> String {
    let one_line = text.replace('\n', " ");
    match one_line.char_indices().nth(at) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// `show`'s text: one `name: value` line per field of [`record_json`] (and
/// the actions), in its order.
pub(super) fn details(shown: &Value) -> String {
    const ORDER: [&str; 20] = [
        "op",
        "operation",
        "state",
        "recovery_point",
        "attention",
        "attempts",
        "last_error",
        "lease",
        "caller",
        "key",
        "fingerprint",
        "generation",
        "downstream_key",
        "resume_state",
        "created",
        "age_seconds",
        "answered",
        "expires",
        "answer",
        "actions",
    ];
    let mut out = String::new();
    let fields = ORDER
        .iter()
        .filter_map(|name| Some((*name, shown.get(*name)?)));
    for (name, value) in fields {
        match (name, value) {
            ("actions", Value::Array(actions)) => {
                let _ = writeln!(out, "{:<15} {}", "actions:", actions.len());
                for action in actions {
                    let _ = writeln!(
                        out,
                        "  {} {} by {}{}{}{}: {}",
                        action["at"].as_str().unwrap_or_default(),
                        action["action"].as_str().unwrap_or_default(),
                        action["operator"].as_str().unwrap_or_default(),
                        action["os_user"]
                            .as_str()
                            .map(|u| format!(" (os user {u})"))
                            .unwrap_or_default(),
                        action["outcome"]
                            .as_str()
                            .map(|o| format!(" as {o}"))
                            .unwrap_or_default(),
                        action["status"]
                            .as_u64()
                            .map(|s| format!(" ({s})"))
                            .unwrap_or_default(),
                        action["reason"].as_str().unwrap_or("-"),
                    );
                }
            }
            (_, Value::Null) => {
                let _ = writeln!(out, "{:<15} -", format!("{name}:"));
            }
            (_, Value::String(text)) => {
                let _ = writeln!(out, "{:<15} {text}", format!("{name}:"));
            }
            (_, other) => {
                let _ = writeln!(out, "{:<15} {other}", format!("{name}:"));
            }
        }
    }
    out
}

/// An answer as one line: `201 {"id": …}`.
pub(super) fn answer_line(answer: &Value) -> String {
    format!("{} {}", answer["status"], answer["body"])
}

/// What `settle` shows before it records anything: the operation, and
/// what the provider's ledger holds under its downstream key.
pub(super) fn ledger_lines(record: &OperationRecord, ledger: &Value) -> String {
    let mut out = format!(
        "operation {} ({}, at {}): {}\n",
        record.operation(),
        record.state,
        record.recovery_point,
        record.attention.as_deref().unwrap_or("-")
    );
    if let Some(error) = ledger["error"].as_str() {
        let _ = writeln!(out, "the provider's ledger: not read: {error}");
        return out;
    }
    let Some(charges) = ledger["charges"].as_array() else {
        let _ = writeln!(
            out,
            "the provider's ledger: nothing to show for this operation"
        );
        return out;
    };
    let key = ledger["idempotency_key"].as_str().unwrap_or_default();
    if charges.is_empty() {
        let _ = writeln!(
            out,
            "the provider's ledger ({}) holds no charge under its key {key}",
            ledger["ledger"].as_str().unwrap_or_default()
        );
    }
    for charge in charges {
        let _ = writeln!(
            out,
            "the provider's ledger holds {} ({} {}) under its key {key}",
            charge["id"].as_str().unwrap_or_default(),
            charge["amount"],
            charge["currency"].as_str().unwrap_or_default()
        );
    }
    out
}

/// An operator error as the one line it prints.
pub(super) fn said(e: OperatorError) -> String {
    exactly_once::workspace::Chain(&e).to_string()
}

pub(super) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialise")
    );
}
