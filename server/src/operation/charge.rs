//! `POST /charges`: its operations and their answers.
//!
//! Without a provider a charge is one phase, [`RecordCharge`]: the charge
//! row, the receipt (when there is one to send) and the answer commit with
//! the key. With a provider it is two phases around the provider call:
//! [`StartCharge`] records the charge as `pending` and stops at
//! [`CHARGE_CREATED`] with a [`PendingCharge`];
//! [`FinishCharge`] records the provider's verdict, the receipt and the
//! answer in one commit.

use super::receipt::{Receipt, Receipts};
use crate::domain::{
    Amount, Caller, Charge, ChargeId, ChargeStatus, Currency, NewCharge, OperationId,
    PaymentMethod, ProviderChargeId,
};
use crate::error::Problem;
use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::{OneStatement, Transaction};
use exactly_once::Sqlite;
use exactly_once::{Lease, Operation, PhaseEnd, RunContext, StoredResponse};
use http::StatusCode;
use serde::{Deserialize, Serialize};

/// Without a provider: the charge, succeeded, in one phase. Its rows and
/// its answer are made before the database is touched (the store only
/// writes them), so no writer or transaction spends time rendering.
#[derive(Debug)]
pub struct RecordCharge {
    /// The charge to write.
    pub charge: Charge,
    /// Its receipt, when receipts are sent (`--smtp-url`) and it has an
    /// address.
    pub receipt: Option<Receipt>,
    /// The answer recorded with the key.
    pub response: StoredResponse,
}

impl RecordCharge {
    /// The charge `request` asks for, `caller`'s, succeeded at `created`
    /// (Unix seconds), with its receipt if `receipts` sends one.
    pub fn new(request: NewCharge, receipts: &Receipts, caller: &Caller, created: i64) -> Self {
        let charge = Charge::new(request, ChargeStatus::Succeeded, created);
        Self {
            receipt: receipts.for_charge(caller, &charge),
            response: created_response(&charge),
            charge,
        }
    }
}

/// With a provider, the first phase: the charge recorded as `pending`.
#[derive(Debug)]
pub struct StartCharge {
    /// What the caller asked for.
    pub request: NewCharge,
}

/// With a provider, the last phase: the provider's verdict recorded.
#[derive(Debug)]
pub struct FinishCharge {
    /// The charge it finishes.
    pub charge: ChargeId,
    /// What the provider said.
    pub verdict: ProviderVerdict,
    /// Whether its receipt is sent.
    pub receipts: Receipts,
}

/// The recovery point of a charge recorded as `pending`; the provider has
/// not (as far as we know) charged it. Next: call the provider with the
/// downstream key, then finish ([`crate::steps`]).
pub const CHARGE_CREATED: &str = "charge_created";

/// What a stopped charge resumes from: what the provider is asked to
/// charge. Stored as JSON with the recovery point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCharge {
    /// How the provider call's `Idempotency-Key` is derived. A state
    /// recorded by an earlier release has no such field: it is
    /// [`KeyScheme::PerOperation`], and goes on with the key it may have
    /// sent already.
    #[serde(default)]
    pub key_scheme: KeyScheme,
    /// Our charge's id.
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency code.
    pub currency: String,
    /// The card, as the provider knows it.
    pub payment_method: String,
}

/// How a stopped charge's downstream key is derived, and what the provider
/// is sent with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScheme {
    /// From the caller and the key alone (releases before per-run keys):
    /// only ever read from states those releases stored.
    #[default]
    PerOperation,
    /// From the caller, the key and the charge this run created (releases
    /// before per-life keys): a run that a restore forgot made another
    /// charge row, so its retry charged the card again. Only read from
    /// states those releases stored.
    PerRun,
    /// From the caller, the key, the request and the key's generation
    /// ([`exactly_once::Lease::downstream_key`]), and the provider request
    /// a pure function of the operation (its metadata names the operation,
    /// not our charge row): a run that a restore, a point-in-time recovery
    /// or an asynchronous failover made the database forget sends the
    /// provider the same key and the same request again, and adopts its
    /// answer; a key reused after its record expired is the key's next
    /// generation, a new charge.
    PerLife,
}

