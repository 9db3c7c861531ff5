//! Domain types, each parsed once at the edge: inside the server only valid
//! values exist.

/// `AsRef<str>` and `Display` for newtypes over a `String` that is valid
/// once parsed: each reads as the text it holds.
macro_rules! text_newtype {
    ($($name:ident),+ $(,)?) => {$(
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

mod caller;
mod charge;
mod fingerprint;
mod idempotency_key;
mod operation_id;
mod payment;
mod reservation;

pub use caller::{session_cookie, Caller, CallerError, SessionToken};
pub use charge::{
    Amount, Charge, ChargeId, ChargeRow, Currency, Description, NewCharge, NewChargeError,
};
pub use fingerprint::Fingerprint;
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use operation_id::OperationId;
pub use payment::{ChargeStatus, PaymentMethod, ProviderChargeId, ReceiptEmail};
pub use reservation::{ItemId, NewReservation, NewReservationError, Quantity, Reservation};
