//! One error type for the simulator, rendered in Stripe's shape:
//! `{"error": {"type", "code", "message", "param"?, "decline_code"?}}`.
//! Internal details are logged, never sent.

use crate::domain::{ErrorBody, IdempotencyKey, KeyError, ParamError};
use crate::ledger::LedgerError;
use axum::response::{IntoResponse, Response};
use http::{header, StatusCode};

/// Everything a request can end in that is not a stored answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No usable `Idempotency-Key`.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The body is not a charge request.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// A query string or an admin body the endpoint does not take.
    #[error("{0}")]
    InvalidRequest(String),
    /// The key was used before with other parameters.
    #[error(
        "Keys for idempotent requests can only be used with the same parameters they were \
         first used with. Try using a key other than '{0}' if you meant to execute a \
         different request."
    )]
    IdempotencyMismatch(IdempotencyKey),
    /// A request with this key is still being answered (Stripe's 409 to a
    /// concurrent request under one key): retry once it is done.
    #[error(
        "There is currently another in-progress request using this Idempotent Key (that \
         probably means you submitted twice, and the other request is still going through): \
         '{0}'. Please try again later."
    )]
    IdempotencyKeyInUse(String),
    /// No such path.
    #[error("Unrecognized request URL ({method}: {path}).")]
    NotFound {
        /// The request's method.
        method: String,
        /// The request's path.
        path: String,
    },
    /// The path exists, not with this method.
    #[error("this method is not allowed on this path")]
    MethodNotAllowed,
    /// The body is over the limit.
    #[error("the body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The `fail` fault: nothing was charged.
    #[error("simulated failure (fault mode fail); nothing was charged")]
    SimulatedFailure,
    /// The `down` fault: refused at once, nothing was charged.
    #[error("simulated outage (fault mode down); nothing was charged")]
    SimulatedOutage,
    /// The ledger failed: the transaction rolled back, nothing was charged.
    #[error("internal error; nothing was charged")]
    Internal(String),
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        Self::Internal(e.to_string())
    }
}

impl ApiError {
    /// Status, Stripe error type and code: the one table of them.
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        use ApiError::*;
        const BAD: StatusCode = StatusCode::BAD_REQUEST;
        match self {
            Key(KeyError::Missing) => (BAD, "invalid_request_error", "idempotency_key_missing"),
            Key(_) => (BAD, "invalid_request_error", "idempotency_key_invalid"),
            Params(e) => (BAD, "invalid_request_error", e.code()),
            InvalidRequest(_) => (BAD, "invalid_request_error", "parameter_invalid"),
            IdempotencyMismatch(_) => (BAD, "idempotency_error", "idempotency_key_reused"),
            IdempotencyKeyInUse(_) => (
                StatusCode::CONFLICT,
                "idempotency_error",
                "idempotency_key_in_use",
            ),
            NotFound { .. } => (
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "resource_missing",
            ),
            MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
            ),
            PayloadTooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "payload_too_large",
            ),
            SimulatedFailure => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "simulated_failure",
            ),
            SimulatedOutage => (
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                "simulated_outage",
            ),
            Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "api_error", "internal"),
        }
    }

    /// The status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// Its Stripe error code (for logs).
    pub fn code(&self) -> &'static str {
        self.parts().2
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind, code) = self.parts();
        if let ApiError::Internal(why) = &self {
            tracing::error!(error = %why, "request failed; rolled back");
        }
        let message = self.to_string();
        let param = match &self {
            ApiError::Params(e) => e.param(),
            _ => None,
        };
        let body = ErrorBody {
            kind,
            code,
            decline_code: None,
            param,
            message: &message,
        }
        .to_vec();
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn render(error: ApiError) -> (StatusCode, String) {
        let response = error.into_response();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn errors_render_in_stripes_shape() {
        assert_eq!(
            render(ApiError::Params(ParamError::AmountTooSmall)).await,
            (
                StatusCode::BAD_REQUEST,
                r#"{"error":{"type":"invalid_request_error","code":"amount_too_small","param":"amount","message":"amount must be at least 1"}}"#.to_owned()
            )
        );
        let (status, body) = render(ApiError::Internal("disk on fire".into())).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            !body.contains("disk"),
            "internal details stay in the logs: {body}"
        );
    }
}
