//! The simulator's vocabulary, parsed once at the edge: inside, only
//! valid keys, parameters and ids exist.

mod charge;
mod key;
mod params;

pub use charge::{Answer, Charge, ChargeId, ChargeIdError};
pub use key::{IdempotencyKey, KeyError};
pub use params::{
    Amount, ChargeParams, Currency, Decline, Fingerprint, Metadata, ParamError, PaymentMethod,
};
