//! The answers of `POST /reservations`.

use crate::db::{postgres, sqlite};
use crate::domain::{NewReservation, Reservation};
use crate::error::Problem;
use async_trait::async_trait;
use exactly_once::store::postgres::Transaction;
use exactly_once::{Operation, RunContext, Step, StoredResponse};
use http::StatusCode;

#[async_trait]
impl Operation for NewReservation {
    fn run_sqlite(
        &self,
        conn: &rusqlite::Connection,
        at: &RunContext<'_>,
    ) -> rusqlite::Result<Step> {
        sqlite::new_reservation(self, conn, at)
    }

    async fn run_postgres(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::store::Result<Step> {
        postgres::new_reservation(self, tx, at).await
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
