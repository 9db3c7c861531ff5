//! Each operation's business change in SQL, inside the savepoint that
//! records its key: charges (in one phase, or started and finished around
//! the provider) and reservations.

use super::outbox::enqueue;
use super::Run;
use crate::domain::{Charge, ChargeStatus, NewReservation, Reservation, CHARGE_COLUMNS};
use crate::idempotency::record::Step;
use crate::operation;
use crate::operation::charge::{self, FinishCharge, RecordCharge, StartCharge};
use crate::store::RunContext;
use rusqlite::{params, Connection};

impl Run for RecordCharge {
    fn run_sqlite(&self, conn: &Connection, at: &RunContext<'_>) -> rusqlite::Result<Step> {
        insert_charge(conn, at, &self.charge)?;
        if let Some(receipt) = &self.receipt {
            enqueue(conn, receipt, at.store_ms)?;
        }
        Ok(Step::Finished(self.response.clone()))
    }
}

impl Run for StartCharge {
    fn run_sqlite(&self, conn: &Connection, at: &RunContext<'_>) -> rusqlite::Result<Step> {
        let charge = Charge::new(
            self.request.clone(),
            ChargeStatus::Pending,
            at.now_ms / 1000,
        );
        insert_charge(conn, at, &charge)?;
        Ok(StartCharge::stop(&charge))
    }
}

impl Run for FinishCharge {
    fn run_sqlite(&self, conn: &Connection, at: &RunContext<'_>) -> rusqlite::Result<Step> {
        let charge = conn
            .prepare_cached(&format!(
                "UPDATE charges SET status = ?3, provider_charge = ?4
                 WHERE caller = ?1 AND id = ?2 RETURNING {CHARGE_COLUMNS}"
            ))?
            .query_row(
                params![
                    &at.caller,
                    self.charge.as_ref(),
                    self.verdict.status().as_str(),
                    self.verdict.provider_charge().map(AsRef::<str>::as_ref),
                ],
                super::queries::charge,
            )?;
        let (step, receipt) = charge::finished(&charge, &self.verdict, self.receipts);
        if let Some(receipt) = receipt {
            enqueue(conn, &receipt, at.store_ms)?;
        }
        Ok(step)
    }
}

fn insert_charge(conn: &Connection, at: &RunContext<'_>, charge: &Charge) -> rusqlite::Result<()> {
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

impl Run for NewReservation {
    fn run_sqlite(&self, conn: &Connection, at: &RunContext<'_>) -> rusqlite::Result<Step> {
        // The guard is in the UPDATE itself: stock never goes below zero,
        // whatever runs beside it.
        let taken = conn
            .prepare_cached(
                "UPDATE inventory SET available = available - ?1
                 WHERE item_id = ?2 AND available >= ?1",
            )?
            .execute(params![self.quantity.get(), self.item_id.as_ref()])?;
        if taken == 0 {
            let available = super::queries::available(conn, &self.item_id)?;
            return Ok(Step::Finished(operation::reservation::refused(
                self, available,
            )));
        }
        let reservation = Reservation::new(self.clone());
        conn.prepare_cached(
            "INSERT INTO reservations (id, caller, item_id, quantity, created)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            reservation.id,
            &at.caller,
            reservation.item_id.as_ref(),
            reservation.quantity.get(),
            at.now_ms / 1000,
        ])?;
        Ok(Step::Finished(operation::reservation::reserved(
            &reservation,
        )))
    }
}
