//! Each operation's business change in SQL, inside the transaction that
//! records its key: charges (in one phase, in one statement with the claim,
//! or started and finished around the provider) and reservations.

use super::one_statement::{OneStatement, Shape};
use super::outbox::enqueue;
use super::{cached, classify, exec, Run};
use crate::domain::{Charge, ChargeRow, ChargeStatus, NewReservation, Reservation, CHARGE_COLUMNS};
use crate::idempotency::record::Step;
use crate::operation;
use crate::operation::charge::{self, FinishCharge, RecordCharge, StartCharge};
use crate::store::{Result, RunContext};
use async_trait::async_trait;
use deadpool_postgres::Transaction;

/// A charge, from a row of [`CHARGE_COLUMNS`].
pub(super) fn charge(row: &tokio_postgres::Row) -> Charge {
    let columns: ChargeRow = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
        row.get(7),
        row.get(8),
    );
    Charge::from(columns)
}

/// A charge's row with its key's claim, and its receipt in the outbox when
/// it has one (`c9` to `c12`, NULL without).
static CHARGE: Shape = Shape::new(
    &[
        "text", "bigint", "text", "text", "text", "text", "text", "bigint", "text", "text", "text",
        "text",
    ],
    &[
        "charge AS (INSERT INTO charges (caller, id, amount, currency, description, status,
                                        payment_method, receipt_email, created)
             SELECT caller, c1, c2, c3, c4, c5, c6, c7, c8 FROM claimed)",
        "receipt AS (INSERT INTO outbox (message_id, recipient, subject, body, next_attempt_at)
             SELECT c9, c10, c11, c12, now() FROM claimed WHERE c9 IS NOT NULL
             ON CONFLICT (message_id) DO NOTHING)",
    ],
);

#[async_trait]
impl Run for RecordCharge {
    fn one_statement(&self) -> Option<OneStatement> {
        let charge = &self.charge;
        let receipt = self.receipt.as_ref();
        let params = vec![
            Some(charge.id.to_string()),
            Some(charge.amount.get().to_string()),
            Some(charge.currency.to_string()),
            charge.description.as_ref().map(ToString::to_string),
            Some(charge.status.as_str().to_owned()),
            Some(charge.payment_method.to_string()),
            charge.receipt_email.as_ref().map(ToString::to_string),
            Some(charge.created.to_string()),
            receipt.map(|r| r.message_id.clone()),
            receipt.map(|r| r.recipient.clone()),
            receipt.map(|r| r.subject.clone()),
            receipt.map(|r| r.body.clone()),
        ];
        Some(CHARGE.with(params, self.response.clone()))
    }

    async fn run_postgres(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<Step> {
        insert_charge(tx, at, &self.charge).await?;
        if let Some(receipt) = &self.receipt {
            enqueue(tx, receipt).await?;
        }
        Ok(Step::Finished(self.response.clone()))
    }
}

#[async_trait]
impl Run for StartCharge {
    async fn run_postgres(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<Step> {
        let charge = Charge::new(
            self.request.clone(),
            ChargeStatus::Pending,
            at.now_ms / 1000,
        );
        insert_charge(tx, at, &charge).await?;
        Ok(StartCharge::stop(&charge))
    }
}

#[async_trait]
impl Run for FinishCharge {
    async fn run_postgres(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<Step> {
        let row = tx
            .query_one(
                &cached(
                    tx,
                    &format!(
                        "UPDATE charges SET status = $3, provider_charge = $4
                         WHERE caller = $1 AND id = $2 RETURNING {CHARGE_COLUMNS}"
                    ),
                )
                .await?,
                &[
                    &at.caller,
                    &self.charge.as_ref(),
                    &self.verdict.status().as_str(),
                    &self.verdict.provider_charge().map(AsRef::<str>::as_ref),
                ],
            )
            .await
            .map_err(classify)?;
        let charge = self::charge(&row);
        let (step, receipt) = charge::finished(&charge, &self.verdict, self.receipts);
        if let Some(receipt) = receipt {
            enqueue(tx, &receipt).await?;
        }
        Ok(step)
    }
}

async fn insert_charge(tx: &Transaction<'_>, at: &RunContext<'_>, charge: &Charge) -> Result<()> {
    exec(
        tx,
        "INSERT INTO charges (caller, id, amount, currency, description, status,
                              payment_method, receipt_email, created)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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

#[async_trait]
impl Run for NewReservation {
    async fn run_postgres(&self, tx: &Transaction<'_>, at: &RunContext<'_>) -> Result<Step> {
        // The guard is in the UPDATE: the row lock serialises buyers and
        // the condition is re-checked after the wait.
        let taken = exec(
            tx,
            "UPDATE inventory SET available = available - $1
             WHERE item_id = $2 AND available >= $1",
            &[&self.quantity.get(), &self.item_id.as_ref()],
        )
        .await?;
        if taken == 0 {
            let available = super::available(tx, &self.item_id).await?;
            return Ok(Step::Finished(operation::reservation::refused(
                self, available,
            )));
        }
        let reservation = Reservation::new(self.clone());
        exec(
            tx,
            "INSERT INTO reservations (id, caller, item_id, quantity, created)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &reservation.id,
                &at.caller,
                &reservation.item_id.as_ref(),
                &reservation.quantity.get(),
                &(at.now_ms / 1000),
            ],
        )
        .await?;
        Ok(Step::Finished(operation::reservation::reserved(
            &reservation,
        )))
    }
}
