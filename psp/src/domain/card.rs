//! The test cards, by Stripe's names, and what each does to a charge.

use super::param_error::ParamError;
use std::fmt;

/// The test cards, by Stripe's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentMethod {
    /// `pm_card_visa`: succeeds.
    Visa,
    /// `pm_card_mastercard`: succeeds.
    Mastercard,
    /// `pm_card_chargeDeclined`: declined, `generic_decline`.
    ChargeDeclined,
    /// `pm_card_chargeDeclinedInsufficientFunds`: declined, `insufficient_funds`.
    ChargeDeclinedInsufficientFunds,
}

/// Why a card was declined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decline {
    /// Stripe's `decline_code`.
    pub decline_code: &'static str,
    /// Stripe's message for it.
    pub message: &'static str,
}

impl PaymentMethod {
    /// Every test card.
    pub const ALL: [Self; 4] = [
        Self::Visa,
        Self::Mastercard,
        Self::ChargeDeclined,
        Self::ChargeDeclinedInsufficientFunds,
    ];

    pub(super) fn parse(raw: &str) -> Result<Self, ParamError> {
        Self::ALL
            .into_iter()
            .find(|pm| pm.as_str() == raw)
            .ok_or_else(|| ParamError::UnknownPaymentMethod(raw.to_owned()))
    }

    /// Stripe's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Visa => "pm_card_visa",
            Self::Mastercard => "pm_card_mastercard",
            Self::ChargeDeclined => "pm_card_chargeDeclined",
            Self::ChargeDeclinedInsufficientFunds => "pm_card_chargeDeclinedInsufficientFunds",
        }
    }

    /// What the card does to a charge: `None` pays, `Some` declines.
    pub fn decline(self) -> Option<Decline> {
        match self {
            Self::Visa | Self::Mastercard => None,
            Self::ChargeDeclined => Some(Decline {
                decline_code: "generic_decline",
                message: "Your card was declined.",
            }),
            Self::ChargeDeclinedInsufficientFunds => Some(Decline {
                decline_code: "insufficient_funds",
                message: "Your card has insufficient funds.",
            }),
        }
    }
}

impl fmt::Display for PaymentMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_card_parses_by_its_stripe_name() {
        for pm in PaymentMethod::ALL {
            assert_eq!(PaymentMethod::parse(pm.as_str()), Ok(pm));
        }
        assert_eq!(PaymentMethod::Visa.decline(), None);
        assert_eq!(PaymentMethod::Mastercard.decline(), None);
        assert_eq!(
            PaymentMethod::ChargeDeclined
                .decline()
                .map(|d| d.decline_code),
            Some("generic_decline")
        );
        assert_eq!(
            PaymentMethod::ChargeDeclinedInsufficientFunds
                .decline()
                .map(|d| d.decline_code),
            Some("insufficient_funds")
        );
    }
}
