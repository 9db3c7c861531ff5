//! What a charge through a payment provider adds: the payment method, the
//! receipt address, the charge's status and the provider's id for it.

use serde::Serialize;
use std::fmt;

/// A provider's payment method id: `pm_` and 1 to 100 of `A-Z a-z 0-9 _`
/// (`pm_card_visa`, `pm_card_chargeDeclined`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct PaymentMethod(String);

impl PaymentMethod {
    /// The method charged when a request names none.
    pub const DEFAULT: &'static str = "pm_card_visa";

    /// Parses a payment method id.
    pub fn parse(raw: &str) -> Option<Self> {
        let rest = raw.strip_prefix("pm_")?;
        let ok = (1..=100).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        ok.then(|| Self(raw.to_owned()))
    }

    /// [`PaymentMethod::DEFAULT`].
    pub fn default_method() -> Self {
        Self(Self::DEFAULT.to_owned())
    }

    /// Rebuilds a stored method (it was parsed before it was written).
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }
}

/// Where a charge's receipt goes: an e-mail address as the SMTP relay
/// accepts it (lettre's parser), at most 254 characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptEmail(lettre::Address);

impl ReceiptEmail {
    /// The longest address accepted (RFC 5321's path limit).
    pub const MAX_LEN: usize = 254;

    /// Parses an address.
    pub fn parse(raw: &str) -> Option<Self> {
        if raw.len() > Self::MAX_LEN || raw.chars().any(char::is_control) {
            return None;
        }
        raw.parse().ok().map(Self)
    }

    /// The address, for the relay.
    pub fn address(&self) -> &lettre::Address {
        &self.0
    }
}

impl AsRef<str> for ReceiptEmail {
    fn as_ref(&self) -> &str {
        self.0.as_ref()
    }
}

impl fmt::Display for ReceiptEmail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_ref())
    }
}

impl Serialize for ReceiptEmail {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_ref())
    }
}

/// Where a charge stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChargeStatus {
    /// Recorded, the provider's answer not yet.
    Pending,
    /// Charged (at the provider, when there is one).
    Succeeded,
    /// The provider declined the card: nothing was charged.
    Failed,
}

impl ChargeStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    /// Reads the stored spelling; anything else is a corrupt row.
    pub fn from_stored(raw: &str) -> Option<Self> {
        match raw {
            "pending" => Some(Self::Pending),
            "succeeded" => Some(Self::Succeeded),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// The provider's id of a charge (`pch_…`), as it answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ProviderChargeId(String);

impl ProviderChargeId {
    /// Accepts what a provider sent: 1 to 255 visible ASCII characters.
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = (1..=255).contains(&raw.len()) && raw.bytes().all(|b| (0x21..=0x7e).contains(&b));
        ok.then(|| Self(raw.to_owned()))
    }
}

serve::text_newtype!(PaymentMethod, ProviderChargeId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payment_methods_are_pm_ids() {
        for ok in ["pm_card_visa", "pm_card_chargeDeclined", "pm_x"] {
            assert!(PaymentMethod::parse(ok).is_some(), "{ok}");
        }
        let too_long = format!("pm_{}", "a".repeat(101));
        for bad in ["", "pm_", "card_visa", "pm_card visa", "pm_é", &too_long] {
            assert!(PaymentMethod::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn receipt_addresses_are_what_smtp_accepts() {
        for ok in ["ada@example.com", "a.b+tag@sub.example.org"] {
            assert_eq!(
                ReceiptEmail::parse(ok).map(|e| e.to_string()),
                Some(ok.to_owned())
            );
        }
        for bad in [
            "",
            "ada",
            "ada@",
            "@example.com",
            "ada @example.com",
            "ada@example.com\n",
            "ada\u{0}@example.com",
            &format!("{}@example.com", "a".repeat(250)),
        ] {
            assert!(ReceiptEmail::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn statuses_round_trip_through_their_stored_spelling() {
        for s in [
            ChargeStatus::Pending,
            ChargeStatus::Succeeded,
            ChargeStatus::Failed,
        ] {
            assert_eq!(ChargeStatus::from_stored(s.as_str()), Some(s));
        }
        assert_eq!(ChargeStatus::from_stored("refunded"), None);
    }
}
