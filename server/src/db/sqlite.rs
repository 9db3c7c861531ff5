//! Each operation's business change in SQLite, inside the writer's
//! savepoint that records its key: charges (in one phase, or started and
//! finished around the provider) and reservations. The operations'
//! [`exactly_once::Operation`] impls (in [`crate::operation`]) call these.

use super::sqlite_reads;
use crate::domain::{Charge, ChargeStatus, NewReservation, Reservation, CHARGE_COLUMNS};
use crate::operation;
use crate::operation::charge::{self, FinishCharge, RecordCharge, StartCharge};
use exactly_once::store::sqlite::enqueue;
use exactly_once::{PhaseEnd, RunContext};
use rusqlite::{params, Connection};

pub(crate) fn record_charge(
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

pub(crate) fn start_charge(
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

pub(crate) fn finish_charge(
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
    let (step, receipt) = charge::finished(&charge, &this.verdict, this.receipts);
    if let Some(receipt) = receipt {
        enqueue(conn, &receipt.message(), at)?;
    }
    Ok(step)
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

pub(crate) fn new_reservation(
    this: &NewReservation,
    conn: &Connection,
    at: &RunContext<'_>,
) -> rusqlite::Result<PhaseEnd> {
    // The guard is in the UPDATE itself: stock never goes below zero,
    // whatever runs beside it.
    let taken = conn
        .prepare_cached(
            "UPDATE inventory SET available = available - ?1
             WHERE item_id = ?2 AND available >= ?1",
        )?
        .execute(params![this.quantity.get(), this.item_id.as_ref()])?;
    if taken == 0 {
        let available = sqlite_reads::available(conn, &this.item_id)?;
        return Ok(PhaseEnd::Finished(operation::reservation::refused(
            this, available,
        )));
    }
    let reservation = Reservation::new(this.clone());
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
    Ok(PhaseEnd::Finished(operation::reservation::reserved(
        &reservation,
    )))
}
