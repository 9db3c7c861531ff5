//! The body of every error and decline the simulator answers, as Stripe
//! shapes it.

use serde::Serialize;

/// The body of every error and decline: `{"error": {...}}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    /// `card_error`, `idempotency_error`, `invalid_request_error` or `api_error`.
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// What went wrong, for programs.
    pub code: &'a str,
    /// Why a card was declined (declines only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decline_code: Option<&'a str>,
    /// The parameter at fault, if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<&'a str>,
    /// What went wrong, for people.
    pub message: &'a str,
}

impl ErrorBody<'_> {
    /// The JSON, wrapped in `{"error": …}`.
    pub fn to_vec(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Wrapped<'b, 'a> {
            error: &'b ErrorBody<'a>,
        }
        serde_json::to_vec(&Wrapped { error: self }).expect("an error body always serialises")
    }
}
