//! `POST /charges`: its operations and their answers.
//!
//! Without a provider a charge is one phase, [`RecordCharge`]: the charge
//! row, the receipt (when there is one to send) and the answer commit with
//! the key. With a provider it is two phases around the provider call:
//! [`StartCharge`] records the charge as `pending` and stops at
//! [`CHARGE_CREATED`] with a [`PendingCharge`];
//! [`FinishCharge`] records the provider's verdict, the receipt and the
//! answer in one commit.

pub use super::pending_charge::{KeyScheme, PendingCharge};
use super::receipt::{Receipt, Receipts};
use crate::domain::{Caller, Charge, ChargeId, ChargeStatus, NewCharge, ProviderChargeId};
use crate::error::Problem;
use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::{OneStatement, Transaction};
use exactly_once::Sqlite;
use exactly_once::{Operation, PhaseEnd, RunContext, StoredResponse};
use http::StatusCode;

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

/// The charge's SQL on SQLite, inside the writer's savepoint that records
/// its key.
mod on_sqlite {
    use super::{finished, FinishCharge, RecordCharge, StartCharge};
    use crate::db::sqlite_reads;
    use crate::domain::{Charge, ChargeStatus, CHARGE_COLUMNS};
    use exactly_once::outbox::enqueue;
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
    use exactly_once::outbox::enqueue;
    use exactly_once::postgres::Result;
    use exactly_once::postgres::{Insert, OneStatement, Shape, Sql, Transaction};
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
        .caller("caller")
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
            enqueue(tx, &receipt.message(), at).await?;
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
            enqueue(tx, &receipt.message(), at).await?;
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