/// The provider's final word on a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderVerdict {
    /// Charged, under this provider id.
    Charged(ProviderChargeId),
    /// The card was declined (`code` as the provider gave it): nothing was
    /// charged.
    Declined {
        /// `card_declined`, …
        code: String,
    },
    /// The provider refused the request itself (an unknown payment method):
    /// nothing was charged.
    Refused {
        /// The provider's explanation.
        message: String,
    },
    /// Not the provider's word: an operator settled a charge set aside as
    /// not made (`server operations settle --outcome not-charged`), having
    /// found no charge under its key in the provider's ledger.
    NotCharged,
}

impl ProviderVerdict {
    /// The status the charge ends with.
    pub fn status(&self) -> ChargeStatus {
        match self {
            Self::Charged(_) => ChargeStatus::Succeeded,
            Self::Declined { .. } | Self::Refused { .. } | Self::NotCharged => ChargeStatus::Failed,
        }
    }

    /// The provider's charge id, when it charged.
    pub fn provider_charge(&self) -> Option<&ProviderChargeId> {
        match self {
            Self::Charged(id) => Some(id),
            _ => None,
        }
    }
}

impl StartCharge {
    /// Where the start phase stops, for a charge just recorded as pending.
    pub fn stop(charge: &Charge) -> PhaseEnd {
        let pending = PendingCharge {
            key_scheme: KeyScheme::PerLife,
            id: charge.id.to_string(),
            amount: charge.amount.get(),
            currency: charge.currency.to_string(),
            payment_method: charge.payment_method.to_string(),
        };
        PhaseEnd::stop(CHARGE_CREATED, &pending)
    }
}

/// The downstream key of a charge whose first phase was recorded by a
/// release that derived it from the caller and the key alone (before runs
/// had keys of their own): such a run must go on with the key it may
/// already have sent.
fn legacy_downstream_key(operation: &OperationId) -> String {
    format!("eo_{}", hex::encode(operation.as_bytes()))
}

impl PendingCharge {
    /// The `Idempotency-Key` the provider is sent for this charge: the same
    /// for every attempt, resumption and instance of this operation (and,
    /// for [`KeyScheme::PerLife`], of a run of it the database forgot).
    pub fn downstream_key(&self, lease: &Lease) -> String {
        match self.key_scheme {
            KeyScheme::PerOperation => legacy_downstream_key(&lease.operation()),
            KeyScheme::PerRun => lease.downstream_key_of_run(&self.id),
            KeyScheme::PerLife => lease.downstream_key(),
        }
    }

    /// The provider request's `metadata`: for [`KeyScheme::PerLife`], the
    /// operation (the `op` of the logs and of `server operations`) and its
    /// generation, the same for every run of it, by which an operator
    /// finds the provider's charge of an operation in the provider's
    /// ledger; before, our charge row's id, as those releases sent it (a
    /// resumed charge must send what it may have sent already).
    pub fn provider_metadata(&self, lease: &Lease) -> serde_json::Value {
        match self.key_scheme {
            KeyScheme::PerOperation | KeyScheme::PerRun => {
                serde_json::json!({ "charge_id": self.id })
            }
            KeyScheme::PerLife => serde_json::json!({
                "operation": lease.operation().to_string(),
                "generation": lease.generation.to_string(),
            }),
        }
    }

    /// Reads the state a start phase stored.
    pub fn from_state(state: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(state)
    }

    /// The amount, as parsed when the charge was created.
    pub fn amount(&self) -> Option<Amount> {
        Amount::parse(self.amount).ok()
    }

    /// The currency, as parsed when the charge was created.
    pub fn currency(&self) -> Option<Currency> {
        Currency::parse(&self.currency).ok()
    }

    /// The card.
    pub fn payment_method(&self) -> Option<PaymentMethod> {
        PaymentMethod::parse(&self.payment_method)
    }
}

impl Operation<Sqlite> for RecordCharge {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        on_sqlite::record_charge(self, conn, at)
    }
}

impl PostgresOperation for RecordCharge {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        on_postgres::record_charge(self, tx, at).await
    }

    fn one_statement(&self) -> Option<OneStatement> {
        on_postgres::record_charge_one_statement(self)
    }
}

impl Operation<Sqlite> for StartCharge {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        on_sqlite::start_charge(self, conn, at)
    }
}

