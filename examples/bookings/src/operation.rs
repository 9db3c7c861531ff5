//! The booking operation: its two phases, each this service's own SQL on
//! each backend, run by the engine inside the transaction that records
//! the key (phase 1) or advances it under the lease (phase 2).

use exactly_once::postgres::PostgresOperation;
use exactly_once::postgres::{Sql, Transaction};
use exactly_once::Sqlite;
use exactly_once::{Error, Operation, PhaseEnd, Problem, RunContext, StoredResponse};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use tokio_postgres::types::Type;

/// The recovery point of a booking inserted as `held`: the partner has not
/// (as far as we know) confirmed it. Next: [`crate::PartnerSteps`].
pub const SEAT_HELD: &str = "seat_held";

/// What a held booking resumes from, recorded with [`SEAT_HELD`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The booking's id, derived from the operation's downstream key.
    pub id: String,
    /// The seat.
    pub seat: String,
    /// The partner is sent the operation's downstream key
    /// ([`exactly_once::Lease::downstream_key`]). False in a state an
    /// earlier release recorded: its key was derived from the booking's
    /// (random) id, and it goes on with that one.
    #[serde(default)]
    pub per_life: bool,
}

impl Held {
    /// The `Idempotency-Key` the partner is sent for this booking.
    pub fn downstream_key(&self, lease: &exactly_once::Lease) -> String {
        match self.per_life {
            true => lease.downstream_key(),
            false => lease.downstream_key_of_run(&self.id),
        }
    }
}

/// The answer of a confirmed booking: `201` with this body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    /// `bk_…`.
    pub id: String,
    /// The seat.
    pub seat: String,
    /// Always `confirmed` in an answer.
    pub status: String,
    /// The partner's confirmation code.
    pub confirmation: String,
}

/// Phase 1: the booking inserted as `held`, or the seat refused.
#[derive(Debug)]
pub struct HoldSeat {
    /// The seat asked for.
    pub seat: String,
}

/// The id of the booking an operation makes: derived from its downstream
/// key, so that a run the database forgot (a restore) and its retry make
/// the same booking and send the partner the same request under the same
/// key.
fn booking_id(at: &RunContext<'_>) -> String {
    let key = at.downstream_key();
    format!("bk_{}", &key["eo_".len().."eo_".len() + 32])
}

impl HoldSeat {
    /// The operation a `POST /bookings` body asks for: `{"seat": "12A"}`,
    /// a row from 1 to 999 and a letter from A to K.
    pub fn parse(body: &serde_json::Value) -> Result<Self, Error> {
        let seat = body
            .get("seat")
            .and_then(|s| s.as_str())
            .ok_or_else(|| Error::InvalidRequest("the body needs a \"seat\" string".into()))?;
        if !valid_seat(seat) {
            return Err(Error::InvalidRequest(format!(
                "{seat:?} is not a seat: a row from 1 to 999 and a letter from A to K, like \"12A\""
            )));
        }
        Ok(Self {
            seat: seat.to_owned(),
        })
    }

    /// How the phase ends: stopped at [`SEAT_HELD`] if the row `id` went
    /// in, else the recorded refusal.
    fn ended(&self, id: String, inserted: bool) -> PhaseEnd {
        if inserted {
            PhaseEnd::stop(
                SEAT_HELD,
                &Held {
                    id,
                    seat: self.seat.clone(),
                    per_life: true,
                },
            )
        } else {
            let detail = format!("seat {} is already booked", self.seat);
            PhaseEnd::Finished(
                Problem::new(StatusCode::CONFLICT, "seat-taken", "Seat taken", &detail).stored(),
            )
        }
    }
}

fn valid_seat(seat: &str) -> bool {
    if !seat.is_ascii() {
        return false;
    }
    let (row, letter) = seat.split_at(seat.len().saturating_sub(1));
    matches!(letter.as_bytes(), [b'A'..=b'K'])
        && !row.starts_with('0')
        && (1..=3).contains(&row.len())
        && row.bytes().all(|b| b.is_ascii_digit())
}

