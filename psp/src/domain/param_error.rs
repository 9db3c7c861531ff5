//! Why a body is not a charge request: each refusal names its parameter
//! and carries a Stripe-style error code.

/// Why a body is not a charge request. Each renders as a 400
/// `invalid_request_error` with [`ParamError::code`] and [`ParamError::param`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// Not JSON at all.
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("the body must be a JSON object")]
    NotAnObject,
    /// A parameter this endpoint does not take.
    #[error("received unknown parameter: {0}")]
    Unknown(String),
    /// A required parameter is absent (or null).
    #[error("missing required param: {0}")]
    Missing(&'static str),
    /// `amount` is not an integer.
    #[error("amount must be an integer number of minor units, such as 1999")]
    AmountNotInteger,
    /// `amount` below 1.
    #[error("amount must be at least 1")]
    AmountTooSmall,
    /// `amount` above 100000000.
    #[error("amount must be at most 100000000")]
    AmountTooLarge,
    /// `currency` is not three lowercase letters.
    #[error("currency must be three lowercase letters, such as usd")]
    Currency,
    /// `payment_method` is not a string.
    #[error("payment_method must be a string, such as pm_card_visa")]
    PaymentMethodNotString,
    /// `payment_method` names no test card.
    #[error(
        "no such payment method: {0:?}; use pm_card_visa, pm_card_mastercard, \
         pm_card_chargeDeclined or pm_card_chargeDeclinedInsufficientFunds"
    )]
    UnknownPaymentMethod(String),
    /// `metadata` breaks one of Stripe's rules.
    #[error("metadata {0}")]
    Metadata(String),
}

impl ParamError {
    /// The Stripe-style error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Json(_) | Self::NotAnObject => "invalid_request_body",
            Self::Unknown(_) => "parameter_unknown",
            Self::Missing(_) => "parameter_missing",
            Self::AmountNotInteger => "parameter_invalid_integer",
            Self::AmountTooSmall => "amount_too_small",
            Self::AmountTooLarge => "amount_too_large",
            Self::Currency | Self::PaymentMethodNotString | Self::Metadata(_) => {
                "parameter_invalid"
            }
            Self::UnknownPaymentMethod(_) => "resource_missing",
        }
    }

    /// The parameter at fault, if one is.
    pub fn param(&self) -> Option<&str> {
        match self {
            Self::Json(_) | Self::NotAnObject => None,
            Self::Unknown(name) => Some(name),
            Self::Missing(name) => Some(name),
            Self::AmountNotInteger | Self::AmountTooSmall | Self::AmountTooLarge => Some("amount"),
            Self::Currency => Some("currency"),
            Self::PaymentMethodNotString | Self::UnknownPaymentMethod(_) => Some("payment_method"),
            Self::Metadata(_) => Some("metadata"),
        }
    }
}
