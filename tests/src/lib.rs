//! The harness of the end-to-end stories in `tests/tests/stories/`: the real
//! `server` binary and real headless browsers (Chromium and Firefox),
//! driven over WebDriver.
//!
//! # Layout
//!
//! - [`paths`]: where the page and the outputs live.
//! - The server is the test kit's [`Server`] (crate `testkit`): the `server`
//!   process on port 0 with a fresh SQLite database and `--chaos`; it can
//!   be waited on and restarted on the same port and database, and asked
//!   over HTTP what it holds.
//! - [`browser`]: the engines ([`Engine`], picked by `E2E_BROWSERS`) and
//!   one WebDriver session of either, with its own driver process and
//!   profile (its own cookies and storage).
//! - [`page`]: the checkout page in one browser window: one method per thing
//!   a shopper does or sees (what it reads, receipts, reservations, the
//!   attempt log, in `shown.rs`, re-exported there).
//! - [`steps`]: the steps the stories repeat (a shopper with the stories'
//!   cart, paying it, a killed server) and the checks that end them
//!   (charged exactly once).
//! - [`scene`]: one story in one engine: a server and browsers; at the end
//!   it saves screenshots under `target/e2e/` and fails with what the pages
//!   showed. [`stories!`] declares a test per story that runs it in each
//!   engine, a scene each, named after the story.

pub mod browser;
pub mod page;
pub mod paths;
pub mod scene;
mod shown;
pub mod steps;
pub mod wait;

pub use browser::{engines, Browser, Engine, Profile};
pub use page::{Attempt, ListedCharge, Page, Receipt};
pub use scene::{Scene, Setup};
pub use testkit::Server;
pub use wait::{eventually, PATIENCE};
