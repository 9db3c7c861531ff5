//! Charges: what `POST /charges` asks for and what it creates.

use super::payment::{ChargeStatus, PaymentMethod, ProviderChargeId, ReceiptEmail};
use serde::{Deserialize, Serialize};

/// Minor units (cents), 1 to 100 000 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

/// Three lowercase ASCII letters (`usd`, `eur`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Currency(String);

/// A free text of at most 500 characters, none of them a control
/// character (PostgreSQL cannot store NUL, and a description is one line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Description(String);

/// A charge's id: `ch_` and a time-ordered UUID (v7), so ids sort by
/// creation and new rows append to the end of the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ChargeId(String);

/// Why a charge request was refused before it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NewChargeError {
    /// Not an object of the expected fields.
    #[error("{0}")]
    Shape(String),
    /// `amount` outside 1..=100000000.
    #[error("amount must be an integer of minor units from 1 to 100000000")]
    Amount,
    /// `currency` is not three lowercase letters.
    #[error("currency must be three lowercase letters, such as \"usd\"")]
    Currency,
    /// `description` longer than 500 characters, or with a control character.
    #[error("description must be at most 500 characters, none of them a control character")]
    Description,
    /// `payment_method` is not a provider's payment method id.
    #[error("payment_method must be a payment method id such as \"pm_card_visa\"")]
    PaymentMethod,
    /// `receipt_email` is not an e-mail address.
    #[error("receipt_email must be an e-mail address of at most 254 characters")]
    ReceiptEmail,
}

impl Amount {
    /// The smallest and largest amounts a charge may have.
    pub const RANGE: std::ops::RangeInclusive<i64> = 1..=100_000_000;

    /// Parses an amount of minor units.
    pub fn parse(raw: i64) -> Result<Self, NewChargeError> {
        if Self::RANGE.contains(&raw) {
            Ok(Self(raw))
        } else {
            Err(NewChargeError::Amount)
        }
    }

    /// The amount in minor units.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl Currency {
    /// Parses a three-letter lowercase currency code.
    pub fn parse(raw: &str) -> Result<Self, NewChargeError> {
        if raw.len() == 3 && raw.bytes().all(|b| b.is_ascii_lowercase()) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(NewChargeError::Currency)
        }
    }
}

impl Description {
    /// The longest description, in characters.
    pub const MAX_CHARS: usize = 500;

    /// Parses a description of at most 500 characters, none of them a
    /// control character.
    pub fn parse(raw: String) -> Result<Self, NewChargeError> {
        if raw.chars().count() <= Self::MAX_CHARS && !raw.chars().any(char::is_control) {
            Ok(Self(raw))
        } else {
            Err(NewChargeError::Description)
        }
    }
}

impl ChargeId {
    /// A new, time-ordered id.
    pub fn generate() -> Self {
        Self(format!("ch_{}", uuid::Uuid::now_v7().simple()))
    }

    /// Parses an id sent by a caller (`starting_after`).
    pub fn parse(raw: &str) -> Option<Self> {
        let hex = raw.strip_prefix("ch_")?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Self(raw.to_owned()))
    }

    /// Rebuilds an id read from the database.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }
}

/// A validated `POST /charges` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCharge {
    /// How much, in minor units.
    pub amount: Amount,
    /// In which currency.
    pub currency: Currency,
    /// What for, if the caller said.
    pub description: Option<Description>,
    /// What the provider charges (`pm_card_visa` unless the caller said).
    pub payment_method: PaymentMethod,
    /// Where the receipt goes, if anywhere.
    pub receipt_email: Option<ReceiptEmail>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewChargeBody {
    #[serde(deserialize_with = "super::integer")]
    amount: i64,
    currency: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    payment_method: Option<String>,
    #[serde(default)]
    receipt_email: Option<String>,
}

impl NewCharge {
    /// Parses the JSON body of `POST /charges`.
    pub fn parse(body: &serde_json::Value) -> Result<Self, NewChargeError> {
        let raw =
            NewChargeBody::deserialize(body).map_err(|e| NewChargeError::Shape(e.to_string()))?;
        Ok(Self {
            amount: Amount::parse(raw.amount)?,
            currency: Currency::parse(&raw.currency)?,
            description: raw.description.map(Description::parse).transpose()?,
            payment_method: match raw.payment_method {
                None => PaymentMethod::default_method(),
                Some(raw) => PaymentMethod::parse(&raw).ok_or(NewChargeError::PaymentMethod)?,
            },
            receipt_email: raw
                .receipt_email
                .map(|raw| ReceiptEmail::parse(&raw).ok_or(NewChargeError::ReceiptEmail))
                .transpose()?,
        })
    }
}

/// A charge as stored and as answered. The fields serialise in the order
/// the contract shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Charge {
    /// `ch_…`
    pub id: ChargeId,
    /// Minor units.
    pub amount: Amount,
    /// Currency code.
    pub currency: Currency,
    /// The caller's description, or `null`.
    pub description: Option<Description>,
    /// `succeeded`; through a provider also `pending` or `failed`.
    pub status: ChargeStatus,
    /// Unix seconds.
    pub created: i64,
    /// The provider's id of the charge, once it charged (`null` without a
    /// provider).
    pub provider_charge: Option<ProviderChargeId>,
    /// Where the receipt goes, or `null`.
    pub receipt_email: Option<ReceiptEmail>,
    /// What the provider charges; kept, not answered.
    #[serde(skip)]
    pub payment_method: PaymentMethod,
}