impl PostgresOperation for StartCharge {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        on_postgres::start_charge(self, tx, at).await
    }
}

impl Operation<Sqlite> for FinishCharge {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        on_sqlite::finish_charge(self, conn, at)
    }
}

impl PostgresOperation for FinishCharge {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        on_postgres::finish_charge(self, tx, at).await
    }
}

/// The answer of `caller`'s finished charge, and the receipt to send with
/// it.
pub fn finished(
    charge: &Charge,
    verdict: &ProviderVerdict,
    receipts: &Receipts,
    caller: &Caller,
) -> (PhaseEnd, Option<Receipt>) {
    let response = match verdict {
        ProviderVerdict::Charged(_) => created_response(charge),
        ProviderVerdict::Declined { code } => Problem::new(
            StatusCode::PAYMENT_REQUIRED,
            "card-declined",
            "Card declined",
            &format!(
                "the card was declined ({code}); nothing was charged. \
                 Pay with another card as a new operation (a new Idempotency-Key)."
            ),
        )
        .stored(),
        ProviderVerdict::Refused { message } => Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "Invalid request",
            &format!("the payment provider refused the charge: {message}; nothing was charged"),
        )
        .stored(),
        // The contract's one final answer that says "not paid, nothing
        // charged, pay again as a new operation" (a 402 the clients do not
        // retry), with a detail that says what happened.
        ProviderVerdict::NotCharged => Problem::new(
            StatusCode::PAYMENT_REQUIRED,
            "card-declined",
            "Card declined",
            "the payment could not be completed and the shop cancelled it; nothing was \
             charged. Pay as a new operation (a new Idempotency-Key).",
        )
        .stored(),
    };
    let receipt = receipts.for_charge(caller, charge);
    (PhaseEnd::Finished(response), receipt)
}

/// `201` with the charge.
pub fn created_response(charge: &Charge) -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        "application/json",
        serde_json::to_vec(charge).expect("a charge always serialises"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(state: &str, generation: u64) -> Lease {
        let caller = crate::domain::Caller::from_bytes([7; 32]);
        let key = crate::domain::IdempotencyKey::parse(b"8e03c5a2").unwrap();
        Lease {
            caller,
            key,
            token: [1; 16],
            point: CHARGE_CREATED.into(),
            state: state.into(),
            fingerprint: exactly_once::Fingerprint::from_bytes([9; 32]),
            generation,
        }
    }

    /// A charge stopped by a release before per-run keys has no
    /// `key_scheme`, and one stopped before per-life keys says `per_run`:
    /// each goes on with the key (and the request) it may already have
    /// sent the provider, or the provider would charge the card a second
    /// time, or refuse the request as another one under its key.
    #[test]
    fn a_state_stored_by_an_earlier_release_keeps_its_downstream_key_and_request() {
        let stored = r#"{"id":"ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e6f","amount":1999,"currency":"usd","payment_method":"pm_card_visa"}"#;
        let pending = PendingCharge::from_state(stored).unwrap();
        assert_eq!(pending.key_scheme, KeyScheme::PerOperation);
        let lease = lease(stored, 0);
        let op = lease.operation();
        assert_eq!(pending.downstream_key(&lease), legacy_downstream_key(&op));
        assert_eq!(legacy_downstream_key(&op).len(), 67);

        let per_run = PendingCharge {
            key_scheme: KeyScheme::PerRun,
            ..pending.clone()
        };
        let back = PendingCharge::from_state(&serde_json::to_string(&per_run).unwrap()).unwrap();
        assert_eq!(back, per_run);
        assert_eq!(back.downstream_key(&lease), op.downstream_key(&pending.id));
        for earlier in [&pending, &per_run] {
            assert_eq!(
                earlier.provider_metadata(&lease),
                serde_json::json!({ "charge_id": pending.id })
            );
        }
    }

    /// A charge of this release: its key and its provider request are a
    /// pure function of the operation and the key's generation, not of the
    /// charge row a run made, so a run the database forgot (a restore)
    /// sends both again as they were; the key's next life sends another.
    #[test]
    fn a_charge_sends_the_same_key_and_request_from_every_run_of_one_life() {
        let first = PendingCharge {
            key_scheme: KeyScheme::PerLife,
            id: "ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e6f".into(),
            amount: 1999,
            currency: "usd".into(),
            payment_method: "pm_card_visa".into(),
        };
        let forgotten_and_run_again = PendingCharge {
            id: "ch_0192f0c4a2b07c3d9e8f1a2b3c4d5e70".into(),
            ..first.clone()
        };
        let state = serde_json::to_string(&first).unwrap();
        let (life, next_life) = (lease(&state, 3), lease(&state, 4));
        assert_eq!(
            first.downstream_key(&life),
            forgotten_and_run_again.downstream_key(&life)
        );
        assert_eq!(
            first.provider_metadata(&life),
            forgotten_and_run_again.provider_metadata(&life)
        );
        assert_ne!(
            first.downstream_key(&life),
            first.downstream_key(&next_life)
        );
        assert_ne!(
            first.downstream_key(&life),
            legacy_downstream_key(&life.operation())
        );
        assert_ne!(
            first.downstream_key(&life),
            life.downstream_key_of_run(&first.id)
        );
    }
}

