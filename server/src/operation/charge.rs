//! `POST /charges`: its operations and their answers.
//!
//! Without a provider a charge is one phase, [`RecordCharge`]: the charge
//! row, the receipt (when there is one to send) and the answer commit with
//! the key. With a provider it is two phases around the provider call:
//! [`StartCharge`] records the charge as `pending` and stops at
//! [`RecoveryPoint::ChargeCreated`] with a [`PendingCharge`];
//! [`FinishCharge`] records the provider's verdict, the receipt and the
//! answer in one commit.

use super::receipt::Receipt;
use crate::domain::{
    Amount, Charge, ChargeId, ChargeStatus, Currency, NewCharge, PaymentMethod, ProviderChargeId,
};
use crate::error::Problem;
use crate::idempotency::record::{RecoveryPoint, Step, StoredResponse};
use http::StatusCode;
use serde::{Deserialize, Serialize};

/// Without a provider: the charge, succeeded, in one phase. Its rows and
/// its answer are made before the database is touched (the store only
/// writes them), so no writer or transaction spends time rendering.
#[derive(Debug)]
pub struct RecordCharge {
    /// The charge to write.
    pub charge: Charge,
    /// Its receipt, when receipts are sent (`--smtp-url`) and it has an
    /// address.
    pub receipt: Option<Receipt>,
    /// The answer recorded with the key.
    pub response: StoredResponse,
}

impl RecordCharge {
    /// The charge `request` asks for, succeeded at `created` (Unix seconds).
    pub fn new(request: NewCharge, receipts: bool, created: i64) -> Self {
        let charge = Charge::new(request, ChargeStatus::Succeeded, created);
        Self {
            receipt: receipts.then(|| Receipt::for_charge(&charge)).flatten(),
            response: created_response(&charge),
            charge,
        }
    }
}

/// With a provider, the first phase: the charge recorded as `pending`.
#[derive(Debug)]
pub struct StartCharge {
    /// What the caller asked for.
    pub request: NewCharge,
}

/// With a provider, the last phase: the provider's verdict recorded.
#[derive(Debug)]
pub struct FinishCharge {
    /// The charge it finishes.
    pub charge: ChargeId,
    /// What the provider said.
    pub verdict: ProviderVerdict,
    /// Whether receipts are sent (`--smtp-url`).
    pub receipts: bool,
}

/// What a stopped charge resumes from: what the provider is asked to
/// charge. Stored as JSON with the recovery point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCharge {
    /// Our charge's id.
    pub id: String,
    /// Minor units.
    pub amount: i64,
    /// Currency code.
    pub currency: String,
    /// The card, as the provider knows it.
    pub payment_method: String,
}

/// The provider's final word on a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderVerdict {
    /// Charged, under this provider id.
    Charged(ProviderChargeId),
    /// The card was declined (`code` as the provider gave it): nothing was
    /// charged.
    Declined {
        /// `card_declined`, …
        code: String,
    },
    /// The provider refused the request itself (an unknown payment method):
    /// nothing was charged.
    Refused {
        /// The provider's explanation.
        message: String,
    },
}

impl ProviderVerdict {
    /// The status the charge ends with.
    pub fn status(&self) -> ChargeStatus {
        match self {
            Self::Charged(_) => ChargeStatus::Succeeded,
            Self::Declined { .. } | Self::Refused { .. } => ChargeStatus::Failed,
        }
    }

    /// The provider's charge id, when it charged.
    pub fn provider_charge(&self) -> Option<&ProviderChargeId> {
        match self {
            Self::Charged(id) => Some(id),
            _ => None,
        }
    }
}

impl StartCharge {
    /// Where the start phase stops, for a charge just recorded as pending.
    pub fn stop(charge: &Charge) -> Step {
        let pending = PendingCharge {
            id: charge.id.to_string(),
            amount: charge.amount.get(),
            currency: charge.currency.to_string(),
            payment_method: charge.payment_method.to_string(),
        };
        Step::Stopped(
            RecoveryPoint::ChargeCreated,
            serde_json::to_string(&pending).expect("a pending charge always serialises"),
        )
    }
}

impl PendingCharge {
    /// Reads the state a start phase stored.
    pub fn from_state(state: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(state)
    }

    /// The amount, as parsed when the charge was created.
    pub fn amount(&self) -> Option<Amount> {
        Amount::parse(self.amount).ok()
    }

    /// The currency, as parsed when the charge was created.
    pub fn currency(&self) -> Option<Currency> {
        Currency::parse(&self.currency).ok()
    }

    /// The card.
    pub fn payment_method(&self) -> Option<PaymentMethod> {
        PaymentMethod::parse(&self.payment_method)
    }
}

/// The answer of a finished charge, and the receipt to send with it.
pub fn finished(
    charge: &Charge,
    verdict: &ProviderVerdict,
    receipts: bool,
) -> (Step, Option<Receipt>) {
    let response = match verdict {
        ProviderVerdict::Charged(_) => created_response(charge),
        ProviderVerdict::Declined { code } => Problem::new(
            StatusCode::PAYMENT_REQUIRED,
            "card-declined",
            "Card declined",
            &format!(
                "the card was declined ({code}); nothing was charged. \
                 Pay with another card as a new operation (a new Idempotency-Key)."
            ),
        )
        .stored(),
        ProviderVerdict::Refused { message } => Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-request",
            "Invalid request",
            &format!("the payment provider refused the charge: {message}; nothing was charged"),
        )
        .stored(),
    };
    let receipt = receipts.then(|| Receipt::for_charge(charge)).flatten();
    (Step::Finished(response), receipt)
}

/// `201` with the charge.
pub fn created_response(charge: &Charge) -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        "application/json",
        serde_json::to_vec(charge).expect("a charge always serialises"),
    )
}