/// A charge's columns, in the order of [`ChargeRow`]: what both backends
/// select (a macro, for statements written at compile time: `concat!`).
#[macro_export]
macro_rules! charge_columns {
    () => {
        "id, amount, currency, description, status, created, provider_charge, receipt_email, \
         payment_method"
    };
}

/// [`charge_columns!`] as a constant.
pub const CHARGE_COLUMNS: &str = charge_columns!();

/// A charge's columns as a backend reads them, in [`CHARGE_COLUMNS`] order
/// (trusted: they were parsed before they were written). Column order is
/// named once, here and in the [`From`] below, not in each backend.
pub type ChargeRow = (
    String,
    i64,
    String,
    Option<String>,
    String,
    i64,
    Option<String>,
    Option<String>,
    String,
);

impl Charge {
    /// The charge a request creates, at `created` (Unix seconds).
    pub fn new(request: NewCharge, status: ChargeStatus, created: i64) -> Self {
        Self {
            id: ChargeId::generate(),
            amount: request.amount,
            currency: request.currency,
            description: request.description,
            status,
            created,
            provider_charge: None,
            receipt_email: request.receipt_email,
            payment_method: request.payment_method,
        }
    }
}

impl From<ChargeRow> for Charge {
    fn from(row: ChargeRow) -> Self {
        let (
            id,
            amount,
            currency,
            description,
            status,
            created,
            provider_charge,
            receipt_email,
            payment_method,
        ) = row;
        Self {
            id: ChargeId(id),
            amount: Amount(amount),
            currency: Currency(currency),
            description: description.map(Description),
            // A corrupt status reads as pending: never as charged.
            status: ChargeStatus::from_stored(&status).unwrap_or(ChargeStatus::Pending),
            created,
            provider_charge: provider_charge.as_deref().and_then(ProviderChargeId::parse),
            receipt_email: receipt_email.as_deref().and_then(ReceiptEmail::parse),
            payment_method: PaymentMethod::from_stored(payment_method),
        }
    }
}

serve::text_newtype!(Currency, Description, ChargeId);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn charge_bodies_are_checked_field_by_field() {
        let ok = [
            json!({"amount": 1999, "currency": "usd"}),
            json!({"amount": 1, "currency": "eur", "description": "cart 42"}),
            json!({"amount": 100000000, "currency": "jpy", "description": null}),
            json!({"amount": 5, "currency": "usd", "description": "é".repeat(500)}),
            json!({"amount": 5, "currency": "usd", "payment_method": "pm_card_chargeDeclined",
                   "receipt_email": "ada@example.com"}),
        ];
        for body in ok {
            assert!(NewCharge::parse(&body).is_ok(), "{body}");
        }
        let bad = [
            (
                json!({"amount": 0, "currency": "usd"}),
                NewChargeError::Amount,
            ),
            (
                json!({"amount": -5, "currency": "usd"}),
                NewChargeError::Amount,
            ),
            (
                json!({"amount": 100000001, "currency": "usd"}),
                NewChargeError::Amount,
            ),
            (
                json!({"amount": 10, "currency": "USD"}),
                NewChargeError::Currency,
            ),
            (
                json!({"amount": 10, "currency": "us"}),
                NewChargeError::Currency,
            ),
            (
                json!({"amount": 10, "currency": "usd", "description": "x".repeat(501)}),
                NewChargeError::Description,
            ),
            (
                json!({"amount": 10, "currency": "usd", "description": "nul \u{0} inside"}),
                NewChargeError::Description,
            ),
            (
                json!({"amount": 10, "currency": "usd", "description": "two\nlines"}),
                NewChargeError::Description,
            ),
            (
                json!({"amount": 10, "currency": "usd", "description": "c1 \u{85} control"}),
                NewChargeError::Description,
            ),
            (
                json!({"amount": 10, "currency": "usd", "payment_method": "visa"}),
                NewChargeError::PaymentMethod,
            ),
            (
                json!({"amount": 10, "currency": "usd", "receipt_email": "not an address"}),
                NewChargeError::ReceiptEmail,
            ),
        ];
        for (body, want) in bad {
            assert_eq!(NewCharge::parse(&body), Err(want), "{body}");
        }
        for shape in [
            json!([1, 2]),
            json!({"amount": 19.99, "currency": "usd"}),
            json!({"amount": "1999", "currency": "usd"}),
            json!({"currency": "usd"}),
            json!({"amount": 1999, "currency": "usd", "extra": 1}),
            json!({"amount": 1e30, "currency": "usd"}),
        ] {
            assert!(
                matches!(NewCharge::parse(&shape), Err(NewChargeError::Shape(_))),
                "{shape}"
            );
        }
    }

    #[test]
    fn charge_ids_sort_by_creation() {
        let a = ChargeId::generate();
        let b = ChargeId::generate();
        assert!(a.0 < b.0);
        assert_eq!(ChargeId::parse(a.as_ref()), Some(a));
        assert_eq!(ChargeId::parse("ch_nothex"), None);
        assert_eq!(
            ChargeId::parse("res_0123456789abcdef0123456789abcdef"),
            None
        );
    }
}
