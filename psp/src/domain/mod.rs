//! The simulator's vocabulary, parsed once at the edge: inside, only
//! valid keys, parameters and ids exist.

mod card;
mod charge;
mod key;
mod metadata;
mod params;

pub use card::{Decline, PaymentMethod};
pub use charge::{Answer, Charge, ChargeId, ChargeIdError};
pub use key::{IdempotencyKey, KeyError};
pub use metadata::Metadata;
pub use params::{Amount, ChargeParams, Currency, Fingerprint, ParamError};
