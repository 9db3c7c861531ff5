//! The answers of `POST /reservations`.

use crate::domain::{NewReservation, Reservation};
use crate::error::Problem;
use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::Transaction;
use exactly_once::Sqlite;
use exactly_once::{Operation, PhaseEnd, RunContext, StoredResponse};
use http::StatusCode;

impl Operation<Sqlite> for NewReservation {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        on_sqlite::new_reservation(self, conn, at)
    }
}

impl PostgresOperation for NewReservation {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        on_postgres::new_reservation(self, tx, at).await
    }
}

/// `201` with the reservation.
pub fn reserved(reservation: &Reservation) -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        "application/json",
        serde_json::to_vec(reservation).expect("a reservation always serialises"),
    )
}

/// A reservation the stock guard refused: `409 insufficient-inventory`
/// when the item has `available` left, `404 not-found` when there is no
/// such item (`None`). Nothing was taken either way.
pub fn refused(request: &NewReservation, available: Option<i64>) -> StoredResponse {
    let item = request.item_id.as_ref();
    match available {
        Some(available) => Problem::new(
            StatusCode::CONFLICT,
            "insufficient-inventory",
            "Insufficient inventory",
            &format!(
                "{item} has {available} left; {} requested. Nothing was reserved.",
                request.quantity.get()
            ),
        )
        .stored(),
        None => Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "Not found",
            &format!("there is no item {item}"),
        )
        .stored(),
    }
}

/// The reservation's SQL on SQLite, inside the writer's savepoint that
/// records its key.
mod on_sqlite {
    use crate::db::sqlite_reads;
    use crate::domain::{NewReservation, Reservation};
    use crate::operation;
    use exactly_once::{PhaseEnd, RunContext};
    use rusqlite::{params, Connection};

    pub(super) fn new_reservation(
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
}

/// The reservation's SQL on PostgreSQL, inside the transaction that
/// records its key.
mod on_postgres {
    use crate::db::postgres::available;
    use crate::domain::{NewReservation, Reservation};
    use crate::operation;
    use exactly_once::postgres::Result;
    use exactly_once::postgres::{Sql, Transaction};
    use exactly_once::{PhaseEnd, RunContext};
    use tokio_postgres::types::Type;

    /// Takes `$1` of item `$2` if that many are left.
    const TAKE_STOCK: Sql = Sql::new(
        "UPDATE inventory SET available = available - $1
     WHERE item_id = $2 AND available >= $1",
        &[Type::INT8, Type::TEXT],
    );

    const INSERT_RESERVATION: Sql = Sql::new(
        "INSERT INTO reservations (id, caller, item_id, quantity, created)
     VALUES ($1, $2, $3, $4, $5)",
        &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::INT8, Type::INT8],
    );

    pub(super) async fn new_reservation(
        this: &NewReservation,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> Result<PhaseEnd> {
        // The guard is in the UPDATE: the row lock serialises buyers and
        // the condition is re-checked after the wait.
        let taken = TAKE_STOCK
            .execute(&**tx, &[&this.quantity.get(), &this.item_id.as_ref()])
            .await?;
        if taken == 0 {
            let available = available(&**tx, &this.item_id).await?;
            return Ok(PhaseEnd::Finished(operation::reservation::refused(
                this, available,
            )));
        }
        let reservation = Reservation::new(this.clone());
        INSERT_RESERVATION
            .execute(
                &**tx,
                &[
                    &reservation.id,
                    &at.caller,
                    &reservation.item_id.as_ref(),
                    &reservation.quantity.get(),
                    &(at.now_ms / 1000),
                ],
            )
            .await?;
        Ok(PhaseEnd::Finished(operation::reservation::reserved(
            &reservation,
        )))
    }
}
