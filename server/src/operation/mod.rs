//! What each business operation answers, as it is recorded with its key and
//! replayed byte for byte. Backends run the SQL (`store/*/operations.rs`);
//! these functions decide the HTTP shape, so every backend stores the same
//! bytes. Business refusals (no stock, no such item) are answers too: they
//! are recorded and replayed like a success.
//!
//! Adding an operation: its request type in [`crate::domain`], its answers
//! here, its SQL as `Run` in each backend's `operations.rs`, its route in
//! [`crate::routes`].

pub mod charge;
pub mod receipt;
pub mod reservation;
