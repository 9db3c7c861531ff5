//! Reservations: holding stock of an inventory item.

use serde::{Deserialize, Serialize};

/// An inventory item id such as `sku-poster`: 1 to 64 of `a-z 0-9 - _`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ItemId(String);

/// How many to reserve: 1 to 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Quantity(i64);

/// Why a reservation request was refused before it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NewReservationError {
    /// Not an object of the expected fields.
    #[error("{0}")]
    Shape(String),
    /// `item_id` is not a plausible item id.
    #[error("item_id must be 1 to 64 characters of a-z, 0-9, '-' and '_'")]
    ItemId,
    /// `quantity` outside 1..=1000.
    #[error("quantity must be an integer from 1 to 1000")]
    Quantity,
}

impl ItemId {
    /// Parses an item id.
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        ok.then(|| Self(raw.to_owned()))
    }
}

impl Quantity {
    /// Parses a quantity.
    pub fn parse(raw: i64) -> Result<Self, NewReservationError> {
        if (1..=1000).contains(&raw) {
            Ok(Self(raw))
        } else {
            Err(NewReservationError::Quantity)
        }
    }

    /// The quantity as a number.
    pub fn get(self) -> i64 {
        self.0
    }
}

/// A validated `POST /reservations` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReservation {
    /// Which item.
    pub item_id: ItemId,
    /// How many.
    pub quantity: Quantity,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewReservationBody {
    item_id: String,
    #[serde(deserialize_with = "super::integer")]
    quantity: i64,
}

impl NewReservation {
    /// Parses the JSON body of `POST /reservations`.
    pub fn parse(body: &serde_json::Value) -> Result<Self, NewReservationError> {
        let raw = NewReservationBody::deserialize(body)
            .map_err(|e| NewReservationError::Shape(e.to_string()))?;
        Ok(Self {
            item_id: ItemId::parse(&raw.item_id).ok_or(NewReservationError::ItemId)?,
            quantity: Quantity::parse(raw.quantity)?,
        })
    }
}

/// A reservation as stored and as answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reservation {
    /// `res_…`
    pub id: String,
    /// Which item.
    pub item_id: ItemId,
    /// How many.
    pub quantity: Quantity,
    /// Always `reserved`.
    pub status: &'static str,
}

impl Reservation {
    /// The reservation a request creates.
    pub fn new(request: NewReservation) -> Self {
        Self {
            id: format!("res_{}", uuid::Uuid::now_v7().simple()),
            item_id: request.item_id,
            quantity: request.quantity,
            status: "reserved",
        }
    }
}

serve::text_newtype!(ItemId);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reservation_bodies_are_checked_field_by_field() {
        assert!(NewReservation::parse(&json!({"item_id": "sku-poster", "quantity": 1})).is_ok());
        assert!(NewReservation::parse(&json!({"item_id": "sku-poster", "quantity": 1000})).is_ok());
        let cases = [
            (
                json!({"item_id": "sku-poster", "quantity": 0}),
                NewReservationError::Quantity,
            ),
            (
                json!({"item_id": "sku-poster", "quantity": 1001}),
                NewReservationError::Quantity,
            ),
            (
                json!({"item_id": "SKU", "quantity": 1}),
                NewReservationError::ItemId,
            ),
            (
                json!({"item_id": "", "quantity": 1}),
                NewReservationError::ItemId,
            ),
        ];
        for (body, want) in cases {
            assert_eq!(NewReservation::parse(&body), Err(want), "{body}");
        }
        assert!(matches!(
            NewReservation::parse(&json!({"item_id": "sku-tee", "quantity": 1.5})),
            Err(NewReservationError::Shape(_))
        ));
    }
}
