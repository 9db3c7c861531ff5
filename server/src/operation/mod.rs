//! The shop's operations as the engine runs them ([`exactly_once::Operation`]):
//! what each answers, as it is recorded with its key and replayed byte for
//! byte, and which SQL it runs on each backend ([`crate::db`]). These
//! functions decide the HTTP shape, so every backend stores the same bytes.
//! Business refusals (no stock, no such item) are answers too: they are
//! recorded and replayed like a success.
//!
//! Adding an operation: its request type in [`crate::domain`], its
//! `Operation` impl and answers here, its SQL in [`crate::db`], its route
//! in [`crate::routes`].

pub mod charge;
pub mod pending_charge;
pub mod receipt;
pub mod reservation;
