//! The receipt a succeeded charge sends: written to the outbox in the
//! transaction that finishes the charge, sent later by the relay.

use crate::domain::{Charge, ChargeStatus};

/// One e-mail, as the outbox keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// `<receipt.CHARGE_ID@exactly-once>`: the same for every copy, so a
    /// mail client shows a rare second copy as the same message.
    pub message_id: String,
    /// Where it goes.
    pub recipient: String,
    /// Its subject line.
    pub subject: String,
    /// Its plain-text body.
    pub body: String,
}

impl Receipt {
    /// The receipt of a succeeded charge that has a `receipt_email`.
    pub fn for_charge(charge: &Charge) -> Option<Self> {
        let recipient = charge.receipt_email.as_ref()?;
        if charge.status != ChargeStatus::Succeeded {
            return None;
        }
        let amount = format_amount(charge.amount.get(), charge.currency.as_ref());
        let mut body = format!(
            "Thank you for your order.\n\nAmount: {amount}\nCharge: {}\n",
            charge.id
        );
        if let Some(description) = &charge.description {
            body.push_str(&format!("For: {}\n", description.as_ref()));
        }
        if let Some(provider) = &charge.provider_charge {
            body.push_str(&format!("Card payment: {provider}\n"));
        }
        body.push_str("\nThis receipt is sent once per payment.\n");
        Some(Self {
            message_id: format!("<receipt.{}@exactly-once>", charge.id),
            recipient: recipient.to_string(),
            subject: format!("Your receipt: {amount}"),
            body,
        })
    }
}

impl Receipt {
    /// The receipt as the engine's outbox keeps a message.
    pub fn message(&self) -> exactly_once::outbox::Message {
        exactly_once::outbox::Message {
            id: self.message_id.clone(),
            to: self.recipient.clone(),
            subject: self.subject.clone(),
            body: self.body.clone(),
        }
    }
}

/// `1999, usd` → `19.99 USD` (two decimals: a receipt, not an invoice).
fn format_amount(minor: i64, currency: &str) -> String {
    format!(
        "{}.{:02} {}",
        minor / 100,
        minor % 100,
        currency.to_ascii_uppercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_as_money() {
        assert_eq!(format_amount(1999, "usd"), "19.99 USD");
        assert_eq!(format_amount(5, "eur"), "0.05 EUR");
        assert_eq!(format_amount(100_000_000, "jpy"), "1000000.00 JPY");
    }
}
