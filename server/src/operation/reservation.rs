//! The answers of `POST /reservations`.

use crate::db::{postgres, sqlite};
use crate::domain::{NewReservation, Reservation};
use crate::error::Problem;
use exactly_once::backend::BoxFuture;
use exactly_once::store::postgres::Transaction;
use exactly_once::{Operation, PhaseEnd, RunContext, StoredResponse};
use exactly_once::{Postgres, Sqlite};
use http::StatusCode;

impl Operation<Sqlite> for NewReservation {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        sqlite::new_reservation(self, conn, at)
    }
}

impl Operation<Postgres> for NewReservation {
    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, exactly_once::store::Result<PhaseEnd>> {
        Box::pin(postgres::new_reservation(self, tx, at))
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
