//! The receipt a succeeded charge sends: written to the outbox in the
//! transaction that finishes the charge, sent later by the relay; and
//! [`Receipts`], whether one is sent, at most `--caller-receipts` per
//! caller in any hour.

use crate::domain::{Charge, ChargeStatus};
use exactly_once::Caller;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use prometheus_client::metrics::counter::Counter;
use std::num::NonZeroU32;
use std::sync::Arc;

/// Whether receipts are sent (`--smtp-url`), and how many one caller may
/// be sent in any hour (`--caller-receipts`): so that a caller cannot
/// point the shop's e-mail at addresses of its choosing at will. Past the
/// allowance the charge succeeds as usual and its receipt is withheld:
/// logged, and counted in `receipts_withheld_total`.
///
/// The allowance is each instance's own, kept in memory (a token bucket
/// of N an hour): with several instances a caller may be sent up to N
/// receipts an hour through each, and a restart gives every caller a full
/// allowance again. It bounds spam; it is not an accounting.
#[derive(Clone, Default)]
pub struct Receipts(Option<Arc<Allowance>>);

impl std::fmt::Debug for Receipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_hour = self.0.as_ref().map(|a| a.per_caller.is_some());
        f.debug_struct("Receipts")
            .field("enabled", &self.enabled())
            .field("per_caller_cap", &per_hour.unwrap_or(false))
            .finish()
    }
}

struct Allowance {
    per_caller: Option<DefaultKeyedRateLimiter<Caller>>,
    withheld: Counter,
}

impl Receipts {
    /// No receipts (no `--smtp-url`).
    pub fn off() -> Self {
        Self(None)
    }

    /// Receipts, at most `per_hour` per caller in any hour (0: no limit),
    /// each withheld counted in `withheld`.
    pub fn on(per_hour: u32, withheld: Counter) -> Self {
        let per_caller = NonZeroU32::new(per_hour)
            .map(|n| RateLimiter::keyed(Quota::per_hour(n).allow_burst(n)));
        Self(Some(Arc::new(Allowance {
            per_caller,
            withheld,
        })))
    }

    /// Whether receipts are sent at all.
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The receipt of `charge`, `caller`'s, when one is to be sent: the
    /// charge succeeded, has an address, and the caller's allowance holds
    /// one more (which this takes).
    pub fn for_charge(&self, caller: &Caller, charge: &Charge) -> Option<Receipt> {
        let allowance = self.0.as_ref()?;
        let receipt = Receipt::for_charge(charge)?;
        let Some(limiter) = &allowance.per_caller else {
            return Some(receipt);
        };
        if limiter.check_key(caller).is_ok() {
            return Some(receipt);
        }
        allowance.withheld.inc();
        tracing::warn!(
            %caller,
            charge = %charge.id,
            "receipt withheld: this caller has been sent its --caller-receipts receipts this hour"
        );
        None
    }

    /// Forgets, now and then, the callers whose allowance is whole again:
    /// run it beside the server.
    pub async fn forget_idle(self) {
        let Some(limiter) = self.0.as_ref().and_then(|a| a.per_caller.as_ref()) else {
            return;
        };
        let mut every = tokio::time::interval(crate::rate::SWEEP_EVERY * 6);
        loop {
            every.tick().await;
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

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
    fn for_charge(charge: &Charge) -> Option<Self> {
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
