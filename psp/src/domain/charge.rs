//! What a charge request ends as: a charge in the ledger, or a decline;
//! and the answer stored with its key, byte for byte.

use super::error_body::ErrorBody;
use super::{ChargeParams, Decline, Metadata};
use serde::Serialize;
use std::fmt;

/// The prefix of every charge id.
const PREFIX: &str = "pch_";

/// A charge id: `pch_` + a UUID v7 in simple form. V7 ids begin with their
/// creation time, so sorting ids sorts charges by creation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ChargeId(String);

/// Why a string is not a charge id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a charge id (pch_ and 32 lowercase hex digits)")]
pub struct ChargeIdError(String);

impl ChargeId {
    /// A new id, later than every id this process made before.
    pub fn new() -> Self {
        Self(format!("{PREFIX}{}", uuid::Uuid::now_v7().simple()))
    }

    /// Parses `pch_` + 32 lowercase hex digits.
    pub fn parse(raw: &str) -> Result<Self, ChargeIdError> {
        match raw.strip_prefix(PREFIX) {
            Some(hex)
                if hex.len() == 32
                    && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Ok(Self(raw.to_owned()))
            }
            _ => Err(ChargeIdError(raw.to_owned())),
        }
    }

    /// An id the ledger stored (it wrote only valid ones).
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }
}

impl Default for ChargeId {
    fn default() -> Self {
        Self::new()
    }
}

serve::text_newtype!(ChargeId);

impl fmt::Debug for ChargeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChargeId({})", self.0)
    }
}

impl Serialize for ChargeId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A succeeded charge, as `201` answers it.
#[derive(Debug, Serialize)]
pub struct Charge<'a> {
    /// Its id.
    pub id: ChargeId,
    /// Always `"charge"` (Stripe's object tag).
    pub object: &'static str,
    /// Minor units.
    pub amount: i64,
    /// Three lowercase letters.
    pub currency: &'a str,
    /// Always `"succeeded"`: the ledger holds nothing else.
    pub status: &'static str,
    /// The test card charged.
    pub payment_method: &'static str,
    /// The request's metadata.
    pub metadata: &'a Metadata,
    /// Unix seconds.
    pub created: i64,
}

impl<'a> Charge<'a> {
    /// A new charge for `params`, created at `created` (Unix seconds).
    pub fn new(params: &'a ChargeParams, created: i64) -> Self {
        Self {
            id: ChargeId::new(),
            object: "charge",
            amount: params.amount.get(),
            currency: params.currency.as_ref(),
            status: "succeeded",
            payment_method: params.payment_method.as_str(),
            metadata: &params.metadata,
            created,
        }
    }
}

/// An answer as the key stores and replays it: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `201` or `402`.
    pub status: u16,
    /// The JSON body, byte for byte.
    pub body: Vec<u8>,
}

impl Answer {
    /// `201` with the charge.
    pub fn created(charge: &Charge<'_>) -> Self {
        Self {
            status: 201,
            body: serde_json::to_vec(charge).expect("a charge always serialises"),
        }
    }

    /// `402` `card_error` `card_declined`, with Stripe's `decline_code`.
    pub fn declined(decline: Decline) -> Self {
        Self {
            status: 402,
            body: ErrorBody {
                kind: "card_error",
                code: "card_declined",
                decline_code: Some(decline.decline_code),
                param: None,
                message: decline.message,
            }
            .to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_back_and_sort_by_creation() {
        let ids: Vec<ChargeId> = (0..1000).map(|_| ChargeId::new()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0].as_ref() < pair[1].as_ref(), "{pair:?}");
        }
        assert_eq!(ChargeId::parse(ids[0].as_ref()), Ok(ids[0].clone()));
        for bad in [
            "",
            "pch_",
            "ch_0190a0f3c2a87c3b9a3c6f1e2d4b5a69",
            "pch_0190A0F3C2A87C3B9A3C6F1E2D4B5A69",
            "pch_0190a0f3c2a87c3b9a3c6f1e2d4b5a6",
            "pch_0190a0f3c2a87c3b9a3c6f1e2d4b5a69x",
        ] {
            assert!(ChargeId::parse(bad).is_err(), "{bad}");
        }
    }
}
