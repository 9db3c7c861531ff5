//! The shop's domain types, each parsed once at the edge: inside the
//! server only valid values exist.

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
mod payment;
mod reservation;

pub use caller::{caller_from_headers, caller_of, session_cookie, CallerError, SessionToken};
pub use charge::{
    Amount, Charge, ChargeId, ChargeRow, Currency, Description, NewCharge, NewChargeError,
    CHARGE_COLUMNS,
};
/// The engine's names for who calls and which operation: keys are per
/// caller.
pub use exactly_once::{Caller, Fingerprint, IdempotencyKey, IdempotencyKeyError, OperationId};
pub use payment::{ChargeStatus, PaymentMethod, ProviderChargeId, ReceiptEmail};
pub use reservation::{ItemId, NewReservation, NewReservationError, Quantity, Reservation};
