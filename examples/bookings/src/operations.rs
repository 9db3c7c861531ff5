//! `bookings operations list | show OP | retry OP`: the operator's view of
//! unfinished bookings, against `--database` with no service running. Each
//! is a call of the engine's [`exactly_once::operator`] and a few lines of
//! printing: what any application on the engine writes to get them.
//! (Settling a booking set aside is not offered: [`crate::PartnerSteps`]
//! keeps the engine's default, which refuses, so its operators retry it
//! once the partner is fixed.)

use clap::Subcommand;
use exactly_once::operator::{Intervention, ListFilter, OperationRecord, OperationRef, Retried};
use exactly_once::{Any, Engine};

/// `bookings operations …`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Operations {
    /// Unfinished bookings, oldest first: running, stalled, needs-attention.
    List,
    /// One booking's operation, in any state.
    Show {
        /// The `op` of the logs (12 to 64 hex digits).
        op: String,
    },
    /// Runs one now, as the completer would (also one set aside).
    Retry {
        /// The `op` of the logs.
        op: String,
        /// Who retries it, for the audit table.
        #[arg(long, env = "USER", default_value = "operator")]
        operator: String,
    },
}

/// Runs `command` on `engine`; what it prints is its answer, `Err` why it
/// could not.
pub async fn run(engine: &Engine<Any>, command: &Operations) -> Result<(), String> {
    let error =
        |e: &(dyn std::error::Error + 'static)| exactly_once::workspace::Chain(e).to_string();
    match command {
        Operations::List => {
            let list = engine
                .list_operations(&ListFilter::default())
                .await
                .map_err(|e| error(&e))?;
            for record in &list {
                println!("{}", line(record));
            }
        }
        Operations::Show { op } => {
            let which = OperationRef::parse(op).map_err(|e| error(&e))?;
            let record = engine.find_operation(&which).await.map_err(|e| error(&e))?;
            println!("{}", line(&record));
            println!("downstream key: {}", record.downstream_key());
            if let Some(answer) = &record.response {
                println!(
                    "answer: {} {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                );
            }
        }
        Operations::Retry { op, operator } => {
            let which = OperationRef::parse(op).map_err(|e| error(&e))?;
            let by = Intervention::by(operator.as_str());
            match engine
                .retry_operation(&which, &by)
                .await
                .map_err(|e| error(&e))?
            {
                Retried::Finished(answer) => {
                    println!(
                        "finished: {} {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    )
                }
                Retried::Failed(e) => return Err(format!("not finished: {}", error(&e))),
            }
        }
    }
    Ok(())
}

/// One operation on one line: op, state, recovery point, age, attempts,
/// why it is set aside or last failed.
fn line(record: &OperationRecord) -> String {
    format!(
        "{} {} {} {}s {} {}",
        record.operation(),
        record.state,
        record.recovery_point,
        record.age.as_secs(),
        record.attempts,
        record
            .attention
            .as_deref()
            .or(record.last_error.as_deref())
            .unwrap_or("-")
    )
}