const HOLD_SQLITE: &str =
    "INSERT INTO bookings (id, caller, idempotency_key, seat, status, created_ms)
     VALUES (?1, ?2, ?3, ?4, 'held', ?5) ON CONFLICT (seat) DO NOTHING";
const HOLD_POSTGRES: Sql = Sql::new(
    "INSERT INTO bookings (id, caller, idempotency_key, seat, status, created_ms)
     VALUES ($1, $2, $3, $4, 'held', $5) ON CONFLICT (seat) DO NOTHING",
    &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::TEXT, Type::INT8],
);

impl Operation<Sqlite> for HoldSeat {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        let id = booking_id(at);
        let inserted = conn
            .prepare_cached(HOLD_SQLITE)?
            .execute(rusqlite::params![
                // The row names the key that made it.
                id,
                at.caller,
                at.key.as_ref(),
                self.seat,
                at.now_ms
            ])?;
        Ok(self.ended(id, inserted == 1))
    }
}

impl PostgresOperation for HoldSeat {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        at: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        let id = booking_id(at);
        let inserted = HOLD_POSTGRES
            .execute(
                &**tx,
                &[&id, at.caller, &at.key.as_ref(), &self.seat, &at.now_ms],
            )
            .await?;
        Ok(self.ended(id, inserted == 1))
    }
}

/// Phase 2: the partner's confirmation recorded, and the answer.
#[derive(Debug)]
pub struct ConfirmSeat {
    /// The held booking.
    pub id: String,
    /// The partner's code.
    pub confirmation: String,
}

impl ConfirmSeat {
    fn answer(&self, seat: String) -> PhaseEnd {
        let booking = Booking {
            id: self.id.clone(),
            seat,
            status: "confirmed".into(),
            confirmation: self.confirmation.clone(),
        };
        let body = serde_json::to_vec(&booking).expect("a booking serialises");
        PhaseEnd::Finished(StoredResponse::new(
            StatusCode::CREATED,
            "application/json",
            body,
        ))
    }
}

const CONFIRM_SQLITE: &str = "UPDATE bookings SET status = 'confirmed', confirmation = ?2
     WHERE id = ?1 AND status = 'held' RETURNING seat";
const CONFIRM_POSTGRES: Sql = Sql::new(
    "UPDATE bookings SET status = 'confirmed', confirmation = $2
     WHERE id = $1 AND status = 'held' RETURNING seat",
    &[Type::TEXT, Type::TEXT],
);

impl Operation<Sqlite> for ConfirmSeat {
    fn run(&self, conn: &rusqlite::Connection, _: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        // No row: the booking is not held (never under a live lease); the
        // phase fails and the operation stays at its recovery point.
        let seat = conn
            .prepare_cached(CONFIRM_SQLITE)?
            .query_row(rusqlite::params![self.id, self.confirmation], |row| {
                row.get(0)
            })?;
        Ok(self.answer(seat))
    }
}

impl PostgresOperation for ConfirmSeat {
    async fn run(
        &self,
        tx: &Transaction<'_>,
        _: &RunContext<'_>,
    ) -> exactly_once::postgres::Result<PhaseEnd> {
        let row = CONFIRM_POSTGRES
            .query_opt(&**tx, &[&self.id, &self.confirmation])
            .await?
            .ok_or_else(|| {
                exactly_once::StoreError::internal(format!("booking {} is not held", self.id))
            })?;
        Ok(self.answer(row.get(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats() {
        for seat in ["1A", "12A", "99K", "999K"] {
            assert!(valid_seat(seat), "{seat}");
        }
        for seat in [
            "", "A", "0A", "01A", "1000A", "12L", "12a", "1 A", "é", "12AA",
        ] {
            assert!(!valid_seat(seat), "{seat}");
        }
    }
}
