//! The checkout's user stories, each in real headless browsers (Chromium,
//! then Firefox: `E2E_BROWSERS`) against a real server process with a
//! fresh database. Every payment story ends by checking that the shopper
//! was charged exactly once: in the page's own list of charges and, over
//! HTTP with the browser's session cookie, on the server (and, through the
//! provider, in the provider's ledger and in MailDev).
//!
//! Run with `scripts/test-e2e.sh` (it builds the wasm client, the server
//! and psp first). Screenshots land in `target/e2e/`.
//!
//! - [`failures`]: the demo's story (docs/DEMO.md) told failure by failure, numbered;
//!   [`concurrent`]: its failures where two payments meet (6 to 8).
//! - [`shopper`]: what a shopper's browser and hands do to the page:
//!   storage switched off, a key expired on the device, reservations left
//!   unanswered, the keyboard, a long history of charges.
//! - [`provider`]: payments through the payment provider simulator, with
//!   receipts to MailDev.
//! - [`accounts`]: two shoppers on one browser, the page's strict
//!   Content-Security-Policy, and axe-core's accessibility rules.
//! - [`privacy`]: what the page leaves in storage after a receipt and a
//!   sign-out, and where Shopper B's token is kept.
//! - [`finishing`]: the server killed after the provider charged, walked
//!   again and again with the demo's lease: every walk ends on the receipt.
//!
//! Each story is an `async fn` listed in its module's `e2e::stories!`,
//! which runs it once per engine, each time in a fresh scene: a new
//! server, new browsers. The steps they share are `e2e::steps`.

mod accounts;
mod concurrent;
mod failures;
mod finishing;
mod privacy;
mod provider;
mod shopper;
