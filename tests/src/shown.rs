//! What the checkout page shows, as the stories read it: a receipt, a
//! reservation, the attempt log's rows, the "Your charges" list, and the
//! check that an attempt log holds one key. `Page` (in `page.rs`) reads
//! them from the DOM; they are re-exported there.

use anyhow::{bail, Result};
use serde::Deserialize;

/// A receipt as the page shows it.
#[derive(Debug, Clone, Deserialize)]
pub struct Receipt {
    /// The charge's id (`ch_…`).
    pub charge_id: String,
    /// The idempotency key the payment was sent with.
    pub key: String,
    /// The answer was the server's stored one.
    pub replayed: bool,
    /// How many requests were sent with its key (as the page counted them).
    pub attempts: u32,
    /// The provider's charge (`pch_…`), when the shop charges through one.
    #[serde(default)]
    pub provider_charge: Option<String>,
    /// Where the e-mailed receipt is: `queued` (the shop's outbox has it),
    /// `delivered` (the page saw it in the inbox), or `none`.
    #[serde(default)]
    pub mail: String,
}

/// Every result a reservation can end on: all but `sending`.
pub const SETTLED_RESERVATION: &[&str] =
    &["reserved", "sold-out", "unconfirmed", "refused", "lost"];

/// One reservation as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reservation {
    /// `sending`, `reserved`, `sold-out`, `unconfirmed`, `refused` or `lost`.
    pub result: String,
    /// What the shopper reads.
    pub text: String,
}

/// One row of the attempt log.
#[derive(Debug, Clone, Deserialize)]
pub struct Attempt {
    /// The full idempotency key.
    pub key: String,
    /// `/charges` or `/reservations`.
    pub path: String,
    /// An HTTP status, `timeout`, `network error`, `cut by reload` or `pending`.
    pub status: String,
    /// The answer carried `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// When the page's fetch sent it (ms since the epoch, the browser's
    /// clock, as the page logged it).
    pub start: f64,
    /// When it ended; `None` while in flight.
    pub end: Option<f64>,
}

/// One entry of the page's "Your charges" list.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedCharge {
    /// `ch_…`
    pub id: String,
    /// `cart <cart id>`
    pub description: String,
}

/// Fails unless every attempt was sent with `key`.
pub fn ensure_one_key(attempts: &[Attempt], key: &str) -> Result<()> {
    if attempts.is_empty() {
        bail!("the attempt log is empty");
    }
    if let Some(other) = attempts.iter().find(|a| a.key != key) {
        bail!(
            "an attempt used key {} instead of {key}: {attempts:?}",
            other.key
        );
    }
    Ok(())
}
