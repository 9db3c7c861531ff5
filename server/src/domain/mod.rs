//! Domain types, each parsed once at the edge: inside the server only valid
//! values exist.

mod caller;
mod charge;
mod fingerprint;
mod idempotency_key;
mod reservation;

pub use caller::{session_cookie, Caller, CallerError, SessionToken};
pub use charge::{Amount, Charge, ChargeId, Currency, Description, NewCharge, NewChargeError};
pub use fingerprint::Fingerprint;
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use reservation::{ItemId, NewReservation, NewReservationError, Quantity, Reservation};
