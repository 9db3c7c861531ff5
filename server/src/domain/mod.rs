//! Domain types, each parsed once at the edge: inside the server only valid
//! values exist.

/// `Display` and `Debug` for newtypes over a SHA-256 hash: the first 12
/// hex digits, enough to find a value's log lines and too few to reuse
/// (`Debug` wraps them in the type's name).
macro_rules! short_hash_display {
    ($($name:ident),+ $(,)?) => {$(
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&hex::encode(&self.0[..6]))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }
    )+};
}

/// Reads a JSON number whose value is an integer as an `i64`, however it
/// is written: `1999`, `1999.0` and `1.999e3` are the same number in JSON
/// (RFC 8259), and JSON Schema's `integer` takes all three. A fraction, or
/// a number beyond `i64`, is refused.
fn integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    use serde::de::{Deserialize, Error, Unexpected};
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(n) = number.as_i64() {
        return Ok(n);
    }
    let float = number.as_f64().unwrap_or(f64::NAN);
    // i64::MAX as f64 rounds up to 2^63, which is already out of range.
    if float.fract() == 0.0 && float >= i64::MIN as f64 && float < i64::MAX as f64 {
        Ok(float as i64)
    } else {
        Err(D::Error::invalid_value(
            Unexpected::Float(float),
            &"an integer",
        ))
    }
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
    CHARGE_COLUMNS,
};
pub use fingerprint::Fingerprint;
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use operation_id::OperationId;
pub use payment::{ChargeStatus, PaymentMethod, ProviderChargeId, ReceiptEmail};
pub use reservation::{ItemId, NewReservation, NewReservationError, Quantity, Reservation};