/// The charge's SQL on SQLite, inside the writer's savepoint that records
/// its key.
mod on_sqlite {
    use super::{finished, FinishCharge, RecordCharge, StartCharge};
    use crate::db::sqlite_reads;
    use crate::domain::{Charge, ChargeStatus, CHARGE_COLUMNS};
    use exactly_once::sqlite::enqueue;
    use exactly_once::{PhaseEnd, RunContext};
    use rusqlite::{params, Connection};

    pub(super) fn record_charge(
        this: &RecordCharge,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<PhaseEnd> {
        insert_charge(conn, at, &this.charge)?;
        if let Some(receipt) = &this.receipt {
            enqueue(conn, &receipt.message(), at)?;
        }
        Ok(PhaseEnd::Finished(this.response.clone()))
    }

    pub(super) fn start_charge(
        this: &StartCharge,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<PhaseEnd> {
        let charge = Charge::new(
            this.request.clone(),
            ChargeStatus::Pending,
            at.now_ms / 1000,
        );
        insert_charge(conn, at, &charge)?;
        Ok(StartCharge::stop(&charge))
    }

    pub(super) fn finish_charge(
        this: &FinishCharge,
        conn: &Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<PhaseEnd> {
        let charge = conn
            .prepare_cached(&format!(
                "UPDATE charges SET status = ?3, provider_charge = ?4
             WHERE caller = ?1 AND id = ?2 RETURNING {CHARGE_COLUMNS}"
            ))?
            .query_row(
                params![
                    &at.caller,
                    this.charge.as_ref(),
                    this.verdict.status().as_str(),
                    this.verdict.provider_charge().map(AsRef::<str>::as_ref),
                ],
                sqlite_reads::charge,
            )?;
        let (step, receipt) = finished(&charge, &this.verdict, &this.receipts, at.caller);
        if let Some(receipt) = receipt {
            enqueue(conn, &receipt.message(), at)?;
        }
        Ok(step)
    }

    fn insert_charge(
        conn: &Connection,
        at: &RunContext<'_>,
        charge: &Charge,
    ) -> rusqlite::Result<()> {
        conn.prepare_cached(
            "INSERT INTO charges (caller, id, amount, currency, description, status,
                              payment_method, receipt_email, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            &at.caller,
            charge.id.as_ref(),
            charge.amount.get(),
            charge.currency.as_ref(),
            charge.description.as_ref().map(AsRef::as_ref),
            charge.status.as_str(),
            charge.payment_method.as_ref(),
            charge.receipt_email.as_ref().map(AsRef::as_ref),
            charge.created,
        ])?;
        Ok(())
    }
}

/// The charge's SQL on PostgreSQL, inside the transaction that records its
/// key (or, for [`RecordCharge`], in one statement with the claim).
mod on_postgres {
    use super::{finished, FinishCharge, RecordCharge, StartCharge};
    use crate::charge_columns;
    use crate::db::postgres::charge;
    use crate::domain::{Charge, ChargeStatus};
    use exactly_once::postgres::Result;
    use exactly_once::postgres::{enqueue, Insert, OneStatement, Shape, Sql, Transaction};
    use exactly_once::{PhaseEnd, RunContext};
    use tokio_postgres::types::Type;

    /// A charge's row with its key's claim, and its receipt in the outbox when
    /// it has one.
    static CHARGE: Shape = Shape::inserts(&[
        Insert::into(
            "charges",
            &[
                ("id", "text"),
                ("amount", "bigint"),
                ("currency", "text"),
                ("description", "text"),
                ("status", "text"),
                ("payment_method", "text"),
                ("receipt_email", "text"),
                ("created", "bigint"),
            ],
        )
        .caller("caller"),
        Insert::into(
            "outbox",
            &[
                ("message_id", "text"),
                ("recipient", "text"),
                ("subject", "text"),
                ("body", "text"),
            ],
        )
        .now(&["next_attempt_at"])
        .only_with("message_id")
        .ignoring_conflicts_on("message_id"),
    ]);

    pub(super) fn record_charge_one_statement(this: &RecordCharge) -> Option<OneStatement> {
        let charge = &this.charge;
        let mut row = CHARGE.row();
        row.set("id", &charge.id)
            .set("amount", charge.amount.get())
            .set("currency", &charge.currency)
            .set_optional("description", charge.description.as_ref())
            .set("status", charge.status.as_str())
            .set("payment_method", &charge.payment_method)
            .set_optional("receipt_email", charge.receipt_email.as_ref())
            .set("created", charge.created);
        if let Some(receipt) = &this.receipt {
            row.set("message_id", &receipt.message_id)
                .set("recipient", &receipt.recipient)
                .set("subject", &receipt.subject)
                .set("body", &receipt.body);
        }
        Some(row.answer(this.response.clone()))
    }

    pub(super) async fn record_charge(
        this: &RecordCharge,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<PhaseEnd> {
        insert_charge(tx, at, &this.charge).await?;
        if let Some(receipt) = &this.receipt {
            enqueue(tx, &receipt.message()).await?;
        }
        Ok(PhaseEnd::Finished(this.response.clone()))
    }

    pub(super) async fn start_charge(
        this: &StartCharge,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<PhaseEnd> {
        let charge = Charge::new(
            this.request.clone(),
            ChargeStatus::Pending,
            at.now_ms / 1000,
        );
        insert_charge(tx, at, &charge).await?;
        Ok(StartCharge::stop(&charge))
    }

    pub(super) async fn finish_charge(
        this: &FinishCharge,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<PhaseEnd> {
        const FINISH: Sql = Sql::new(
            concat!(
                "UPDATE charges SET status = $3, provider_charge = $4
             WHERE caller = $1 AND id = $2 RETURNING ",
                charge_columns!()
            ),
            &[Type::BYTEA, Type::TEXT, Type::TEXT, Type::TEXT],
        );
        let row = FINISH
            .query_one(
                &**tx,
                &[
                    &at.caller,
                    &this.charge.as_ref(),
                    &this.verdict.status().as_str(),
                    &this.verdict.provider_charge().map(AsRef::<str>::as_ref),
                ],
            )
            .await?;
        let charge = charge(&row);
        let (step, receipt) = finished(&charge, &this.verdict, &this.receipts, at.caller);
        if let Some(receipt) = receipt {
            enqueue(tx, &receipt.message()).await?;
        }
        Ok(step)
    }

    async fn insert_charge(
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
        charge: &Charge,
    ) -> Result<()> {
        const INSERT: Sql = Sql::new(
            "INSERT INTO charges (caller, id, amount, currency, description, status,
                              payment_method, receipt_email, created)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                Type::BYTEA,
                Type::TEXT,
                Type::INT8,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::TEXT,
                Type::INT8,
            ],
        );
        INSERT
            .execute(
                &**tx,
                &[
                    &at.caller,
                    &charge.id.as_ref(),
                    &charge.amount.get(),
                    &charge.currency.as_ref(),
                    &charge.description.as_ref().map(AsRef::<str>::as_ref),
                    &charge.status.as_str(),
                    &charge.payment_method.as_ref(),
                    &charge.receipt_email.as_ref().map(AsRef::<str>::as_ref),
                    &charge.created,
                ],
            )
            .await?;
        Ok(())
    }
}
