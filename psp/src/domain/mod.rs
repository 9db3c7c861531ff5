//! The simulator's vocabulary, parsed once at the edge: inside, only
//! valid keys, parameters and ids exist.

mod card;
mod charge;
mod error_body;
mod key;
mod metadata;
mod param_error;
mod params;

pub use card::{Decline, PaymentMethod};
pub use charge::{Answer, Charge, ChargeId, ChargeIdError};
pub use error_body::ErrorBody;
pub use key::{IdempotencyKey, KeyError};
pub use metadata::Metadata;
pub use param_error::ParamError;
pub use params::{Amount, ChargeParams, Currency, Fingerprint};
