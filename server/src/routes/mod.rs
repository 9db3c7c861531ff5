//! One module per resource.

pub mod charges;
pub mod config;
pub mod health;
pub mod inventory;
pub mod reservations;
pub mod www;

use crate::domain::Caller;
use crate::error::ApiError;
use axum::extract::FromRequestParts;
use http::request::Parts;

/// The caller of a request that needs one (401 otherwise).
#[derive(Debug, Clone, Copy)]
pub struct Authenticated(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(Caller::from_headers(&parts.headers)?))
    }
}

/// Answers a method a route does not take, as problem+json.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Answers a path nothing serves, as problem+json.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("nothing is served at this path".into())
}
