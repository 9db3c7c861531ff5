//! The business operations an idempotency key protects, and the answers
//! they record. Backends run the SQL; this module decides the HTTP shape,
//! so every backend stores (and replays) the same bytes.

use crate::domain::{Charge, ItemId, NewCharge, NewReservation, Reservation};
use crate::error::{Problem, PROBLEM_JSON};
use bytes::Bytes;
use http::StatusCode;

/// What a keyed request asks the server to do.
#[derive(Debug, Clone)]
pub enum Operation {
    /// `POST /charges`
    CreateCharge(NewCharge),
    /// `POST /reservations`
    Reserve(NewReservation),
}

/// What running an operation produced. Business refusals (no stock) are
/// outcomes too: they are recorded and replayed like a success.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The charge was written.
    ChargeCreated(Charge),
    /// The stock was taken.
    Reserved(Reservation),
    /// Not enough stock: nothing was taken.
    InsufficientInventory {
        /// Which item.
        item_id: ItemId,
        /// How many were asked for.
        requested: i64,
        /// How many are left.
        available: i64,
    },
    /// No such item.
    UnknownItem(ItemId),
}

/// A response as recorded with its key and replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// The headers that matter for a replay (`content-type`), in order.
    pub headers: Vec<(String, String)>,
    /// The exact body bytes.
    pub body: Bytes,
}

impl StoredResponse {
    fn json(status: StatusCode, content_type: &str, body: Vec<u8>) -> Self {
        Self {
            status: status.as_u16(),
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: Bytes::from(body),
        }
    }

    /// Headers as stored: one `name: value` line each.
    pub fn headers_to_text(&self) -> String {
        self.headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\n"))
            .collect()
    }

    /// Reads headers stored by [`StoredResponse::headers_to_text`].
    pub fn headers_from_text(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|line| line.split_once(": "))
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }
}

impl Outcome {
    /// A reservation the stock guard refused: not enough left of the item
    /// (`available`), or no such item (`None`).
    pub fn refused_reservation(request: &NewReservation, available: Option<i64>) -> Self {
        match available {
            Some(available) => Outcome::InsufficientInventory {
                item_id: request.item_id.clone(),
                requested: request.quantity.get(),
                available,
            },
            None => Outcome::UnknownItem(request.item_id.clone()),
        }
    }

    /// The response this outcome answers with, as it will be stored.
    pub fn render(&self) -> StoredResponse {
        match self {
            Outcome::ChargeCreated(charge) => StoredResponse::json(
                StatusCode::CREATED,
                "application/json",
                serde_json::to_vec(charge).expect("a charge always serialises"),
            ),
            Outcome::Reserved(reservation) => StoredResponse::json(
                StatusCode::CREATED,
                "application/json",
                serde_json::to_vec(reservation).expect("a reservation always serialises"),
            ),
            Outcome::InsufficientInventory {
                item_id,
                requested,
                available,
            } => {
                let detail = format!(
                    "{} has {available} left; {requested} requested. Nothing was reserved.",
                    item_id.as_ref()
                );
                let problem = Problem::new(
                    StatusCode::CONFLICT,
                    "insufficient-inventory",
                    "Insufficient inventory",
                    &detail,
                );
                StoredResponse::json(
                    StatusCode::CONFLICT,
                    PROBLEM_JSON,
                    problem.to_bytes().to_vec(),
                )
            }
            Outcome::UnknownItem(item_id) => {
                let detail = format!("there is no item {}", item_id.as_ref());
                let problem =
                    Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", &detail);
                StoredResponse::json(
                    StatusCode::NOT_FOUND,
                    PROBLEM_JSON,
                    problem.to_bytes().to_vec(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_round_trip() {
        let r = StoredResponse::json(StatusCode::CREATED, "application/json", b"{}".to_vec());
        assert_eq!(
            StoredResponse::headers_from_text(&r.headers_to_text()),
            r.headers
        );
    }
}
